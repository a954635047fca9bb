"""Alternative product quantizer (#45): the same contract, written differently.

Differences from the reference: encoding scores all subspaces at once with one ``einsum`` into an
``(n, m, ks)`` array (expansion ``|c|^2 - 2 x.c``, the ``|x|^2`` term dropped since it does not change the
argmin); the ADC sum accumulates one subspace at a time (``m`` gathers of ``(m_q, n)``) instead of one
``(m_q, n, m)`` gather; decoding uses ``take_along_axis``; top-k uses ``argpartition`` then ``lexsort``.
Shape letters: ``n``, ``d``, ``m``, ``ks``, ``ds``, ``m_q``, ``k``. Test: all reference tests pass.
"""

from __future__ import annotations

import numpy as np

from canon_refs.classical.kmeans import kmeans


class ProductQuantizer:
    """PQ with einsum encoding and accumulated ADC."""

    def __init__(self, d, m, nbits=8, seed=0):
        if m < 1 or d < 1 or d % m:
            raise ValueError(f"m={m} must be a positive divisor of d={d}")
        if not 1 <= nbits <= 8:
            raise ValueError(f"nbits={nbits} must be within [1, 8]")
        self.d, self.m, self.nbits, self.seed = d, m, nbits, seed
        self.ks, self.ds = 1 << nbits, d // m
        self.codebooks = None
        self.trained = False

    def _need(self):
        if not self.trained:
            raise RuntimeError("ProductQuantizer is not trained")

    def _x(self, X, name):
        X = np.asarray(X, dtype=np.float64)                                          # (n, d)
        if X.ndim != 2 or X.shape[1] != self.d or not np.isfinite(X).all():
            raise ValueError(f"{name} must be finite with shape (n, {self.d})")
        return X                                                                     # (n, d)

    def train(self, X):
        X = self._x(X, "X")                                                          # (n, d)
        if len(X) < self.ks:
            raise ValueError(f"n_train={len(X)} < ks={self.ks}")
        subs = np.split(X, self.m, axis=1)                                           # list[m]
        books = [kmeans(s, self.ks, n_iter=25, seed=self.seed + j).centroids for j, s in enumerate(subs)]
        self.codebooks = np.stack(books).astype(np.float32)                          # (m, ks, ds)
        self.trained = True

    def encode(self, X):
        self._need()
        X = self._x(X, "X").reshape(-1, self.m, self.ds)                             # (n, m, ds)
        C = self.codebooks.astype(np.float64)                                        # (m, ks, ds)
        score = np.einsum("mcs,mcs->mc", C, C)[None] - 2.0 * np.einsum("nms,mcs->nmc", X, C)   # (n, m, ks)
        return score.argmin(axis=2).astype(np.uint8)                                 # (n, m)

    def decode(self, codes):
        self._need()
        codes = np.asarray(codes, dtype=np.int64)                                    # (n, m)
        out = np.empty((codes.shape[0], self.m, self.ds), dtype=np.float32)          # (n, m, ds)
        for j in range(self.m):
            out[:, j] = self.codebooks[j][codes[:, j]]
        return out.reshape(codes.shape[0], self.d)                                   # (n, d)

    def distance_tables(self, q):
        self._need()
        q = np.asarray(q, dtype=np.float64).reshape(self.m, 1, self.ds)              # (m, 1, ds)
        return ((self.codebooks - q) ** 2).sum(axis=2).astype(np.float32)            # (m, ks)

    def adc_search(self, Q, codes, k):
        self._need()
        Q = self._x(Q, "Q")                                                          # (m_q, d)
        if k < 1:
            raise ValueError(f"k={k} must be >= 1")
        codes = np.asarray(codes, dtype=np.int64)                                    # (n, m)
        if codes.ndim != 2 or codes.shape[1] != self.m:
            raise ValueError("codes must have shape (n, m)")
        sub = Q.reshape(len(Q), self.m, 1, self.ds)                                  # (m_q, m, 1, ds)
        tables = ((sub - self.codebooks[None].astype(np.float64)) ** 2).sum(axis=3)  # (m_q, m, ks)
        dist = np.zeros((len(Q), len(codes)))                                        # (m_q, n)
        for j in range(self.m):
            dist += tables[:, j, codes[:, j]]
        D = np.full((len(Q), k), np.inf, dtype=np.float32)                           # (m_q, k)
        I = np.full((len(Q), k), -1, dtype=np.int64)                                 # (m_q, k)
        kk = min(k, len(codes))
        if kk == 0:
            return D, I                                                              # (m_q, k), (m_q, k)
        part = np.argpartition(dist, kk - 1, axis=1)[:, :kk] if kk < len(codes) else np.tile(np.arange(kk), (len(Q), 1))   # (m_q, kk)
        for r in range(len(Q)):
            cand = part[r]
            order = cand[np.lexsort((cand, dist[r, cand]))]
            D[r, :kk], I[r, :kk] = dist[r, order], order
        return D, I                                                                  # (m_q, k), (m_q, k)
