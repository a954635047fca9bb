"""Canon #42: VLM projectors (linear, LLaVA-1.5 MLP, learned-query resampler) and the splice ...

Plan: a projector maps vision-encoder tokens (width d_v) into the LM's embedding space (width d).
Linear (LLaVA-1) and a 2-layer GELU MLP (LLaVA-1.5) keep one output token per patch; the resampler
uses N_q learned queries that cross-attend to the patches, so the LM sees a fixed number of visual
tokens whatever N is. The visual tokens are spliced in front of the text, and the text logits are
read one position to the left because position s predicts token s + 1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from canon_refs.transformer.multihead import CrossAttention

__all__ = ["LinearProjector", "MLPProjector", "ResamplerProjector", "splice_visual_tokens", "text_logits"]


class LinearProjector(nn.Module):
    """One ``Linear(d_v, d)`` applied to every visual token (LLaVA-1): ``(B, N, d_v) -> (B, N, d)``."""

    def __init__(self, d_vision: int, d_model: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_vision, d_model)

    def forward(self, v: Tensor) -> Tensor:
        """``v (B, N, d_v)`` -> ``(B, N, d)``."""
        return self.proj(v)


class MLPProjector(nn.Module):
    """Two-layer MLP per visual token (LLaVA-1.5): ``fc2(gelu(fc1(v)))``, ``(B, N, d_v) -> (B, N, d)``."""

    def __init__(self, d_vision: int, d_model: int, d_hidden: int | None = None) -> None:
        super().__init__()
        h = d_model if d_hidden is None else d_hidden
        self.fc1 = nn.Linear(d_vision, h)
        self.fc2 = nn.Linear(h, d_model)

    def forward(self, v: Tensor) -> Tensor:
        """``v (B, N, d_v)`` -> ``(B, N, d)``."""
        return self.fc2(F.gelu(self.fc1(v)))


class ResamplerProjector(nn.Module):
    """``N_q`` learned queries cross-attend to the visual tokens: ``(B, N, d_v) -> (B, N_q, d)``."""

    def __init__(self, d_vision: int, d_model: int, n_queries: int, n_heads: int = 4) -> None:
        super().__init__()
        self.queries = nn.Parameter(torch.randn(n_queries, d_model) * 0.02)
        self.cross_attn = CrossAttention(d_model, n_heads, d_context=d_vision)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, v: Tensor, vision_mask: Tensor | None = None) -> Tensor:
        """``v (B, N, d_v)``, ``vision_mask (B, N)`` (True/1 = real token) -> ``(B, N_q, d)``."""
        q = self.queries[None].expand(v.shape[0], -1, -1)  # (B, N_q, d)
        return self.norm(q + self.cross_attn(q, v, vision_mask))


def splice_visual_tokens(visual_embeds: Tensor, text_embeds: Tensor,
                         attention_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Visual tokens in front of the text: ``inputs (B, S, d)``, ``mask (B, S)`` long, ``position_ids (B, S)``."""
    B, N_q, _ = visual_embeds.shape
    T = text_embeds.shape[1]
    device = text_embeds.device
    if attention_mask is None:
        attention_mask = torch.ones(B, T, dtype=torch.long, device=device)
    inputs = torch.cat([visual_embeds, text_embeds], dim=1)  # (B, S, d)
    vis_mask = torch.ones(B, N_q, dtype=torch.long, device=device)
    mask = torch.cat([vis_mask, attention_mask.long()], dim=1)  # (B, S)
    position_ids = torch.arange(N_q + T, device=device).expand(B, -1)  # (B, S)
    return inputs, mask, position_ids


def text_logits(logits: Tensor, n_visual: int, T: int) -> Tensor:
    """The logits that score the text tokens: ``(B, S, V) -> (B, T, V) = logits[:, n_visual-1 : n_visual-1+T]``."""
    return logits[:, n_visual - 1: n_visual - 1 + T]
