"""Canon #37: a mixture-of-experts feed-forward layer with a top-k softmax router and ...

Plan: a linear gate scores each token against E experts; softmax (float32 for half inputs), keep the
top-k (stable sort, so ties go to the lower index) and renormalise their probabilities to sum to 1.
Each expert processes only the tokens routed to it (gather by index, scatter-add the weighted
outputs back), so compute grows with k, not E. The Switch balancing loss E * sum_e f_e P_e pushes the
router towards uniform load; f (counts) carries no gradient, P (mean probabilities) does.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from canon_refs.transformer.ffn import FeedForward, SwiGLU

__all__ = ["MoE", "TopKRouter", "load_balancing_loss"]


class TopKRouter(nn.Module):
    """Top-k softmax router: ``x (N, d)`` -> ``(weights (N, k), indices (N, k), router_probs (N, E))``."""

    def __init__(self, d_model: int, n_experts: int, k: int = 2) -> None:
        super().__init__()
        self.n_experts = n_experts
        self.k = k
        self.gate = nn.Linear(d_model, n_experts, bias=False)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Route ``x (N, d)``; see the class docstring for the three outputs."""
        logits = self.gate(x)  # (N, E)
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        probs = torch.softmax(logits, dim=-1)  # (N, E)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)  # (N, E)
        top_p, indices = sorted_p[:, : self.k], order[:, : self.k]  # (N, k)
        weights = top_p / top_p.sum(dim=-1, keepdim=True)  # (N, k)
        return weights.to(x.dtype), indices, probs


def load_balancing_loss(router_probs: Tensor, indices: Tensor, n_experts: int) -> Tensor:
    """Switch-Transformer balancing loss ``E · Σ_e f_e · P_e``, a scalar ``()``."""
    counts = torch.bincount(indices.reshape(-1), minlength=n_experts)  # (E,)
    f = counts.to(router_probs.dtype) / indices.numel()  # (E,)
    P = router_probs.mean(dim=0)  # (E,)
    return n_experts * (f * P).sum()


class MoE(nn.Module):
    """Mixture-of-experts FFN: ``x (B, T, d)`` -> ``(out (B, T, d), aux_loss ())``."""

    def __init__(self, d_model: int, d_ff: int, n_experts: int, k: int = 2, *,
                 expert: Literal["gelu", "swiglu"] = "gelu") -> None:
        super().__init__()
        self.n_experts = n_experts
        self.k = k
        self.router = TopKRouter(d_model, n_experts, k)
        make = (lambda: FeedForward(d_model, d_ff)) if expert == "gelu" else (lambda: SwiGLU(d_model, d_ff))
        self.experts = nn.ModuleList([make() for _ in range(n_experts)])

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x (B, T, d)`` -> ``(out (B, T, d), aux_loss ())``."""
        B, T, d = x.shape
        xf = x.reshape(B * T, d)  # (N, d)
        weights, indices, probs = self.router(xf)  # (N, k), (N, k), (N, E)
        out = torch.zeros_like(xf)  # (N, d)
        for e, expert in enumerate(self.experts):
            tok, slot = torch.where(indices == e)  # (n_e,), (n_e,)
            if tok.numel() == 0:
                continue
            y = expert(xf[tok]) * weights[tok, slot, None]  # (n_e, d)
            out.index_add_(0, tok, y.to(out.dtype))
        aux = load_balancing_loss(probs, indices, self.n_experts)
        return out.reshape(B, T, d), aux
