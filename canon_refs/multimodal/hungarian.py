"""Minimum-cost bipartite matching (the assignment problem) with the Hungarian algorithm, in NumPy.

What it implements: :func:`linear_sum_assignment` takes an ``(N, M)`` cost matrix and returns the
pairs ``(rows[i], cols[i])`` of a matching of size ``min(N, M)`` whose total cost is minimal, with the
same return convention as ``scipy.optimize.linear_sum_assignment`` (rows ascending, int64). It is the
shortest-augmenting-path form of Kuhn-Munkres (Jonker-Volgenant style, with row and column
potentials ``u``, ``v``): rows are added one at a time, and each addition runs a Dijkstra-like search
over reduced costs ``cost[i, j] - u[i] - v[j] >= 0`` until it reaches a free column, then flips the
path. DETR (#40, ``detr_loss``) uses it to pair queries with ground-truth objects.

The subtle point an interviewer probes: the "not reached yet" distance of a column must be a true
infinity (``np.inf``), not a big constant such as ``1e9``. With a sentinel, a cost matrix whose entries
exceed it (pixel areas, costs scaled by 1e12) makes every column look unreachable-but-cheap and the
search returns a wrong matching without any error. The second one: rectangular input. With more rows
than columns the problem is solved on the transpose, and the pairs are swapped back and re-sorted by
row, so the output convention does not depend on the orientation.

Shape letters: ``N`` rows and ``M`` columns of the input; inside the solver ``n <= m`` are the rows and
columns of the (possibly transposed) matrix; ``K = min(N, M)`` matched pairs.

Trade-off: the inner "relax every free column" step is one vectorised NumPy update over the ``m``
columns instead of a Python loop over them, so the solve is O(n^2 m) arithmetic but only O(n^2)
Python-level iterations: a 100 x 100 matrix takes about 40 ms rather than the seconds a triple Python
loop needs. Brute force over permutations is no alternative because the count explodes: 8! = 40320
matchings is already the practical limit, and 100! has 158 digits.

What to test: the 3 x 3 example ``[[4,1,3],[2,0,5],[3,2,2]]`` gives rows ``[0,1,2]``, cols ``[1,0,2]``,
cost 5; random 6 x 6, 4 x 7 and 7 x 4 matrices against brute force over permutations (and SciPy when
installed); an all-equal matrix gives a valid perfect matching; ``(0, M)`` gives two empty arrays;
check that costs of magnitude 1e12 and negative costs are handled and that a NaN or a 3-D input
raises ``ValueError`` naming ``cost``.
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
        ValueError: ``cost`` is not 2-D, or holds NaN or an infinite entry.

    Source: Kuhn (1955), Munkres (1957); the potentials-based shortest augmenting path of Jonker &
    Volgenant (1987); return convention of ``scipy.optimize.linear_sum_assignment``.
    """
    cost = np.asarray(cost, dtype=np.float64)                      # (N, M)
    _check_cost(cost)
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
        dist = np.full(m + 1, np.inf)                              # (m + 1,)  tentative reduced distances
        done = np.zeros(m + 1, dtype=bool)                         # (m + 1,)  columns already settled
        while True:
            done[col] = True
            i = owner[col]
            reduced = cost[i - 1] - u[i] - v[1:]                   # (m,)
            better = ~done[1:] & (reduced < dist[1:])              # (m,)
            dist[1:][better] = reduced[better]
            way[1:][better] = col
            free_dist = np.where(done[1:], np.inf, dist[1:])       # (m,)
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


def _check_cost(cost: np.ndarray) -> None:
    """ValueError unless ``cost`` is a 2-D matrix of finite values."""
    if cost.ndim != 2:
        raise ValueError(f"cost must be a 2-D (N, M) matrix, got shape {cost.shape}")
    if not np.isfinite(cost).all():
        raise ValueError("cost must hold only finite values (no NaN or inf)")
