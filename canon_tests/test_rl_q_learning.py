"""Reference tests for #48, Q-learning on a gridworld (docs/contract.md #48).

Training check: 4x4 grid, gamma 0.9, alpha 0.5, epsilon 0.1, 2000 episodes (max_steps 30). Verified on
seeds 0-9 before freezing (and with max_steps 100): every seed's greedy policy walks to the goal in 6
steps and ``max Q[start]`` equals 0.59049 to 1e-15 (threshold 0.05); about 0.5 s per run.
"""

from __future__ import annotations

import numpy as np
import pytest

from canon_refs.rl import q_learning as ql
from canon_refs.rl.envs import GridWorld
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged, rng, strict_numpy

pytestmark = pytest.mark.canon("rl/q_learning")

V_START = 0.9**5


def _frequencies(q_values, epsilon, n=40_000, seed=0):
    g = rng(seed)
    counts = np.bincount([ql.epsilon_greedy(q_values, epsilon, g) for _ in range(n)], minlength=len(q_values))
    return counts / n


def _within_4_se(freq, expected, n=40_000):
    expected = np.asarray(expected, dtype=np.float64)
    se = np.sqrt(expected * (1 - expected) / n)
    return np.all(np.abs(freq - expected) <= 4 * se + 1e-12)


# --- the update -------------------------------------------------------------------------------------------


def test_worked_update_not_done():
    Q = np.zeros((3, 4))
    Q[2] = [0.0, 2.0, 1.0, 0.0]
    before = Q.copy()
    delta = ql.q_learning_update(Q, 0, 1, 1.0, 2, False, 0.5, 0.9)
    assert isinstance(delta, float)
    assert_close(delta, 2.8, what="q_learning_update(...) delta")
    assert_close(Q[0, 1], 1.4, what="Q[0, 1] after the update")
    before[0, 1] = Q[0, 1]
    np.testing.assert_array_equal(Q, before)  # only Q[s, a] changed


def test_worked_update_done_does_not_bootstrap():
    Q = np.zeros((3, 4))
    Q[2] = [0.0, 2.0, 1.0, 0.0]
    delta = ql.q_learning_update(Q, 0, 1, 1.0, 2, True, 0.5, 0.9)
    assert_close(delta, 1.0, what="q_learning_update(done=True) delta")
    assert_close(Q[0, 1], 0.5, what="Q[0, 1] after a terminal update")


def test_update_uses_the_current_estimate_and_the_max():
    Q = np.array([[0.3, -0.2], [-1.0, -4.0]])
    delta = ql.q_learning_update(Q, 0, 0, -0.5, 1, False, 0.25, 0.8)
    want = -0.5 + 0.8 * -1.0 - 0.3
    assert_close(delta, want, what="q_learning_update(...) delta")
    assert_close(Q[0, 0], 0.3 + 0.25 * want, what="Q[0, 0] after the update")
    # a self-transition reads Q[s] before writing it
    Q = np.array([[2.0, 1.0]])
    delta = ql.q_learning_update(Q, 0, 0, 0.0, 0, False, 1.0, 0.5)
    assert_close(delta, 0.5 * 2.0 - 2.0, magnitude=2.0, what="q_learning_update(self-transition) delta")
    assert_close(Q[0, 0], 1.0, what="Q[0, 0] after a self-transition")


@pytest.mark.contract
@pytest.mark.parametrize(
    ("args", "arg"),
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.5}, "alpha"),
        ({"gamma": -0.1}, "gamma"),
        ({"gamma": 1.01}, "gamma"),
        ({"s": 3}, "s"),
        ({"a": 4}, "a"),
        ({"a": -1}, "a"),
        ({"s_next": 7}, "s_next"),
    ],
)
def test_update_errors_leave_q_untouched(args, arg):
    Q = np.arange(12, dtype=np.float64).reshape(3, 4)
    before = Q.copy()
    call = {"s": 0, "a": 1, "r": 1.0, "s_next": 2, "done": False, "alpha": 0.5, "gamma": 0.9, **args}
    with pytest.raises(ValueError):
        ql.q_learning_update(Q, **call)
    np.testing.assert_array_equal(Q, before)


# --- exploration --------------------------------------------------------------------------------------------


def test_epsilon_zero_returns_the_argmax():
    g = rng(1)
    for _ in range(200):
        q = g.normal(size=5)
        assert call_leaves_inputs_unchanged(ql.epsilon_greedy, q, 0.0, g) == int(np.argmax(q))
    assert isinstance(ql.epsilon_greedy(np.array([0.0, 1.0]), 0.0, g), int)


def test_epsilon_one_is_uniform_even_with_a_clear_best():
    assert _within_4_se(_frequencies(np.zeros(4), 1.0), [0.25] * 4)
    assert _within_4_se(_frequencies(np.array([0.0, 0.0, 9.0, 0.0]), 1.0, n=10_000, seed=1), [0.25] * 4, n=10_000)


def test_greedy_ties_are_broken_uniformly():
    freq = _frequencies(np.array([1.0, 3.0, 3.0, 0.0]), 0.0, n=10_000, seed=2)
    assert freq[0] == 0.0 and freq[3] == 0.0
    assert _within_4_se(freq, [0.0, 0.5, 0.5, 0.0], n=10_000)


def test_epsilon_mixture_frequencies():
    # P(best) = 1 - eps + eps / A = 0.85 with eps = 0.2, A = 4
    freq = _frequencies(np.array([0.1, -2.0, 0.7, 0.3]), 0.2, n=10_000, seed=3)
    assert _within_4_se(freq, [0.05, 0.05, 0.85, 0.05], n=10_000)


@pytest.mark.contract
def test_epsilon_greedy_errors():
    g = rng(0)
    for bad in (-0.1, 1.1, float("nan")):
        with pytest.raises(ValueError):
            ql.epsilon_greedy(np.zeros(4), bad, g)
    with pytest.raises(ValueError):
        ql.epsilon_greedy(np.zeros((2, 2)), 0.1, g)
    with pytest.raises(ValueError):
        ql.epsilon_greedy(np.array([]), 0.1, g)


@pytest.mark.numerics_probe
def test_extreme_q_values():
    g = rng(4)
    q = np.array([-1e308, 1e308, 1e307, -np.finfo(np.float64).max])
    with strict_numpy():
        picks = {ql.epsilon_greedy(q, 0.0, g) for _ in range(50)}
        Q = np.array([[0.0, 0.0], [1e300, -1e300]])
        delta = ql.q_learning_update(Q, 0, 1, -1e300, 1, False, 0.5, 0.5)
    assert picks == {1}
    assert np.isfinite(delta) and np.all(np.isfinite(Q))
    assert_close(Q[0, 1], 0.5 * (-1e300 + 0.5e300), magnitude=1e300, what="Q[0, 1] after an update of size 1e300")


# --- greedy policy and training -------------------------------------------------------------------------


def test_greedy_policy():
    Q = np.array([[0.0, 1.0, 1.0, 0.0], [5.0, -1.0, 0.0, 5.0], [0.0, 0.0, 0.0, 0.0]])
    policy = call_leaves_inputs_unchanged(ql.greedy_policy, Q)
    assert policy.dtype == np.int64 and policy.shape == (3,)
    assert policy.tolist() == [1, 0, 0]


def _greedy_rollout(env, policy, limit=50):
    s, steps, done = env.reset(), 0, False
    while not done and steps < limit:
        s, _, done = env.step(int(policy[s]))
        steps += 1
    return steps, done


def test_learns_the_shortest_path_on_the_grid():
    env = GridWorld()
    # max_steps = 30 keeps a stuck learner (argmax ties to action 0 walks into the wall) from costing 100 steps
    # an episode; the reference finds the goal in every seed 0-9 either way
    Q, returns = ql.q_learning(env, 2000, alpha=0.5, gamma=0.9, epsilon=0.1, max_steps=30, seed=0)
    assert Q.shape == (16, 4) and Q.dtype == np.float64
    assert len(returns) == 2000 and all(r in (0.0, 1.0) for r in returns)
    steps, done = _greedy_rollout(env, ql.greedy_policy(Q))
    assert done and steps == 6
    assert abs(Q[0].max() - V_START) < 0.05
    np.testing.assert_array_equal(Q[15], np.zeros(4))  # the absorbing goal is never updated


def test_same_seed_same_q():
    Q1, r1 = ql.q_learning(GridWorld(slip=0.1, seed=5), 60, alpha=0.5, gamma=0.9, seed=3)
    Q2, r2 = ql.q_learning(GridWorld(slip=0.1, seed=5), 60, alpha=0.5, gamma=0.9, seed=3)
    np.testing.assert_array_equal(Q1, Q2)
    assert r1 == r2
    Q3, _ = ql.q_learning(GridWorld(slip=0.1, seed=5), 60, alpha=0.5, gamma=0.9, seed=4)
    assert not np.array_equal(Q1, Q3)


@pytest.mark.edge_case
def test_episode_length_limit():
    # max_steps = 1: one update per episode, and returns stay 0 until a single step reaches the goal
    env = GridWorld(1, 2)
    Q, returns = ql.q_learning(env, 200, alpha=1.0, gamma=0.9, epsilon=1.0, max_steps=1, seed=0)
    assert len(returns) == 200
    assert Q[0, 1] == 1.0 and 0.0 < sum(returns) < 200
    assert_close(Q[0, [0, 2, 3]], [0.9, 0.9, 0.9], what="Q[0, bumping actions] = 0.9 * max Q[0]")


@pytest.mark.contract
def test_training_errors():
    env = GridWorld()
    for kwargs in ({"alpha": 0.0}, {"gamma": 2.0}, {"epsilon": -1.0}, {"max_steps": 0}):
        with pytest.raises(ValueError):
            ql.q_learning(env, 5, **kwargs)
    with pytest.raises(ValueError):
        ql.q_learning(env, 0)
    with pytest.raises(ValueError):
        ql.greedy_policy(np.zeros(4))
