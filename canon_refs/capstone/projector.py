"""Canon #60, part 3: the projector, learned queries that cross-attend to the patches (16 -> 8 tokens).

The vision encoder emits ``N_v = 16`` tokens of width ``d_v = 32``; the language model wants tokens of
its own width ``d = 48``, and every visual token it reads costs attention over the whole spliced
sequence. The projector does both jobs at once: ``N_q = 8`` learned query vectors (width ``d``)
cross-attend to the normalised patch tokens (keys and values projected from ``d_v`` to ``d``), then a
pre-norm MLP refines each query. This is the Q-Former / Perceiver-resampler idea in one layer.

The subtle point is that the queries, not the patches, set the output length: the output has ``N_q``
rows whatever ``N_v`` is, and each output row is a softmax-weighted mixture over *all* patches, so
spatial layout survives only through the position embeddings the encoder added. Nothing is masked:
every image is complete.

Shapes: ``B`` batch, ``N_v`` patch tokens, ``N_q`` query tokens, ``d_v`` vision width, ``d`` LM
width, ``H_a`` heads, ``d_h = d / H_a``.

Trade-off: learned-query cross-attention instead of the LLaVA-1.5 MLP, because an MLP keeps all 16
tokens, whereas 8 queries halve the visual prefix the causal LM attends over on every step of
training and generation; the price is a bottleneck the task must fit through (8 x 48 numbers for a
board of 16 cells, which is enough for counts and the largest shape's colour).

What to test: ``(B, 16, 32) -> (B, 8, 48)``; an image gives the same rows alone as inside a batch;
a wrong patch count or width raises ``ValueError`` naming ``visual_tokens``. The queries start at
unit scale rather than 0.02, because near-zero queries attend uniformly, give all ``N_q`` outputs
the same mean of the patches, and the largest-shape question then stalled near chance in SFT.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

_MLP_RATIO = 2

_HEADS = 4


class Projector(nn.Module):
    """Token-reducing map from the vision width to the LM width: ``(B, N_v, d_v) -> (B, N_q, d)``.

    Args:
        d_v: width of the vision tokens.
        d_llm: width ``d`` of the language model; must be divisible by 4 (the cross-attention heads).
        n_vision_tokens: ``N_v`` the encoder produces (checked in ``forward``).
        n_query_tokens: ``N_q`` learned queries, the number of visual tokens the LM sees.

    Raises:
        ValueError: a non-positive size, or ``d_llm`` not divisible by 4.
    """

    def __init__(self, d_v: int, d_llm: int, n_vision_tokens: int, n_query_tokens: int) -> None:
        super().__init__()
        for name, value in (("d_v", d_v), ("d_llm", d_llm), ("n_vision_tokens", n_vision_tokens),
                            ("n_query_tokens", n_query_tokens)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if d_llm % _HEADS:
            raise ValueError(f"d_llm {d_llm} must be divisible by the {_HEADS} cross-attention heads")
        self.d_v = d_v
        self.d_llm = d_llm
        self.n_vision_tokens = n_vision_tokens
        self.n_query_tokens = n_query_tokens
        self.queries = nn.Parameter(torch.randn(n_query_tokens, d_llm))     # (N_q, d)
        self.norm_kv = nn.LayerNorm(d_v)
        self.q_proj = nn.Linear(d_llm, d_llm)
        self.kv_proj = nn.Linear(d_v, 2 * d_llm)
        self.out_proj = nn.Linear(d_llm, d_llm)
        self.norm_mlp = nn.LayerNorm(d_llm)
        self.mlp = nn.Sequential(nn.Linear(d_llm, _MLP_RATIO * d_llm), nn.GELU(),
                                 nn.Linear(_MLP_RATIO * d_llm, d_llm))
        self.norm_out = nn.LayerNorm(d_llm)

    def forward(self, visual_tokens: Tensor) -> Tensor:
        """``(B, N_v, d_v)`` patch tokens -> ``(B, N_q, d)`` tokens in the LM's embedding space.

        Raises:
            ValueError: ``visual_tokens`` is not ``(B, n_vision_tokens, d_v)``.
        """
        if visual_tokens.ndim != 3 or tuple(visual_tokens.shape[1:]) != (self.n_vision_tokens, self.d_v):
            raise ValueError(f"visual_tokens must be (B, {self.n_vision_tokens}, {self.d_v}), "
                             f"got {tuple(visual_tokens.shape)}")
        B, N_v, _ = visual_tokens.shape
        d, d_h = self.d_llm, self.d_llm // _HEADS
        q = self.q_proj(self.queries)                                    # (N_q, d)
        q = q.reshape(1, self.n_query_tokens, _HEADS, d_h).transpose(1, 2)  # (1, H_a, N_q, d_h)
        k, v = self.kv_proj(self.norm_kv(visual_tokens)).split(d, dim=-1)  # (B, N_v, d), (B, N_v, d)
        k = k.reshape(B, N_v, _HEADS, d_h).transpose(1, 2)               # (B, H_a, N_v, d_h)
        v = v.reshape(B, N_v, _HEADS, d_h).transpose(1, 2)               # (B, H_a, N_v, d_h)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)                # (B, H_a, N_q, N_v)
        weights = torch.softmax(scores, dim=-1)                          # (B, H_a, N_q, N_v)
        mixed = (weights @ v).transpose(1, 2).reshape(B, self.n_query_tokens, d)  # (B, N_q, d)
        x = self.queries + self.out_proj(mixed)                          # (B, N_q, d)
        x = x + self.mlp(self.norm_mlp(x))                               # (B, N_q, d)
        return self.norm_out(x)                                          # (B, N_q, d)
