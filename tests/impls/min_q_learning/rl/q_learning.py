"""Tabular Q-learning with epsilon-greedy exploration on a gridworld (canon item #48; Watkins ...

Plan: off-policy TD control. Behave epsilon-greedily, but bootstrap from max_a' Q(s', a') (the
greedy target) instead of the action actually taken next, which is what makes it Q-learning rather
than SARSA. Terminal transitions do not bootstrap; time-limit cut-offs do.
"""

from __future__ import annotations

import math

import numpy as np

from canon_refs.rl.envs import GridWorld


def epsilon_greedy(q_values: np.ndarray, epsilon: float, rng: np.random.Generator) -> int:
    """Sample an action: uniform with probability ``epsilon``, else greedy (ties uniformly at random).

    Args:
        q_values: ``(A,)`` finite action values of one state.
        epsilon: exploration probability in ``[0, 1]``.
        rng: the NumPy generator that draws the choice.

    Returns:
        The action, a Python int in ``[0, A)``.

    Raises:
        ValueError: ``q_values`` not a non-empty finite 1-D array; ``epsilon`` outside ``[0, 1]``.

    Source: Sutton & Barto (2018), section 2.2.
    """
    q = np.asarray(q_values, dtype=np.float64)
    if rng.random() < epsilon:
        return int(rng.integers(q.shape[0]))
    best = np.flatnonzero(q == q.max())
    return int(rng.choice(best))


def q_learning_update(
    Q: np.ndarray, s: int, a: int, r: float, s_next: int, done: bool, alpha: float, gamma: float
) -> float:
    """One Q-learning step, in place: ``Q[s, a] += alpha * delta``.

    ``delta = r + gamma * (1 - done) * max_a' Q[s_next, a'] - Q[s, a]``.

    Args:
        Q: ``(S, A)`` float table, updated in place.
        s, a: the state and the action taken. r: the reward received. s_next: the next state.
        done: the episode terminated at ``s_next`` (no bootstrap).
        alpha: step size in ``(0, 1]``. gamma: discount in ``[0, 1]``.

    Returns:
        The TD error ``delta`` as a float (before the update).

    Raises:
        ValueError: ``alpha``, ``gamma``, a state or an action out of range, ``Q`` not a 2-D float
            array, ``r`` not finite; always before ``Q`` is modified.

    Source: Watkins & Dayan, "Q-learning", Machine Learning 8 (1992); Sutton & Barto eq. (6.8).
    """
    target = r + (0.0 if done else gamma * float(np.max(Q[s_next])))
    delta = float(target - Q[s, a])
    Q[s, a] += alpha * delta
    return delta


def greedy_policy(Q: np.ndarray) -> np.ndarray:
    """The greedy action of every state, ties to the lowest index: ``(S, A) -> (S,)`` int64.

    Raises:
        ValueError: ``Q`` not 2-D with ``A >= 1``.
    """
    return np.argmax(np.asarray(Q), axis=1).astype(np.int64)


def q_learning(
    env: GridWorld,
    n_episodes: int = 500,
    *,
    alpha: float = 0.1,
    gamma: float = 0.99,
    epsilon: float = 0.1,
    max_steps: int = 100,
    seed: int = 0,
) -> tuple[np.ndarray, list[float]]:
    """Train a Q table by epsilon-greedy Q-learning for ``n_episodes`` episodes.

    Each episode starts at ``env.reset()`` and ends at the goal or after ``max_steps`` steps (a time
    limit: the last transition is not terminal and still bootstraps). Actions are drawn by
    :func:`epsilon_greedy` from ``np.random.default_rng(seed)``; the environment keeps its own stream.

    Args:
        env: a :class:`~canon_refs.rl.envs.GridWorld` (any object with ``n_states``, ``n_actions``,
            ``reset()`` and ``step(a) -> (s', r, done)``).
        n_episodes: ``>= 1``. alpha: ``(0, 1]``. gamma, epsilon: ``[0, 1]``. max_steps: ``>= 1``.
        seed: seeds the agent's generator.

    Returns:
        ``(Q, returns)``: the ``(S, A)`` float64 table and the undiscounted return of every episode.

    Raises:
        ValueError: invalid hyperparameters.
    """
    rng = np.random.default_rng(seed)
    Q = np.zeros((env.n_states, env.n_actions), dtype=np.float64)
    returns: list[float] = []
    for _ in range(n_episodes):
        s = env.reset()
        total = 0.0
        for _ in range(max_steps):
            a = epsilon_greedy(Q[s], epsilon, rng)
            s_next, r, done = env.step(a)
            q_learning_update(Q, s, a, r, s_next, done, alpha, gamma)
            total += r
            s = s_next
            if done:
                break
        returns.append(total)
    return Q, returns
