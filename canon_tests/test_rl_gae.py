"""Reference tests for #52, generalized advantage estimation (docs/contract.md #52)."""

from __future__ import annotations

import numpy as np
import pytest

from canon_refs.rl import gae
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged, rng, strict_numpy

pytestmark = pytest.mark.canon("rl/gae")


def _close(got, want, what, rewards, values, last_value=0.0):
    """Advantages are weighted sums (weights <= 1) of rewards and values, built by up to T multiply-adds:
    each partial sum is at most M = sum |r| + sum |v| + |last_value| in size, and an evaluation order costs
    up to T roundings of that size, so compare at magnitude M with condition T."""
    magnitude = float(np.abs(rewards).sum() + np.abs(values).sum() + np.abs(last_value).sum())
    assert_close(got, want, magnitude=magnitude, cond=np.shape(rewards)[-1], what=what)


def _direct_sum(rewards, values, dones, last_value, gamma, lam):
    """O(T^2) definition: A_t = sum_l (gamma lam)^l delta_{t+l}, stopping after the first done."""
    T = len(rewards)
    next_values = np.append(values[1:], last_value)
    deltas = rewards + gamma * (1.0 - dones) * next_values - values
    adv = np.zeros(T)
    for t in range(T):
        total, weight = 0.0, 1.0
        for k in range(t, T):
            total += weight * deltas[k]
            if dones[k]:
                break
            weight *= gamma * lam
        adv[t] = total
    return adv


def _random_rollout(seed: int, T: int = 40):
    g = rng(seed)
    rewards = g.normal(size=T)
    values = g.normal(size=T)
    dones = (g.random(T) < 0.15).astype(np.float64)
    return rewards, values, dones, float(g.normal())


def test_worked_rollout():
    rewards, values = np.ones(3), np.full(3, 0.5)
    adv, ret = call_leaves_inputs_unchanged(gae.compute_gae, rewards, values, np.array([0, 0, 1]), 7.0, gamma=0.9,
                                            lam=0.8)
    assert adv.shape == (3,) and ret.shape == (3,)
    assert adv.dtype == np.float64 and ret.dtype == np.float64
    _close(adv, [1.8932, 1.31, 0.5], "compute_gae(worked rollout) advantages", rewards, values, 7.0)
    _close(ret, [2.3932, 1.81, 1.0], "compute_gae(worked rollout) returns", rewards, values, 7.0)


def test_worked_rollout_bootstraps_when_not_done():
    # the same rollout cut by the end of the buffer, not by termination: V_3 = last_value = 2
    adv, _ = gae.compute_gae([1.0, 1.0, 1.0], [0.5, 0.5, 0.5], [0, 0, 0], 2.0, gamma=0.9, lam=0.8)
    d2 = 1.0 + 0.9 * 2.0 - 0.5
    d1 = 1.0 + 0.9 * 0.5 - 0.5
    expected = [d1 + 0.72 * (d1 + 0.72 * d2), d1 + 0.72 * d2, d2]
    _close(adv, expected, "compute_gae(not done, last_value=2) advantages", np.ones(3), np.full(3, 0.5), 2.0)


def test_lambda_zero_is_one_step_td():
    rewards, values, dones, last = _random_rollout(1)
    adv, ret = gae.compute_gae(rewards, values, dones, last, gamma=0.97, lam=0.0)
    next_values = np.append(values[1:], last)
    _close(adv, rewards + 0.97 * (1 - dones) * next_values - values, "compute_gae(lam=0) advantages", rewards, values,
           last)
    _close(ret, rewards + 0.97 * (1 - dones) * next_values, "compute_gae(lam=0) returns", rewards, values, last)


def test_lambda_one_is_discounted_return_minus_values():
    rewards, values, dones, last = _random_rollout(2)
    gamma = 0.95
    adv, ret = gae.compute_gae(rewards, values, dones, last, gamma=gamma, lam=1.0)
    expected = np.zeros_like(rewards)
    running = last
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * (1.0 - dones[t]) * running
        expected[t] = running
    _close(ret, expected, "compute_gae(lam=1) returns", rewards, values, last)
    _close(adv, expected - values, "compute_gae(lam=1) advantages", rewards, values, last)


@pytest.mark.parametrize("seed", [0, 3, 4])
def test_matches_direct_sum(seed):
    rewards, values, dones, last = _random_rollout(seed)
    assert dones.sum() >= 2, "the rollout should cross episode ends"
    want = _direct_sum(rewards, values, dones, last, 0.99, 0.9)
    adv, ret = gae.compute_gae(rewards, values, dones, last, gamma=0.99, lam=0.9)
    _close(adv, want, "compute_gae vs the O(T^2) direct sum", rewards, values, last)
    _close(ret, want + values, "compute_gae returns = advantages + values", rewards, values, last)


def test_rewards_after_done_do_not_leak_backwards():
    rewards, values, _, last = _random_rollout(5, T=12)
    dones = np.zeros(12)
    dones[6] = 1.0
    base, _ = gae.compute_gae(rewards, values, dones, last, gamma=0.99, lam=0.95)
    changed = rewards.copy()
    changed[7:] += 100.0
    values_changed = values.copy()
    values_changed[7] -= 50.0  # V of the next episode's first state must not be bootstrapped either
    adv, _ = gae.compute_gae(changed, values_changed, dones, last + 9.0, gamma=0.99, lam=0.95)
    np.testing.assert_array_equal(adv[:7], base[:7])
    assert not np.allclose(adv[7:], base[7:])


def test_batched_equals_row_wise():
    rollouts = [_random_rollout(s, T=15) for s in range(4)]
    rewards, values, dones = (np.stack([r[i] for r in rollouts]) for i in range(3))
    last = np.array([r[3] for r in rollouts])
    adv, ret = gae.compute_gae(rewards, values, dones, last, gamma=0.9, lam=0.7)
    assert adv.shape == (4, 15) and ret.shape == (4, 15)
    for i, (r, v, d, lv) in enumerate(rollouts):
        want = _direct_sum(r, v, d, lv, 0.9, 0.7)
        _close(adv[i], want, f"compute_gae((4, 15) rollouts) row {i}", r, v, lv)
        _close(ret[i], want + v, f"compute_gae((4, 15) rollouts) returns row {i}", r, v, lv)


@pytest.mark.edge_case
def test_single_step():
    adv, ret = gae.compute_gae([2.0], [0.5], [0], 3.0, gamma=0.9, lam=0.5)
    _close(adv, [2.0 + 0.9 * 3.0 - 0.5], "compute_gae(T=1) advantages", [2.0], [0.5], 3.0)
    _close(ret, [2.0 + 0.9 * 3.0], "compute_gae(T=1) returns", [2.0], [0.5], 3.0)
    adv, _ = gae.compute_gae([2.0], [0.5], [True], 3.0, gamma=0.9, lam=0.5)
    _close(adv, [1.5], "compute_gae(T=1, done) advantages", [2.0], [0.5], 3.0)
    adv, _ = gae.compute_gae([[2.0], [1.0]], [[0.5], [0.0]], [[0], [1]], [3.0, 4.0], gamma=0.9, lam=0.5)
    _close(adv, [[2.0 + 2.7 - 0.5], [1.0]], "compute_gae((2, 1)) advantages", [3.0], [0.5], 7.0)


@pytest.mark.edge_case
def test_gamma_zero_gives_immediate_advantage():
    rewards, values, dones, last = _random_rollout(6)
    adv, _ = gae.compute_gae(rewards, values, dones, last, gamma=0.0, lam=0.95)
    _close(adv, rewards - values, "compute_gae(gamma=0) advantages", rewards, values)


def test_truncation_bootstraps_from_the_real_next_state():
    rewards = np.array([1.0, 0.0, 2.0, 1.0, 0.5])
    values = np.array([0.3, -0.2, 0.8, 0.1, 0.4])
    dones = np.zeros(5)
    truncated = np.array([0, 1, 0, 0, 0])
    cut_values = np.array([0.0, 5.0, 0.0, 0.0, 0.0])
    adv, ret = call_leaves_inputs_unchanged(gae.compute_gae, rewards, values, dones, 1.5, gamma=0.9, lam=0.8,
                                            truncated=truncated, truncated_values=cut_values)
    # the rollout is two independent segments: [0, 1] bootstrapping from V(s_2^real) = 5, then [2, 4]
    first = _direct_sum(rewards[:2], values[:2], np.zeros(2), 5.0, 0.9, 0.8)
    second = _direct_sum(rewards[2:], values[2:], np.zeros(3), 1.5, 0.9, 0.8)
    both = np.concatenate([first, second])
    _close(adv, both, "compute_gae(truncated at step 1) advantages", rewards, values, 6.5)
    _close(ret, both + values, "compute_gae(truncated at step 1) returns", rewards, values, 6.5)
    _close(adv[1], 0.0 + 0.9 * 5.0 - (-0.2), "compute_gae(truncated at step 1) advantage 1", rewards, values, 6.5)
    # termination at the same step would not bootstrap at all
    term, _ = gae.compute_gae(rewards, values, truncated, 1.5, gamma=0.9, lam=0.8)
    _close(term[1], 0.2, "compute_gae(terminated at step 1) advantage 1", rewards, values, 1.5)
    _close(term[2:], second, "compute_gae(terminated at step 1) advantages 2..4", rewards, values, 1.5)


@pytest.mark.edge_case
def test_truncation_at_the_last_step_ignores_last_value():
    rewards, values = np.array([1.0, 1.0]), np.array([0.0, 0.0])
    adv, _ = gae.compute_gae(rewards, values, [0, 0], 100.0, gamma=0.5, lam=1.0, truncated=[0, 1],
                             truncated_values=[0.0, 2.0])
    _close(adv, [1.0 + 0.5 * 2.0, 2.0], "compute_gae(truncated at the last step) advantages", rewards, values, 2.0)
    # all-zero truncation flags without values change nothing
    plain, _ = gae.compute_gae(rewards, values, [0, 0], 100.0, gamma=0.5, lam=1.0)
    same, _ = gae.compute_gae(rewards, values, [0, 0], 100.0, gamma=0.5, lam=1.0, truncated=[0, 0])
    np.testing.assert_array_equal(plain, same)


def test_inputs_are_not_mutated():
    rewards, values, dones, last = _random_rollout(7)
    call_leaves_inputs_unchanged(gae.compute_gae, rewards, values, dones, np.array(last))
    batched = [np.stack([x, x]) for x in (rewards, values, dones)]
    call_leaves_inputs_unchanged(gae.compute_gae, *batched, np.array([last, last]), truncated=np.zeros((2, 40)))


@pytest.mark.numerics_probe
def test_long_horizon_large_rewards_stay_exact():
    # 20 000 steps of reward 1e6 with gamma * lam = 0.999: a geometric series, no overflow, no warnings
    T, gamma, lam = 20_000, 0.999, 1.0
    rewards = np.full(T, 1e6)
    with strict_numpy():
        adv, ret = gae.compute_gae(rewards, np.zeros(T), np.zeros(T), 0.0, gamma=gamma, lam=lam)
    assert np.all(np.isfinite(adv))
    closed_form = 1e6 * (1 - gamma ** np.arange(T, 0, -1)) / (1 - gamma)
    # the recursion rounds once per step at the size of the return: T * 16 ulps relative, 7e-11
    np.testing.assert_allclose(ret, closed_form, rtol=1e-10, atol=0)


@pytest.mark.numerics_probe
def test_extreme_magnitudes_finite():
    g = rng(8)
    rewards = g.normal(size=50) * 1e150
    values = g.normal(size=50) * 1e150
    with strict_numpy():
        adv, ret = gae.compute_gae(rewards, values, np.zeros(50), 0.0, gamma=0.99, lam=0.95)
    assert np.all(np.isfinite(adv)) and np.all(np.isfinite(ret))


@pytest.mark.contract
@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"gamma": 1.5}, "gamma"),
        ({"gamma": -0.1}, "gamma"),
        ({"lam": 1.01}, "lam"),
        ({"lam": float("nan")}, "lam"),
    ],
)
def test_invalid_hyperparameters(kwargs, arg):
    with pytest.raises(ValueError):
        gae.compute_gae([1.0, 1.0], [0.0, 0.0], [0, 0], 0.0, **kwargs)


@pytest.mark.contract
def test_shape_errors():
    with pytest.raises(ValueError):
        gae.compute_gae([1.0, 1.0], [0.0, 0.0, 0.0], [0, 0], 0.0)
    with pytest.raises(ValueError):
        gae.compute_gae([1.0, 1.0], [0.0, 0.0], [0], 0.0)
    with pytest.raises(ValueError):
        gae.compute_gae([1.0, 1.0], [0.0, 0.0], [0, 2], 0.0)
    with pytest.raises(ValueError):
        gae.compute_gae(np.ones((2, 3)), np.zeros((2, 3)), np.zeros((2, 3)), 0.0)
    with pytest.raises(ValueError):
        gae.compute_gae(np.ones((2, 3)), np.zeros((2, 3)), np.zeros((2, 3)), np.zeros(3))
    with pytest.raises(ValueError):
        gae.compute_gae([1.0, 1.0], [0.0, 0.0], [0, 0], [0.0, 1.0])
    with pytest.raises(ValueError):
        gae.compute_gae(np.ones((2, 2, 2)), np.zeros((2, 2, 2)), np.zeros((2, 2, 2)), np.zeros(2))
    with pytest.raises(ValueError):
        gae.compute_gae([1.0, 1.0], [0.0, 0.0], [0, 0], 0.0, truncated=[1, 0])
    with pytest.raises(ValueError):
        gae.compute_gae([1.0, 1.0], [0.0, 0.0], [1, 0], 0.0, truncated=[1, 0], truncated_values=[1.0, 0.0])
    with pytest.raises(ValueError):
        gae.compute_gae([1.0, float("nan")], [0.0, 0.0], [0, 0], 0.0)
