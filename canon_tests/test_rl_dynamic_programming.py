"""Reference tests for #47, value iteration and policy iteration (docs/contract.md #47), and for the support
module ``canon_refs/rl/envs.py`` (S1) that every RL item trains on (``TestEnvs``; envs is never
redirected, so these tests always exercise the reference environments)."""

from __future__ import annotations

import numpy as np
import pytest

from canon_refs.rl import dynamic_programming as dp
from canon_refs.rl import envs
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged, rng, strict_numpy

pytestmark = pytest.mark.canon("rl/dynamic_programming")

GAMMA = 0.9
V_START = 0.9**5  # 0.59049: six moves to the goal, the reward arrives on the sixth
# Values from value iteration or iterative evaluation are compared at CONVERGED: both stop once a sweep
# changes no value by more than tol = 1e-10, which leaves V within tol * gamma / (1 - gamma) (<= 2e-9 for
# gamma <= 0.95) of the fixed point. Exact solves compare at 16 ulps times the condition 1 / (1 - gamma).
CONVERGED = 1e-8


def _grid_model(**kwargs):
    return envs.GridWorld(**kwargs).transition_model()


def _random_mdp(seed: int, S: int = 6, A: int = 3):
    g = rng(seed)
    P = g.dirichlet(np.ones(S), size=(S, A))
    R = g.normal(size=(S, A))
    return P, R


def _assert_greedy(P, R, V, policy, gamma):
    Q = dp.q_from_v(P, R, V, gamma)
    chosen = Q[np.arange(Q.shape[0]), policy]
    np.testing.assert_allclose(chosen, Q.max(axis=1), atol=CONVERGED, rtol=0)


class TestEnvs:
    """The support environments of S1 (not an item: tied to #47, whose DP reads their model)."""

    pytestmark = pytest.mark.canon("rl/dynamic_programming")

    def test_grid_defaults_and_indexing(self):
        g = envs.GridWorld()
        assert (g.n_states, g.n_actions, g.obs_dim) == (16, 4, 16)
        assert g.state_index((0, 0)) == 0 and g.state_index((1, 2)) == 6 and g.state_index((3, 3)) == 15
        assert g.reset() == 0
        obs = g.one_hot(6)
        assert obs.shape == (16,) and obs.dtype == np.float32
        assert obs[6] == 1.0 and obs.sum() == 1.0

    def test_transition_model_of_the_4x4_grid(self):
        P, R = _grid_model()
        assert P.shape == (16, 4, 16) and R.shape == (16, 4)
        np.testing.assert_allclose(P.sum(axis=2), 1.0, atol=1e-12, rtol=0)
        assert set(np.unique(P)) == {0.0, 1.0}
        # off-grid moves stay put: up and left from the start
        assert P[0, 0, 0] == 1.0 and P[0, 3, 0] == 1.0
        assert P[0, 1, 1] == 1.0 and P[0, 2, 4] == 1.0
        # entering the goal pays 1, from (2, 3) going down and from (3, 2) going right
        assert R[11, 2] == 1.0 and R[14, 1] == 1.0
        assert R.sum() == 2.0
        # the goal is absorbing with reward 0
        assert np.all(P[15, :, 15] == 1.0) and np.all(R[15] == 0.0)

    def test_walls_slip_and_expected_reward(self):
        g = envs.GridWorld(3, 3, walls=[(1, 1)], slip=0.2, step_reward=-0.1)
        P, R = g.transition_model()
        np.testing.assert_allclose(P.sum(axis=2), 1.0, atol=1e-12, rtol=0)
        assert np.all(P[:, :, 4][np.arange(9) != 4] == 0.0), "nothing enters the wall"
        # from (0, 1) down is blocked: intended stay 0.8 + slip to stay via up/down 2 * 0.05
        np.testing.assert_allclose(P[1, 2, 1], 0.8 + 0.1, atol=1e-15, rtol=0)
        # from (1, 2) going down enters the goal with 0.85; R is the expectation over landing cells
        np.testing.assert_allclose(P[5, 2, 8], 0.85, atol=1e-15, rtol=0)
        np.testing.assert_allclose(R[5, 2], 0.85 * 1.0 + 0.15 * -0.1, atol=1e-15, rtol=0)
        np.testing.assert_allclose(R, np.einsum("sat,t->sa", P, np.where(np.arange(9) == 8, 1.0, -0.1))
                                   * (np.arange(9) != 8)[:, None] * (np.arange(9) != 4)[:, None], atol=1e-15)

    def test_step_walks_to_the_goal(self):
        g = envs.GridWorld()
        s = g.reset()
        rewards = []
        for action in (1, 1, 1, 2, 2):
            s, r, done = g.step(action)
            rewards.append(r)
            assert not done
        assert s == 11
        s, r, done = g.step(2)
        assert (s, r, done) == (15, 1.0, True)
        assert rewards == [0.0] * 5
        with pytest.raises(RuntimeError):
            g.step(0)
        assert g.reset() == 0
        assert g.step(0) == (0, 0.0, False)  # bumping into the border stays put

    def test_step_matches_the_model_with_slip(self):
        g = envs.GridWorld(slip=0.4, seed=3)
        P, _ = g.transition_model()
        n = 4000
        landed = np.zeros(16)
        for _ in range(n):
            g.reset()
            landed[g.step(1)[0]] += 1
        expected = P[0, 1]
        se = np.sqrt(expected * (1 - expected) / n)
        assert np.all(np.abs(landed / n - expected) <= 4 * se + 1e-12)
        np.testing.assert_allclose(expected[[0, 1, 4]], [0.2, 0.7, 0.1], atol=1e-15)

    def test_corridor(self):
        g = envs.GridWorld(1, 6)
        assert (g.n_states, g.start_state, g.goal_state) == (6, 0, 5)
        P, R = g.transition_model()
        assert all(P[s, 0, s] == 1.0 and P[s, 2, s] == 1.0 for s in range(5))
        assert R[4, 1] == 1.0 and R.sum() == 1.0

    def test_bandit(self):
        b = envs.Bandit([0.2, 0.5, 0.8], offset=5.0, seed=4)
        assert b.n_arms == 3
        np.testing.assert_allclose(b.arm_rewards(), [5.2, 5.5, 5.8], atol=1e-15)
        pulls = np.array([b.pull(2) for _ in range(2000)])
        assert set(np.unique(pulls)) <= {5.0, 6.0}
        se = np.sqrt(0.8 * 0.2 / 2000)
        assert abs((pulls - 5.0).mean() - 0.8) <= 4 * se

    def test_bandit_stream_is_not_the_policy_stream(self):
        b = envs.Bandit([0.5], seed=7)
        pulls = np.array([b.pull(0) for _ in range(64)])
        stream = np.random.default_rng(7 + 1_000_003).random(64) < 0.5
        np.testing.assert_array_equal(pulls, stream.astype(np.float64))
        same_seed = np.random.default_rng(7).random(64) < 0.5
        assert not np.array_equal(pulls, same_seed.astype(np.float64))

    @pytest.mark.edge_case
    def test_environment_errors(self):
        with pytest.raises(ValueError):
            envs.GridWorld(start=(4, 0))
        with pytest.raises(ValueError):
            envs.GridWorld(start=(3, 3))
        with pytest.raises(ValueError):
            envs.GridWorld(walls=[(3, 3)])
        with pytest.raises(ValueError):
            envs.GridWorld(slip=1.5)
        with pytest.raises(ValueError):
            envs.GridWorld(0, 4)
        g = envs.GridWorld()
        with pytest.raises(ValueError):
            g.step(4)
        with pytest.raises(ValueError):
            g.one_hot(16)
        with pytest.raises(ValueError):
            envs.Bandit([0.5, 1.5])
        with pytest.raises(ValueError):
            envs.Bandit([0.5]).pull(1)


# --- the 4x4 grid ---------------------------------------------------------------------------------------


def test_value_iteration_on_the_grid():
    P, R = _grid_model()
    V, policy = dp.value_iteration(P, R, GAMMA)
    assert V.shape == (16,) and V.dtype == np.float64
    assert policy.shape == (16,) and policy.dtype == np.int64
    np.testing.assert_allclose(V[0], V_START, atol=CONVERGED, rtol=0)
    np.testing.assert_allclose(V[[11, 14]], [1.0, 1.0], atol=CONVERGED, rtol=0)
    assert V[15] == 0.0
    # every value is 0.9 ** (distance - 1)
    rows, cols = np.divmod(np.arange(15), 4)
    np.testing.assert_allclose(V[:15], GAMMA ** (6 - rows - cols - 1), atol=CONVERGED, rtol=0)
    _assert_greedy(P, R, V, policy, GAMMA)


def test_greedy_ties_go_to_the_lowest_action():
    P, R = _grid_model()
    _, policy = dp.value_iteration(P, R, GAMMA)
    # from the start, right (1) and down (2) are equally good; the goal's four actions all tie
    assert policy[0] == 1
    assert policy[15] == 0
    assert policy[3] == 2 and policy[12] == 1  # on the border only one action is optimal


def test_policy_iteration_agrees_with_value_iteration():
    P, R = _grid_model()
    V_vi, pi_vi = dp.value_iteration(P, R, GAMMA)
    V_pi, pi_pi = dp.policy_iteration(P, R, GAMMA)
    np.testing.assert_allclose(V_pi, V_vi, atol=CONVERGED, rtol=0)
    assert pi_pi.dtype == np.int64 and pi_pi.shape == (16,)
    _assert_greedy(P, R, V_pi, pi_pi, GAMMA)
    _assert_greedy(P, R, V_vi, pi_vi, GAMMA)
    # the returned V is the value of the returned policy
    assert_close(V_pi, _exact_values(P, R, pi_pi, GAMMA), cond=1 / (1 - GAMMA),
                 what="policy_iteration's V vs the value of its policy")


def _exact_values(P, R, policy, gamma):
    """V of a deterministic policy by a trusted linear solve."""
    states = np.arange(R.shape[0])
    return np.linalg.solve(np.eye(R.shape[0]) - gamma * P[states, policy], R[states, policy])


def test_policy_iteration_converges_within_ten_steps():
    # any starting policy is accepted (action 0 everywhere needs 6 improvements here; Sutton & Barto's
    # uniform policy needs 1), so the check is only that 10 improvement steps reach the optimum
    P, R = _grid_model()
    V_opt, _ = dp.value_iteration(P, R, GAMMA)
    V, policy = dp.policy_iteration(P, R, GAMMA, max_iter=10)
    np.testing.assert_allclose(V, V_opt, atol=CONVERGED, rtol=0)
    _assert_greedy(P, R, V, policy, GAMMA)


@pytest.mark.parametrize("walls", [(), [(1, 1), (2, 1), (1, 2)]])
def test_slippery_grid_vi_and_pi_agree(walls):
    P, R = _grid_model(slip=0.2, walls=walls, step_reward=-0.04)
    V_vi, pi_vi = dp.value_iteration(P, R, GAMMA)
    V_pi, pi_pi = dp.policy_iteration(P, R, GAMMA)
    np.testing.assert_allclose(V_pi, V_vi, atol=CONVERGED, rtol=0)
    _assert_greedy(P, R, V_vi, pi_vi, GAMMA)
    _assert_greedy(P, R, V_pi, pi_pi, GAMMA)
    assert V_vi[0] < V_START  # slipping only costs


def test_walls_force_a_detour():
    # a wall column with one gap at the bottom: the shortest path from (0, 0) is 0-1 .. down .. right
    P, R = _grid_model(walls=[(0, 1), (1, 1), (2, 1)])
    V, policy = dp.value_iteration(P, R, GAMMA)
    np.testing.assert_allclose(V[0], GAMMA**5, atol=CONVERGED, rtol=0)
    assert policy[0] == 2
    P, R = _grid_model(walls=[(0, 1), (1, 1), (2, 1), (3, 1)])
    V, _ = dp.value_iteration(P, R, GAMMA)
    assert V[0] == 0.0  # the goal is unreachable


# --- evaluation ------------------------------------------------------------------------------------------


def test_iterative_evaluation_equals_linear_solve():
    P, R = _grid_model(slip=0.2)
    g = rng(1)
    stochastic = g.dirichlet(np.ones(4), size=16)
    deterministic = g.integers(0, 4, size=16)
    for policy in (stochastic, deterministic):
        P_pi = np.einsum("sa,sat->st", stochastic, P) if policy is stochastic else P[np.arange(16), policy]
        R_pi = (stochastic * R).sum(1) if policy is stochastic else R[np.arange(16), policy]
        want = np.linalg.solve(np.eye(16) - GAMMA * P_pi, R_pi)
        iterative = call_leaves_inputs_unchanged(dp.policy_evaluation, P, R, policy, GAMMA)
        exact = call_leaves_inputs_unchanged(dp.policy_evaluation, P, R, policy, GAMMA, exact=True)
        np.testing.assert_allclose(iterative, want, atol=CONVERGED, rtol=0)
        assert_close(exact, want, cond=1 / (1 - GAMMA), what="policy_evaluation(exact=True)")


def test_one_hot_stochastic_policy_equals_deterministic():
    P, R = _random_mdp(2)
    actions = np.array([0, 2, 1, 1, 0, 2])
    V_det = dp.policy_evaluation(P, R, actions, 0.8, exact=True)
    V_sto = dp.policy_evaluation(P, R, np.eye(3)[actions], 0.8, exact=True)
    want = _exact_values(P, R, actions, 0.8)
    assert_close(V_det, want, cond=1 / (1 - 0.8), what="policy_evaluation(deterministic, exact=True)")
    assert_close(V_sto, want, cond=1 / (1 - 0.8), what="policy_evaluation(one-hot stochastic, exact=True)")


def test_q_from_v_closed_form():
    P = np.array([[[0.5, 0.5], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]])
    R = np.array([[1.0, 0.0], [2.0, -1.0]])
    V = np.array([10.0, 20.0])
    Q = dp.q_from_v(P, R, V, 0.5)
    assert Q.shape == (2, 2)
    assert_close(Q, [[1.0 + 0.5 * 15.0, 0.5 * 20.0], [2.0 + 0.5 * 10.0, -1.0 + 0.5 * 20.0]], what="q_from_v")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_mdp_bellman_optimality(seed):
    P, R = _random_mdp(seed)
    V, policy = dp.value_iteration(P, R, 0.95)
    np.testing.assert_allclose(V, (R + 0.95 * P @ V).max(axis=1), atol=CONVERGED, rtol=0)
    V_pi, _ = dp.policy_iteration(P, R, 0.95)
    np.testing.assert_allclose(V_pi, V, atol=CONVERGED, rtol=0)
    # no deterministic policy does better than the optimum anywhere
    for trial in range(20):
        other = rng(100 + trial).integers(0, 3, size=6)
        assert np.all(_exact_values(P, R, other, 0.95) <= V + CONVERGED)


@pytest.mark.edge_case
def test_single_self_looping_state():
    P, R = np.ones((1, 1, 1)), np.ones((1, 1))
    for V in (dp.value_iteration(P, R, 0.9)[0], dp.policy_iteration(P, R, 0.9)[0],
              dp.policy_evaluation(P, R, np.array([0]), 0.9),
              dp.policy_evaluation(P, R, np.array([0]), 0.9, exact=True)):
        np.testing.assert_allclose(V, [10.0], atol=CONVERGED, rtol=0)


@pytest.mark.edge_case
def test_gamma_zero_is_the_best_immediate_reward():
    P, R = _random_mdp(3)
    V, policy = dp.value_iteration(P, R, 0.0)
    assert_close(V, R.max(axis=1), what="value_iteration(gamma=0) values")
    np.testing.assert_array_equal(policy, R.argmax(axis=1))
    V_pi, _ = dp.policy_iteration(P, R, 0.0)
    assert_close(V_pi, R.max(axis=1), what="policy_iteration(gamma=0) values")


def test_inputs_are_not_mutated():
    P, R = _random_mdp(4)
    call_leaves_inputs_unchanged(dp.value_iteration, P, R, 0.9)
    call_leaves_inputs_unchanged(dp.policy_iteration, P, R, 0.9)
    call_leaves_inputs_unchanged(dp.q_from_v, P, R, np.linspace(0.0, 1.0, 6), 0.9)


@pytest.mark.numerics_probe
def test_gamma_near_one_with_step_costs():
    # gamma = 0.999: (I - gamma P_pi) is nearly singular for wandering policies; values stay finite
    P, R = _grid_model(slip=0.3, step_reward=-1.0, goal_reward=0.0)
    with strict_numpy():
        V_vi, _ = dp.value_iteration(P, R, 0.999, max_iter=100_000)
        V_pi, _ = dp.policy_iteration(P, R, 0.999)
    assert np.all(np.isfinite(V_vi)) and np.all(V_vi <= 0.0)
    # at gamma = 0.999 value iteration stops within tol * gamma / (1 - gamma) = 1e-7 of the fixed point
    np.testing.assert_allclose(V_pi, V_vi, atol=1e-6, rtol=0)


@pytest.mark.numerics_probe
def test_huge_rewards_stay_finite():
    P, R = _random_mdp(5)
    with strict_numpy():
        V, _ = dp.value_iteration(P, R * 1e300, 0.5)
    assert np.all(np.isfinite(V))
    V_small, _ = dp.value_iteration(P, R, 0.5)
    # both runs stop at tol = 1e-10 in their own units: 1e-8 leaves room for the two stopping points
    np.testing.assert_allclose(V / 1e300, V_small, rtol=1e-8, atol=1e-8)


@pytest.mark.contract
def test_model_errors():
    P, R = _random_mdp(6)
    with pytest.raises(ValueError):
        dp.value_iteration(P[:, :, :-1], R, 0.9)
    with pytest.raises(ValueError):
        dp.value_iteration(P, R[:, :2], 0.9)
    negative = P.copy()
    negative[0, 0, 0] = -0.1
    negative[0, 0, 1] += 0.1
    with pytest.raises(ValueError):
        dp.policy_iteration(negative, R, 0.9)
    unnormalised = P.copy()
    unnormalised[2, 1] *= 1.001
    with pytest.raises(ValueError):
        dp.q_from_v(unnormalised, R, np.zeros(6), 0.9)
    with pytest.raises(ValueError):
        dp.q_from_v(P, R, np.zeros(5), 0.9)


@pytest.mark.contract
@pytest.mark.parametrize("gamma", [1.0, -0.1, 1.5, float("nan")])
def test_gamma_errors(gamma):
    P, R = _random_mdp(7)
    with pytest.raises(ValueError):
        dp.value_iteration(P, R, gamma)
    with pytest.raises(ValueError):
        dp.policy_iteration(P, R, gamma)
    with pytest.raises(ValueError):
        dp.policy_evaluation(P, R, np.zeros(6, dtype=np.int64), gamma)


@pytest.mark.contract
def test_policy_errors():
    P, R = _random_mdp(8)
    for bad in (np.zeros(5, dtype=np.int64), np.array([0, 1, 2, 3, 0, 1]), np.full((6, 3), 0.5),
                -np.eye(3)[[0, 1, 2, 0, 1, 2]], np.zeros((6, 2))):
        with pytest.raises(ValueError):
            dp.policy_evaluation(P, R, bad, 0.9)
