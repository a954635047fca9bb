"""Canon #38: LoRA, a low-rank trainable update beside a frozen linear layer, ...

Plan: keep W frozen and learn h = W x + (alpha / r) B A x with A (r, in) Kaiming-initialised and
B (out, r) zero, so training starts exactly at the base model. Only r (in + out) parameters per layer
train. merge folds scaling * B @ A into W for zero-overhead inference; unmerge takes it out again.
apply_lora freezes the whole model and wraps the named Linear layers (q_proj / v_proj by default).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = ["LoRALinear", "apply_lora", "count_trainable_parameters", "lora_state_dict"]


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable rank-``r`` update: ``(..., in) -> (..., out)``."""

    def __init__(self, base: nn.Linear, r: int = 8, alpha: float = 16.0, dropout: float = 0.0) -> None:
        super().__init__()
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.r = r
        self.alpha = alpha
        self.scaling = alpha / r
        w = base.weight
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features, dtype=w.dtype, device=w.device))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, dtype=w.dtype, device=w.device))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.dropout = nn.Dropout(dropout)
        self.merged = False

    def delta_weight(self) -> Tensor:
        """The dense update ``scaling · B @ A``, ``(out, in)``."""
        return self.scaling * (self.lora_B @ self.lora_A)

    def forward(self, x: Tensor) -> Tensor:
        """``x (..., in) -> (..., out)``: ``base(x) + scaling · dropout(x) Aᵀ Bᵀ``."""
        out = self.base(x)
        if self.merged:
            return out
        return out + self.scaling * (self.dropout(x) @ self.lora_A.T @ self.lora_B.T)

    @torch.no_grad()
    def merge(self) -> None:
        """Fold the update into the base weight, ``W += scaling · B @ A``."""
        if self.merged:
            raise RuntimeError("LoRALinear is already merged")
        self.base.weight += self.delta_weight().to(self.base.weight.dtype)
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """Take the update out of the base weight again, ``W -= scaling · B @ A``."""
        if not self.merged:
            raise RuntimeError("LoRALinear is not merged")
        self.base.weight -= self.delta_weight().to(self.base.weight.dtype)
        self.merged = False

    def extra_repr(self) -> str:
        """Rank, alpha and merge state."""
        return f"r={self.r}, alpha={self.alpha}, merged={self.merged}"


def apply_lora(model: nn.Module, target_modules: Sequence[str] = ("q_proj", "v_proj"), r: int = 8,
               alpha: float = 16.0, dropout: float = 0.0) -> nn.Module:
    """Wrap every ``nn.Linear`` whose attribute name is in ``target_modules`` in a ``LoRALinear``, in place."""
    targets = set(target_modules)
    for p in model.parameters():
        p.requires_grad_(False)
    to_wrap = []
    for parent in model.modules():
        if isinstance(parent, LoRALinear):
            continue  # its base is already adapted
        for name, child in parent.named_children():
            if name in targets and isinstance(child, nn.Linear):
                to_wrap.append((parent, name, child))
    for parent, name, child in to_wrap:
        setattr(parent, name, LoRALinear(child, r=r, alpha=alpha, dropout=dropout))
    return model


def lora_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """Only the adapter tensors of ``model.state_dict()``: the entries whose key contains ``"lora_"``."""
    return {k: v for k, v in model.state_dict().items() if "lora_" in k}


def count_trainable_parameters(model: nn.Module) -> int:
    """Number of parameters with ``requires_grad``; shared (tied) parameters are counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
