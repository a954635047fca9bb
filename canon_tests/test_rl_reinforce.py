"""Reference tests for #50, REINFORCE with a baseline (docs/contract.md #50; numbers from seed 003).

Training checks, verified before freezing: ``Bandit([0.2, 0.5, 0.8])``, 500 steps, lr 0.1, final P(C)
averaged over seeds 0-4 is 0.964 (threshold 0.8; the other 5-seed blocks of seeds 5-19 give 0.967,
0.956, 0.944). With offset 5 and the baseline, 20 of 20 seeds end with P(C) > 0.5 after 400 steps in
each of five 20-seed blocks (seeds 0-99; threshold 17); without the baseline 8-12 of 20 do.
"""

from __future__ import annotations

import numpy as np
import pytest

from canon_refs.rl import reinforce
from canon_refs.rl.envs import Bandit
from pytest_mlcanon.testing import (
    assert_close,
    assert_grad_matches,
    call_leaves_inputs_unchanged,
    rng,
    rounded_close,
    strict_numpy,
)

pytestmark = pytest.mark.canon("rl/reinforce")

WIN_CHANCES = (0.2, 0.5, 0.8)


def _log_softmax(z: np.ndarray) -> np.ndarray:
    shifted = z - z.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _softmax(z: np.ndarray) -> np.ndarray:
    """A trusted softmax for the expectations (never the learner's)."""
    return np.exp(_log_softmax(np.asarray(z, dtype=np.float64)))


# --- the worked step ---------------------------------------------------------------------------------------


def test_worked_reinforce_step():
    z0 = np.zeros(3)
    z = call_leaves_inputs_unchanged(reinforce.reinforce_step, z0, 2, 1.0, 0.5)  # a new array
    assert z.shape == (3,) and z.dtype == np.float64
    assert_close(z, [-1 / 6, -1 / 6, 1 / 3], what="reinforce_step(zeros(3), 2, 1.0, 0.5)")
    assert all(rounded_close(v, q, 3) for v, q in zip(z, (-0.167, -0.167, 0.333)))
    probs = reinforce.softmax([-1 / 6, -1 / 6, 1 / 3])
    assert_close(probs, [0.274068619061197, 0.274068619061197, 0.45186276187760605], what="softmax(worked logits)")
    assert all(rounded_close(p, q, 3) for p, q in zip(probs, (0.274, 0.274, 0.452)))


def test_zero_reward_leaves_logits_unchanged():
    z = np.array([0.3, -1.2, 2.0])
    np.testing.assert_array_equal(reinforce.reinforce_step(z, 1, 0.0, 0.7), z)
    # and a reward equal to the baseline as well
    np.testing.assert_array_equal(reinforce.reinforce_step(z, 1, 5.0, 0.7, baseline=5.0), z)


def test_baseline_subtracts_from_the_reward():
    z = np.array([0.3, -1.2, 2.0])
    step = reinforce.reinforce_step(z, 0, 3.0, 0.1, baseline=4.0) - z
    want = 0.1 * (3.0 - 4.0) * (np.eye(3)[0] - _softmax(z))
    assert_close(step, want, magnitude=2.0, what="reinforce_step(..., baseline=4.0) - logits")
    assert step[0] < 0  # below-baseline reward pushes the chosen action down


# --- the score ------------------------------------------------------------------------------------------------


def test_grad_log_prob_at_uniform_logits():
    g = call_leaves_inputs_unchanged(reinforce.grad_log_prob, np.zeros(3), 2)
    assert g.shape == (3,) and g.dtype == np.float64
    assert_close(g, [-1 / 3, -1 / 3, 2 / 3], what="grad_log_prob(zeros(3), 2)")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grad_log_prob_matches_finite_differences(seed):
    z = rng(seed).normal(size=5) * 2.0
    for action in range(5):
        g = reinforce.grad_log_prob(z, action)
        assert_close(g.sum(), 0.0, magnitude=1.0, what="sum of grad_log_prob")
        assert_grad_matches(lambda action=action: _log_softmax(z)[action], z, g)


def test_softmax_rows_and_shift_invariance():
    z = rng(3).normal(size=(4, 6))
    p = call_leaves_inputs_unchanged(reinforce.softmax, z)
    assert p.shape == (4, 6)
    want = _softmax(z)
    # softmax rounds at the size of its logits (|z| <= 4 here, 104 after the shift)
    assert_close(p, want, magnitude=4.0, what="softmax((4, 6) logits)")
    assert_close(reinforce.softmax(z + 100.0), want, magnitude=104.0, what="softmax(logits + 100)")
    assert_close(reinforce.softmax(z[1]), want[1], magnitude=4.0, what="softmax(one row)")


# --- the estimator's mean and variance ----------------------------------------------------------------------


def test_exact_mean_is_the_true_gradient():
    stats = reinforce.gradient_estimate_stats(np.zeros(3), np.array([0.2, 0.5, 0.8]))
    assert stats["mean"].shape == (3,) and stats["variance"].shape == (3,)
    assert_close(stats["mean"], [-0.1, 0.0, 0.1], magnitude=1.0, what="gradient_estimate_stats(...)['mean']")
    # the mean is the gradient of J(z) = softmax(z) . R, checked by finite differences
    z = rng(4).normal(size=3)
    R = np.array([0.2, 0.5, 0.8])
    mean = call_leaves_inputs_unchanged(reinforce.gradient_estimate_stats, z, R)["mean"]
    assert_grad_matches(lambda: float(_softmax(z) @ R), z, mean)


def test_baseline_removes_the_variance_of_the_two_arm_example():
    plain = reinforce.gradient_estimate_stats(np.zeros(2), np.array([10.0, 12.0]))
    # estimates of size 6 whose squares (36) average to 30.25
    assert_close(plain["mean"][1], 0.5, magnitude=6.0, what="two-arm mean")
    assert_close(plain["variance"][1], 30.25, magnitude=36.0, what="two-arm variance without a baseline")
    centred = reinforce.gradient_estimate_stats(np.zeros(2), np.array([10.0, 12.0]), baseline=11.0)
    assert_close(centred["mean"][1], 0.5, magnitude=6.0, what="two-arm mean with baseline 11")
    assert_close(centred["variance"], [0.0, 0.0], magnitude=36.0, what="two-arm variance with baseline 11")


def test_baseline_never_moves_the_mean():
    z = rng(5).normal(size=4)
    R = rng(6).normal(size=4) + 5.0
    ref = reinforce.gradient_estimate_stats(z, R)
    probs = _softmax(z)
    true_gradient = probs * (R - probs @ R)  # d (softmax(z) . R) / dz
    for b in (-3.0, 1.0, 5.0, 40.0):
        stats = reinforce.gradient_estimate_stats(z, R, baseline=b)
        # terms of size |R - b| <= 47 cancel to the gradient
        assert_close(stats["mean"], true_gradient, magnitude=47.0, what=f"gradient_estimate_stats(baseline={b}) mean")
    # the variance is smallest near the average reward, far below the unbaselined one
    expected_reward = probs @ R
    assert (reinforce.gradient_estimate_stats(z, R, baseline=expected_reward)["variance"].sum()
            < 0.1 * ref["variance"].sum())


def test_sampled_estimate_agrees_with_enumeration():
    z, R = np.array([0.5, -0.5, 0.0]), np.array([1.0, 3.0, -2.0])
    stats = reinforce.gradient_estimate_stats(z, R, baseline=0.5)
    g = rng(7)
    probs = _softmax(z)
    actions = g.choice(3, size=20_000, p=probs)
    per_action = np.stack([(R[a] - 0.5) * (np.eye(3)[a] - probs) for a in range(3)])
    samples = per_action[actions]
    se = np.sqrt(stats["variance"] / len(samples))
    assert np.all(np.abs(samples.mean(axis=0) - stats["mean"]) <= 4 * se)


# --- returns ---------------------------------------------------------------------------------------------------


def test_discounted_returns():
    out = call_leaves_inputs_unchanged(reinforce.discounted_returns, np.array([1.0, 1.0, 1.0]), 0.5)
    assert out.shape == (3,) and out.dtype == np.float64
    assert_close(out, [1.75, 1.5, 1.0], what="discounted_returns([1, 1, 1], 0.5)")
    assert_close(reinforce.discounted_returns([0.0, 0.0, 2.0, -1.0], 1.0), [1.0, 1.0, 1.0, -1.0], magnitude=3.0,
                 what="discounted_returns([0, 0, 2, -1], 1.0)")
    assert_close(reinforce.discounted_returns([3.0, 4.0], 0.0), [3.0, 4.0], what="discounted_returns(gamma=0)")


@pytest.mark.edge_case
def test_discounted_returns_of_empty_and_single_episodes():
    assert reinforce.discounted_returns(np.array([]), 0.9).shape == (0,)
    assert_close(reinforce.discounted_returns([2.5], 0.9), [2.5], what="discounted_returns([2.5], 0.9)")


# --- numerics -------------------------------------------------------------------------------------------------


@pytest.mark.numerics_probe
def test_extreme_logits():
    z = np.array([1e4, -1e4, 0.0, 1e4 - 1.0])
    with strict_numpy():
        p = reinforce.softmax(z)
        g = reinforce.grad_log_prob(z, 1)
        step = reinforce.reinforce_step(z, 3, 1.0, 0.5)
        stats = reinforce.gradient_estimate_stats(z, np.array([1.0, 2.0, 3.0, 4.0]))
    assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))
    assert abs(p.sum() - 1.0) <= 1e-6
    top = [1 / (1 + np.exp(-1.0)), np.exp(-1.0) / (1 + np.exp(-1.0))]
    # a softmax of logits of size 1e4 is exact to a few ulps of 1e4
    assert_close(p[[0, 3]], top, magnitude=1e4, what="softmax([1e4, -1e4, 0, 1e4 - 1])[[0, 3]]")
    assert np.all(np.isfinite(g)) and np.all(np.isfinite(step))
    assert all(np.all(np.isfinite(stats[key])) for key in ("mean", "variance"))
    assert_close(g, [-top[0], 1.0, 0.0, -top[1]], magnitude=1e4, what="grad_log_prob(extreme logits, 1)")


@pytest.mark.numerics_probe
def test_extreme_negative_logits_and_rows():
    with strict_numpy():
        p = reinforce.softmax(np.array([[-1e4, -1e4], [-1e4, 1e4]]))
    assert_close(p, [[0.5, 0.5], [0.0, 1.0]], magnitude=1e4, what="softmax(rows of +-1e4)")


# --- training ---------------------------------------------------------------------------------------------------


def test_first_step_with_baseline_is_zero_and_history_shapes():
    out = reinforce.train_reinforce(Bandit(WIN_CHANCES, seed=0), steps=30, lr=0.5, baseline=True, seed=0)
    assert out["probs"].shape == (31, 3) and out["rewards"].shape == (30,)
    assert_close(out["probs"][0], [1 / 3] * 3, what="train_reinforce probs before the first step")
    np.testing.assert_array_equal(out["probs"][1], out["probs"][0])
    assert_close(out["probs"].sum(axis=1), np.ones(31), what="train_reinforce probs row sums")
    assert set(np.unique(out["rewards"])) <= {0.0, 1.0}
    assert not np.allclose(out["probs"][-1], out["probs"][0])


def test_baseline_uses_only_past_rewards():
    # Replay the run without knowing how the arms were drawn: step t must be the REINFORCE step of SOME arm
    # with the baseline b_t = mean of the earlier rewards (the reward itself at t = 0).
    out = reinforce.train_reinforce(Bandit(WIN_CHANCES, offset=5.0, seed=3), steps=25, lr=0.3, baseline=True, seed=3)
    probs, rewards = out["probs"], out["rewards"]
    for t, r in enumerate(rewards):
        b = rewards[:t].mean() if t else r
        z = np.log(probs[t])
        candidates = [_softmax(z + 0.3 * (r - b) * (np.eye(3)[a] - probs[t])) for a in range(3)]
        # logits of size <= 10 after 25 steps of size <= 2: a few ulps of that
        tol = 16 * np.finfo(np.float64).eps * 10.0
        assert any(np.all(np.abs(c - probs[t + 1]) <= tol) for c in candidates), (
            f"step {t}: probs {probs[t + 1]} is not a REINFORCE step of any arm with baseline {b} "
            "(the mean of the earlier rewards)")


def test_same_seed_same_history():
    a = reinforce.train_reinforce(Bandit(WIN_CHANCES, seed=2), 50, 0.1, seed=2)
    b = reinforce.train_reinforce(Bandit(WIN_CHANCES, seed=2), 50, 0.1, seed=2)
    np.testing.assert_array_equal(a["probs"], b["probs"])
    np.testing.assert_array_equal(a["rewards"], b["rewards"])


def test_finds_the_best_arm():
    finals = [reinforce.train_reinforce(Bandit(WIN_CHANCES, seed=s), 500, 0.1, seed=s)["probs"][-1, 2] for s in range(5)]
    assert np.mean(finals) > 0.8
    runs = [reinforce.train_reinforce(Bandit(WIN_CHANCES, seed=0), 500, 0.1, seed=0)]
    assert runs[0]["rewards"][-100:].mean() > runs[0]["rewards"][:100].mean()


def test_baseline_rescues_offset_rewards():
    def successes(baseline: bool) -> int:
        finals = [reinforce.train_reinforce(Bandit(WIN_CHANCES, offset=5.0, seed=s), 400, 0.1, baseline=baseline,
                                            seed=s)["probs"][-1, 2] for s in range(20)]
        return sum(p > 0.5 for p in finals)

    with_baseline = successes(True)
    assert with_baseline >= 17
    assert successes(False) <= 16 < with_baseline


@pytest.mark.contract
def test_errors():
    with pytest.raises(ValueError):
        reinforce.grad_log_prob(np.zeros(3), 3)
    with pytest.raises(ValueError):
        reinforce.reinforce_step(np.zeros(3), -1, 1.0, 0.1)
    for lr in (0.0, -0.1):  # the stub asks for lr > 0 (it says nothing of inf)
        with pytest.raises(ValueError):
            reinforce.reinforce_step(np.zeros(3), 0, 1.0, lr)
        with pytest.raises(ValueError):
            reinforce.train_reinforce(Bandit(WIN_CHANCES), 10, lr)
    for gamma in (-0.1, 1.5):
        with pytest.raises(ValueError):
            reinforce.discounted_returns(np.ones(3), gamma)
    with pytest.raises(ValueError):
        reinforce.gradient_estimate_stats(np.zeros(3), np.array([1.0, 2.0]))
    with pytest.raises(ValueError):
        reinforce.grad_log_prob(np.zeros((2, 3)), 0)
    with pytest.raises(ValueError):
        reinforce.train_reinforce(Bandit(WIN_CHANCES), 0)
