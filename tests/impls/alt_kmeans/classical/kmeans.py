"""Alternative K-means (item #5): ``np.add.at`` sums, inverse-CDF k-means++, assign-first loop.

Written differently from the reference on purpose: the cluster sums are accumulated with
``np.add.at`` and the counts with ``np.bincount`` instead of a one-hot matrix product; k-means++
draws by inverting the cumulative sum of ``D^2`` with ``searchsorted`` instead of ``rng.choice(p=)``;
the loop assigns first and runs one extra assignment after it stops. Shapes: ``n`` points, ``d``
features, ``K`` clusters. Distances still come from item #4. It must pass every test of
``classical/kmeans``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from canon_refs.classical.knn import pairwise_sq_distances


@dataclass
class KMeansResult:
    """Centroids ``(K, d)``, labels ``(n,)`` int64, inertia, updates run, inertia per assignment."""

    centroids: np.ndarray
    labels: np.ndarray
    inertia: float
    n_iter: int
    inertia_history: list[float]


def _data(X):
    X = np.asarray(X, dtype=np.float64)                                        # (...,)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got {X.ndim}-D")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or inf")
    return X


def _k(k, n):
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 or k > n:
        raise ValueError(f"need 1 <= k <= {n}, got k={k!r}")


def kmeans_plus_plus_init(X: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``(k, d)`` distinct rows of ``X`` drawn by k-means++ (D^2 weighting)."""
    X = _data(X)                                                               # (n, d)
    n = X.shape[0]
    _k(k, n)
    idx = [int(rng.integers(0, n))]
    d2 = pairwise_sq_distances(X, X[idx]).min(axis=1)                          # (n,)
    d2[idx] = 0.0
    while len(idx) < k:
        cdf = np.cumsum(d2)                                                    # (n,)
        if cdf[-1] <= 0.0:
            free = np.setdiff1d(np.arange(n), idx)                             # (F,)
            j = int(free[rng.integers(0, free.size)])
        else:
            j = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
            j = min(j, n - 1)
        idx.append(j)
        d2 = np.minimum(d2, pairwise_sq_distances(X, X[j][None, :])[:, 0])    # (n,)
        d2[idx] = 0.0
    return X[idx].copy()                                                       # (k, d)


def assign(X: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest-centroid labels ``(n,)`` int64 and squared distances ``(n,)``."""
    D = pairwise_sq_distances(X, centroids)                                    # (n, K)
    lab = D.argmin(axis=1)                                                     # (n,)
    return lab.astype(np.int64), D[np.arange(D.shape[0]), lab]                 # (n,), (n,)


def kmeans(
    X: np.ndarray,
    k: int,
    *,
    n_iter: int = 100,
    tol: float = 1e-8,
    init: Literal["k-means++", "random"] | np.ndarray = "k-means++",
    seed: int = 0,
) -> KMeansResult:
    """Lloyd iterations from k-means++/random/given centroids; see the reference for the contract."""
    X = _data(X)                                                               # (n, d)
    n, d = X.shape
    _k(k, n)
    rng = np.random.default_rng(seed)
    if isinstance(init, str) and init == "k-means++":
        C = kmeans_plus_plus_init(X, k, rng)                                   # (K, d)
    elif isinstance(init, str) and init == "random":
        C = X[rng.permutation(n)[:k]].copy()                                   # (K, d)
    elif isinstance(init, str):
        raise ValueError(f"init: unknown option {init!r}")
    else:
        C = np.array(init, dtype=np.float64)                                   # (...,)
        if C.shape != (k, d) or not np.all(np.isfinite(C)):
            raise ValueError(f"init must be a finite ({k}, d={d}) array, got {C.shape}")
    history = []
    it = 0
    while True:
        lab, sq = assign(X, C)                                                 # (n,), (n,)
        history.append(float(sq.sum()))
        if it == n_iter:
            break
        sums = np.zeros((k, d))                                                # (K, d)
        np.add.at(sums, lab, X)
        cnt = np.bincount(lab, minlength=k)                                    # (K,)
        newC = C.copy()                                                        # (K, d)
        nonempty = cnt > 0
        newC[nonempty] = sums[nonempty] / cnt[nonempty][:, None]               # (K_full, d)
        if not nonempty.all():
            resid = ((X - newC[lab]) ** 2).sum(axis=1)                         # (n,)
            far = np.argsort(-resid, kind="stable")                            # (n,)
            newC[~nonempty] = X[far[: int((~nonempty).sum())]]
        move = np.sqrt(((newC - C) ** 2).sum(axis=1)).max()                    # ()
        C = newC
        it += 1
        if move <= tol:
            lab, sq = assign(X, C)                                             # (n,), (n,)
            history.append(float(sq.sum()))
            break
    return KMeansResult(centroids=C, labels=lab, inertia=history[-1], n_iter=it, inertia_history=history)
