"""Minimum-cost bipartite matching (the assignment problem) with the Hungarian algorithm, in NumPy.

TODO: your plan (not implemented yet).
"""

from __future__ import annotations

import numpy as np

__all__ = ["linear_sum_assignment"]


def linear_sum_assignment(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Solve the rectangular linear assignment problem: minimise ``sum(cost[rows, cols])``.

    Args:
        cost: ``(N, M)`` array-like of finite real costs (converted to float64; not modified).
            Negative costs are allowed.

    Returns:
        ``rows, cols``: two ``(K,)`` int64 arrays, ``K = min(N, M)``; ``rows`` strictly ascending,
        every row and every column used at most once, and ``cost[rows, cols].sum()`` minimal. An
        ``(0, M)`` or ``(N, 0)`` input gives two empty int64 arrays.

    Raises:
        ValueError: ``cost`` is not 2-D, or holds NaN or an infinite entry (message names ``cost``).

    Source: Kuhn (1955), Munkres (1957); the potentials-based shortest augmenting path of Jonker &
    Volgenant (1987); return convention of ``scipy.optimize.linear_sum_assignment``.
    """
    raise NotImplementedError("linear_sum_assignment: not implemented yet")
