"""Broken #33: the overflow check runs after the write.

The slice assignment silently truncates at ``max_len`` and ``length`` is advanced before the error is
raised, so a failed ``update`` leaves the cache changed (canon-spec C6: validate before mutating).
Caught by ``test_fill_to_capacity_then_overflow_leaves_cache_unchanged``.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["KVCache", "kv_cache_bytes"]


class KVCache:
    """Preallocated per-layer key/value cache ``(B, H_kv, max_len, d_h)``.

    Args:
        batch_size, n_kv_heads, head_dim, max_len: buffer sizes, each >= 1.
        dtype: buffer dtype (the dtype of the keys and values written); float32 by default.
        device: buffer device.

    Attributes: ``k``, ``v`` the buffers; ``length`` the number of positions written so far.
    A cache is for inference: ``update`` writes in place, so use it under ``torch.no_grad()``.
    Raises ValueError for non-positive sizes. Source: canon-spec #33; the layout is HF's
    ``StaticCache`` (batch, heads, positions, head width).
    """

    def __init__(self, batch_size: int, n_kv_heads: int, head_dim: int, max_len: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> None:
        for name, value in (("batch_size", batch_size), ("n_kv_heads", n_kv_heads),
                            ("head_dim", head_dim), ("max_len", max_len)):
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        shape = (batch_size, n_kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)          # (B, H_kv, max_len, d_h)
        self.v = torch.zeros(shape, dtype=dtype, device=device)          # (B, H_kv, max_len, d_h)
        self.max_len = max_len
        self._length = 0

    @property
    def length(self) -> int:
        """Number of positions written since construction or the last ``reset()``."""
        return self._length

    def update(self, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``T_new`` positions and return views of all ``L = length + T_new`` cached positions.

        ``k_new``, ``v_new``: ``(B, H_kv, T_new, d_h)``, the buffers' dtype. Writes them at
        ``[length, length + T_new)`` and returns ``(k, v)``, each ``(B, H_kv, L, d_h)``, views sharing
        the buffers' storage (no copy). Raises ValueError, leaving the cache unchanged, if a shape or
        dtype differs from the buffers or if ``length + T_new > max_len``.
        """
        B, H_kv, _, d_h = self.k.shape
        for name, t in (("k_new", k_new), ("v_new", v_new)):
            if t.dim() != 4 or t.shape[0] != B or t.shape[1] != H_kv or t.shape[3] != d_h:
                raise ValueError(f"{name} must be (B={B}, H_kv={H_kv}, T_new, d_h={d_h}), got {tuple(t.shape)}")
            if t.dtype != self.k.dtype:
                raise ValueError(f"{name} dtype {t.dtype} differs from the cache dtype {self.k.dtype}")
        if v_new.shape != k_new.shape:
            raise ValueError(f"v_new shape {tuple(v_new.shape)} differs from k_new shape {tuple(k_new.shape)}")
        start, end = self._length, self._length + k_new.shape[2]
        fits = min(end, self.max_len) - start
        self.k[:, :, start:start + fits] = k_new[:, :, :fits]            # (B, H_kv, T_new, d_h)
        self.v[:, :, start:start + fits] = v_new[:, :, :fits]            # (B, H_kv, T_new, d_h)
        self._length = min(end, self.max_len)
        if end > self.max_len:
            raise ValueError(f"k_new would overflow the cache: length {start} + T_new "
                             f"{k_new.shape[2]} > max_len={self.max_len}")
        return self.k[:, :, :end], self.v[:, :, :end]                    # (B, H_kv, L, d_h), (B, H_kv, L, d_h)

    def reset(self) -> None:
        """Forget every cached position (``length`` back to 0); the buffers are kept for reuse."""
        self._length = 0

    def memory_bytes(self) -> int:
        """Bytes held by both buffers: ``2 · B · H_kv · max_len · d_h · element_size``."""
        return 2 * self.k.numel() * self.k.element_size()


def kv_cache_bytes(n_layers: int, batch_size: int, n_kv_heads: int, head_dim: int, seq_len: int,
                   bytes_per_elem: int = 2) -> int:
    """KV-cache size of a whole model: ``2 · L · B · H_kv · T · d_h · bytes`` (K and V, every layer).

    ``bytes_per_elem`` is 2 for float16/bfloat16. ``kv_cache_bytes(32, 1, 8, 128, 8192) == 2**30``.
    Raises ValueError if any argument is negative or ``bytes_per_elem < 1``.
    """
    args = {"n_layers": n_layers, "batch_size": batch_size, "n_kv_heads": n_kv_heads,
            "head_dim": head_dim, "seq_len": seq_len}
    for name, value in args.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    if bytes_per_elem < 1:
        raise ValueError(f"bytes_per_elem must be >= 1, got {bytes_per_elem}")
    return 2 * n_layers * batch_size * n_kv_heads * head_dim * seq_len * bytes_per_elem
