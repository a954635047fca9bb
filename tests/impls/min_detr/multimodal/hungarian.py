"""Minimum-cost bipartite matching (the assignment problem) with the Hungarian algorithm, in NumPy.

Plan: the O(n^2 m) shortest-augmenting-path form with row/column potentials u, v (Jonker-Volgenant
style): add the rows one at a time, grow a Dijkstra-like tree over the columns on reduced costs
c[i, j] - u[i] - v[j] >= 0 until a free column is reached, update the potentials by the tree's slack
and flip the alternating path. Needs n <= m, so a tall matrix is solved transposed. Test against
brute force over permutations on small random matrices, ties, negative and rectangular costs.
"""

from __future__ import annotations

import numpy as np

__all__ = ["linear_sum_assignment"]


def _solve(cost: np.ndarray) -> np.ndarray:
    """Assignment for n <= m: returns col_of_row (n,)."""
    n, m = cost.shape
    INF = np.inf
    u = np.zeros(n + 1)
    v = np.zeros(m + 1)
    p = np.zeros(m + 1, dtype=np.int64)  # p[j] = 1-based row matched to column j (0 = free)
    way = np.zeros(m + 1, dtype=np.int64)
    a = np.zeros((n + 1, m + 1))
    a[1:, 1:] = cost
    for i in range(1, n + 1):
        p[0] = i
        j0 = 0
        minv = np.full(m + 1, INF)
        used = np.zeros(m + 1, dtype=bool)
        while True:
            used[j0] = True
            i0 = p[j0]
            free = ~used
            free[0] = False
            cur = a[i0] - u[i0] - v  # (m + 1,) reduced costs from row i0
            better = free & (cur < minv)
            minv[better] = cur[better]
            way[better] = j0
            cand = np.where(free, minv, INF)
            j1 = int(np.argmin(cand))
            delta = cand[j1]
            u[p[used]] += delta
            v[used] -= delta
            minv[free] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while j0:  # flip the augmenting path
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
    col_of_row = np.empty(n, dtype=np.int64)
    for j in range(1, m + 1):
        if p[j]:
            col_of_row[p[j] - 1] = j - 1
    return col_of_row


def linear_sum_assignment(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Solve the rectangular linear assignment problem: minimise ``sum(cost[rows, cols])``."""
    c = np.asarray(cost, dtype=np.float64)
    n, m = c.shape
    if n == 0 or m == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    if n <= m:
        cols = _solve(c)
        return np.arange(n, dtype=np.int64), cols
    rows_of_col = _solve(c.T)  # (m,) row chosen for each column
    order = np.argsort(rows_of_col)
    return rows_of_col[order].astype(np.int64), order.astype(np.int64)
