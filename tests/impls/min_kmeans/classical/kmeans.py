"""K-means clustering with Lloyd iterations and k-means++ seeding (canon item #5).

Plan: seed with k-means++ (D^2 sampling) instead of uniform picks because it is O(log k)-competitive
and avoids two seeds in one blob; then alternate assignment (vectorised squared distances) and
mean update until the largest centroid move is <= tol. An empty cluster keeps its previous centroid.
Tests: inertia is non-increasing, well-separated blobs are recovered, k = n gives zero inertia.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from canon_refs.classical.knn import pairwise_sq_distances


@dataclass
class KMeansResult:
    """The outcome of :func:`kmeans` (centroids, labels, inertia, n_iter, inertia_history)."""
    centroids: np.ndarray
    labels: np.ndarray
    inertia: float
    n_iter: int
    inertia_history: list[float]


def kmeans_plus_plus_init(X: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding: first centroid uniform, then D(x)^2-weighted draws; ``(k, d)``."""
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    chosen = [int(rng.integers(n))]
    d2 = pairwise_sq_distances(X, X[chosen[0]][None, :])[:, 0]  # (n,)
    for _ in range(1, k):
        total = d2.sum()
        if total > 0:
            i = int(rng.choice(n, p=d2 / total))
        else:  # every point sits on a centroid: uniform among the unchosen ones
            rest = np.setdiff1d(np.arange(n), chosen)
            i = int(rng.choice(rest))
        chosen.append(i)
        d2 = np.minimum(d2, pairwise_sq_distances(X, X[i][None, :])[:, 0])
        d2[chosen] = 0.0
    return X[chosen].copy()


def assign(X: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid per point (ties -> lower index) and the squared distance to it."""
    D = pairwise_sq_distances(X, centroids)  # (n, K)
    labels = np.argmin(D, axis=1)  # (n,)
    return labels.astype(np.int64), D[np.arange(D.shape[0]), labels]


def kmeans(
    X: np.ndarray,
    k: int,
    *,
    n_iter: int = 100,
    tol: float = 1e-8,
    init: Literal["k-means++", "random"] | np.ndarray = "k-means++",
    seed: int = 0,
) -> KMeansResult:
    """Lloyd's algorithm until the largest centroid move is ``<= tol`` or ``n_iter`` updates."""
    X = np.asarray(X, dtype=np.float64)
    rng = np.random.default_rng(seed)
    if isinstance(init, str) and init == "k-means++":
        C = kmeans_plus_plus_init(X, k, rng)
    elif isinstance(init, str):  # "random"
        C = X[rng.choice(X.shape[0], size=k, replace=False)].copy()
    else:
        C = np.array(init, dtype=np.float64)
    labels, d2 = assign(X, C)
    history = [float(d2.sum())]
    it = 0
    while it < n_iter:
        newC = C.copy()
        for j in range(k):
            members = labels == j
            if members.any():  # an empty cluster keeps its centroid
                newC[j] = X[members].mean(axis=0)
        move = float(np.max(np.linalg.norm(newC - C, axis=1)))
        C = newC
        labels, d2 = assign(X, C)
        history.append(float(d2.sum()))
        it += 1
        if move <= tol:
            break
    return KMeansResult(C, labels, float(d2.sum()), it, history)
