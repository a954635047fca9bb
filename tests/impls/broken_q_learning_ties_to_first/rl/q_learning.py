"""Q-learning with one classic mistake (broken variant of #48): greedy ties always go to the first action.

``np.argmax`` on a freshly zeroed row always returns action 0, so an untrained greedy agent walks into
the top wall. Caught by ``test_greedy_ties_are_broken_uniformly``.
"""

from __future__ import annotations

import math

import numpy as np

from canon_refs.rl.envs import GridWorld


def _check_unit(value: float, name: str, *, open_low: bool = False) -> float:
    """A finite number in ``[0, 1]`` (``(0, 1]`` with ``open_low``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value > 1.0 or value < 0.0 or (open_low and value == 0.0):
        bound = "(0, 1]" if open_low else "[0, 1]"
        raise ValueError(f"{name} must lie in {bound}, got {value}")
    return float(value)


def _check_index(value: object, name: str, size: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < size:
        raise ValueError(f"{name} must be an int in [0, {size}), got {value!r}")
    return int(value)


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
    epsilon = _check_unit(epsilon, "epsilon")
    q = np.asarray(q_values, dtype=np.float64)                              # (A,)
    if q.ndim != 1 or q.size == 0 or not np.all(np.isfinite(q)):
        raise ValueError(f"q_values must be a non-empty finite (A,) array, got shape {q.shape}")
    if rng.random() < epsilon:
        return int(rng.integers(q.shape[0]))
    return int(np.argmax(q))


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
    alpha = _check_unit(alpha, "alpha", open_low=True)
    gamma = _check_unit(gamma, "gamma")
    if not isinstance(Q, np.ndarray) or Q.ndim != 2 or not np.issubdtype(Q.dtype, np.floating):
        raise ValueError("Q must be a 2-D float array (S, A)")
    S, A = Q.shape
    s = _check_index(s, "s", S)
    a = _check_index(a, "a", A)
    s_next = _check_index(s_next, "s_next", S)
    if not isinstance(r, (int, float, np.floating)) or not math.isfinite(r):
        raise ValueError(f"r must be a finite number, got {r!r}")
    bootstrap = 0.0 if done else float(Q[s_next].max())
    delta = float(r) + gamma * bootstrap - float(Q[s, a])
    Q[s, a] += alpha * delta
    return delta


def greedy_policy(Q: np.ndarray) -> np.ndarray:
    """The greedy action of every state, ties to the lowest index: ``(S, A) -> (S,)`` int64.

    Raises:
        ValueError: ``Q`` not 2-D with ``A >= 1``.
    """
    Q = np.asarray(Q)                                                       # (S, A)
    if Q.ndim != 2 or Q.shape[1] < 1:
        raise ValueError(f"Q must have shape (S, A), got {Q.shape}")
    return np.argmax(Q, axis=1).astype(np.int64)                            # (S,)


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
    alpha = _check_unit(alpha, "alpha", open_low=True)
    gamma = _check_unit(gamma, "gamma")
    epsilon = _check_unit(epsilon, "epsilon")
    for name, value in (("n_episodes", n_episodes), ("max_steps", max_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    rng = np.random.default_rng(seed)
    Q = np.zeros((env.n_states, env.n_actions))                             # (S, A)
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
