"""Broken tiny CNN (canon #17), mistake: softmax applied to the logits before ``F.cross_entropy``
(which already applies log-softmax), so the loss saturates near 0.74 and gradients are squashed.
Caught by test_loss_is_cross_entropy_of_the_logits and the probe test_huge_inputs_give_finite_losses.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class TinyCNN(nn.Module):
    """``conv3x3(C->w) - ReLU - maxpool2 - conv3x3(w->2w) - ReLU - global avg pool - Linear(2w, K)``.

    Args:
        in_channels: ``C``, channels of the input images.
        n_classes: ``K``, number of logits.
        width: ``w``, channels of the first convolution (the second has ``2w``).

    ``forward`` maps ``(B, C, H_in, W_in)`` float images to ``(B, K)`` logits (no softmax).

    Raises:
        ValueError: in ``__init__`` when a size argument is < 1; in ``forward`` when ``x`` is not
        4-D, its channel count is not ``in_channels``, or ``H_in``/``W_in`` < 2.

    Source: the LeNet/VGG pattern (conv-ReLU-pool) with a Network-in-Network global average pool
    (Lin, Chen & Yan, 2014).
    """

    def __init__(self, in_channels: int = 1, n_classes: int = 4, width: int = 16) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("n_classes", n_classes), ("width", width)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.in_channels = in_channels
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(width, 2 * width, kernel_size=3, padding=1)
        self.head = nn.Linear(2 * width, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, H_in, W_in) -> (B, K)`` logits."""
        if x.dim() != 4:
            raise ValueError(f"x must be 4-D (B, C, H_in, W_in), got shape {tuple(x.shape)}")
        if x.shape[1] != self.in_channels:
            raise ValueError(f"x has {x.shape[1]} channels but in_channels = {self.in_channels}")
        if x.shape[2] < 2 or x.shape[3] < 2:
            raise ValueError(f"x must be at least 2x2 for the 2x2 max-pool, got {tuple(x.shape[2:])}")
        h = F.relu(self.conv1(x))                                # (B, w, H_in, W_in)
        h = self.pool(h)                                         # (B, w, H_in // 2, W_in // 2)
        h = F.relu(self.conv2(h))                                # (B, 2*w, H_in // 2, W_in // 2)
        h = h.mean(dim=(2, 3))                                   # (B, 2*w)
        return self.head(h)                                      # (B, n_classes)


def _check_data(X: Tensor, y: Tensor, batch_size: int) -> None:
    if len(X) != len(y):
        raise ValueError(f"X and y must have the same length, got len(X) = {len(X)} and len(y) = {len(y)}")
    if len(X) == 0:
        raise ValueError("X must hold at least one example")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")


def train_cnn(
    model: nn.Module,
    X: Tensor,
    y: Tensor,
    *,
    steps: int = 300,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
) -> dict[str, list[float]]:
    """Train ``model`` with AdamW on ``F.cross_entropy(model(X_batch), y_batch)``.

    Batches are consecutive slices of a fresh random permutation per epoch, drawn from a private
    ``torch.Generator`` seeded with ``seed`` (the global RNG is not touched, so the weights decide
    the initialisation and ``seed`` decides the batch order).

    Args:
        model: any module mapping ``(B, C, H_in, W_in)`` to ``(B, K)`` logits.
        X: ``(N, C, H_in, W_in)`` float images. y: ``(N,)`` long labels in ``[0, K)``.
        steps: optimizer steps (>= 1). batch_size: examples per step (>= 1; capped at ``N``).
        lr: AdamW learning rate (weight decay 0.01, torch's default).
        seed: seed of the batch-order generator.

    Returns:
        ``{"losses": [...]}``, the training loss of each step (``steps`` floats). The model is left
        in the mode it was in before the call.

    Raises:
        ValueError: ``len(X) != len(y)``, empty ``X``, ``steps < 1``, ``batch_size < 1``, ``lr <= 0``.

    Source: the standard PyTorch training loop; AdamW from Loshchilov & Hutter (2019).
    """
    _check_data(X, y, batch_size)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not (lr > 0):
        raise ValueError(f"lr must be > 0, got {lr}")
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    n = len(X)
    batch_size = min(batch_size, n)
    was_training = model.training
    model.train()
    losses: list[float] = []
    perm = torch.randperm(n, generator=gen)                      # (N,)
    cursor = 0
    for _ in range(steps):
        if cursor + batch_size > n:
            perm = torch.randperm(n, generator=gen)              # (N,)
            cursor = 0
        idx = perm[cursor : cursor + batch_size]                 # (B,)
        cursor += batch_size
        logits = model(X[idx])                                   # (B, n_classes)
        loss = F.cross_entropy(logits.softmax(dim=-1), y[idx])   # ()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.train(was_training)
    return {"losses": losses}


@torch.no_grad()
def evaluate(model: nn.Module, X: Tensor, y: Tensor, batch_size: int = 256) -> float:
    """Accuracy of ``model`` on ``(X, y)``, in eval mode; the previous train/eval mode is restored.

    Args:
        model: a classifier returning ``(B, K)`` logits.
        X: ``(N, C, H_in, W_in)`` images. y: ``(N,)`` long labels.
        batch_size: examples per forward pass (>= 1).

    Returns:
        The fraction of ``argmax`` predictions equal to ``y``, a float in [0, 1].

    Raises:
        ValueError: ``len(X) != len(y)``, empty ``X``, ``batch_size < 1``.

    Source: standard practice; ``model.eval()`` as in the PyTorch docs, undone with ``model.train(mode)``.
    """
    _check_data(X, y, batch_size)
    was_training = model.training
    model.eval()
    try:
        correct = 0
        for start in range(0, len(X), batch_size):
            logits = model(X[start : start + batch_size])        # (B, n_classes)
            pred = logits.argmax(dim=-1)                         # (B,)
            correct += int((pred == y[start : start + batch_size]).sum())
    finally:
        model.train(was_training)
    return correct / len(X)
