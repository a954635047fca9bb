"""Value iteration and policy iteration on a known tabular MDP (canon item ...

Plan: everything is built on the one-step look-ahead Q = R + gamma * P @ V. Value iteration
iterates the max-backup from V = 0; policy iteration alternates an exact linear solve (cheap for
small S, and exact instead of approximate so improvement cannot stall) with greedy improvement.
"""

from __future__ import annotations

import math

import numpy as np

STOCHASTIC_TOL = 1e-8


def q_from_v(P: np.ndarray, R: np.ndarray, V: np.ndarray, gamma: float) -> np.ndarray:
    """One-step look-ahead ``Q(s, a) = R(s, a) + gamma * sum_s' P(s, a, s') V(s')``.

    Args:
        P: ``(S, A, S)`` transition probabilities. R: ``(S, A)`` expected rewards.
        V: ``(S,)`` state values. gamma: discount in ``[0, 1)``.

    Returns:
        ``(S, A)`` float64.

    Raises:
        ValueError: bad shapes, probabilities, ``gamma``.

    Source: Sutton & Barto (2018), eq. (4.6).
    """
    return np.asarray(R, dtype=np.float64) + gamma * np.asarray(P, dtype=np.float64) @ np.asarray(V, dtype=np.float64)


def policy_evaluation(
    P: np.ndarray,
    R: np.ndarray,
    policy: np.ndarray,
    gamma: float,
    *,
    tol: float = 1e-10,
    max_iter: int = 10_000,
    exact: bool = False,
) -> np.ndarray:
    """``V_pi``: the fixed point of ``V = R_pi + gamma * P_pi V``.

    With ``exact=True`` the linear system ``(I - gamma * P_pi) V = R_pi`` is solved directly; otherwise
    Bellman expectation backups run until ``max |V_new - V| < tol`` or ``max_iter`` sweeps (the last
    iterate is returned either way).

    Args:
        P: ``(S, A, S)``. R: ``(S, A)``.
        policy: ``(S,)`` integer actions (deterministic) or ``(S, A)`` action probabilities.
        gamma: discount in ``[0, 1)``. tol: stopping threshold ``> 0``. max_iter: ``>= 1`` sweeps.
        exact: solve the linear system instead of iterating.

    Returns:
        ``(S,)`` float64 state values.

    Raises:
        ValueError: bad model, ``gamma``, ``tol``, ``max_iter``, or ``policy`` of the wrong shape,
            with out-of-range actions or with rows that are not distributions.

    Source: Sutton & Barto (2018), section 4.1, eq. (4.5).
    """
    P = np.asarray(P, dtype=np.float64)
    R = np.asarray(R, dtype=np.float64)
    S, A = R.shape
    pi = np.asarray(policy)
    if pi.ndim == 1:  # deterministic -> one-hot
        pi = np.eye(A)[pi.astype(np.int64)]
    pi = pi.astype(np.float64)
    R_pi = (pi * R).sum(axis=1)                     # (S,)
    P_pi = np.einsum("sa,sat->st", pi, P)           # (S, S)
    if exact:
        return np.linalg.solve(np.eye(S) - gamma * P_pi, R_pi)
    V = np.zeros(S)
    for _ in range(max_iter):
        V_new = R_pi + gamma * P_pi @ V
        done = np.max(np.abs(V_new - V)) < tol
        V = V_new
        if done:
            break
    return V


def value_iteration(
    P: np.ndarray, R: np.ndarray, gamma: float, *, tol: float = 1e-10, max_iter: int = 10_000
) -> tuple[np.ndarray, np.ndarray]:
    """Bellman optimality backups ``V <- max_a (R + gamma * P @ V)`` from ``V = 0``.

    Stops when ``max |V_new - V| < tol`` or after ``max_iter`` sweeps.

    Args:
        P: ``(S, A, S)``. R: ``(S, A)``. gamma: ``[0, 1)``. tol: ``> 0``. max_iter: ``>= 1``.

    Returns:
        ``(V, policy)``: ``(S,)`` float64 values and ``(S,)`` int64 actions greedy with respect to
        ``q_from_v(P, R, V, gamma)``, ties to the lowest action index.

    Raises:
        ValueError: bad model, ``gamma``, ``tol`` or ``max_iter``.

    Source: Sutton & Barto (2018), section 4.4, eq. (4.10).
    """
    V = np.zeros(np.asarray(R).shape[0])
    for _ in range(max_iter):
        V_new = q_from_v(P, R, V, gamma).max(axis=1)
        done = np.max(np.abs(V_new - V)) < tol
        V = V_new
        if done:
            break
    policy = np.argmax(q_from_v(P, R, V, gamma), axis=1).astype(np.int64)  # argmax: first max on ties
    return V, policy


def policy_iteration(
    P: np.ndarray, R: np.ndarray, gamma: float, *, max_iter: int = 1000
) -> tuple[np.ndarray, np.ndarray]:
    """Exact evaluation and greedy improvement, from the all-zeros policy, until the policy is stable.

    The improvement keeps the current action wherever it is still greedy (within ``1e-9``), so equal
    actions cannot make the loop cycle; otherwise ties go to the lowest index.

    Args:
        P: ``(S, A, S)``. R: ``(S, A)``. gamma: ``[0, 1)``.
        max_iter: maximum number of improvement steps, ``>= 1``.

    Returns:
        ``(V, policy)``: ``(S,)`` float64 values of the returned policy and ``(S,)`` int64 actions.

    Raises:
        ValueError: bad model, ``gamma`` or ``max_iter``.

    Source: Sutton & Barto (2018), section 4.3.
    """
    S = np.asarray(R).shape[0]
    policy = np.zeros(S, dtype=np.int64)
    V = policy_evaluation(P, R, policy, gamma, exact=True)
    for _ in range(max_iter):
        Q = q_from_v(P, R, V, gamma)
        best = Q.max(axis=1)
        keep = Q[np.arange(S), policy] >= best - 1e-9
        new_policy = np.where(keep, policy, np.argmax(Q, axis=1)).astype(np.int64)
        if np.array_equal(new_policy, policy):
            break
        policy = new_policy
        V = policy_evaluation(P, R, policy, gamma, exact=True)
    return V, policy
