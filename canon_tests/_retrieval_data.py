"""Test data for the retrieval items (#45 ``retrieval/ann``): the Gaussian-mixture fixture of the spec.

Not a canon module and never redirected: the data is generated here, not by learner code (C1).
"""

from __future__ import annotations

import functools

import numpy as np


@functools.lru_cache(maxsize=8)
def gaussian_mixture(n: int = 5000, d: int = 32, n_queries: int = 100, n_components: int = 200,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(database (n, d), queries (n_queries, d))`` float32 from one Gaussian mixture.

    Component centres are drawn with std 3 and the points around them with unit variance; database
    and queries share the centres. Cached and returned read-only, so tests cannot alter each other's data.
    """
    g = np.random.default_rng(seed)
    centres = 3.0 * g.standard_normal((n_components, d))
    database = centres[g.integers(n_components, size=n)] + g.standard_normal((n, d))
    queries = centres[g.integers(n_components, size=n_queries)] + g.standard_normal((n_queries, d))
    database, queries = database.astype(np.float32), queries.astype(np.float32)
    database.flags.writeable = False
    queries.flags.writeable = False
    return database, queries


def exact_neighbours(database: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The oracle: squared-L2 ``(m, k)`` distances and ids from direct float64 differences (no expansion)
    and a stable ``np.argsort`` of the full distance row, one query at a time."""
    X = database.astype(np.float64)
    full = np.stack([np.sum((X - q) ** 2, axis=1) for q in queries.astype(np.float64)])
    ids = np.argsort(full, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(full, ids, axis=1), ids


def distance_scale(database: np.ndarray, queries: np.ndarray) -> float:
    """The size of the terms of a squared distance, ``max |q|^2 + max |x|^2``: float32 distances are exact to a
    few float32 ulps of that (the expansion ``|q|^2 - 2 q.x + |x|^2`` cancels terms of that size)."""
    x_sq = np.sum(np.asarray(database, dtype=np.float64) ** 2, axis=1).max()
    q_sq = np.sum(np.asarray(queries, dtype=np.float64) ** 2, axis=1).max()
    return float(x_sq + q_sq)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    """Share of the true neighbours (``truth`` rows) present in the matching ``found`` rows."""
    return float(np.mean([len(set(f.tolist()) & set(t.tolist())) / len(t) for f, t in zip(found, truth)]))
