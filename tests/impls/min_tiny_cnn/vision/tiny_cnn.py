"""Canon #17: a tiny CNN trained end to end in torch (model, ...

Plan: two 3x3 convs with padding 1 (so a 2x2 input still works after the pool), ReLU, one 2x2
max-pool, then a global average pool instead of flattening, because it makes the head independent
of the image size. Training uses AdamW with a private torch.Generator for the batch order, so the
global RNG stays untouched. Tests: logits (B, K), loss falls on a separable toy set, train/eval
mode restored, evaluate is batch-size invariant.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class TinyCNN(nn.Module):
    """``conv3x3(C->w) - ReLU - maxpool2 - conv3x3(w->2w) - ReLU - global avg pool - Linear(2w, K)``."""

    def __init__(self, in_channels: int = 1, n_classes: int = 4, width: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, kernel_size=3, padding=1)
        self.fc = nn.Linear(2 * width, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, H_in, W_in) -> (B, K)`` logits."""
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)  # (B, w, H_in//2, W_in//2)
        h = F.relu(self.conv2(h))  # (B, 2w, H_in//2, W_in//2)
        h = h.mean(dim=(2, 3))  # (B, 2w)
        return self.fc(h)  # (B, K)


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
    """AdamW on the cross-entropy, batches from a per-epoch permutation; returns ``{"losses": [...]}``."""
    was_training = model.training
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    n = len(X)
    bs = min(batch_size, n)
    losses: list[float] = []
    perm, pos = torch.randperm(n, generator=gen), 0
    for _ in range(steps):
        if pos >= n:
            perm, pos = torch.randperm(n, generator=gen), 0
        idx = perm[pos : pos + bs]
        pos += bs
        loss = F.cross_entropy(model(X[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.train(was_training)
    return {"losses": losses}


@torch.no_grad()
def evaluate(model: nn.Module, X: Tensor, y: Tensor, batch_size: int = 256) -> float:
    """Accuracy of ``argmax`` predictions in eval mode; restores the previous mode."""
    was_training = model.training
    model.eval()
    correct = 0
    for i in range(0, len(X), batch_size):
        correct += (model(X[i : i + batch_size]).argmax(dim=1) == y[i : i + batch_size]).sum().item()
    model.train(was_training)
    return correct / len(X)
