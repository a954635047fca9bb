"""Canon #42: VLM projectors (linear, LLaVA-1.5 MLP, learned-query resampler) and the splice ...

TODO: your plan (not implemented yet).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from canon_refs.transformer.multihead import CrossAttention

__all__ = ["LinearProjector", "MLPProjector", "ResamplerProjector", "splice_visual_tokens", "text_logits"]


class LinearProjector(nn.Module):
    """One ``Linear(d_v, d)`` applied to every visual token (LLaVA-1): ``(B, N, d_v) -> (B, N, d)``.

    Attributes: ``proj`` (``nn.Linear(d_vision, d_model)``, float32). Raises ValueError for a
    non-positive width. Source: Liu et al. 2023, "Visual Instruction Tuning", section 4.1.
    """

    def __init__(self, d_vision: int, d_model: int) -> None:
        raise NotImplementedError("LinearProjector.__init__: not implemented yet")

    def forward(self, v: Tensor) -> Tensor:
        """``v (B, N, d_v)`` -> ``(B, N, d)``. Raises ValueError when ``v`` is not ``(B, N, d_vision)``."""
        raise NotImplementedError("LinearProjector.forward: not implemented yet")


class MLPProjector(nn.Module):
    """Two-layer MLP per visual token (LLaVA-1.5): ``fc2(gelu(fc1(v)))``, ``(B, N, d_v) -> (B, N, d)``.

    Args:
        d_vision, d_model: input and output widths.
        d_hidden: hidden width ``h``; defaults to ``d_model``.

    Attributes: ``fc1 (d_v -> h)``, ``fc2 (h -> d)``; ``d_v·h + h + h·d + d`` parameters, float32.
    Raises ValueError for a non-positive width. Source: Liu et al. 2023, "Improved Baselines with Visual
    Instruction Tuning" (LLaVA-1.5), section 3.2.
    """

    def __init__(self, d_vision: int, d_model: int, d_hidden: int | None = None) -> None:
        raise NotImplementedError("MLPProjector.__init__: not implemented yet")

    def forward(self, v: Tensor) -> Tensor:
        """``v (B, N, d_v)`` -> ``(B, N, d)``. Raises ValueError when ``v`` is not ``(B, N, d_vision)``."""
        raise NotImplementedError("MLPProjector.forward: not implemented yet")


class ResamplerProjector(nn.Module):
    """``N_q`` learned queries cross-attend to the visual tokens: ``(B, N, d_v) -> (B, N_q, d)`` for any ``N``.

    ``out = norm(queries + cross_attn(queries, v, vision_mask))``: one cross-attention layer with the
    queries as a residual, then ``LayerNorm``. No positional information enters, so the output is
    invariant to the order of the visual tokens.

    Args:
        d_vision: visual token width ``d_v`` (the cross-attention's ``d_context``).
        d_model: LM width ``d``, divisible by ``n_heads``.
        n_queries: number of output tokens ``N_q >= 1``.
        n_heads: attention heads.

    Attributes: ``queries`` (``nn.Parameter (N_q, d)``, ``N(0, 0.02)``), ``cross_attn``
    (``CrossAttention(d, n_heads, d_context=d_v)``, #28), ``norm`` (``nn.LayerNorm(d)``); float32.
    Raises ValueError for ``n_queries < 1``, a non-positive width or ``d_model % n_heads != 0``.
    Source: Alayrac et al. 2022 (Flamingo), section 2.1; Li et al. 2023 (BLIP-2 Q-Former).
    """

    def __init__(self, d_vision: int, d_model: int, n_queries: int, n_heads: int = 4) -> None:
        raise NotImplementedError("ResamplerProjector.__init__: not implemented yet")

    def forward(self, v: Tensor, vision_mask: Tensor | None = None) -> Tensor:
        """``v (B, N, d_v)``, ``vision_mask (B, N)`` bool|int (True/1 = real token) -> ``(B, N_q, d)``.

        A row whose tokens are all masked gets a finite output (the cross-attention contributes its
        output bias only).

        Raises:
            ValueError: ``v`` not ``(B, N, d_vision)``; ``vision_mask`` not ``(B, N)`` or floating.
        """
        raise NotImplementedError("ResamplerProjector.forward: not implemented yet")


def splice_visual_tokens(visual_embeds: Tensor, text_embeds: Tensor,
                         attention_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Put the visual tokens in front of the text: one sequence of ``S = N_q + T`` embeddings for the LM.

    Args:
        visual_embeds: ``(B, N_q, d)`` projector output.
        text_embeds: ``(B, T, d)`` token embeddings, same dtype.
        attention_mask: ``(B, T)`` bool|int text mask (True/1 = real token); default all ones.

    Returns:
        ``inputs (B, S, d)``; ``mask (B, S)`` long, ``N_q`` ones (the image is never padding) then the text
        mask; ``position_ids (B, S) = arange(S)`` long for every row.

    Raises:
        ValueError: either input not 3-D, a batch or width mismatch between them, or an
            ``attention_mask`` that is not ``(B, T)``.
    """
    raise NotImplementedError("splice_visual_tokens: not implemented yet")


def text_logits(logits: Tensor, n_visual: int, T: int) -> Tensor:
    """The logits that score the text tokens: ``(B, S, V) -> (B, T, V) = logits[:, n_visual-1 : n_visual-1+T]``.

    Entry ``t`` of the result is the LM's prediction for text token ``t`` (which sits at position
    ``n_visual + t``), made from position ``n_visual + t - 1``.

    Args:
        logits: ``(B, S, V)`` over the spliced sequence.
        n_visual: ``N_q >= 1`` visual tokens in front (with none, no position scores text token 0).
        T: number of text tokens, ``>= 0``.

    Raises:
        ValueError: ``logits`` not 3-D; ``n_visual < 1``; ``T < 0``; ``n_visual - 1 + T > S``.
    """
    raise NotImplementedError("text_logits: not implemented yet")
