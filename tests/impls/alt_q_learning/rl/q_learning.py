"""Q-learning written differently (alternative for #48).

epsilon-greedy builds the full action distribution ``eps / A + (1 - eps) * ties / k`` and draws once
with ``rng.choice``; the update is written as the blend ``Q <- (1 - alpha) Q + alpha * target``.
Shapes: ``S`` states, ``A`` actions.
"""

from __future__ import annotations

import math

import numpy as np


def _unit(x, name, low_open=False):
    ok = not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and 0 <= x <= 1
    if not ok or (low_open and x == 0):
        raise ValueError(f"{name} out of range: {x!r}")
    return float(x)


def epsilon_greedy(q_values, epsilon, rng):
    epsilon = _unit(epsilon, "epsilon")
    q = np.array(q_values, dtype=np.float64)                                # (A,)
    if q.ndim != 1 or len(q) == 0 or not np.isfinite(q).all():
        raise ValueError("q_values must be a finite non-empty vector")
    ties = (q == q.max()).astype(np.float64)
    probs = epsilon / len(q) + (1.0 - epsilon) * ties / ties.sum()
    return int(rng.choice(len(q), p=probs))


def q_learning_update(Q, s, a, r, s_next, done, alpha, gamma):
    alpha = _unit(alpha, "alpha", low_open=True)
    gamma = _unit(gamma, "gamma")
    n_s, n_a = Q.shape
    for name, v, hi in (("s", s, n_s), ("a", a, n_a), ("s_next", s_next, n_s)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < hi:
            raise ValueError(f"{name} out of range: {v!r}")
    target = r + (0.0 if done else gamma * np.max(Q[s_next]))
    old = Q[s, a]
    Q[s, a] = (1.0 - alpha) * old + alpha * target
    return float(target - old)


def greedy_policy(Q):
    Q = np.array(Q)                                                         # (S, A)
    if Q.ndim != 2:
        raise ValueError("Q must be (S, A)")
    return Q.argmax(axis=1).astype(np.int64)                                # (S,)


def q_learning(env, n_episodes=500, *, alpha=0.1, gamma=0.99, epsilon=0.1, max_steps=100, seed=0):
    _unit(alpha, "alpha", low_open=True)
    _unit(gamma, "gamma")
    _unit(epsilon, "epsilon")
    if not isinstance(n_episodes, int) or n_episodes < 1:
        raise ValueError("n_episodes must be >= 1")
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError("max_steps must be >= 1")
    g = np.random.default_rng(seed)
    Q = np.zeros((env.n_states, env.n_actions))                             # (S, A)
    history = []
    for _ in range(n_episodes):
        s, ret, t, done = env.reset(), 0.0, 0, False
        while not done and t < max_steps:
            a = epsilon_greedy(Q[s], epsilon, g)
            s2, r, done = env.step(a)
            q_learning_update(Q, s, a, r, s2, done, alpha, gamma)
            s, ret, t = s2, ret + r, t + 1
        history.append(ret)
    return Q, history
