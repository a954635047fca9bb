"""REINFORCE with a baseline on a multi-armed bandit, in NumPy (canon item ...

Plan: the score-function estimator (R - b) * grad log pi(a) for a softmax policy, where
grad log pi(a) = onehot(a) - pi. A baseline b keeps the estimator unbiased (E[grad log pi] = 0) but
lowers its variance; gradient_estimate_stats checks both claims exactly by summing over arms.
"""

from __future__ import annotations

import math

import numpy as np

from canon_refs.rl.envs import Bandit


def softmax(z: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, with the max subtracted first: ``(..., A) -> (..., A)`` float64.

    Subtracting the max is exact (softmax is shift-invariant) and keeps ``exp`` from overflowing:
    logits of ``1e4`` would otherwise give ``inf / inf = NaN``.
    """
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


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
    g = -softmax(logits)
    g[action] += 1.0
    return g


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
    z = np.asarray(logits, dtype=np.float64)
    return z + lr * (reward - baseline) * grad_log_prob(z, action)


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
    pi = softmax(logits)                                     # (A,)
    A = pi.shape[0]
    adv = np.asarray(arm_rewards, dtype=np.float64) - baseline  # (A,)
    g = adv[:, None] * (np.eye(A) - pi[None, :])             # (A_sampled, A) estimate per arm
    mean = pi @ g
    second = pi @ (g ** 2)
    return {"mean": mean, "variance": second - mean ** 2}


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """Reward-to-go ``G_t = sum_{k >= t} gamma^(k - t) r_k`` of one episode: ``(T,) -> (T,)`` float64.

    Raises:
        ValueError: ``rewards`` not a finite 1-D array; ``gamma`` outside ``[0, 1]``.
    """
    r = np.asarray(rewards, dtype=np.float64)
    G = np.zeros_like(r)
    running = 0.0
    for t in reversed(range(r.shape[0])):
        running = r[t] + gamma * running
        G[t] = running
    return G


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
    rng = np.random.default_rng(seed)
    A = bandit.n_arms
    z = np.zeros(A)
    probs = [softmax(z)]
    rewards: list[float] = []
    for _ in range(steps):
        p = probs[-1]
        a = int(rng.choice(A, p=p))
        r = float(bandit.pull(a))
        if baseline:
            b = float(np.mean(rewards)) if rewards else r
        else:
            b = 0.0
        score = -p.copy()
        score[a] += 1.0
        z = z + lr * (r - b) * score
        rewards.append(r)
        probs.append(softmax(z))
    return {"probs": np.array(probs), "rewards": np.array(rewards, dtype=np.float64)}
