"""Alternative generation (#32), written differently from the reference: spec-literal ``-inf`` fills,
top-k through ``kthvalue``, top-p through an ascending sort whose tail mass decides removal, sampling by
the Gumbel-max trick instead of ``torch.multinomial``, and generation that preallocates the output and
writes one column per step. Must pass every test of transformer/generation.

Shapes: ``B`` rows, ``V`` vocabulary, ``T_0`` prompt, ``L`` total length.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def _logits_ok(logits: Tensor) -> None:
    if not torch.is_tensor(logits) or logits.dim() != 2 or not torch.is_floating_point(logits):
        raise ValueError("logits: expected a floating tensor of shape (B, V)")


def _k_ok(k, name: str) -> None:
    if k is not None and (type(k) is not int or k <= 0):
        raise ValueError(f"{name}: expected a positive int, got {k!r}")


def _p_ok(p, name: str) -> None:
    if p is not None and not (isinstance(p, (int, float)) and 0.0 < p <= 1.0):
        raise ValueError(f"{name}: expected a value in (0, 1], got {p!r}")


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Entries below the k-th largest become -inf (ties kept)."""
    _logits_ok(logits)
    _k_ok(k, "top_k (k)")
    V = logits.shape[-1]
    if k >= V:
        return logits.clone()
    kth = torch.kthvalue(logits, V - k + 1, dim=-1, keepdim=True).values          # (B, 1)
    return torch.where(logits >= kth, logits, torch.full_like(logits, -math.inf))  # (B, V)


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Keep the smallest set of top tokens whose probability reaches p."""
    _logits_ok(logits)
    _p_ok(p, "top_p (p)")
    if p == 1.0:
        return logits.clone()
    asc, idx = torch.sort(logits.double(), dim=-1)                                 # (B, V), (B, V)
    probs = torch.softmax(asc, dim=-1)                                             # (B, V)
    tail_incl = torch.flip(torch.cumsum(torch.flip(probs, [-1]), -1), [-1])        # (B, V) mass of this token and all above
    drop_sorted = (tail_incl - probs) >= p                                         # (B, V) mass strictly above already >= p
    drop = torch.empty_like(drop_sorted)
    drop.scatter_(-1, idx, drop_sorted)
    return logits.masked_fill(drop, -math.inf)                                     # (B, V)


def sample_next_token(logits: Tensor, greedy: bool = False, temperature: float = 1.0, top_k: int | None = None,
                      generator: torch.Generator | None = None, *, top_p: float | None = None) -> Tensor:
    """Greedy or Gumbel-max sampling after temperature, top-k, top-p."""
    _logits_ok(logits)
    if not greedy and not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError("temperature must be > 0 for sampling")
    _k_ok(top_k, "top_k")
    _p_ok(top_p, "top_p")
    if greedy:
        return torch.argmax(logits, dim=-1)                                        # (B,)
    z = logits.double() / temperature
    if top_k is not None:
        z = top_k_filter(z, top_k)
    if top_p is not None:
        z = top_p_filter(z, top_p)
    u = torch.rand(z.shape, generator=generator, dtype=torch.float64).clamp_(1e-300, 1.0)  # (B, V)
    gumbel = -torch.log(-torch.log(u))
    return torch.argmax(z + gumbel, dim=-1)                                        # (B,)


@torch.no_grad()
def generate(model: nn.Module, idx: Tensor, max_new_tokens: int, *, greedy: bool = False, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, eos_id: int | None = None,
             use_cache: bool = False, generator: torch.Generator | None = None) -> Tensor:
    """Prompt followed by max_new_tokens generated tokens."""
    if not torch.is_tensor(idx) or idx.dim() != 2 or torch.is_floating_point(idx) or idx.dtype == torch.bool:
        raise ValueError("idx must be integer (B, T_0)")
    if type(max_new_tokens) is not int or max_new_tokens < 0:
        raise ValueError("max_new_tokens must be a non-negative int")
    if not greedy and not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError("temperature must be > 0 for sampling")
    _k_ok(top_k, "top_k")
    _p_ok(top_p, "top_p")
    B, T0 = idx.shape
    L = T0 + max_new_tokens
    cfg = getattr(model, "config", None)
    limit = getattr(cfg, "max_seq_len", None)
    if use_cache and limit is not None and L > limit:
        raise ValueError(f"use_cache: total length {L} is above max_seq_len {limit}")
    out = torch.empty(B, L, dtype=torch.long)                                      # (B, L)
    out[:, :T0] = idx
    done = torch.zeros(B, dtype=torch.bool)                                        # (B,)
    caches = model.new_kv_caches(B, L) if (use_cache and max_new_tokens) else None
    for pos in range(T0, L):
        if caches is not None:
            step_in = out[:, :pos] if pos == T0 else out[:, pos - 1:pos]
            res = model(step_in, kv_caches=caches)
        else:
            lo = 0 if limit is None else max(0, pos - limit)
            res = model(out[:, lo:pos])
        last = (res[0] if isinstance(res, tuple) else res)[:, -1]                 # (B, V)
        tok = sample_next_token(last, greedy, temperature, top_k, generator, top_p=top_p)
        if eos_id is not None:
            tok = torch.where(done, torch.full_like(tok, eos_id), tok)             # (B,)
            done |= tok == eos_id
        out[:, pos] = tok
    return out
