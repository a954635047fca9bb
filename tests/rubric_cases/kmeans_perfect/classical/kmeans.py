"""K-means (Lloyd's algorithm) in NumPy, with k-means++ seeding and empty-cluster repair.

Plan: seed K centroids (k-means++ or K distinct random rows, or an array given by the caller), then
alternate two steps until no centroid moves by more than ``tol``: assign every point to its nearest
centroid with the vectorised distance table of the KNN item, and move each centroid to the mean of
its points. I assign once more after every update, so the labels I return are always the
assignment to the centroids I return (a fixed point), and the inertia history is recorded after
each assignment.

Subtle point: a centroid can lose all of its points. Averaging an empty set gives NaN, so an empty
cluster is re-seeded on the point that is currently worst served (farthest from its own centroid);
that point's cost drops to 0, so the inertia still cannot go up.

Shapes: X (n, d) points, centroids (K, d), distance table (n, K), labels and squared distances (n,).

Trade-off: I update the centroids with ``np.add.at`` sums and ``np.bincount`` counts rather than
a Python loop over clusters, because the loop costs K passes over X instead of one. k-means++ keeps
its D^2 weights with direct differences rather than the norm expansion, so a point already chosen
has weight exactly 0 and is never drawn twice.

What I would test: the 1-D example [0, 1, 10, 11] from [0, 1] (centroids 0.5 and 10.5, inertia 1),
purity 1 on three separated blobs, a non-increasing history, labels == assign(X, centroids), k = 1
giving the mean, k = n giving inertia 0, the empty-cluster case, and the D^2 draw frequencies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from canon_refs.classical.knn import pairwise_sq_distances


@dataclass
class KMeansResult:
    """Outcome of ``kmeans``: centroids (K, d), labels (n,) int64, inertia (sum of squared distances
    to the assigned centroid), n_iter (centroid updates run) and the inertia after each assignment."""

    centroids: np.ndarray
    labels: np.ndarray
    inertia: float
    n_iter: int
    inertia_history: list[float] = field(default_factory=list)


def _points(X: np.ndarray) -> np.ndarray:
    """X as a finite float64 (n, d) array, or ValueError naming X."""
    pts = np.asarray(X, dtype=np.float64)                                 # (n, d)
    if pts.ndim != 2:
        raise ValueError(f"X must be 2-D (n, d), got shape {pts.shape}")
    if not np.isfinite(pts).all():
        raise ValueError("X must contain only finite values")
    return pts


def _check_k(k: int, n: int) -> None:
    """ValueError naming k unless 1 <= k <= n."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise ValueError(f"k must be an integer in [1, n = {n}], got {k!r}")


def kmeans_plus_plus_init(X: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding: the first centroid uniformly, each next one with probability proportional
    to its squared distance to the nearest centroid chosen so far (Arthur and Vassilvitskii, 2007).

    X (n, d), returns (k, d) copies of rows of X. Raises ValueError for k outside [1, n].
    """
    pts = _points(X)
    n = pts.shape[0]
    _check_k(k, n)
    picks = [int(rng.integers(n))]
    gap = np.sum((pts - pts[picks[0]]) ** 2, axis=1)                      # (n,)
    while len(picks) < k:
        total = gap.sum()
        if total > 0:
            nxt = int(rng.choice(n, p=gap / total))
        else:  # every point coincides with a centroid: fall back to an unused row
            unused = np.setdiff1d(np.arange(n), picks)                    # (r,)
            nxt = int(rng.choice(unused))
        picks.append(nxt)
        fresh = np.sum((pts - pts[nxt]) ** 2, axis=1)                     # (n,)
        gap = np.minimum(gap, fresh)
    return pts[np.array(picks)].copy()                                    # (k, d)


def assign(X: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid for every point: labels (n,) int64 and squared distances (n,).

    X (n, d), centroids (K, d). A point equally close to two centroids takes the lower index.
    """
    table = pairwise_sq_distances(X, centroids)                           # (n, K)
    labels = np.argmin(table, axis=1)                                     # (n,)
    best = np.take_along_axis(table, labels[:, None], axis=1)             # (n, 1)
    return labels.astype(np.int64), best[:, 0]                            # (n,), (n,)


def _update(X: np.ndarray, labels: np.ndarray, sq: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """New centroids (K, d): cluster means; an empty cluster takes the worst-served point."""
    K, d = centroids.shape
    sums = np.zeros((K, d))                                               # (K, d)
    np.add.at(sums, labels, X)
    counts = np.bincount(labels, minlength=K)                             # (K,)
    fresh = sums / np.maximum(counts, 1)[:, None]                         # (K, d)
    empty = np.flatnonzero(counts == 0)                                   # (E,)
    if empty.size:
        worst = np.argsort(-sq, kind="stable")[: empty.size]              # (E,)
        fresh[empty] = X[worst]
    return fresh


def kmeans(X: np.ndarray, k: int, *, n_iter: int = 100, tol: float = 1e-8,
           init: Literal["k-means++", "random"] | np.ndarray = "k-means++", seed: int = 0) -> KMeansResult:
    """Lloyd iterations on X (n, d) with k clusters; stops when the largest centroid move is <= tol.

    ``init`` is "k-means++", "random" (k distinct rows) or a (k, d) array (copied, never modified).
    Raises ValueError for X not 2-D or not finite, k outside [1, n], or a bad ``init``.
    """
    pts = _points(X)
    n, d = pts.shape
    _check_k(k, n)
    if n_iter < 1:
        raise ValueError(f"n_iter must be >= 1, got {n_iter}")
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    rng = np.random.default_rng(seed)
    if isinstance(init, str):
        if init == "k-means++":
            centroids = kmeans_plus_plus_init(pts, k, rng)                # (k, d)
        elif init == "random":
            centroids = pts[rng.choice(n, size=k, replace=False)].copy()  # (k, d)
        else:
            raise ValueError(f"init must be 'k-means++', 'random' or a (k, d) array, got {init!r}")
    else:
        centroids = np.array(init, dtype=np.float64)                      # (k, d)
        if centroids.shape != (k, d) or not np.isfinite(centroids).all():
            raise ValueError(f"init array must be finite with shape ({k}, {d}), got {centroids.shape}")
    labels, sq = assign(pts, centroids)                                   # (n,), (n,)
    history = [float(sq.sum())]
    updates = 0
    for _ in range(n_iter):
        moved = _update(pts, labels, sq, centroids)                       # (k, d)
        shift = float(np.sqrt(np.max(np.sum((moved - centroids) ** 2, axis=1))))
        centroids = moved
        labels, sq = assign(pts, centroids)                               # (n,), (n,)
        history.append(float(sq.sum()))
        updates += 1
        if shift <= tol:
            break
    return KMeansResult(centroids, labels, history[-1], updates, history)
