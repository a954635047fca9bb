"""Canon #33: a preallocated key/value cache for incremental decoding, and its memory cost.

Plan: allocate K and V buffers (B, H_kv, max_len, d_h) once, keep a write pointer ``length``, and
on each step copy the new positions into [length, length + T_new) and return views of the filled
prefix, so decoding never re-concatenates (no O(T^2) copying). Memory is 2 (K and V) x layers x
batch x kv heads x positions x head width x bytes, which is why GQA's fewer kv heads matter.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["KVCache", "kv_cache_bytes"]


class KVCache:
    """Preallocated per-layer key/value cache ``(B, H_kv, max_len, d_h)``."""

    def __init__(self, batch_size: int, n_kv_heads: int, head_dim: int, max_len: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> None:
        self.max_len = max_len
        shape = (batch_size, n_kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # (B, H_kv, max_len, d_h)
        self.v = torch.zeros(shape, dtype=dtype, device=device)  # (B, H_kv, max_len, d_h)
        self._length = 0

    @property
    def length(self) -> int:
        """Number of positions written since construction or the last ``reset()``."""
        return self._length

    def update(self, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``T_new`` positions and return views ``(B, H_kv, L, d_h)`` of all cached positions."""
        start = self._length
        end = start + k_new.shape[2]
        if end > self.max_len:
            raise ValueError(f"KV cache overflow: {end} positions > max_len {self.max_len}")
        self.k[:, :, start:end] = k_new
        self.v[:, :, start:end] = v_new
        self._length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def reset(self) -> None:
        """Forget every cached position (``length`` back to 0); the buffers are kept for reuse."""
        self._length = 0

    def memory_bytes(self) -> int:
        """Bytes held by both buffers: ``2 · B · H_kv · max_len · d_h · element_size``."""
        return 2 * self.k.numel() * self.k.element_size()


def kv_cache_bytes(n_layers: int, batch_size: int, n_kv_heads: int, head_dim: int, seq_len: int,
                   bytes_per_elem: int = 2) -> int:
    """KV-cache size of a whole model: ``2 · L · B · H_kv · T · d_h · bytes`` (K and V, every layer)."""
    return 2 * n_layers * batch_size * n_kv_heads * seq_len * head_dim * bytes_per_elem
