"""Alternative #37: sorted dispatch, and combine weights as a softmax over the chosen logits only.

Renormalised top-k probabilities equal ``softmax`` of the top-k *logits* (the other experts' mass
cancels), so the router never renormalises explicitly. Dispatch flattens the ``N·k`` assignments, sorts
them by expert with a stable argsort and splits them into per-expert runs (the MegaBlocks layout);
the balancing loss counts assignments with ``one_hot``.
Shape letters: ``N`` tokens, ``d`` width, ``E`` experts, ``k`` slots, ``A = N·k`` assignments, ``n_e`` per expert.
Trade-off: one sort instead of ``E`` boolean scans, because the scans cost ``E·N·k``; the sort costs
``A log A``. Test: passes every #37 check.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from canon_refs.transformer.ffn import FeedForward, SwiGLU

__all__ = ["MoE", "TopKRouter", "load_balancing_loss"]


def _validate(n_experts: int, k: int) -> None:
    if n_experts < 1:
        raise ValueError(f"n_experts must be positive, got {n_experts}")
    if k < 1 or k > n_experts:
        raise ValueError(f"k must be between 1 and n_experts, got {k}")


class TopKRouter(nn.Module):
    """``(N, d) -> weights (N, k), indices (N, k), probs (N, E)``; ValueError for bad sizes or input."""

    def __init__(self, d_model: int, n_experts: int, k: int = 2) -> None:
        super().__init__()
        _validate(n_experts, k)
        self.d_model, self.n_experts, self.k = d_model, n_experts, k
        self.gate = nn.Linear(d_model, n_experts, bias=False)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Route tokens."""
        if x.ndim != 2 or x.shape[1] != self.d_model:
            raise ValueError(f"x must be (N, {self.d_model}), got {tuple(x.shape)}")
        logits = self.gate(x)                                            # (N, E)
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        ranked = torch.argsort(logits, dim=-1, descending=True, stable=True)  # (N, E)
        indices = ranked[:, : self.k]                                    # (N, k)
        chosen = logits.gather(-1, indices)                              # (N, k)
        weights = F.softmax(chosen, dim=-1)                              # (N, k)
        probs = F.softmax(logits, dim=-1)                                # (N, E)
        return weights.to(x.dtype), indices, probs.to(x.dtype)


def load_balancing_loss(router_probs: Tensor, indices: Tensor, n_experts: int) -> Tensor:
    """``E · Σ f_e P_e`` with ``f`` from one-hot counts over all slots; ValueError for bad shapes."""
    if n_experts < 1:
        raise ValueError("n_experts must be positive")
    if router_probs.ndim != 2 or router_probs.shape[1] != n_experts:
        raise ValueError("router_probs must be (N, n_experts)")
    if indices.ndim != 2 or indices.shape[0] != router_probs.shape[0] or indices.dtype.is_floating_point:
        raise ValueError("indices must be integer (N, k)")
    if ((indices < 0) | (indices >= n_experts)).any():
        raise ValueError("indices out of range")
    hits = F.one_hot(indices, n_experts).to(router_probs.dtype)         # (N, k, E)
    f = hits.mean(dim=(0, 1))                                            # (E,)
    return n_experts * torch.dot(f, router_probs.mean(dim=0))           # ()


class MoE(nn.Module):
    """Top-k MoE FFN ``(B, T, d) -> ((B, T, d), ())``; ValueError for bad sizes or input."""

    def __init__(self, d_model: int, d_ff: int, n_experts: int, k: int = 2, *,
                 expert: Literal["gelu", "swiglu"] = "gelu") -> None:
        super().__init__()
        _validate(n_experts, k)
        if expert == "gelu":
            experts = [FeedForward(d_model, d_ff) for _ in range(n_experts)]
        elif expert == "swiglu":
            experts = [SwiGLU(d_model, d_ff) for _ in range(n_experts)]
        else:
            raise ValueError(f"unknown expert {expert!r}")
        self.d_model, self.n_experts, self.k = d_model, n_experts, k
        self.router = TopKRouter(d_model, n_experts, k)
        self.experts = nn.ModuleList(experts)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Dispatch sorted by expert, combine with ``index_add``."""
        if x.ndim != 3 or x.shape[2] != self.d_model:
            raise ValueError(f"x must be (B, T, {self.d_model}), got {tuple(x.shape)}")
        B, T, d = x.shape
        tokens = x.reshape(-1, d)                                        # (N, d)
        weights, indices, probs = self.router(tokens)                    # (N, k), (N, k), (N, E)
        flat_expert = indices.reshape(-1)                                # (A,)
        order = torch.argsort(flat_expert, stable=True)                  # (A,)
        token_of = order // self.k                                       # (A,)
        weight_of = weights.reshape(-1)[order]                           # (A,)
        counts = torch.bincount(flat_expert, minlength=self.n_experts).tolist()
        combined = tokens.new_zeros(tokens.shape)                        # (N, d)
        start = 0
        for e, count in enumerate(counts):
            if count:
                rows = token_of[start:start + count]                     # (n_e,)
                y = self.experts[e](tokens[rows])                        # (n_e, d)
                combined = combined.index_add(0, rows, y * weight_of[start:start + count, None])  # (N, d)
            start += count
        return combined.view(B, T, d), load_balancing_loss(probs, indices, self.n_experts)
