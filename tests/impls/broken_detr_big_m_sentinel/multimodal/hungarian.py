"""Broken Hungarian algorithm (canon #40), mistake: the "not reached yet" distance is the big constant
1e9 instead of np.inf. Costs above 1e9 (pixel areas, costs scaled by 1e12) then look no farther than
an unreached column, the search settles the wrong column and returns a sub-optimal matching without
any error. Caught by test_extreme_cost_magnitudes[1e+12] and test_large_offset_does_not_change_the_matching.
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
    cost = np.asarray(cost, dtype=np.float64)                      # (N, M)
    if cost.ndim != 2:
        raise ValueError(f"cost must be a 2-D (N, M) matrix, got shape {cost.shape}")
    if not np.isfinite(cost).all():
        raise ValueError("cost must hold only finite values (no NaN or inf)")
    n_rows, n_cols = cost.shape
    if n_rows == 0 or n_cols == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)  # (0,), (0,)
    if n_rows <= n_cols:
        col_of_row = _solve_wide(cost)                             # (N,)
        return np.arange(n_rows, dtype=np.int64), col_of_row       # (N,), (N,)
    row_of_col = _solve_wide(cost.T)                               # (M,)
    order = np.argsort(row_of_col)                                 # (M,)
    return row_of_col[order], order.astype(np.int64)               # (M,), (M,)


def _solve_wide(cost: np.ndarray) -> np.ndarray:
    """Optimal column of every row of an ``(n, m)`` cost with ``n <= m``; returns ``(n,)`` int64.

    Index 0 of ``v``, ``owner``, ``way`` and ``dist`` is a virtual column that holds the row being
    inserted, so real column ``j`` lives at index ``j + 1``; ``owner[j + 1] = i + 1`` means row ``i``
    owns column ``j`` (0 = free).
    """
    n, m = cost.shape
    u = np.zeros(n + 1)                                            # (n + 1,)  row potentials
    v = np.zeros(m + 1)                                            # (m + 1,)  column potentials
    owner = np.zeros(m + 1, dtype=np.int64)                        # (m + 1,)
    way = np.zeros(m + 1, dtype=np.int64)                          # (m + 1,)  predecessor column on the path
    for row in range(1, n + 1):
        owner[0] = row
        col = 0
        dist = np.full(m + 1, 1e9)                                 # (m + 1,)  tentative reduced distances
        done = np.zeros(m + 1, dtype=bool)                         # (m + 1,)  columns already settled
        while True:
            done[col] = True
            i = owner[col]
            reduced = cost[i - 1] - u[i] - v[1:]                   # (m,)
            better = ~done[1:] & (reduced < dist[1:])              # (m,)
            dist[1:][better] = reduced[better]
            way[1:][better] = col
            free_dist = np.where(done[1:], 1e9, dist[1:])          # (m,)
            nxt = int(np.argmin(free_dist)) + 1
            delta = free_dist[nxt - 1]
            u[owner[done]] += delta
            v[done] -= delta
            dist[~done] -= delta
            col = nxt
            if owner[col] == 0:
                break
        while col != 0:
            prev = way[col]
            owner[col] = owner[prev]
            col = prev
    col_of_row = np.zeros(n, dtype=np.int64)                       # (n,)
    assigned = np.nonzero(owner[1:])[0]                            # (n,)
    col_of_row[owner[1:][assigned] - 1] = assigned
    return col_of_row
