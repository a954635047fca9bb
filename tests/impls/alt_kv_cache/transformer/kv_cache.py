"""Alternative correct #33: ``narrow(...).copy_`` writes, ``narrow`` views, the validation done on
``torch.Size`` tuples, and byte counts from ``math.prod`` / the buffers' storage size.

Written differently from the reference on purpose (tests/impls); it must pass every test of
``transformer/kv_cache``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


class KVCache:
    """See canon_refs/transformer/kv_cache.py for the contract."""

    def __init__(self, batch_size: int, n_kv_heads: int, head_dim: int, max_len: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> None:
        sizes = {"batch_size": batch_size, "n_kv_heads": n_kv_heads, "head_dim": head_dim, "max_len": max_len}
        bad = [n for n, s in sizes.items() if s <= 0]
        if bad:
            raise ValueError(f"{bad[0]} must be positive")
        self.k = torch.empty(batch_size, n_kv_heads, max_len, head_dim, dtype=dtype, device=device)  # (B, H_kv, max_len, d_h)
        self.v = torch.empty_like(self.k)                                # (B, H_kv, max_len, d_h)
        self._n = 0

    @property
    def length(self) -> int:
        return self._n

    def update(self, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        b, h, cap, d = self.k.shape
        for name, t in (("k_new", k_new), ("v_new", v_new)):
            if t.ndim != 4 or (t.shape[0], t.shape[1], t.shape[3]) != (b, h, d) or t.dtype != self.k.dtype:
                raise ValueError(f"{name} does not match the cache layout/dtype")
        if v_new.shape[2] != k_new.shape[2]:
            raise ValueError("v_new and k_new lengths differ")
        n = k_new.shape[2]
        if self._n + n > cap:
            raise ValueError("k_new does not fit: max_len exceeded")
        self.k.narrow(2, self._n, n).copy_(k_new)
        self.v.narrow(2, self._n, n).copy_(v_new)
        self._n += n
        return self.k.narrow(2, 0, self._n), self.v.narrow(2, 0, self._n)  # (B, H_kv, L, d_h), (B, H_kv, L, d_h)

    def reset(self) -> None:
        self._n = 0

    def memory_bytes(self) -> int:
        return self.k.untyped_storage().nbytes() + self.v.untyped_storage().nbytes()


def kv_cache_bytes(n_layers: int, batch_size: int, n_kv_heads: int, head_dim: int, seq_len: int,
                   bytes_per_elem: int = 2) -> int:
    """K and V for every layer."""
    if min(n_layers, batch_size, n_kv_heads, head_dim, seq_len) < 0 or bytes_per_elem < 1:
        raise ValueError("sizes must be non-negative and bytes_per_elem >= 1")
    return math.prod((2, n_layers, batch_size, n_kv_heads, seq_len, head_dim, bytes_per_elem))
