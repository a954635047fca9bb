"""Canon #17: a tiny CNN trained end to end in torch (model, training loop, evaluation).

Two 3x3 convolutions with a 2x2 max-pool between them, global average pooling, and one linear
layer: ``conv(C -> w) - ReLU - maxpool2 - conv(w -> 2w) - ReLU - mean over H, W - Linear(2w, K)``.
The training loop is the standard one: sample a batch, ``zero_grad``, forward, cross-entropy,
``backward``, ``step``.

The subtle points: the model returns *logits* and the loss is ``F.cross_entropy``, which applies
``log_softmax`` itself (adding a softmax before it squashes the gradients and is the classic bug);
``evaluate`` switches to eval mode and must put the model back in whatever mode it found, because a
caller that evaluates mid-training would otherwise keep training in eval mode (silently wrong as
soon as the model has dropout or batch norm); and the batch order comes from a private
``torch.Generator(seed)``, so two runs with the same seed and the same initial weights give
bit-identical losses without touching the global RNG.

Shapes: ``B`` batch, ``C`` input channels, ``H_in, W_in`` image size (any size >= 4 works because
of the global pooling), ``w`` width of the first convolution, ``K`` = ``n_classes``, ``N`` dataset size.

Trade-off: global average pooling instead of flattening the feature map into the linear layer
keeps the head at ``2w * K + K`` parameters (132 at w = 16, K = 4) rather than
``2w * (H_in/2) * (W_in/2) * K`` (8192 weights for 16x16 inputs), and makes the network accept any
input size; the price is losing absolute position, which the orientation task here does not need.
The whole model has 4 932 parameters at the default width.

What to test: output shape and parameter budget, several input sizes and a batch of one in eval
mode, test accuracy >= 0.95 on the bars task within 300 steps (and under 10 s), losses that fall,
bit-identical losses for the same seed and copied weights, that ``evaluate`` restores the mode, and
every ValueError.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class TinyCNN(nn.Module):
    """``conv3x3(C->w) - ReLU - maxpool2 - conv3x3(w->2w) - ReLU - global avg pool - Linear(2w, K)``.

    Both convolutions are 3x3 with padding 1 (``nn.Conv2d``); the head is one ``nn.Linear``.

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
        _check_sizes(in_channels=in_channels, n_classes=n_classes, width=width)
        self.in_channels = in_channels
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(width, 2 * width, kernel_size=3, padding=1)
        self.head = nn.Linear(2 * width, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, H_in, W_in) -> (B, K)`` logits."""
        _check_images(x, self.in_channels)
        h = F.relu(self.conv1(x))                          # (B, w, H_in, W_in)
        h = self.pool(h)                                   # (B, w, H_in // 2, W_in // 2)
        h = F.relu(self.conv2(h))                          # (B, 2*w, H_in // 2, W_in // 2)
        h = h.mean(dim=(2, 3))                             # (B, 2*w)
        return self.head(h)                                # (B, n_classes)


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

    The batch order comes from a private ``torch.Generator`` seeded with ``seed``; the global RNG is
    not touched, so the weights decide the initialisation and ``seed`` decides the batch order (the
    reference takes consecutive slices of a fresh random permutation per epoch).

    Args:
        model: any module mapping ``(B, C, H_in, W_in)`` to ``(B, K)`` logits.
        X: ``(N, C, H_in, W_in)`` float images. y: ``(N,)`` long labels in ``[0, K)``.
        steps: optimizer steps (>= 1). batch_size: examples per step (>= 1; capped at ``N``).
        lr: AdamW learning rate (weight decay 0.01, torch's default).
        seed: seed of the batch-order generator.

    Returns:
        A dict whose ``"losses"`` entry lists the training loss of each step (``steps`` floats, before
        each update); other keys are allowed. The model is left in the mode it was in before the call.

    Raises:
        ValueError: ``len(X) != len(y)``, empty ``X``, ``steps < 1``, ``batch_size < 1``, ``lr <= 0``.

    Source: the standard PyTorch training loop; AdamW from Loshchilov & Hutter (2019).
    """
    _check_data(X, y, batch_size)
    _check_schedule(steps, lr)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    n = len(X)
    batch_size = min(batch_size, n)
    was_training = model.training
    model.train()
    losses: list[float] = []
    perm = torch.randperm(n, generator=gen)                # (N,)
    cursor = 0
    for _ in range(steps):
        if cursor + batch_size > n:
            perm = torch.randperm(n, generator=gen)        # (N,)
            cursor = 0
        idx = perm[cursor : cursor + batch_size]           # (B,)
        cursor += batch_size
        logits = model(X[idx])                             # (B, n_classes)
        loss = F.cross_entropy(logits, y[idx])             # ()
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
            logits = model(X[start : start + batch_size])  # (B, n_classes)
            pred = logits.argmax(dim=-1)                   # (B,)
            correct += int((pred == y[start : start + batch_size]).sum())
    finally:
        model.train(was_training)
    return correct / len(X)


def _check_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def _check_images(x: Tensor, in_channels: int) -> None:
    if x.dim() != 4:
        raise ValueError(f"x must be 4-D (B, C, H_in, W_in), got shape {tuple(x.shape)}")
    if x.shape[1] != in_channels:
        raise ValueError(f"x has {x.shape[1]} channels but in_channels = {in_channels}")
    if x.shape[2] < 2 or x.shape[3] < 2:
        raise ValueError(f"x must be at least 2x2 for the 2x2 max-pool, got {tuple(x.shape[2:])}")


def _check_data(X: Tensor, y: Tensor, batch_size: int) -> None:
    if len(X) != len(y):
        raise ValueError(f"X and y must have the same length, got len(X) = {len(X)} and len(y) = {len(y)}")
    if len(X) == 0:
        raise ValueError("X must hold at least one example")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")


def _check_schedule(steps: int, lr: float) -> None:
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not (lr > 0):
        raise ValueError(f"lr must be > 0, got {lr}")
