"""Canon #33: a preallocated key/value cache for incremental decoding, and its memory formula.

During generation each new token needs the keys and values of every earlier token. Recomputing them
costs a full forward over the prefix per step (quadratic in length overall); caching them makes a step
one token's worth of projections plus one attention row. ``KVCache`` holds ``(B, H_kv, max_len, d_h)``
buffers for keys and values, ``update`` writes the new slice and returns views of everything written.

The subtle point is the bookkeeping around the cache rather than the cache itself: the new queries
are the *last* ``T_new`` of ``length`` positions, so the causal mask must be bottom-right aligned
(``causal_mask(T_new, length)``, #27) and RoPE positions must start at the old length. The cache
stores keys *after* RoPE, so a key is rotated once, at its own position. A failed ``update``
(overflow, wrong shape) must leave the cache exactly as it was.

Shape letters: ``B`` batch, ``H_kv`` key/value heads (``H`` for MHA, fewer for GQA), ``T_new`` tokens
appended by one update, ``L`` tokens held after it, ``max_len`` capacity, ``d_h`` head width.

Trade-off: the buffers are preallocated to ``max_len`` instead of grown with ``torch.cat`` each step,
because concatenation copies the whole cache every token: over ``T`` steps that is ``T²/2`` token
copies (3.4·10⁷ at ``T = 8192``, per head and layer) instead of ``T``, and it fragments memory. The
price is paying for ``max_len`` up front: ``kv_cache_bytes(32, 1, 8, 128, 8192)`` is exactly 1 GiB in
bf16 for an 8B-class model with 8 KV heads, which is why GQA (#35) shrinks ``H_kv``.

What to test: cached decoding (prefill, then single tokens) equals the full causal forward row by
row, ``length`` bookkeeping and ``reset``, that returned tensors share the buffers' storage, the
1 GiB figure, and that overflow and shape or dtype mismatches raise without changing the cache.
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
    Raises ValueError for non-positive sizes. Source: docs/contract.md #33; the layout is HF's
    ``StaticCache`` (batch, heads, positions, head width).
    """

    def __init__(self, batch_size: int, n_kv_heads: int, head_dim: int, max_len: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> None:
        _check_sizes(batch_size=batch_size, n_kv_heads=n_kv_heads, head_dim=head_dim, max_len=max_len)
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
        the buffers' storage (no copy). Raises ValueError if a shape or dtype differs from the buffers
        or if ``length + T_new > max_len``; an update that raises leaves ``length`` and the cached
        positions unchanged.
        """
        self._check_update(k_new, v_new)
        start, end = self._length, self._length + k_new.shape[2]
        self.k[:, :, start:end] = k_new                                  # (B, H_kv, T_new, d_h)
        self.v[:, :, start:end] = v_new                                  # (B, H_kv, T_new, d_h)
        self._length = end
        return self.k[:, :, :end], self.v[:, :, :end]                    # (B, H_kv, L, d_h), (B, H_kv, L, d_h)

    def reset(self) -> None:
        """Forget every cached position (``length`` back to 0); the buffers are kept for reuse."""
        self._length = 0

    def memory_bytes(self) -> int:
        """Bytes held by both buffers: ``2 · B · H_kv · max_len · d_h · element_size``."""
        return 2 * self.k.numel() * self.k.element_size()

    def _check_update(self, k_new: Tensor, v_new: Tensor) -> None:
        """ValueError unless both are ``(B, H_kv, T_new, d_h)`` in the buffers' dtype and fit ``max_len``."""
        B, H_kv, _, d_h = self.k.shape
        for name, t in (("k_new", k_new), ("v_new", v_new)):
            if t.dim() != 4 or t.shape[0] != B or t.shape[1] != H_kv or t.shape[3] != d_h:
                raise ValueError(f"{name} must be (B={B}, H_kv={H_kv}, T_new, d_h={d_h}), got {tuple(t.shape)}")
            if t.dtype != self.k.dtype:
                raise ValueError(f"{name} dtype {t.dtype} differs from the cache dtype {self.k.dtype}")
        if v_new.shape != k_new.shape:
            raise ValueError(f"v_new shape {tuple(v_new.shape)} differs from k_new shape {tuple(k_new.shape)}")
        if self._length + k_new.shape[2] > self.max_len:
            raise ValueError(f"k_new would overflow the cache: length {self._length} + T_new "
                             f"{k_new.shape[2]} > max_len={self.max_len}")


def kv_cache_bytes(n_layers: int, batch_size: int, n_kv_heads: int, head_dim: int, seq_len: int,
                   bytes_per_elem: int = 2) -> int:
    """KV-cache size of a whole model: ``2 · L · B · H_kv · T · d_h · bytes`` (K and V, every layer).

    ``bytes_per_elem`` is 2 for float16/bfloat16. ``kv_cache_bytes(32, 1, 8, 128, 8192) == 2**30``.
    Raises ValueError if any argument is negative or ``bytes_per_elem < 1``.
    """
    _check_counts(n_layers=n_layers, batch_size=batch_size, n_kv_heads=n_kv_heads, head_dim=head_dim,
                  seq_len=seq_len)
    if bytes_per_elem < 1:
        raise ValueError(f"bytes_per_elem must be >= 1, got {bytes_per_elem}")
    return 2 * n_layers * batch_size * n_kv_heads * head_dim * seq_len * bytes_per_elem


def _check_sizes(**sizes: int) -> None:
    """ValueError naming the first size that is not a positive integer."""
    for name, value in sizes.items():
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")


def _check_counts(**counts: int) -> None:
    """ValueError naming the first count that is negative."""
    for name, value in counts.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
