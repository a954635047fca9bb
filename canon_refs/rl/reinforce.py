"""REINFORCE with a baseline on a multi-armed bandit, in NumPy (canon item #50; seed 003, Williams 1992).

What it implements: a softmax policy over the arms' logits ``z``; :func:`grad_log_prob`, the score
``d log pi(a) / dz = onehot(a) - softmax(z)``; :func:`reinforce_step`, one gradient-ascent step
``z + lr * (R - b) * grad log pi(a)``; :func:`gradient_estimate_stats`, the exact mean and variance of
the one-sample estimate by enumerating the actions; :func:`discounted_returns` (reward-to-go); and
:func:`train_reinforce`, the whole loop against ``canon_refs.rl.envs.Bandit`` with an optional
running-mean baseline. :func:`softmax` subtracts the row max first: exact (softmax is shift-invariant),
and it keeps ``exp`` from overflowing, where logits of ``1e4`` would otherwise give ``inf / inf = NaN``.

The subtle point an interviewer probes is why the baseline is allowed and what it buys. It is allowed
because ``E[b * grad log pi(a)] = b * grad sum_a pi(a) = b * grad 1 = 0``: the mean of the estimate does
not move. It buys variance: two arms paying 10 and 12 under a 50/50 policy give one-sample estimates
of -5 or +6 for arm 2's logit (mean 0.5, variance 30.25); with ``b = 11`` every sample says +0.5
(variance 0). The running-mean baseline must use only *past* rewards: on the first pull there is no
history, so the reward is its own baseline and the step is zero.

Shape letters: ``A`` arms (actions), ``T`` time steps of an episode, ``steps`` training steps.

Trade-off: the policy is sampled with its own generator ``default_rng(seed)``, separate from the
bandit's (``seed + 1_000_003``), because with equal streams the uniform that picks an arm also decides
whether it pays. The estimator statistics are computed by exact enumeration over the ``A`` actions
rather than by sampling, because the enumeration is exact to 1e-15 (``variance[1] = 30.25``, 0 with
``b = 11``) while a 4 000-sample estimate of the two-arm mean 0.5 would still carry a standard error of
``sqrt(30.25 / 4000) = 0.087``.

What to test: the worked step (logits ``(-1/6, -1/6, 1/3)``, probabilities ``(0.274, 0.274, 0.452)``),
the score against finite differences of the log-softmax, the exact mean ``(-0.1, 0, 0.1)``, the
variance 30.25 -> 0 with a baseline, ``discounted_returns([1, 1, 1], 0.5) = [1.75, 1.5, 1.0]``,
extreme logits, and that training finds the 0.8 arm (mean final ``P(C) > 0.8`` over seeds 0-4).
"""

from __future__ import annotations

import math

import numpy as np

from canon_refs.rl.envs import Bandit


def softmax(z: np.ndarray) -> np.ndarray:
    """Softmax over the last axis: ``(..., A) -> (..., A)`` float64, finite and summing to 1 for any finite
    logits (entries of 1e4 included), with no floating-point warning."""
    z = np.asarray(z, dtype=np.float64)                  # (..., A)
    shifted = z - z.max(axis=-1, keepdims=True)          # (..., A)
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)             # (..., A)


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
    z = _check_logits(logits)                            # (A,)
    action = _check_action(action, z.shape[0])
    grad = -softmax(z)                                   # (A,)
    grad[action] += 1.0
    return grad


def reinforce_step(logits: np.ndarray, action: int, reward: float, lr: float, baseline: float = 0.0) -> np.ndarray:
    """One REINFORCE update ``z + lr * (reward - baseline) * grad_log_prob(z, action)``, as a new array.

    Args:
        logits: ``(A,)`` current logits (not modified). action: the arm pulled.
        reward: the payout. lr: step size ``> 0``. baseline: any action-independent number.

    Returns:
        ``(A,)`` float64 new logits; ``logits`` is not modified.

    Raises:
        ValueError: bad ``logits``, ``action`` out of range, ``lr <= 0``, non-finite reward or baseline.

    Source: Williams (1992), eq. (2) with a constant baseline; seed 003's worked step.
    """
    _check_lr(lr)
    advantage = _check_finite(reward, "reward") - _check_finite(baseline, "baseline")
    z = _check_logits(logits)                            # (A,)
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
    z = _check_logits(logits)                            # (A,)
    rewards = np.asarray(arm_rewards, dtype=np.float64)  # (A,)
    _check_arm_rewards(rewards, z.shape)
    b = _check_finite(baseline, "baseline")
    probs = softmax(z)                                   # (A,)
    scores = np.eye(z.shape[0]) - probs[None, :]         # (A, A)  row a = grad log pi(a)
    estimates = (rewards - b)[:, None] * scores          # (A, A)
    mean = probs @ estimates                             # (A,)
    variance = probs @ (estimates - mean[None, :]) ** 2  # (A,)
    return {"mean": mean, "variance": variance}


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """Reward-to-go ``G_t = sum_{k >= t} gamma^(k - t) r_k`` of one episode: ``(T,) -> (T,)`` float64.

    Raises:
        ValueError: ``rewards`` not a finite 1-D array; ``gamma`` outside ``[0, 1]``.
    """
    r = np.asarray(rewards, dtype=np.float64)            # (T,)
    _check_episode(r, gamma)
    out = np.empty_like(r)                               # (T,)
    running = 0.0
    for t in range(r.shape[0] - 1, -1, -1):
        running = r[t] + gamma * running
        out[t] = running
    return out


def train_reinforce(bandit: Bandit, steps: int = 500, lr: float = 0.1, baseline: bool = False,
                    seed: int = 0) -> dict[str, np.ndarray]:
    """REINFORCE on a bandit, one pull per step, from uniform logits.

    Each step samples an arm from ``softmax(z)`` with a generator seeded by ``seed`` (any sampling method;
    the same seed gives the same history), pulls it, and applies :func:`reinforce_step`. With
    ``baseline=True`` the baseline is the mean of all *earlier* rewards; on the first step there is none,
    so the reward is its own baseline and the update is zero.

    Args:
        bandit: a :class:`~canon_refs.rl.envs.Bandit` (``n_arms``, ``pull(arm)``).
        steps: ``>= 1`` pulls. lr: step size ``> 0``. baseline: use the running-mean baseline.
        seed: seeds the policy's generator.

    Returns:
        A dict with at least ``"probs"`` ``(steps + 1, A)`` and ``"rewards"`` ``(steps,)``, float64 (extra
        keys are allowed): the policy before the first and after every step, and what each pull paid.

    Raises:
        ValueError: ``steps < 1``, ``lr <= 0``.

    Source: seed 003, ``train_reinforce``.
    """
    _check_steps(steps)
    _check_lr(lr)
    rng = np.random.default_rng(seed)
    A = bandit.n_arms
    logits = np.zeros(A)                                 # (A,)
    probs = np.empty((steps + 1, A))                     # (steps+1, A)
    rewards = np.empty(steps)                            # (steps,)
    probs[0] = softmax(logits)
    total = 0.0
    for t in range(steps):
        action = int(rng.choice(A, p=probs[t]))
        reward = bandit.pull(action)
        b = (total / t if t else reward) if baseline else 0.0
        score = -probs[t]                                # (A,)  grad_log_prob, already validated
        score[action] += 1.0
        logits = logits + lr * (reward - b) * score
        total += reward
        rewards[t] = reward
        probs[t + 1] = softmax(logits)
    return {"probs": probs, "rewards": rewards}


def _check_logits(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)             # (A,)
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


def _check_lr(lr: float) -> None:
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")


def _check_steps(steps: int) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")


def _check_arm_rewards(rewards: np.ndarray, shape: tuple[int, ...]) -> None:
    if rewards.shape != shape or not np.all(np.isfinite(rewards)):
        raise ValueError(f"arm_rewards must be finite with shape {shape}, got {rewards.shape}")


def _check_episode(r: np.ndarray, gamma: float) -> None:
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma!r}")
    if r.ndim != 1 or not np.all(np.isfinite(r)):
        raise ValueError(f"rewards must be a finite (T,) array, got shape {r.shape}")
