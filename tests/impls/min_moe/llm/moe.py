"""Canon #37: a mixture-of-experts feed-forward layer with a top-k softmax router and ...

TODO: your plan (not implemented yet).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from canon_refs.transformer.ffn import FeedForward, SwiGLU

__all__ = ["MoE", "TopKRouter", "load_balancing_loss"]


class TopKRouter(nn.Module):
    """Top-k softmax router: ``x (N, d)`` -> ``(weights (N, k), indices (N, k), router_probs (N, E))``.

    Args:
        d_model: token width ``d``.
        n_experts: ``E >= 1``.
        k: experts per token, ``1 <= k <= E``.

    Attributes: ``gate = nn.Linear(d, E, bias=False)``, ``n_experts``, ``k``.
    ``router_probs`` is the full softmax (computed in float32 for float16/bfloat16 inputs, max-subtracted by
    ``torch.softmax``); ``indices`` are the ``k`` most probable experts in descending order, ties to the lower
    index; ``weights`` are their probabilities renormalised to sum to 1, in the input dtype.
    Raises ValueError for ``n_experts < 1``, ``k`` outside ``[1, E]`` and an ``x`` that is not ``(N, d_model)``.
    Source: Shazeer et al. 2017 (top-k gating); Jiang et al. 2024 (Mixtral, renormalised top-2).
    """

    def __init__(self, d_model: int, n_experts: int, k: int = 2) -> None:
        raise NotImplementedError("TopKRouter.__init__: not implemented yet")

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Route ``x (N, d)``; see the class docstring for the three outputs."""
        raise NotImplementedError("TopKRouter.forward: not implemented yet")


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
    raise NotImplementedError("load_balancing_loss: not implemented yet")


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
        raise NotImplementedError("MoE.__init__: not implemented yet")

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x (B, T, d)`` -> ``(out (B, T, d), aux_loss ())``; ValueError if ``x`` is not ``(B, T, d_model)``."""
        raise NotImplementedError("MoE.forward: not implemented yet")
