"""Tabular Q-learning with epsilon-greedy exploration on a gridworld (canon item #48; Watkins 1989).

What it implements: :func:`epsilon_greedy` (a uniformly random action with probability ``epsilon``,
else a greedy action with ties broken uniformly at random), :func:`q_learning_update` (the off-policy
TD update ``Q[s, a] += alpha * (r + gamma * (1 - done) * max_a' Q[s', a'] - Q[s, a])``, in place),
:func:`q_learning`, the episode loop against ``canon_refs.rl.envs.GridWorld``, and
:func:`greedy_policy`.

The subtle point an interviewer probes is the terminal transition: when ``done`` is true there is no
next state to bootstrap from, so the target is ``r`` alone. Bootstrapping from the absorbing goal's row
(which is never updated and stays 0 here) hides the bug on this grid, but with optimistic or random
initial values it inflates every value near the goal. The second one is tie-breaking: with ``Q = 0``
at the start, ``argmax`` always returns action 0 ("up"), and a greedy agent with small ``epsilon``
bumps into the top wall for hundreds of steps; random tie-breaking makes the untrained greedy agent
a random walker instead.

Shape letters: ``S`` states, ``A`` actions, ``k`` actions tied for the maximum.

Trade-off: Q-learning bootstraps from ``max_a' Q[s', a']`` rather than from the action actually taken
next (SARSA), because it then learns the greedy policy's values while following the exploratory one;
the price is the maximisation bias of the max over noisy estimates, which double Q-learning removes.
With ``alpha = 0.5`` on the deterministic grid the estimates converge quickly: after 2000 episodes
``max Q[start]`` is within 0.05 of ``0.9^5 = 0.59049``.

What to test: the worked update (``delta = 2.8``, ``Q[s, a] = 1.4``; done: ``delta = 1.0``, ``0.5``),
``epsilon = 0`` returns the argmax, ``epsilon = 1`` and tied rows give uniform frequencies (4 standard
errors), the trained greedy policy reaches the goal in 6 steps, same seed gives the same ``Q``, and that
invalid arguments raise before ``Q`` is touched.
"""

from __future__ import annotations

import math

import numpy as np

from canon_refs.rl.envs import GridWorld


def epsilon_greedy(q_values: np.ndarray, epsilon: float, rng: np.random.Generator) -> int:
    """Sample an action: uniform with probability ``epsilon``, else greedy (ties uniformly at random).

    Args:
        q_values: ``(A,)`` finite action values of one state: any finite float64, up to ``±finfo.max``,
            with no floating-point warning (C9; greedy means the exact maximum).
        epsilon: exploration probability in ``[0, 1]``.
        rng: the NumPy generator that draws the choice.

    Returns:
        The action, a Python int in ``[0, A)``. Any way of drawing from ``rng`` is accepted (the tests
        check frequencies); ``q_values`` is not modified.

    Raises:
        ValueError: ``q_values`` not a non-empty finite 1-D array; ``epsilon`` outside ``[0, 1]``.

    Source: Sutton & Barto (2018), section 2.2.
    """
    epsilon = _check_unit(epsilon, "epsilon")
    q = np.asarray(q_values, dtype=np.float64)    # (A,)
    _check_q_values(q)
    if rng.random() < epsilon:
        return int(rng.integers(q.shape[0]))
    best = np.flatnonzero(q == q.max())           # (k,)
    return int(best[rng.integers(best.shape[0])])


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
    alpha, gamma = _check_update(Q, s, a, r, s_next, alpha, gamma)
    bootstrap = 0.0 if done else float(Q[s_next].max())
    delta = float(r) + gamma * bootstrap - float(Q[s, a])
    Q[s, a] += alpha * delta
    return delta


def greedy_policy(Q: np.ndarray) -> np.ndarray:
    """The greedy action of every state, ties to the lowest index: ``(S, A) -> (S,)`` int64.

    Raises:
        ValueError: ``Q`` not 2-D with ``A >= 1``.
    """
    Q = np.asarray(Q)                             # (S, A)
    if Q.ndim != 2 or Q.shape[1] < 1:
        raise ValueError(f"Q must have shape (S, A), got {Q.shape}")
    return np.argmax(Q, axis=1).astype(np.int64)  # (S,)


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
    _check_counts(n_episodes=n_episodes, max_steps=max_steps)
    rng = np.random.default_rng(seed)
    Q = np.zeros((env.n_states, env.n_actions))   # (S, A)
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


def _check_q_values(q: np.ndarray) -> None:
    if q.ndim != 1 or q.size == 0 or not np.all(np.isfinite(q)):
        raise ValueError(f"q_values must be a non-empty finite (A,) array, got shape {q.shape}")


def _check_update(Q: np.ndarray, s: int, a: int, r: float, s_next: int, alpha: float,
                  gamma: float) -> tuple[float, float]:
    """Validate one update's arguments (before ``Q`` is touched); return ``alpha`` and ``gamma`` as floats."""
    alpha = _check_unit(alpha, "alpha", open_low=True)
    gamma = _check_unit(gamma, "gamma")
    if not isinstance(Q, np.ndarray) or Q.ndim != 2 or not np.issubdtype(Q.dtype, np.floating):
        raise ValueError("Q must be a 2-D float array (S, A)")
    S, A = Q.shape
    _check_index(s, "s", S)
    _check_index(a, "a", A)
    _check_index(s_next, "s_next", S)
    if not isinstance(r, (int, float, np.floating)) or not math.isfinite(r):
        raise ValueError(f"r must be a finite number, got {r!r}")
    return alpha, gamma


def _check_counts(**counts: int) -> None:
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
