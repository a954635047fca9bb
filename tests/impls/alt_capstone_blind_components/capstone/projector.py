# Blind alternative (capstone round, tester A, written from the stubs alone), with its variants optimizer varA
# (per-parameter state, torch-style in-place clip without the 1e-6, addcdiv; no steps_taken/exp_avg contract)
# and tiny_lm varB (SDPA, arithmetic bias, Gumbel sampling): must pass every test of capstone/agent.
"""Canon #60, part 3: the projector, learned queries that cross-attend to the vision tokens.

Plan. ``N_q`` learned query vectors of width ``d`` (a Perceiver-resampler / Q-Former in miniature)
cross-attend, with 4 heads, to the ``N_v`` patch tokens: queries come from the learned table, keys and
values from the patch tokens mapped ``d_v -> d``. Then a residual pre-norm MLP and a final LayerNorm,
so the LM receives ``(B, N_q, d)`` tokens on a fixed scale next to its own text embeddings.

Subtle point: the queries are parameters ``(N_q, d)`` shared by the batch, broadcast to
``(B, N_q, d)``; the attention weights are a softmax over the *keys* (the ``N_v`` patches), so each
visual token the LM sees is a convex mix of patch values, and the projector can compress 16 patches to
8 tokens without a fixed pooling pattern. The residual adds the query itself, which keeps each output
token distinguishable even when its attention is nearly uniform at initialisation.

Shapes: visual tokens ``(B, N_v, d_v)``; keys and values ``(B, 4, N_v, d_h)``, queries
``(B, 4, N_q, d_h)`` with ``d_h = d / 4``; scores ``(B, 4, N_q, N_v)``; output ``(B, N_q, d)``.

Trade-off: cross-attention with learned queries rather than an MLP per patch (LLaVA style): the MLP keeps
``N_v`` tokens (16 of the LM's positions) while the queries cut the LM's sequence to ``N_q`` (8), which is
cheaper for the LM at the cost of a learned, possibly lossy, compression.

Tests I would write: output ``(B, 8, 48)``; a bad ``N_v`` or ``d_v`` raises ``ValueError``; the output does
not depend on the order of the patches when positions are stripped (attention is permutation-invariant
over keys); gradients reach the queries, the key/value maps and the vision tokens.
"""
# What the rubric reads: in the docstring above, your plan (what the module computes and its subtle
# point, the shapes, a trade-off: why this way rather than another, and what you would test); a
# docstring on every public function; a shape comment at the end of every line that creates,
# reshapes, contracts or reduces a tensor: `scores = q @ k.transpose(-2, -1)  # (B, H, T_q, T_k)`.

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


_N_HEADS: int = 4
"""Heads of the projector's cross-attention (the stub fixes 4: ``d_llm`` must be divisible by it)."""


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
            if value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        if d_llm % _N_HEADS != 0:
            raise ValueError(f"d_llm {d_llm} must be divisible by {_N_HEADS} (the projector's heads)")
        self.d_v = d_v
        self.d_llm = d_llm
        self.n_vision_tokens = n_vision_tokens
        self.n_query_tokens = n_query_tokens
        self.d_h = d_llm // _N_HEADS
        self.queries = nn.Parameter(torch.randn(n_query_tokens, d_llm) * 0.02)  # (N_q, d)
        self.q_proj = nn.Linear(d_llm, d_llm)
        self.k_proj = nn.Linear(d_v, d_llm)
        self.v_proj = nn.Linear(d_v, d_llm)
        self.out_proj = nn.Linear(d_llm, d_llm)
        self.mlp_norm = nn.LayerNorm(d_llm)
        self.mlp = nn.Sequential(nn.Linear(d_llm, 2 * d_llm), nn.GELU(), nn.Linear(2 * d_llm, d_llm))
        self.out_norm = nn.LayerNorm(d_llm)

    def forward(self, visual_tokens: Tensor) -> Tensor:
        """``(B, N_v, d_v)`` patch tokens -> ``(B, N_q, d)`` tokens in the LM's embedding space.

        Raises:
            ValueError: ``visual_tokens`` is not ``(B, n_vision_tokens, d_v)``.
        """
        if visual_tokens.dim() != 3 or tuple(visual_tokens.shape[1:]) != (self.n_vision_tokens, self.d_v):
            raise ValueError(f"visual_tokens must be (B, {self.n_vision_tokens}, {self.d_v}), "
                             f"got {tuple(visual_tokens.shape)}")
        B, N_v, _ = visual_tokens.shape
        H, d_h, N_q = _N_HEADS, self.d_h, self.n_query_tokens
        queries = self.queries.unsqueeze(0).expand(B, N_q, self.d_llm)  # (B, N_q, d)
        q = self.q_proj(queries).reshape(B, N_q, H, d_h).transpose(1, 2)  # (B, H, N_q, d_h)
        k = self.k_proj(visual_tokens).reshape(B, N_v, H, d_h).transpose(1, 2)  # (B, H, N_v, d_h)
        v = self.v_proj(visual_tokens).reshape(B, N_v, H, d_h).transpose(1, 2)  # (B, H, N_v, d_h)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)  # (B, H, N_q, N_v)
        weights = torch.softmax(scores, dim=-1)
        ctx = (weights @ v).transpose(1, 2).reshape(B, N_q, self.d_llm)  # (B, N_q, d)
        x = queries + self.out_proj(ctx)  # (B, N_q, d)
        x = x + self.mlp(self.mlp_norm(x))  # (B, N_q, d)
        return self.out_norm(x)  # (B, N_q, d)

