"""Alternative VLM projectors (canon #42), written differently from the reference.

* ``LinearProjector`` holds its own weight and uses ``einsum`` instead of ``nn.Linear``.
* ``MLPProjector`` writes GELU out with ``erf``.
* ``ResamplerProjector`` has no residual: ``norm(cross_attn(queries, v))``; the tests accept either form.
* The splice pads the text mask on the left with ``F.pad`` and builds positions with ``cumsum``.
* ``text_logits`` uses ``narrow``.

Shapes: ``B`` batch, ``N`` visual tokens, ``N_q`` queries, ``T`` text tokens, ``d`` width, ``V`` vocabulary.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from canon_refs.transformer.multihead import CrossAttention


def _check_v(v, d_vision):
    if v.dim() != 3 or v.size(-1) != d_vision:
        raise ValueError(f"v must be (B, N, {d_vision})")


class LinearProjector(nn.Module):
    """einsum-based per-token affine map."""

    def __init__(self, d_vision, d_model):
        super().__init__()
        self.d_vision = d_vision
        bound = 1.0 / math.sqrt(d_vision)
        self.weight = nn.Parameter(torch.empty(d_vision, d_model).uniform_(-bound, bound))  # (d_v, d)
        self.bias = nn.Parameter(torch.zeros(d_model))                  # (d,)

    def forward(self, v):
        """(B, N, d_v) -> (B, N, d)."""
        _check_v(v, self.d_vision)
        return torch.einsum("bnv,vd->bnd", v, self.weight) + self.bias  # (B, N, d)


class MLPProjector(nn.Module):
    """fc1 -> erf GELU -> fc2."""

    def __init__(self, d_vision, d_model, d_hidden=None):
        super().__init__()
        self.d_vision = d_vision
        hidden = d_hidden or d_model
        self.fc1 = nn.Linear(d_vision, hidden)
        self.fc2 = nn.Linear(hidden, d_model)

    def forward(self, v):
        """(B, N, d_v) -> (B, N, d)."""
        _check_v(v, self.d_vision)
        x = self.fc1(v)                                                 # (B, N, h)
        x = 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
        return self.fc2(x)                                              # (B, N, d)


class ResamplerProjector(nn.Module):
    """Learned queries -> cross-attention -> LayerNorm (no residual)."""

    def __init__(self, d_vision, d_model, n_queries, n_heads=4):
        super().__init__()
        if n_queries < 1:
            raise ValueError("n_queries must be >= 1")
        self.d_vision = d_vision
        self.queries = nn.Parameter(0.02 * torch.randn(n_queries, d_model))  # (N_q, d)
        self.cross_attn = CrossAttention(d_model, n_heads, d_context=d_vision)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, v, vision_mask=None):
        """(B, N, d_v) -> (B, N_q, d)."""
        _check_v(v, self.d_vision)
        if vision_mask is not None and vision_mask.shape != v.shape[:2]:
            raise ValueError("vision_mask must be (B, N)")
        q = self.queries.unsqueeze(0).repeat(v.size(0), 1, 1).to(v.dtype)  # (B, N_q, d)
        return self.norm(self.cross_attn(q, v, vision_mask))             # (B, N_q, d)


def splice_visual_tokens(visual_embeds, text_embeds, attention_mask=None):
    """cat embeddings; pad the text mask with N_q ones; cumsum positions."""
    B, N_q, d = visual_embeds.shape
    if text_embeds.size(0) != B or text_embeds.size(2) != d:
        raise ValueError("text_embeds must match visual_embeds in batch and width")
    T = text_embeds.size(1)
    if attention_mask is None:
        attention_mask = torch.ones(B, T, dtype=torch.long)            # (B, T)
    if attention_mask.shape != (B, T):
        raise ValueError("attention_mask must be (B, T)")
    mask = F.pad(attention_mask.long(), (N_q, 0), value=1)             # (B, N_q + T)
    ones = torch.ones(B, N_q + T, dtype=torch.long)                    # (B, N_q + T)
    position_ids = ones.cumsum(dim=1) - 1
    inputs = torch.cat((visual_embeds, text_embeds), dim=1)            # (B, N_q + T, d)
    return inputs, mask, position_ids


def text_logits(logits, n_visual, T):
    """narrow(1, n_visual - 1, T)."""
    if n_visual < 1:
        raise ValueError("n_visual must be >= 1")
    if n_visual - 1 + T > logits.size(1):
        raise ValueError("T too large for the logits")
    return logits.narrow(1, n_visual - 1, T)                           # (B, T, V)
