"""Product quantization (PQ) with asymmetric distance computation (ADC) (canon item #45).

Plan: split vectors into m contiguous sub-vectors and quantize each with its own k-means codebook,
so a code of m bytes indexes ks^m cells without storing them. Search is asymmetric (ADC): the query
stays exact, one (m, ks) table of sub-distances per query, and a code's distance is m table lookups.
"""

from __future__ import annotations

import numpy as np

from canon_refs.classical.kmeans import kmeans


class ProductQuantizer:
    """``m`` independent sub-quantizers of ``2**nbits`` centroids each, over contiguous subspaces.

    Attributes:
        d, m, nbits: as given; ``ks = 2**nbits``; ``dsub = d // m``.
        codebooks: ``(m, ks, dsub)`` float32 sub-centroids (zeros until :meth:`train`).
        is_trained: True once :meth:`train` ran.

    Source: Jegou, Douze & Schmid, "Product quantization for nearest neighbor search", TPAMI 2011,
    sections II-III (PQ, ADC, eq. 13).
    """

    def __init__(self, d: int, m: int, nbits: int = 8, seed: int = 0) -> None:
        """Untrained quantizer.

        Args:
            d: vector width, ``>= 1``.
            m: number of subspaces, ``>= 1`` and a divisor of ``d``.
            nbits: bits per code, in ``[1, 8]`` (codes are uint8).
            seed: the k-means of subspace ``j`` is seeded with ``seed + j``.

        Raises:
            ValueError: ``d < 1``, ``m < 1``, ``d % m != 0``, ``nbits`` outside ``[1, 8]``.
        """
        self.d, self.m, self.nbits, self.seed = d, m, nbits, seed
        self.ks = 2 ** nbits
        self.dsub = d // m
        self.codebooks = np.zeros((m, self.ks, self.dsub), dtype=np.float32)
        self.is_trained = False

    def train(self, X: np.ndarray) -> None:
        """Fit one k-means codebook per subspace on the matching columns of ``X``.

        Args:
            X: ``(n_train, d)`` finite training vectors, ``n_train >= ks``.

        Raises:
            ValueError: ``X`` not ``(n_train, d)`` or not finite; ``n_train < ks``.
        """
        X = np.asarray(X, dtype=np.float64)
        for j in range(self.m):
            sub = X[:, j * self.dsub:(j + 1) * self.dsub]                     # (n, dsub)
            self.codebooks[j] = kmeans(sub, self.ks, seed=self.seed + j).centroids
        self.is_trained = True

    def encode(self, X: np.ndarray) -> np.ndarray:
        """Index of the nearest sub-centroid in every subspace.

        Args:
            X: ``(n, d)`` finite vectors.

        Returns:
            ``(n, m)`` uint8 codes.

        Raises:
            RuntimeError: before :meth:`train`.
            ValueError: ``X`` not ``(n, d)`` or not finite.
        """
        if not self.is_trained:
            raise RuntimeError("ProductQuantizer.encode: train first")
        X = np.asarray(X, dtype=np.float64)
        codes = np.empty((X.shape[0], self.m), dtype=np.uint8)
        for j in range(self.m):
            sub = X[:, j * self.dsub:(j + 1) * self.dsub]                     # (n, dsub)
            cb = self.codebooks[j].astype(np.float64)                         # (ks, dsub)
            d2 = ((sub[:, None, :] - cb[None, :, :]) ** 2).sum(-1)            # (n, ks)
            codes[:, j] = np.argmin(d2, axis=1)                               # first min on ties
        return codes

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """Concatenate the chosen sub-centroids.

        Args:
            codes: ``(n, m)`` integer codes in ``[0, ks)``.

        Returns:
            ``(n, d)`` float32 reconstructions.

        Raises:
            RuntimeError: before :meth:`train`.
            ValueError: ``codes`` not ``(n, m)`` integers in range.
        """
        if not self.is_trained:
            raise RuntimeError("ProductQuantizer.decode: train first")
        codes = np.asarray(codes).astype(np.int64)
        parts = [self.codebooks[j][codes[:, j]] for j in range(self.m)]      # m x (n, dsub)
        return np.concatenate(parts, axis=1).astype(np.float32)

    def distance_tables(self, q: np.ndarray) -> np.ndarray:
        """ADC lookup table of one query: ``T[j, c] = ||q_j - codebooks[j, c]||^2``.

        Args:
            q: ``(d,)`` finite query.

        Returns:
            ``(m, ks)`` float32.

        Raises:
            RuntimeError: before :meth:`train`.
            ValueError: ``q`` not ``(d,)`` or not finite.
        """
        if not self.is_trained:
            raise RuntimeError("ProductQuantizer.distance_tables: train first")
        qs = np.asarray(q, dtype=np.float64).reshape(self.m, 1, self.dsub)   # (m, 1, dsub)
        return ((qs - self.codebooks.astype(np.float64)) ** 2).sum(-1).astype(np.float32)  # (m, ks)

    def adc_search(self, Q: np.ndarray, codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``k`` nearest codes of every query by asymmetric distance ``sum_j T[j, code_j]``.

        Args:
            Q: ``(m_q, d)`` finite queries.
            codes: ``(n, m)`` codes of the database.
            k: ``>= 1``; when ``k > n`` the tail is padded with ``(inf, -1)``.

        Returns:
            ``(D, I)``: ``(m_q, k)`` float32 distances ascending (ties by lower row) and ``(m_q, k)``
            int64 rows of ``codes``.

        Raises:
            RuntimeError: before :meth:`train`.
            ValueError: ``Q`` or ``codes`` malformed; ``k < 1``.
        """
        if not self.is_trained:
            raise RuntimeError("ProductQuantizer.adc_search: train first")
        Q = np.asarray(Q, dtype=np.float64)
        codes = np.asarray(codes).astype(np.int64)
        n = codes.shape[0]
        D = np.full((Q.shape[0], k), np.inf, dtype=np.float32)
        I = np.full((Q.shape[0], k), -1, dtype=np.int64)
        for qi, q in enumerate(Q):
            T = self.distance_tables(q)                                       # (m, ks)
            dist = T[np.arange(self.m)[None, :], codes].sum(axis=1)           # (n,)
            order = np.argsort(dist, kind="stable")[:k]
            D[qi, : len(order)] = dist[order]
            I[qi, : len(order)] = order
        return D, I
