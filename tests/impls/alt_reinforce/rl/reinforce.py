"""REINFORCE written differently (alternative for #50).

softmax as ``exp(z - logsumexp(z))``; the estimator's variance as ``E[x^2] - E[x]^2``; reward-to-go as
one upper-triangular matrix of discount powers; arms sampled by inverse CDF with ``searchsorted``.
Shapes: ``A`` arms, ``T`` steps.
"""

from __future__ import annotations

import math

import numpy as np


def softmax(z):
    z = np.asarray(z, dtype=np.float64)                                     # (..., A)
    m = np.max(z, axis=-1, keepdims=True)                                   # (..., 1)
    lse = m + np.log(np.sum(np.exp(z - m), axis=-1, keepdims=True))         # (..., 1)
    return np.exp(z - lse)


def _z(logits):
    z = np.asarray(logits, dtype=np.float64)                                # (A,)
    if z.ndim != 1 or len(z) == 0 or not np.isfinite(z).all():
        raise ValueError("logits must be a finite vector")
    return z


def grad_log_prob(logits, action):
    z = _z(logits)                                                          # (A,)
    if isinstance(action, bool) or not isinstance(action, (int, np.integer)) or not 0 <= action < len(z):
        raise ValueError(f"action out of range: {action!r}")
    return np.eye(len(z))[action] - softmax(z)


def reinforce_step(logits, action, reward, lr, baseline=0.0):
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    z = _z(logits)                                                          # (A,)
    return z + (lr * (reward - baseline)) * grad_log_prob(z, action)


def gradient_estimate_stats(logits, arm_rewards, baseline=0.0):
    z = _z(logits)                                                          # (A,)
    R = np.asarray(arm_rewards, dtype=np.float64)                           # (A,)
    if R.shape != z.shape:
        raise ValueError("arm_rewards must have one entry per arm")
    p = softmax(z)                                                          # (A,)
    est = np.einsum("a,ak->ak", R - baseline, np.eye(len(z)) - p)           # (A, A)
    mean = np.einsum("a,ak->k", p, est)                                     # (A,)
    second = np.einsum("a,ak->k", p, est**2)                                # (A,)
    return {"mean": mean, "variance": np.maximum(second - mean**2, 0.0)}


def discounted_returns(rewards, gamma):
    if not isinstance(gamma, (int, float)) or not 0 <= gamma <= 1:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma!r}")
    r = np.asarray(rewards, dtype=np.float64)                               # (T,)
    T = len(r)
    lags = np.arange(T)[None, :] - np.arange(T)[:, None]                    # (T, T)
    weights = np.where(lags >= 0, float(gamma) ** np.maximum(lags, 0), 0.0)  # (T, T)
    return weights @ r                                                      # (T,)


def train_reinforce(bandit, steps=500, lr=0.1, baseline=False, seed=0):
    if not isinstance(steps, int) or steps < 1:
        raise ValueError("steps must be >= 1")
    if not isinstance(lr, (int, float)) or lr <= 0:
        raise ValueError("lr must be > 0")
    g = np.random.default_rng(seed)
    z = np.zeros(bandit.n_arms)                                             # (A,)
    history, paid = [softmax(z)], []
    for _ in range(steps):
        cdf = np.cumsum(history[-1])
        a = int(np.searchsorted(cdf / cdf[-1], g.random(), side="right"))
        r = bandit.pull(a)
        b = (float(np.mean(paid)) if paid else r) if baseline else 0.0
        z = reinforce_step(z, a, r, lr, b)
        paid.append(r)
        history.append(softmax(z))
    return {"probs": np.array(history), "rewards": np.array(paid)}          # (steps+1, A), (steps,)
