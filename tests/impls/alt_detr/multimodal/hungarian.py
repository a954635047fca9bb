"""Alternative Hungarian algorithm (canon #40): pad to a square matrix, then Crouse's shortest
augmenting path (the LAPJV form SciPy uses), 0-indexed, with no virtual column.

Differences from the reference: rectangular input is padded with zero-cost dummy rows or columns
instead of being transposed, the Dijkstra search starts from the free row itself (path costs are
absolute, not re-based every step), and the duals are updated once per augmentation from the final
path costs rather than inside the search loop.

Shape letters: ``N`` rows, ``M`` columns, ``S = max(N, M)`` side of the padded square, ``K = min(N, M)``.
What to test: the same checks as the reference (brute force, SciPy, the 3 x 3 example, empties).
"""

from __future__ import annotations

import numpy as np


def linear_sum_assignment(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(N, M)`` costs -> ``rows, cols`` ``(K,)`` int64, rows ascending; minimal total cost.

    Raises ValueError naming ``cost`` when it is not 2-D or not finite.
    """
    c = np.asarray(cost, dtype=np.float64)                     # (N, M)
    if c.ndim != 2:
        raise ValueError(f"cost must be 2-D, got {c.ndim}-D")
    if not np.all(np.isfinite(c)):
        raise ValueError("cost has a non-finite entry")
    n_rows, n_cols = c.shape
    if n_rows * n_cols == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)  # (0,), (0,)
    side = max(n_rows, n_cols)
    square = np.zeros((side, side))                            # (S, S)
    square[:n_rows, :n_cols] = c
    col4row = _solve_square(square)                            # (S,)
    real = np.flatnonzero(col4row[:n_rows] < n_cols)           # (K,)
    return real.astype(np.int64), col4row[real].astype(np.int64)  # (K,), (K,)


def _solve_square(square: np.ndarray) -> np.ndarray:
    """Column of every row of an ``(S, S)`` cost at minimum total cost; ``(S,)`` int64."""
    side = square.shape[0]
    u = np.zeros(side)                                         # (S,)
    v = np.zeros(side)                                         # (S,)
    col4row = np.full(side, -1, dtype=np.int64)                # (S,)
    row4col = np.full(side, -1, dtype=np.int64)                # (S,)
    for start in range(side):
        path_cost = np.full(side, np.inf)                      # (S,)
        came_from = np.full(side, -1, dtype=np.int64)          # (S,)
        seen_cols = np.zeros(side, dtype=bool)                 # (S,)
        seen_rows = np.zeros(side, dtype=bool)                 # (S,)
        row, reach, sink = start, 0.0, -1
        while sink < 0:
            seen_rows[row] = True
            through = reach + square[row] - u[row] - v         # (S,)
            shorter = ~seen_cols & (through < path_cost)       # (S,)
            came_from[shorter] = row
            path_cost[shorter] = through[shorter]
            open_cost = np.where(seen_cols, np.inf, path_cost)  # (S,)
            col = int(np.argmin(open_cost))
            reach = float(open_cost[col])
            seen_cols[col] = True
            if row4col[col] < 0:
                sink = col
            else:
                row = int(row4col[col])
        u[start] += reach
        others = seen_rows.copy()
        others[start] = False
        u[others] += reach - path_cost[col4row[others]]
        v[seen_cols] -= reach - path_cost[seen_cols]
        col = sink
        while True:
            row = int(came_from[col])
            row4col[col] = row
            col4row[row], col = col, int(col4row[row])
            if row == start:
                break
    return col4row
