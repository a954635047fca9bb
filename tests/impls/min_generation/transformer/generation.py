"""Autoregressive generation: greedy decoding, temperature, top-k and top-p (nucleus) sampling.

Plan: sampling works on the last position's logits (B, V): divide by the temperature, mask everything
outside the top-k / the nucleus with finfo.min (not -inf, so a row never becomes all -inf), softmax
in float32 and draw with torch.multinomial from the caller's generator for reproducibility. The loop
either re-runs the cropped context each step (O(T^2) per token) or prefills a KV cache once and then
feeds one token per step; rows that emitted eos keep emitting eos.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the ``k`` largest logits of each row (ties with the k-th kept); others -> ``finfo.min``."""
    V = logits.shape[-1]
    if k >= V:
        return logits.clone()
    kth = torch.topk(logits, k, dim=-1).values[:, -1:]  # (B, 1)
    return logits.masked_fill(logits < kth, torch.finfo(logits.dtype).min)


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter: drop a token when the mass strictly before it (descending) is already ``>= p``."""
    if p >= 1.0:
        return logits.clone()
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V)
    probs = torch.softmax(sorted_logits.float(), dim=-1)  # (B, V)
    mass_before = probs.cumsum(dim=-1) - probs  # (B, V)
    remove_sorted = mass_before >= p
    remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)  # back to vocab order
    return logits.masked_fill(remove, torch.finfo(logits.dtype).min)


def sample_next_token(
    logits: Tensor,
    greedy: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    *,
    top_p: float | None = None,
) -> Tensor:
    """One next token per row: argmax, or temperature -> top-k -> top-p -> softmax -> multinomial."""
    if greedy:
        return logits.argmax(dim=-1)
    x = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    x = x / temperature
    if top_k is not None:
        x = top_k_filter(x, top_k)
    if top_p is not None:
        x = top_p_filter(x, top_p)
    probs = torch.softmax(x, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)


def _logits_of(out) -> Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


@torch.no_grad()
def generate(
    model: nn.Module,
    idx: Tensor,
    max_new_tokens: int,
    *,
    greedy: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_id: int | None = None,
    use_cache: bool = False,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Append ``max_new_tokens`` tokens to each prompt row ``idx (B, T_0)``; returns ``(B, T_0 + n)``."""
    B, T0 = idx.shape
    if max_new_tokens == 0:
        return idx.clone()
    config = getattr(model, "config", None)
    max_len = getattr(config, "max_seq_len", None)
    finished = torch.zeros(B, dtype=torch.bool, device=idx.device)
    caches = model.new_kv_caches(B, T0 + max_new_tokens) if use_cache else None
    out = idx
    step_input = idx
    for _ in range(max_new_tokens):
        if use_cache:
            logits = _logits_of(model(step_input, kv_caches=caches))
        else:
            ctx = out if max_len is None else out[:, -max_len:]
            logits = _logits_of(model(ctx))
        nxt = sample_next_token(logits[:, -1], greedy, temperature, top_k, generator, top_p=top_p)  # (B,)
        if eos_id is not None:
            nxt = torch.where(finished, torch.full_like(nxt, eos_id), nxt)
            finished |= nxt == eos_id
        out = torch.cat([out, nxt[:, None].to(out.dtype)], dim=1)  # (B, T + 1)
        step_input = nxt[:, None].to(out.dtype)
    return out
