"""Alternative IVF (#45): the same contract, written differently.

Differences from the reference: distances are formed with ``einsum`` in float64 and ranked with
``np.lexsort`` (score, then index) after an ``argpartition`` prefilter that keeps every tie at the k-th
place; the inverted lists are a Python list of per-cell arrays instead of one cell-sorted array; recall
uses Python sets. Shape letters: ``n``, ``d``, ``m``, ``k``, ``nlist``, ``c``. Test: all reference tests pass.
"""

from __future__ import annotations

import numpy as np

from canon_refs.classical.kmeans import kmeans


def _mat(X, name, d=None):
    A = np.asarray(X, dtype=np.float64)                                   # (n, d)
    if A.ndim != 2 or (d is not None and A.shape[1] != d) or not np.all(np.isfinite(A)):
        raise ValueError(f"{name}: expected a finite 2-D array of width {d}, got shape {A.shape}")
    return A                                                              # (n, d)


def _metric(metric):
    if metric not in ("l2", "ip"):
        raise ValueError(f"metric {metric!r} is not 'l2' or 'ip'")


def _k(k):
    if int(k) != k or k < 1:
        raise ValueError(f"k={k} must be >= 1")


def _sim(Q, X, metric):
    """Score where larger is better: -squared distance (l2) or inner product (ip); (m, n)."""
    ip = np.einsum("md,nd->mn", Q, X)                                     # (m, n)
    if metric == "ip":
        return ip                                                         # (m, n)
    qq = np.einsum("md,md->m", Q, Q)                                      # (m,)
    xx = np.einsum("nd,nd->n", X, X)                                      # (n,)
    return -np.clip(qq[:, None] + xx[None, :] - 2.0 * ip, 0.0, None)      # (m, n)


def _best(sim, ids, k, metric):
    m, n = sim.shape
    fill = np.inf if metric == "l2" else -np.inf
    D = np.full((m, k), fill, dtype=np.float32)                           # (m, k)
    I = np.full((m, k), -1, dtype=np.int64)                               # (m, k)
    cols = np.arange(n)                                                   # (n,)
    for r in range(m):
        row = sim[r]
        if k < n:
            kth = np.partition(row, n - k)[n - k]
            keep = np.flatnonzero(row >= kth)                             # (c,)
        else:
            keep = cols
        order = keep[np.lexsort((keep, -row[keep]))][:k]                  # (c,)
        vals = row[order]
        D[r, : order.size] = -vals if metric == "l2" else vals
        I[r, : order.size] = ids[order]
    return D, I                                                           # (m, k), (m, k)


def brute_force_search(database, queries, k, metric="l2"):
    """Exact search by full scoring."""
    _metric(metric)
    _k(k)
    X = _mat(database, "database")                                        # (n, d)
    Q = _mat(queries, "queries", X.shape[1])                              # (m, d)
    return _best(_sim(Q, X, metric), np.arange(X.shape[0]), k, metric)    # (m, k), (m, k)


def recall_at_k(found, truth, k):
    """Mean set overlap of the first k ids."""
    _k(k)
    found, truth = np.asarray(found), np.asarray(truth)
    if found.shape[0] != truth.shape[0] or k > min(found.shape[1], truth.shape[1]):
        raise ValueError("found/truth shapes incompatible with k")
    hits = [len({int(a) for a in f[:k] if a >= 0} & {int(b) for b in t[:k]}) for f, t in zip(found, truth)]
    return float(np.mean(hits)) / k


class IVFIndex:
    """IVF with per-cell Python lists."""

    def __init__(self, d, nlist, metric="l2", seed=0):
        _metric(metric)
        if d < 1 or nlist < 1:
            raise ValueError(f"d={d} and nlist={nlist} must be >= 1")
        self.d, self.nlist, self.metric, self.seed = d, nlist, metric, seed
        self.is_trained, self.centroids, self.ntotal = False, None, 0
        self._lists = [(np.zeros((0, d)), np.zeros(0, dtype=np.int64)) for _ in range(nlist)]

    def train(self, X):
        X = _mat(X, "X", self.d)                                          # (n, d)
        if X.shape[0] < self.nlist:
            raise ValueError(f"nlist={self.nlist} > n_train={X.shape[0]}")
        self.centroids = kmeans(X, self.nlist, seed=self.seed).centroids  # (nlist, d)
        self.is_trained = True

    def add(self, X, ids=None):
        if not self.is_trained:
            raise RuntimeError("train first")
        X = _mat(X, "X", self.d)                                          # (n, d)
        ids = np.arange(self.ntotal, self.ntotal + len(X)) if ids is None else np.asarray(ids, dtype=np.int64)   # (n,)
        cell = np.argmax(_sim(X, self.centroids, self.metric), axis=1)    # (n,)
        for c in np.unique(cell):
            sel = cell == c
            vecs, old = self._lists[c]
            self._lists[c] = (np.vstack([vecs, X[sel]]), np.concatenate([old, ids[sel]]))
        self.ntotal += len(X)

    def search(self, Q, k, nprobe=1):
        if not self.is_trained:
            raise RuntimeError("train first")
        Q = _mat(Q, "Q", self.d)                                          # (m, d)
        _k(k)
        if not 1 <= nprobe <= self.nlist:
            raise ValueError(f"nprobe={nprobe} outside [1, {self.nlist}]")
        near = np.argsort(-_sim(Q, self.centroids, self.metric), axis=1, kind="stable")[:, :nprobe]   # (m, nprobe)
        fill = np.inf if self.metric == "l2" else -np.inf
        D = np.full((len(Q), k), fill, dtype=np.float32)                  # (m, k)
        I = np.full((len(Q), k), -1, dtype=np.int64)                      # (m, k)
        for r, cells in enumerate(near):
            vecs = np.vstack([self._lists[c][0] for c in cells])          # (c, d)
            ids = np.concatenate([self._lists[c][1] for c in cells])      # (c,)
            if ids.size == 0:
                continue
            # rank candidates by (score, position in the database order) so ties match brute force
            order = np.argsort(ids, kind="stable")                        # (c,)
            d_r, i_r = _best(_sim(Q[r : r + 1], vecs[order], self.metric), ids[order], k, self.metric)   # (1, k), (1, k)
            D[r], I[r] = d_r[0], i_r[0]
        return D, I                                                       # (m, k), (m, k)
