"""Canon #37: a mixture-of-experts feed-forward layer with a top-k softmax router and a balancing loss.

Each token is scored against ``E`` experts by a linear gate; the ``k`` highest-probability experts are
kept, their probabilities renormalised to sum to 1, and the token's output is the weighted sum of those
experts' outputs. Experts are ordinary feed-forward networks (#36). ``load_balancing_loss`` is the
Switch-Transformer auxiliary loss that pushes the router towards using every expert equally.

The subtle point is the dispatch. Tokens are gathered per expert (``index_select`` of the tokens that
chose it, in any slot), run through that expert as one batch and scattered back with ``index_add``,
each scaled by the weight *of the slot in which that token chose that expert*. The loop runs over
experts, never over tokens; an expert that no token chose is skipped (its parameters get no gradient,
which is not an error). Ties in the top-k go to the lower expert index: ``torch.topk`` does not promise
that on the CPU, so the router takes the first ``k`` of a *stable* descending sort.

Shape letters: ``B`` batch, ``T`` tokens, ``N = B·T`` flattened tokens, ``d`` width, ``E`` experts, ``k``
experts per token, ``n_e`` tokens routed to one expert.

Trade-off: the combine weights are the top-k probabilities renormalised to sum to 1 (Mixtral) rather
than the raw softmax probabilities (Switch, GShard), because then a layer whose experts are identical
is exactly that expert and the output scale does not shrink with ``E``: with 8 experts and a uniform
router, raw top-2 weights would sum to 0.25. The router still learns, since the renormalised weights
depend on the gap between the chosen logits. The balancing loss is ``E · Σ_e f_e · P_e`` where ``f_e`` is
the share of the ``N·k`` assignments sent to ``e`` (not differentiable) and ``P_e`` the mean router
probability (differentiable); it is 1.0 for a uniform router and ``E`` when one expert takes everything.

What to test: the output against a per-token loop, weights summing to 1, identical experts with
``k = E`` (and ``k < E``) giving one expert's output, the balancing loss at 1.0 and ``E``, gradients reaching
the router and no error for an unused expert, tie-breaking towards lower indices, permutation
equivariance over tokens, a single token, and router logits of ±1e4.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from canon_refs.transformer.ffn import FeedForward, SwiGLU

__all__ = ["MoE", "TopKRouter", "load_balancing_loss"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


class TopKRouter(nn.Module):
    """Top-k softmax router: ``x (N, d)`` -> ``(weights (N, k), indices (N, k), router_probs (N, E))``.

    Args:
        d_model: token width ``d``.
        n_experts: ``E >= 1``.
        k: experts per token, ``1 <= k <= E``.

    Attributes: ``gate = nn.Linear(d, E, bias=False)``, ``n_experts``, ``k``.
    ``router_probs`` is the full softmax (computed in float32 for float16/bfloat16 inputs); ``indices`` are the ``k`` most probable experts in descending order, ties to the lower
    index (``torch.topk`` does not promise that order for equal values; a stable descending sort does); ``weights`` are their probabilities renormalised to sum to 1, in the input dtype.
    Raises ValueError for ``n_experts < 1``, ``k`` outside ``[1, E]`` and an ``x`` that is not ``(N, d_model)``.
    Source: Shazeer et al. 2017 (top-k gating); Jiang et al. 2024 (Mixtral, renormalised top-2).
    """

    def __init__(self, d_model: int, n_experts: int, k: int = 2) -> None:
        super().__init__()
        _check_counts(n_experts, k)
        self.d_model = d_model
        self.n_experts = n_experts
        self.k = k
        self.gate = nn.Linear(d_model, n_experts, bias=False)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Route ``x (N, d)``; see the class docstring for the three outputs."""
        _check_tokens(x, self.d_model, "(N, d_model)")
        logits = self.gate(x)                                            # (N, E)
        work = logits.float() if logits.dtype in _LOW_PRECISION else logits
        probs = torch.softmax(work, dim=-1)                              # (N, E)
        order = torch.sort(work, dim=-1, descending=True, stable=True).indices  # (N, E)
        indices = order[:, :self.k]                                      # (N, k)
        top = probs.gather(1, indices)                                   # (N, k)
        weights = top / top.sum(dim=-1, keepdim=True)                    # (N, k)
        return weights.to(x.dtype), indices, probs.to(x.dtype)


def load_balancing_loss(router_probs: Tensor, indices: Tensor, n_experts: int) -> Tensor:
    """Switch-Transformer balancing loss ``E · Σ_e f_e · P_e``, a scalar ``()``.

    ``router_probs (N, E)`` softmax probabilities; ``indices (N, k)`` long, the chosen experts.
    ``f_e`` = share of the ``N·k`` assignments that went to expert ``e`` (a count, no gradient);
    ``P_e`` = mean over tokens of ``router_probs[:, e]`` (carries the gradient). Uniform router
    probabilities give exactly 1.0 whatever the assignment; top-1 routing of every token to one expert
    with probability 1 gives ``E``.
    Raises ValueError for a ``router_probs`` that is not ``(N, n_experts)``, ``indices`` that are not
    ``(N, k)`` integers in ``[0, E)``, or ``n_experts < 1``.
    Source: Fedus et al. 2022 (Switch Transformers), eq. 4, with ``f`` counted over all ``k`` slots.
    """
    _check_routing(router_probs, indices, n_experts)
    counts = torch.bincount(indices.reshape(-1), minlength=n_experts)    # (E,)
    f = counts.to(router_probs.dtype) / indices.numel()                  # (E,)
    P = router_probs.mean(dim=0)                                         # (E,)
    return n_experts * (f * P).sum()                                     # ()


class MoE(nn.Module):
    """Mixture-of-experts FFN: ``x (B, T, d)`` -> ``(out (B, T, d), aux_loss ())``.

    Args:
        d_model: width ``d``. d_ff: each expert's hidden width.
        n_experts: ``E >= 1``. k: experts per token, ``1 <= k <= E``.
        expert: ``"gelu"`` (``FeedForward``) or ``"swiglu"`` (``SwiGLU``), from #36.

    Attributes: ``router`` (``TopKRouter``), ``experts`` (``nn.ModuleList`` of ``E`` FFNs), ``n_experts``, ``k``.
    ``aux_loss`` is ``load_balancing_loss`` of this call's routing; add ``α · aux_loss`` (α ≈ 0.01) to the
    training loss.
    Raises ValueError for ``n_experts < 1``, ``k`` outside ``[1, E]``, an unknown ``expert`` and an input that is
    not ``(B, T, d_model)``. Source: Shazeer et al. 2017; Fedus et al. 2022; Jiang et al. 2024 (Mixtral).
    """

    def __init__(self, d_model: int, d_ff: int, n_experts: int, k: int = 2, *,
                 expert: Literal["gelu", "swiglu"] = "gelu") -> None:
        super().__init__()
        _check_counts(n_experts, k)
        _check_expert(expert)
        self.d_model = d_model
        self.n_experts = n_experts
        self.k = k
        self.router = TopKRouter(d_model, n_experts, k)
        make = FeedForward if expert == "gelu" else SwiGLU
        self.experts = nn.ModuleList(make(d_model, d_ff) for _ in range(n_experts))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x (B, T, d)`` -> ``(out (B, T, d), aux_loss ())``; ValueError if ``x`` is not ``(B, T, d_model)``."""
        _check_tokens(x, self.d_model, "(B, T, d_model)")
        B, T, d = x.shape
        flat = x.reshape(B * T, d)                                       # (N, d)
        weights, indices, probs = self.router(flat)                      # (N, k), (N, k), (N, E)
        out = torch.zeros_like(flat)                                     # (N, d)
        for e, expert in enumerate(self.experts):
            token_ids, slot = torch.nonzero(indices == e, as_tuple=True)  # (n_e,), (n_e,)
            if token_ids.numel() == 0:
                continue
            expert_out = expert(flat.index_select(0, token_ids))         # (n_e, d)
            scale = weights[token_ids, slot][:, None]                    # (n_e, 1)
            out = out.index_add(0, token_ids, expert_out * scale)        # (N, d)
        aux_loss = load_balancing_loss(probs, indices, self.n_experts)   # ()
        return out.reshape(B, T, d), aux_loss                            # (B, T, d), ()


def _check_tokens(x: Tensor, d_model: int, layout: str) -> None:
    """ValueError unless ``x`` has the rank of ``layout`` and last dim ``d_model``."""
    if x.dim() != layout.count(",") + 1 or x.shape[-1] != d_model:
        raise ValueError(f"x must be {layout} with d_model={d_model}, got shape {tuple(x.shape)}")


def _check_expert(expert: str) -> None:
    """ValueError unless ``expert`` is a known FFN kind."""
    if expert not in ("gelu", "swiglu"):
        raise ValueError(f"expert must be 'gelu' or 'swiglu', got {expert!r}")


def _check_routing(router_probs: Tensor, indices: Tensor, n_experts: int) -> None:
    """ValueError for the argument errors :func:`load_balancing_loss` documents."""
    if isinstance(n_experts, bool) or not isinstance(n_experts, int) or n_experts < 1:
        raise ValueError(f"n_experts must be an int >= 1, got {n_experts!r}")
    if router_probs.dim() != 2 or router_probs.shape[1] != n_experts:
        raise ValueError(f"router_probs must be (N, n_experts={n_experts}), got {tuple(router_probs.shape)}")
    if (indices.dim() != 2 or indices.shape[0] != router_probs.shape[0] or indices.is_floating_point()
            or indices.dtype == torch.bool):
        raise ValueError(f"indices must be an integer (N, k) tensor with N = {router_probs.shape[0]}, "
                         f"got {indices.dtype} {tuple(indices.shape)}")
    if indices.numel() and (indices.min() < 0 or indices.max() >= n_experts):
        raise ValueError(f"indices must lie in [0, n_experts={n_experts})")


def _check_counts(n_experts: int, k: int) -> None:
    if isinstance(n_experts, bool) or not isinstance(n_experts, int) or n_experts < 1:
        raise ValueError(f"n_experts must be an int >= 1, got {n_experts!r}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n_experts:
        raise ValueError(f"k must be an int in [1, n_experts={n_experts}], got {k!r}")
