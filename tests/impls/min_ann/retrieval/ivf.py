"""Exact search and an inverted-file (IVF) index for approximate nearest neighbours (canon ...

Plan: exact search is a full distance matrix (||q||^2 - 2 q.x + ||x||^2 in float64, because the
expansion turns the (m, n, d) difference tensor into one matmul) and a stable top-k. IVF clusters the
database with k-means and scans only the nprobe nearest cells of each query, trading recall for speed.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from canon_refs.classical.kmeans import kmeans


def brute_force_search(
    database: np.ndarray, queries: np.ndarray, k: int, metric: Literal["l2", "ip"] = "l2"
) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``k`` nearest neighbours of every query.

    Args:
        database: ``(n, d)`` finite vectors.
        queries: ``(m, d)`` finite vectors.
        k: neighbours per query, ``>= 1``; ``k > n`` pads the tail.
        metric: ``"l2"`` (squared Euclidean distance, ascending) or ``"ip"`` (inner product, descending).

    Returns:
        ``(D, I)``: ``(m, k)`` float32 distances or scores and ``(m, k)`` int64 row indices of
        ``database``; ties go to the lower index; padding is ``(inf, -1)`` for l2, ``(-inf, -1)`` for ip.

    Raises:
        ValueError: an array not 2-D or not finite; widths differ; ``k < 1``; unknown ``metric``.
    """
    X = np.asarray(database, dtype=np.float64)
    Q = np.asarray(queries, dtype=np.float64)
    scores = _scores(Q, X, metric)                                    # (m, n)
    return _topk(scores, np.arange(X.shape[0]), k, metric)


def recall_at_k(found: np.ndarray, truth: np.ndarray, k: int) -> float:
    """Mean over queries of ``|found[i, :k] & truth[i, :k]| / k``; negative (padding) ids never count.

    Args:
        found: ``(m, >= k)`` int ids returned by an approximate search.
        truth: ``(m, >= k)`` int ids of the exact search.
        k: ``>= 1`` and at most the width of both arrays.

    Returns:
        A float in ``[0, 1]``.

    Raises:
        ValueError: not 2-D, different numbers of rows, ``k < 1`` or wider than either array.
    """
    f = np.asarray(found)[:, :k]
    t = np.asarray(truth)[:, :k]
    hits = [len(set(fi[fi >= 0].tolist()) & set(ti[ti >= 0].tolist())) for fi, ti in zip(f, t)]
    return float(np.mean(hits) / k)


def _scores(Q: np.ndarray, X: np.ndarray, metric: str) -> np.ndarray:
    """``(m, n)`` squared L2 distances (``"l2"``) or inner products (``"ip"``)."""
    ip = Q @ X.T
    if metric == "ip":
        return ip
    sq = (Q ** 2).sum(1)[:, None] - 2.0 * ip + (X ** 2).sum(1)[None, :]
    return np.maximum(sq, 0.0)


def _order_key(scores: np.ndarray, metric: str) -> np.ndarray:
    """A key where larger means closer."""
    return scores if metric == "ip" else -scores


def _topk(scores: np.ndarray, ids: np.ndarray, k: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Best ``k`` per row, ties to the lower id, padded with ``(+-inf, -1)``."""
    m, n = scores.shape
    pad = -np.inf if metric == "ip" else np.inf
    D = np.full((m, k), pad, dtype=np.float32)
    I = np.full((m, k), -1, dtype=np.int64)
    key = -_order_key(scores, metric)                           # smaller = better
    for r in range(m):
        order = np.lexsort((ids, key[r]))[:k]                   # primary: key, secondary: id
        D[r, : len(order)] = scores[r, order]
        I[r, : len(order)] = ids[order]
    return D, I


class IVFIndex:
    """Inverted-file index: k-means cells, one list per cell, ``nprobe`` cells scanned per query.

    Attributes:
        d, nlist, metric: as given.
        is_trained: True once :meth:`train` ran.
        centroids: ``(nlist, d)`` float64 cell centres (``None`` before training).
        ntotal: number of vectors added.

    Source: Jegou, Douze & Schmid, "Product quantization for nearest neighbor search", TPAMI 2011,
    section IV (the inverted file with asymmetric search); the faiss ``IndexIVFFlat`` conventions.
    """

    def __init__(self, d: int, nlist: int, metric: Literal["l2", "ip"] = "l2", seed: int = 0) -> None:
        """Untrained index.

        Args:
            d: vector width, ``>= 1``.
            nlist: number of cells, ``>= 1``.
            metric: ``"l2"`` or ``"ip"``; cells are assigned and ranked with the same metric.
            seed: seeds the k-means of :meth:`train`.

        Raises:
            ValueError: ``d < 1``, ``nlist < 1`` or unknown ``metric``.
        """
        self.d, self.nlist, self.metric, self.seed = d, nlist, metric, seed
        self.is_trained = False
        self.centroids: np.ndarray | None = None
        self.ntotal = 0
        self.lists_vecs: list[list[np.ndarray]] = [[] for _ in range(nlist)]
        self.lists_ids: list[list[int]] = [[] for _ in range(nlist)]

    def train(self, X: np.ndarray) -> None:
        """Fit the ``nlist`` centroids with k-means (item #5) on ``X``.

        Args:
            X: ``(n_train, d)`` finite training vectors, ``n_train >= nlist``.

        Raises:
            ValueError: ``X`` not ``(n_train, d)`` or not finite; ``nlist > n_train``.
        """
        self.centroids = kmeans(np.asarray(X, dtype=np.float64), self.nlist, seed=self.seed).centroids
        self.is_trained = True

    def add(self, X: np.ndarray, ids: np.ndarray | None = None) -> None:
        """Assign every row of ``X`` to its nearest cell and append it to that cell's list.

        Args:
            X: ``(n, d)`` finite vectors.
            ids: ``(n,)`` integer ids returned by :meth:`search`; default ``ntotal .. ntotal + n - 1``
                (``0 .. n - 1`` on the first call).

        Raises:
            RuntimeError: before :meth:`train`.
            ValueError: ``X`` not ``(n, d)`` or not finite; ``ids`` not integer of shape ``(n,)``.
        """
        if not self.is_trained:
            raise RuntimeError("IVFIndex.add: train the index first")
        X = np.asarray(X, dtype=np.float64)
        n = X.shape[0]
        ids = np.arange(self.ntotal, self.ntotal + n) if ids is None else np.asarray(ids, dtype=np.int64)
        cells = np.argmax(_order_key(_scores(X, self.centroids, self.metric), self.metric), axis=1)  # (n,)
        for x, i, c in zip(X, ids, cells):
            self.lists_vecs[c].append(x)
            self.lists_ids[c].append(int(i))
        self.ntotal += n

    def search(self, Q: np.ndarray, k: int, nprobe: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Approximate ``k`` nearest neighbours: scan the ``nprobe`` closest cells of each query.

        Args:
            Q: ``(m, d)`` finite queries.
            k: neighbours per query, ``>= 1``.
            nprobe: cells scanned per query, ``1 <= nprobe <= nlist``; ``nprobe = nlist`` is exact.

        Returns:
            ``(D, I)`` as :func:`brute_force_search`, with the ids given to :meth:`add`; a query whose
            probed cells hold fewer than ``k`` vectors (or an empty index) is padded with ``-1``.

        Raises:
            RuntimeError: before :meth:`train`.
            ValueError: ``Q`` not ``(m, d)`` or not finite; ``k < 1``; ``nprobe`` outside ``[1, nlist]``.
        """
        if not self.is_trained:
            raise RuntimeError("IVFIndex.search: train the index first")
        Q = np.asarray(Q, dtype=np.float64)
        cell_key = _order_key(_scores(Q, self.centroids, self.metric), self.metric)  # (m, nlist), larger = closer
        probe = np.argsort(-cell_key, axis=1, kind="stable")[:, :nprobe]             # (m, nprobe)
        D = np.empty((Q.shape[0], k), dtype=np.float32)
        I = np.empty((Q.shape[0], k), dtype=np.int64)
        for qi in range(Q.shape[0]):
            vecs = [v for c in probe[qi] for v in self.lists_vecs[c]]
            ids = np.array([i for c in probe[qi] for i in self.lists_ids[c]], dtype=np.int64)
            cand = np.array(vecs).reshape(len(vecs), self.d)
            Dq, Iq = _topk(_scores(Q[qi:qi + 1], cand, self.metric), ids, k, self.metric)
            D[qi], I[qi] = Dq[0], Iq[0]
        return D, I
