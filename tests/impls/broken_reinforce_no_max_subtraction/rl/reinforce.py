"""REINFORCE with one classic mistake (broken variant of #50): softmax without subtracting the max.

``exp(1e4)`` overflows to ``inf`` and ``inf / inf`` is NaN. Caught by the numerics probes
``test_extreme_logits`` and ``test_extreme_negative_logits_and_rows``.
"""

from __future__ import annotations

import math

import numpy as np

from canon_refs.rl.envs import Bandit


def _check_logits(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)                                # (A,)
    if z.ndim != 1 or z.size == 0 or not np.all(np.isfinite(z)):
        raise ValueError(f"logits must be a non-empty finite (A,) array, got shape {z.shape}")
    return z


def _check_action(action: object, n: int) -> int:
    if isinstance(action, bool) or not isinstance(action, (int, np.integer)) or not 0 <= action < n:
        raise ValueError(f"action must be an int in [0, {n}), got {action!r}")
    return int(action)


def _check_finite(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def softmax(z: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, with the max subtracted first: ``(..., A) -> (..., A)`` float64.

    Subtracting the max is exact (softmax is shift-invariant) and keeps ``exp`` from overflowing:
    logits of ``1e4`` would otherwise give ``inf / inf = NaN``.
    """
    z = np.asarray(z, dtype=np.float64)                                     # (..., A)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)                                # (..., A)


def grad_log_prob(logits: np.ndarray, action: int) -> np.ndarray:
    """Score of a softmax policy: ``d log softmax(z)[action] / dz = onehot(action) - softmax(z)``.

    Args:
        logits: ``(A,)`` finite logits. action: an int in ``[0, A)``.

    Returns:
        ``(A,)`` float64; its entries sum to 0.

    Raises:
        ValueError: bad ``logits``; ``action`` out of range.

    Source: seed 003, "The log-probability trick, decoded".
    """
    z = _check_logits(logits)                                               # (A,)
    action = _check_action(action, z.shape[0])
    grad = -softmax(z)                                                      # (A,)
    grad[action] += 1.0
    return grad


def reinforce_step(logits: np.ndarray, action: int, reward: float, lr: float, baseline: float = 0.0) -> np.ndarray:
    """One REINFORCE update ``z + lr * (reward - baseline) * grad_log_prob(z, action)``, as a new array.

    Args:
        logits: ``(A,)`` current logits (not modified). action: the arm pulled.
        reward: the payout. lr: step size ``> 0``. baseline: any action-independent number.

    Returns:
        ``(A,)`` float64 new logits.

    Raises:
        ValueError: bad ``logits``, ``action`` out of range, ``lr <= 0``, non-finite reward or baseline.

    Source: Williams (1992), eq. (2) with a constant baseline; seed 003's worked step.
    """
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")
    advantage = _check_finite(reward, "reward") - _check_finite(baseline, "baseline")
    z = _check_logits(logits)                                               # (A,)
    return z + lr * advantage * grad_log_prob(z, action)


def gradient_estimate_stats(logits: np.ndarray, arm_rewards: np.ndarray, baseline: float = 0.0) -> dict[str, np.ndarray]:
    """Exact mean and per-logit variance of the one-sample estimate ``(R(a) - b) * grad log pi(a)``.

    Every arm pays a fixed ``arm_rewards[a]``, so the expectation over ``a ~ pi`` is a finite sum.
    ``mean`` is the true gradient of the expected reward and does not depend on ``baseline``.

    Args:
        logits: ``(A,)``. arm_rewards: ``(A,)`` reward of each arm. baseline: a number.

    Returns:
        ``{"mean": (A,), "variance": (A,)}`` float64.

    Raises:
        ValueError: bad ``logits``; ``arm_rewards`` not finite or of length ``!= A``.

    Source: seed 003, "Variance and baselines".
    """
    z = _check_logits(logits)                                               # (A,)
    rewards = np.asarray(arm_rewards, dtype=np.float64)                     # (A,)
    if rewards.shape != z.shape or not np.all(np.isfinite(rewards)):
        raise ValueError(f"arm_rewards must be finite with shape {z.shape}, got {rewards.shape}")
    b = _check_finite(baseline, "baseline")
    probs = softmax(z)                                                      # (A,)
    scores = np.eye(z.shape[0]) - probs[None, :]                            # (A, A)  row a = grad log pi(a)
    estimates = (rewards - b)[:, None] * scores                             # (A, A)
    mean = probs @ estimates                                                # (A,)
    variance = probs @ (estimates - mean[None, :]) ** 2                     # (A,)
    return {"mean": mean, "variance": variance}


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """Reward-to-go ``G_t = sum_{k >= t} gamma^(k - t) r_k`` of one episode: ``(T,) -> (T,)`` float64.

    Raises:
        ValueError: ``rewards`` not a finite 1-D array; ``gamma`` outside ``[0, 1]``.
    """
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma!r}")
    r = np.asarray(rewards, dtype=np.float64)                               # (T,)
    if r.ndim != 1 or not np.all(np.isfinite(r)):
        raise ValueError(f"rewards must be a finite (T,) array, got shape {r.shape}")
    out = np.empty_like(r)                                                  # (T,)
    running = 0.0
    for t in range(r.shape[0] - 1, -1, -1):
        running = r[t] + gamma * running
        out[t] = running
    return out


def train_reinforce(bandit: Bandit, steps: int = 500, lr: float = 0.1, baseline: bool = False,
                    seed: int = 0) -> dict[str, np.ndarray]:
    """REINFORCE on a bandit, one pull per step, from uniform logits.

    The arm is sampled from ``softmax(z)`` with ``np.random.default_rng(seed)``; each step is
    :func:`reinforce_step` with the score computed from the probabilities already at hand (the loop
    skips re-validating its own arrays). With ``baseline=True``
    the baseline is the mean of all *earlier* rewards; on the first step there is none, so the reward is
    its own baseline and the update is zero.

    Args:
        bandit: a :class:`~canon_refs.rl.envs.Bandit` (``n_arms``, ``pull(arm)``).
        steps: ``>= 1`` pulls. lr: step size ``> 0``. baseline: use the running-mean baseline.
        seed: seeds the policy's generator.

    Returns:
        ``{"probs": (steps + 1, A), "rewards": (steps,)}`` float64: the policy before the first and
        after every step, and what each pull paid.

    Raises:
        ValueError: ``steps < 1``, ``lr <= 0``.

    Source: seed 003, ``train_reinforce``.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")
    rng = np.random.default_rng(seed)
    A = bandit.n_arms
    logits = np.zeros(A)                                                    # (A,)
    probs = np.empty((steps + 1, A))                                        # (steps+1, A)
    rewards = np.empty(steps)                                               # (steps,)
    probs[0] = softmax(logits)
    total = 0.0
    for t in range(steps):
        action = int(rng.choice(A, p=probs[t]))
        reward = bandit.pull(action)
        b = (total / t if t else reward) if baseline else 0.0
        score = -probs[t]                                                   # (A,)  grad_log_prob, inlined
        score[action] += 1.0
        logits = logits + lr * (reward - b) * score
        total += reward
        rewards[t] = reward
        probs[t + 1] = softmax(logits)
    return {"probs": probs, "rewards": rewards}
