# Blind alternative (capstone round, tester A, written from the stubs alone), with its variants optimizer varA
# (per-parameter state, torch-style in-place clip without the 1e-6, addcdiv; no steps_taken/exp_avg contract)
# and tiny_lm varB (SDPA, arithmetic bias, Gumbel sampling): must pass every test of capstone/agent.
"""Canon #60, part 4: the causal language model that reads the spliced visual + text sequence.

Plan. ``TinyCausalLM.encode`` takes ready-made input embeddings ``(B, S, d)`` (the VLM splices the
projector's visual tokens in front of the text embeddings), adds a learned position embedding
looked up by ``position_ids``, runs ``n_layers`` pre-norm causal blocks and a final LayerNorm; the VLM
applies ``lm_head`` to the result. ``causal_padding_bias`` turns the ``(B, S)`` real-token mask into one
additive bias ``(B, 1, S, S)`` broadcast over heads: 0 where ``j <= i`` and both tokens are real,
``MASK_VALUE = -1e9`` elsewhere. ``sample_next_token`` turns the last logit row into the next id.

Subtle point: the mask value is the *finite* ``-1e9``, not ``-inf``: a padding query (right padding) has
every key masked, and ``softmax`` of an all ``-inf`` row is NaN, which would poison the loss and every
gradient even though that row is never supervised; with ``-1e9`` the row softmaxes to uniform and stays
finite. Adding ``-1e9`` to ``O(1)`` scores leaves ``exp`` of the masked entries exactly 0 in float32.

Shapes: embeddings ``(B, S, d)``, mask ``(B, S)``, bias ``(B, 1, S, S)``, per-head queries/keys/values
``(B, H, S, d_h)``, scores ``(B, H, S, S)``, hidden states ``(B, S, d)``, logits ``(B, V)`` for sampling.

Trade-off: learned absolute positions rather than RoPE: the model only ever sees ``N_q + max_text_len``
positions, so a table is the simplest thing that works, at the price of no length extrapolation. One
bias for causal and padding masks (built once per forward, shared by all layers) rather than two masks
combined per layer.

Tests I would write: the bias is 0/-1e9 exactly where expected on a hand-made mask; a right-padded
batch gives finite hidden states and gradients; changing a future token does not change earlier
hidden states (causality); ``sample_next_token`` greedy equals argmax, top_k=1 equals greedy, the
same generator seed gives the same draw, and bad temperature / top_k raise ``ValueError``.
"""
# What the rubric reads: in the docstring above, your plan (what the module computes and its subtle
# point, the shapes, a trade-off: why this way rather than another, and what you would test); a
# docstring on every public function; a shape comment at the end of every line that creates,
# reshapes, contracts or reduces a tensor: `scores = q @ k.transpose(-2, -1)  # (B, H, T_q, T_k)`.

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

MASK_VALUE: float = -1e9
"""Additive bias of a disallowed query/key pair: finite, so a fully masked row softmaxes to uniform."""


def causal_padding_bias(attention_mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """``(B, S)`` 0/1 (or bool) mask -> ``(B, 1, S, S)`` additive attention bias in ``dtype``.

    Entry ``[b, 0, i, j]`` is 0 when ``j <= i`` and tokens ``i`` and ``j`` of row ``b`` are both real,
    and ``MASK_VALUE = -1e9`` otherwise (a future key, a padding key, or a padding query).

    Raises:
        ValueError: ``attention_mask`` is not 2-D.
    """
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be 2-D (B, S), got shape {tuple(attention_mask.shape)}")
    B, S = attention_mask.shape
    real = attention_mask != 0  # (B, S)
    causal = torch.ones(S, S, dtype=torch.bool, device=attention_mask.device).tril()  # (S, S)
    allowed = causal & real[:, None, :] & real[:, :, None]  # (B, S, S)
    return ((1.0 - allowed.to(dtype)) * MASK_VALUE).unsqueeze(1)  # (B, 1, S, S)


class TinyCausalLM(nn.Module):
    """Decoder-only transformer over input embeddings, with a token embedding and an LM head.

    Args:
        vocab_size: ``V``.
        d_model: width ``d``; must be divisible by ``n_heads``.
        n_heads: attention heads.
        n_layers: causal blocks, ``>= 1``.
        max_positions: size of the learned position table (``N_q + max_text_len`` in the VLM).

    Token and position embeddings start at ``N(0, 0.02^2)`` (GPT-2's init) instead of
    ``nn.Embedding``'s ``N(0, 1)``: with unit-scale text embeddings next to the layer-normed visual
    tokens, SFT learned the largest-shape question less reliably: on seed 0 after 400 steps its
    accuracy was 0.75 against 1.00 (2x MLPs, ``lr = 1e-3``) and 0.29 against 1.00 (4x MLPs, 3e-3).

    Attributes:
        embed_tokens: ``nn.Embedding(V, d)``, used by the VLM for the text tokens.
        lm_head: ``nn.Linear(d, V)``, applied to :meth:`encode`'s output by the VLM.

    Raises:
        ValueError: a non-positive size, or ``d_model`` not divisible by ``n_heads``.
    """

    def __init__(self, vocab_size: int, d_model: int, n_heads: int, n_layers: int, max_positions: int) -> None:
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("d_model", d_model), ("n_heads", n_heads),
                            ("n_layers", n_layers), ("max_positions", max_positions)):
            if value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        if d_model % n_heads != 0:
            raise ValueError(f"d_model {d_model} must be divisible by n_heads {n_heads}")
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.max_positions = max_positions
        self.embed_tokens = nn.Embedding(vocab_size, d_model)
        self.embed_positions = nn.Embedding(max_positions, d_model)
        nn.init.normal_(self.embed_tokens.weight, mean=0.0, std=0.02)
        nn.init.normal_(self.embed_positions.weight, mean=0.0, std=0.02)
        self.blocks = nn.ModuleList(_CausalBlock(d_model, n_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size)

    def encode(self, inputs_embeds: Tensor, attention_mask: Tensor, position_ids: Tensor) -> Tensor:
        """``(B, S, d)`` embeddings, ``(B, S)`` mask, ``(B, S)`` long positions -> ``(B, S, d)`` hidden states.

        Raises:
            ValueError: mismatched shapes, a width other than ``d``, or a position outside the table.
        """
        if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != self.d_model:
            raise ValueError(f"inputs_embeds must be (B, S, {self.d_model}), got {tuple(inputs_embeds.shape)}")
        B, S, _ = inputs_embeds.shape
        if tuple(attention_mask.shape) != (B, S):
            raise ValueError(f"attention_mask must be {(B, S)}, got {tuple(attention_mask.shape)}")
        if tuple(position_ids.shape) != (B, S):
            raise ValueError(f"position_ids must be {(B, S)}, got {tuple(position_ids.shape)}")
        if position_ids.dtype.is_floating_point or position_ids.dtype == torch.bool:
            raise ValueError(f"position_ids must be an integer tensor, got {position_ids.dtype}")
        if S > 0 and (int(position_ids.min()) < 0 or int(position_ids.max()) >= self.max_positions):
            raise ValueError(f"position_ids must lie in 0..{self.max_positions - 1}")
        bias = causal_padding_bias(attention_mask, dtype=inputs_embeds.dtype)  # (B, 1, S, S)
        x = inputs_embeds + self.embed_positions(position_ids)  # (B, S, d)
        for block in self.blocks:
            x = block(x, bias)  # (B, S, d)
        return self.norm(x)  # (B, S, d)


class _CausalSelfAttention(nn.Module):
    """Multi-head self-attention with an additive ``(B, 1, S, S)`` bias: ``(B, S, d) -> (B, S, d)``."""

    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_h = d // n_heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        """``softmax(Q K^T / sqrt(d_h) + bias) V``, heads merged back to ``d``."""
        B, S, d = x.shape
        qkv = self.qkv(x).reshape(B, S, 3, self.n_heads, self.d_h)  # (B, S, 3, H, d_h)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (B, H, S, d_h) each
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # (B, H, S, d_h)
        ctx = ctx.transpose(1, 2).reshape(B, S, d)  # (B, S, d)
        return self.out(ctx)  # (B, S, d)


class _CausalBlock(nn.Module):
    """Pre-norm decoder block: ``x + attn(LN(x), bias)`` then ``x + MLP(LN(x))`` (4x GELU MLP)."""

    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = _CausalSelfAttention(d, n_heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        """``(B, S, d) -> (B, S, d)``."""
        x = x + self.attn(self.ln1(x), bias)  # (B, S, d)
        return x + self.mlp(self.ln2(x))  # (B, S, d)


def sample_next_token(logits: Tensor, greedy: bool = False, temperature: float = 1.0,
                      top_k: int | None = None, generator: torch.Generator | None = None) -> Tensor:
    """One next token per row: ``(B, V)`` logits -> ``(B,)`` long ids.

    ``greedy`` takes the argmax; otherwise the logits are divided by ``temperature``, optionally cut to
    the ``top_k`` largest (ties at the k-th value kept), softmaxed and sampled with ``generator``.
    Same positional order and defaults as #32's ``sample_next_token``.

    Raises:
        ValueError: ``logits`` not 2-D, ``temperature`` not finite and > 0 when sampling, ``top_k < 1``.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D (B, V), got shape {tuple(logits.shape)}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1 or None, got {top_k}")
    if greedy:
        return logits.argmax(dim=-1)  # (B,)
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be finite and > 0, got {temperature}")
    scaled = logits / temperature  # (B, V)
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        scaled = scaled.masked_fill(scaled < kth, torch.finfo(scaled.dtype).min)  # (B, V); ties at the k-th value kept
    # Gumbel-max: argmax(logits / tau + Gumbel noise) is a draw from softmax(logits / tau).
    u = torch.rand(scaled.shape, generator=generator, dtype=torch.float64)  # (B, V)
    gumbel = -torch.log(-torch.log(u.clamp_min(1e-300)))
    return (scaled.double() + gumbel).argmax(dim=-1)  # (B,)
