"""Canon #60, part 4: the causal language model that reads the spliced sequence, and its sampler.

``TinyCausalLM`` is a GPT without its input layer: :meth:`TinyCausalLM.encode` takes ready-made
embeddings ``(B, S, d)`` (visual tokens followed by text-token embeddings, built by the VLM), adds
learned position embeddings at ``position_ids``, and runs pre-norm causal blocks to final hidden
states. ``embed_tokens`` and ``lm_head`` are exposed so the VLM can embed text and score tokens.

The subtle point is the mask value. :func:`causal_padding_bias` turns an ``(B, S)`` 0/1 attention mask
into an additive ``(B, 1, S, S)`` bias that is 0 where query ``i`` may read key ``j`` (``j <= i`` and
both are real tokens) and the finite ``MASK_VALUE = -1e9`` elsewhere. A right-padded row's padding
queries have *every* key masked; with ``-inf`` their softmax is ``exp(-inf) / 0 = NaN``, and that NaN
reaches every parameter through the backward pass even though the loss never reads those positions
(``NaN * 0`` is NaN). With ``-1e9`` the row is uniform and harmless. The same -1e9 overflows to
``-inf`` in float16 (whose range ends near -6.5e4), which is why production code uses
``torch.finfo(dtype).min`` instead; everything here runs in float32.

Shapes: ``B`` batch, ``S`` spliced sequence length (``N_q + T``), ``d`` width, ``H_a`` heads,
``d_h = d / H_a``, ``V`` vocabulary.

Trade-off: masking padding *queries* as well as padding keys costs nothing (their outputs are never
read) and keeps padded positions from attending to anything, rather than letting garbage positions
mix real tokens; it is also what makes the finite mask value matter, which is why it is the probe.

What to test: the bias is 0 / -1e9 exactly (never ``-inf``) with the causal and padding pattern; a
right-padded batch gives finite hidden states, logits, loss and gradients; a real token's hidden state
does not depend on the padding after it; greedy :func:`sample_next_token` is the argmax and sampling
with a seeded generator is reproducible.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

_MLP_RATIO = 2

MASK_VALUE: float = -1e9
"""Additive bias of a disallowed query/key pair: finite, so a fully masked row softmaxes to uniform."""


def causal_padding_bias(attention_mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """``(B, S)`` 0/1 (or bool) mask -> ``(B, 1, S, S)`` additive attention bias in ``dtype``.

    Entry ``[b, 0, i, j]`` is 0 when ``j <= i`` and tokens ``i`` and ``j`` of row ``b`` are both real,
    and ``MASK_VALUE = -1e9`` otherwise (a future key, a padding key, or a padding query).

    Raises:
        ValueError: ``attention_mask`` is not 2-D.
    """
    if attention_mask.ndim != 2:
        raise ValueError(f"attention_mask must be (B, S), got shape {tuple(attention_mask.shape)}")
    S = attention_mask.shape[1]
    real = attention_mask != 0                                           # (B, S)
    causal = torch.ones(S, S, dtype=torch.bool, device=attention_mask.device).tril()  # (S, S)
    allowed = causal[None, :, :] & real[:, None, :] & real[:, :, None]   # (B, S, S)
    bias = torch.where(allowed, 0.0, MASK_VALUE).to(dtype)               # (B, S, S)
    return bias[:, None, :, :]                                           # (B, 1, S, S)


class _CausalBlock(nn.Module):
    """Pre-norm causal self-attention block: ``(B, S, d)`` and a ``(B, 1, S, S)`` bias -> ``(B, S, d)``."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.norm_attn = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm_mlp = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, _MLP_RATIO * d_model), nn.GELU(),
                                 nn.Linear(_MLP_RATIO * d_model, d_model))

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        B, S, d = x.shape
        d_h = d // self.n_heads
        h = self.norm_attn(x)                                            # (B, S, d)
        q, k, v = self.qkv(h).split(d, dim=-1)                           # (B, S, d), (B, S, d), (B, S, d)
        q = q.reshape(B, S, self.n_heads, d_h).transpose(1, 2)           # (B, H_a, S, d_h)
        k = k.reshape(B, S, self.n_heads, d_h).transpose(1, 2)           # (B, H_a, S, d_h)
        v = v.reshape(B, S, self.n_heads, d_h).transpose(1, 2)           # (B, H_a, S, d_h)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_h) + bias         # (B, H_a, S, S)
        weights = torch.softmax(scores, dim=-1)                          # (B, H_a, S, S)
        mixed = (weights @ v).transpose(1, 2).reshape(B, S, d)           # (B, S, d)
        x = x + self.out(mixed)                                          # (B, S, d)
        return x + self.mlp(self.norm_mlp(x))                            # (B, S, d)


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
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} must be divisible by n_heads {n_heads}")
        self.d_model = d_model
        self.max_positions = max_positions
        self.embed_tokens = nn.Embedding(vocab_size, d_model)
        self.embed_positions = nn.Embedding(max_positions, d_model)
        self.blocks = nn.ModuleList(_CausalBlock(d_model, n_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size)
        nn.init.normal_(self.embed_tokens.weight, std=0.02)
        nn.init.normal_(self.embed_positions.weight, std=0.02)

    def encode(self, inputs_embeds: Tensor, attention_mask: Tensor, position_ids: Tensor) -> Tensor:
        """``(B, S, d)`` embeddings, ``(B, S)`` mask, ``(B, S)`` long positions -> ``(B, S, d)`` hidden states.

        Raises:
            ValueError: mismatched shapes, a width other than ``d``, or a position outside the table.
        """
        if inputs_embeds.ndim != 3 or inputs_embeds.shape[-1] != self.d_model:
            raise ValueError(f"inputs_embeds must be (B, S, {self.d_model}), got {tuple(inputs_embeds.shape)}")
        if tuple(attention_mask.shape) != tuple(inputs_embeds.shape[:2]):
            raise ValueError(f"attention_mask must be {tuple(inputs_embeds.shape[:2])}, got {tuple(attention_mask.shape)}")
        if tuple(position_ids.shape) != tuple(inputs_embeds.shape[:2]):
            raise ValueError(f"position_ids must be {tuple(inputs_embeds.shape[:2])}, got {tuple(position_ids.shape)}")
        if position_ids.numel() and (int(position_ids.min()) < 0 or int(position_ids.max()) >= self.max_positions):
            raise ValueError(f"position_ids must lie in [0, {self.max_positions}), the sequence is too long")
        bias = causal_padding_bias(attention_mask, inputs_embeds.dtype)  # (B, 1, S, S)
        x = inputs_embeds + self.embed_positions(position_ids)           # (B, S, d)
        for block in self.blocks:
            x = block(x, bias)                                           # (B, S, d)
        return self.norm(x)                                              # (B, S, d)


def sample_next_token(logits: Tensor, greedy: bool = False, temperature: float = 1.0,
                      top_k: int | None = None, generator: torch.Generator | None = None) -> Tensor:
    """One next token per row: ``(B, V)`` logits -> ``(B,)`` long ids.

    ``greedy`` takes the argmax; otherwise the logits are divided by ``temperature``, optionally cut to
    the ``top_k`` largest (ties at the k-th value kept), softmaxed and sampled with ``generator``.
    Same positional order and defaults as #32's ``sample_next_token``.

    Raises:
        ValueError: ``logits`` not 2-D, ``temperature`` not finite and > 0 when sampling, ``top_k < 1``.
    """
    if logits.ndim != 2:
        raise ValueError(f"logits must be (B, V), got shape {tuple(logits.shape)}")
    if greedy:
        return logits.argmax(dim=-1)                                     # (B,)
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be finite and > 0 when sampling, got {temperature!r}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1 or None, got {top_k!r}")
    work = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits  # (B, V)
    scaled = work / temperature                                          # (B, V)
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]           # (B, 1)
        scaled = scaled.masked_fill(scaled < kth, torch.finfo(scaled.dtype).min)  # (B, V)
    probs = torch.softmax(scaled, dim=-1)                                # (B, V)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]        # (B,)
