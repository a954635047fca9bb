"""Toy environments for the RL items (support module S1; not a canon item, never redirected).

What it implements: :class:`Bandit`, a row of Bernoulli slot machines (seed 003's three arms with win
chances 0.2, 0.5, 0.8), and :class:`GridWorld`, a deterministic-or-slippery grid with four actions,
an absorbing goal, optional walls, a one-hot observation and its exact tabular model ``(P, R)`` for
dynamic programming (#47). The RL items (#47-#51) and their tests use these through absolute imports,
and learners never rewrite them, so every learner is trained and graded on the very same dynamics.

The subtle point: the bandit draws its payouts from ``default_rng(seed + 1_000_003)`` instead of
``default_rng(seed)``, because a learner's policy seeded with the same integer would otherwise draw the
very same uniforms as the rewards, and the sampled arm would be correlated with its payout: under the
uniform policy, inverse-CDF sampling picks arm C when ``u >= 2/3`` and the same ``u`` pays when ``u < 0.8``,
so C would pay 40% of the time instead of 80%. The second
one: the goal is absorbing with reward 0 in ``transition_model``, so ``V(goal) = 0`` and the value of
the cell next to the goal is exactly the goal reward (1, not ``1 / (1 - gamma)``).

Shape letters: ``S`` states (``n_rows * n_cols``, walls included as unreachable states), ``A`` actions
(4 for the grid; arms for the bandit).

Trade-off: walls and the grid border are handled by one precomputed ``(S, A)`` table of deterministic
successors rather than by branching in ``step``, because ``transition_model`` then derives ``P`` from
the same table (``P = (1 - slip) * onehot(next) + slip * mean_b onehot(next_b)``) and the two can
never disagree; the table costs ``S * A`` ints (64 for the 4x4 grid).

What to test: ``P`` is row-stochastic, ``R`` is the expected immediate reward, the goal is absorbing,
moving off-grid or into a wall stays put, ``step`` agrees with ``P`` (deterministic and, statistically,
with slip), the corridor ``GridWorld(1, 6)``, and that the bandit's stream differs from ``default_rng(seed)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# (row, col) displacement of actions 0 up, 1 right, 2 down, 3 left
MOVES: tuple[tuple[int, int], ...] = ((-1, 0), (0, 1), (1, 0), (0, -1))
ACTION_NAMES: tuple[str, ...] = ("up", "right", "down", "left")
BANDIT_STREAM_OFFSET = 1_000_003


def _check_int(value: object, name: str, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high)``; bools and floats are rejected."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value < low or (high is not None and value >= high):
        bound = f"[{low}, {high})" if high is not None else f">= {low}"
        raise ValueError(f"{name} must lie in {bound}, got {value}")
    return int(value)


class Bandit:
    """A row of slot machines: pulling arm ``k`` pays ``offset + 1`` with chance ``win_chances[k]``,
    else ``offset`` (seed 003).

    Args:
        win_chances: ``(A,)`` probabilities in ``[0, 1]``, ``A >= 1``.
        offset: finite reward added to every pull (seed 003 uses 5 to show why baselines matter).
        seed: the payout stream is ``np.random.default_rng(seed + 1_000_003)`` (never ``seed`` itself).

    Raises:
        ValueError: ``win_chances`` empty, not 1-D or outside ``[0, 1]``; ``offset`` not finite.
    """

    def __init__(self, win_chances: Sequence[float], offset: float = 0.0, seed: int = 0) -> None:
        chances = np.asarray(win_chances, dtype=np.float64)                  # (A,)
        if chances.ndim != 1 or chances.size == 0:
            raise ValueError(f"win_chances must be a non-empty 1-D sequence, got shape {chances.shape}")
        if not np.all((chances >= 0.0) & (chances <= 1.0)):
            raise ValueError(f"win_chances must lie in [0, 1], got {chances.tolist()}")
        if not isinstance(offset, (int, float)) or not math.isfinite(offset):
            raise ValueError(f"offset must be a finite number, got {offset!r}")
        self.win_chances = chances
        self.offset = float(offset)
        self.rng = np.random.default_rng(_check_int(seed, "seed", 0) + BANDIT_STREAM_OFFSET)

    @property
    def n_arms(self) -> int:
        """Number of arms ``A``."""
        return int(self.win_chances.shape[0])

    def arm_rewards(self) -> np.ndarray:
        """Expected reward of each arm, ``offset + win_chances``: ``(A,)`` float64."""
        return self.offset + self.win_chances

    def pull(self, arm: int) -> float:
        """Play ``arm`` once: ``offset + 1`` with probability ``win_chances[arm]``, else ``offset``.

        Raises:
            ValueError: ``arm`` not an int in ``[0, A)``.
        """
        arm = _check_int(arm, "arm", 0, self.n_arms)
        return self.offset + float(self.rng.random() < self.win_chances[arm])


class GridWorld:
    """A ``n_rows x n_cols`` grid; the agent walks from ``start`` to an absorbing ``goal``.

    Actions are 0 up, 1 right, 2 down, 3 left. Moving off the grid or into a wall leaves the agent
    where it is. With probability ``slip`` a uniformly random action (possibly the intended one) is
    executed instead. Entering the goal pays ``goal_reward`` and ends the episode; every other step
    pays ``step_reward``. States are row-major cell indices; observations are one-hot ``(S,)`` float32.
    Episode length limits belong to the training loops, not to the environment.

    Args:
        n_rows, n_cols: grid size, each ``>= 1`` and at least two cells in all.
        start: the start cell ``(row, col)``.
        goal: the goal cell; ``None`` means the bottom-right cell.
        walls: blocked cells (neither ``start`` nor ``goal``).
        slip: probability in ``[0, 1]`` of executing a uniformly random action.
        goal_reward, step_reward: finite rewards.
        seed: seeds the slip stream ``np.random.default_rng(seed)``.

    Raises:
        ValueError: a size below 1, a cell off the grid, ``start == goal``, a wall on ``start`` or
            ``goal``, ``slip`` outside ``[0, 1]``, non-finite rewards.
    """

    def __init__(
        self,
        n_rows: int = 4,
        n_cols: int = 4,
        start: tuple[int, int] = (0, 0),
        goal: tuple[int, int] | None = None,
        walls: Sequence[tuple[int, int]] = (),
        slip: float = 0.0,
        goal_reward: float = 1.0,
        step_reward: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.n_rows = _check_int(n_rows, "n_rows", 1)
        self.n_cols = _check_int(n_cols, "n_cols", 1)
        if self.n_rows * self.n_cols < 2:
            raise ValueError("n_rows * n_cols must be >= 2 (a start and a distinct goal)")
        goal = (self.n_rows - 1, self.n_cols - 1) if goal is None else goal
        self.start = self._check_cell(start, "start")
        self.goal = self._check_cell(goal, "goal")
        if self.start == self.goal:
            raise ValueError(f"start and goal must differ, both are {self.start}")
        self.walls = frozenset(self._check_cell(w, "walls") for w in walls)
        if self.start in self.walls or self.goal in self.walls:
            raise ValueError("walls must not contain the start or the goal cell")
        if not isinstance(slip, (int, float)) or not 0.0 <= slip <= 1.0:
            raise ValueError(f"slip must lie in [0, 1], got {slip!r}")
        for name, value in (("goal_reward", goal_reward), ("step_reward", step_reward)):
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        self.slip = float(slip)
        self.goal_reward = float(goal_reward)
        self.step_reward = float(step_reward)
        self.n_states = self.n_rows * self.n_cols
        self.n_actions = len(MOVES)
        self.obs_dim = self.n_states
        self.start_state = self.state_index(self.start)
        self.goal_state = self.state_index(self.goal)
        self.rng = np.random.default_rng(_check_int(seed, "seed", 0))
        self.next_state = self._successor_table()                            # (S, A)
        self.state = self.start_state
        self.done = False

    def _check_cell(self, cell: object, name: str) -> tuple[int, int]:
        if not isinstance(cell, (tuple, list)) or len(cell) != 2:
            raise ValueError(f"{name} must be a (row, col) pair, got {cell!r}")
        row = _check_int(cell[0], name, 0, self.n_rows)
        col = _check_int(cell[1], name, 0, self.n_cols)
        return row, col

    def _successor_table(self) -> np.ndarray:
        """Deterministic successor of every (state, action): ``(S, A)`` int64."""
        rows = np.arange(self.n_states) // self.n_cols                       # (S,)
        cols = np.arange(self.n_states) % self.n_cols                        # (S,)
        moves = np.array(MOVES)                                              # (A, 2)
        new_rows = np.clip(rows[:, None] + moves[None, :, 0], 0, self.n_rows - 1)  # (S, A)
        new_cols = np.clip(cols[:, None] + moves[None, :, 1], 0, self.n_cols - 1)  # (S, A)
        table = new_rows * self.n_cols + new_cols                            # (S, A)
        blocked = np.zeros(self.n_states, dtype=bool)                        # (S,)
        for cell in self.walls:
            blocked[self.state_index(cell)] = True
        stay = np.broadcast_to(np.arange(self.n_states)[:, None], table.shape)  # (S, A)
        table = np.where(blocked[table], stay, table)                        # (S, A)
        frozen = blocked.copy()
        frozen[self.goal_state] = True
        return np.where(frozen[:, None], stay, table).astype(np.int64)       # (S, A)

    def state_index(self, cell: tuple[int, int]) -> int:
        """Row-major index ``row * n_cols + col`` of ``cell``.

        Raises:
            ValueError: ``cell`` off the grid.
        """
        row, col = self._check_cell(cell, "cell")
        return row * self.n_cols + col

    def transition_model(self) -> tuple[np.ndarray, np.ndarray]:
        """The exact tabular model for dynamic programming.

        Returns:
            ``P`` ``(S, A, S)`` float64 with ``P[s, a, s']`` the probability of landing in ``s'``, and
            ``R`` ``(S, A)`` float64, the expected immediate reward of taking ``a`` in ``s``. The goal
            (and every wall cell, which is unreachable) is absorbing with reward 0.
        """
        S = self.n_states
        intended = np.eye(S)[self.next_state]                                # (S, A, S)
        slipped = intended.mean(axis=1, keepdims=True)                       # (S, 1, S)
        P = (1.0 - self.slip) * intended + self.slip * slipped               # (S, A, S)
        reward_on_entry = np.full(S, self.step_reward)                       # (S,)
        reward_on_entry[self.goal_state] = self.goal_reward
        R = P @ reward_on_entry                                              # (S, A)
        absorbing = np.zeros(S, dtype=bool)                                  # (S,)
        absorbing[self.goal_state] = True
        for cell in self.walls:
            absorbing[self.state_index(cell)] = True
        R[absorbing] = 0.0
        return P, R

    def reset(self) -> int:
        """Put the agent back on ``start`` and return its state index."""
        self.state = self.start_state
        self.done = False
        return self.state

    def step(self, action: int) -> tuple[int, float, bool]:
        """Take ``action``; return ``(next_state, reward, done)`` with ``done`` = reached the goal.

        Raises:
            ValueError: ``action`` not an int in ``[0, 4)``.
            RuntimeError: the episode already ended (call :meth:`reset`).
        """
        action = _check_int(action, "action", 0, self.n_actions)
        if self.done:
            raise RuntimeError("the episode has ended: call reset() before step()")
        if self.slip > 0.0 and self.rng.random() < self.slip:
            action = int(self.rng.integers(self.n_actions))
        self.state = int(self.next_state[self.state, action])
        self.done = self.state == self.goal_state
        reward = self.goal_reward if self.done else self.step_reward
        return self.state, reward, self.done

    def one_hot(self, s: int) -> np.ndarray:
        """One-hot observation of state ``s``: ``(S,)`` float32.

        Raises:
            ValueError: ``s`` not an int in ``[0, S)``.
        """
        s = _check_int(s, "s", 0, self.n_states)
        obs = np.zeros(self.n_states, dtype=np.float32)                      # (S,)
        obs[s] = 1.0
        return obs
