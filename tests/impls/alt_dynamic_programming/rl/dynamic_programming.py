"""Value and policy iteration written differently (alternative for #47).

Look-ahead with ``einsum`` instead of ``@``; exact evaluation with ``np.linalg.lstsq`` rather than
``solve``; stochastic and deterministic policies both turned into an ``(S, A)`` matrix of
probabilities first; greedy ties resolved with ``np.isclose`` against the row maximum.
Shapes: ``S`` states, ``A`` actions.
"""

from __future__ import annotations

import math

import numpy as np


def _gamma(g):
    if isinstance(g, bool) or not isinstance(g, (int, float)) or not math.isfinite(g) or not 0 <= g < 1:
        raise ValueError(f"gamma must lie in [0, 1), got {g!r}")
    return float(g)


def _model(P, R):
    P = np.array(P, dtype=np.float64)                                       # (S, A, S)
    R = np.array(R, dtype=np.float64)                                       # (S, A)
    if P.ndim != 3 or P.shape[0] != P.shape[2]:
        raise ValueError("P must be (S, A, S)")
    if R.shape != P.shape[:2]:
        raise ValueError("R must be (S, A)")
    if (P < 0).any() or not np.allclose(P.sum(-1), 1.0, atol=1e-8, rtol=0):
        raise ValueError("P rows must be distributions")
    return P, R


def _probs(policy, S, A):
    pi = np.array(policy)                                                   # (S,) | (S, A)
    if pi.shape == (S,):
        if np.any(pi != np.floor(pi)) or pi.min() < 0 or pi.max() >= A:
            raise ValueError("policy actions out of range")
        return np.eye(A)[pi.astype(int)]                                    # (S, A)
    if pi.shape == (S, A) and (pi >= 0).all() and np.allclose(pi.sum(1), 1.0, atol=1e-8, rtol=0):
        return pi.astype(np.float64)                                        # (S, A)
    raise ValueError("policy has a bad shape or rows")


def _q(P, R, V, gamma):
    return R + gamma * np.einsum("sat,t->sa", P, V)                         # (S, A)


def _argmax_low(Q, current=None):
    best = Q.max(axis=1, keepdims=True)                                     # (S, 1)
    ties = np.isclose(Q, best, rtol=1e-9, atol=1e-9)                        # (S, A)
    out = ties.argmax(axis=1)                                               # (S,)
    if current is not None:
        out = np.where(np.take_along_axis(ties, current[:, None], 1)[:, 0], current, out)  # (S,)
    return out.astype(np.int64)


def q_from_v(P, R, V, gamma):
    gamma = _gamma(gamma)
    P, R = _model(P, R)
    V = np.array(V, dtype=np.float64)                                       # (S,)
    if V.shape != (P.shape[0],):
        raise ValueError("V must be (S,)")
    return _q(P, R, V, gamma)                                               # (S, A)


def policy_evaluation(P, R, policy, gamma, *, tol=1e-10, max_iter=10_000, exact=False):
    gamma = _gamma(gamma)
    P, R = _model(P, R)
    S, A = R.shape
    pi = _probs(policy, S, A)                                               # (S, A)
    P_pi = np.einsum("sa,sat->st", pi, P)                                   # (S, S)
    R_pi = np.einsum("sa,sa->s", pi, R)                                     # (S,)
    if exact:
        return np.linalg.lstsq(np.eye(S) - gamma * P_pi, R_pi, rcond=None)[0]  # (S,)
    V = np.zeros(S)                                                         # (S,)
    for _ in range(max_iter):
        new = R_pi + gamma * np.einsum("st,t->s", P_pi, V)                  # (S,)
        done = np.abs(new - V).max() < tol
        V = new
        if done:
            break
    return V


def value_iteration(P, R, gamma, *, tol=1e-10, max_iter=10_000):
    gamma = _gamma(gamma)
    P, R = _model(P, R)
    V = np.zeros(R.shape[0])                                                # (S,)
    for _ in range(max_iter):
        new = _q(P, R, V, gamma).max(axis=1)                                # (S,)
        done = np.abs(new - V).max() < tol
        V = new
        if done:
            break
    return V, _argmax_low(_q(P, R, V, gamma))


def policy_iteration(P, R, gamma, *, max_iter=1000):
    gamma = _gamma(gamma)
    P, R = _model(P, R)
    pi = np.zeros(R.shape[0], dtype=np.int64)                               # (S,)
    V = policy_evaluation(P, R, pi, gamma, exact=True)                      # (S,)
    for _ in range(max_iter):
        new = _argmax_low(_q(P, R, V, gamma), pi)                           # (S,)
        if (new == pi).all():
            break
        pi = new
        V = policy_evaluation(P, R, pi, gamma, exact=True)                  # (S,)
    return V, pi
