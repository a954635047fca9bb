"""Reference tests for #56, simplified GRPO / RLVR (docs/contract.md #56; numbers from seed 001 and seed 003).

``grpo_step`` runs on the toy causal LM of ``canon_tests/_toy_lm.py`` with an "is a > b" verifier, so the
item does not depend on #31; a GPT variant of the training check belongs here once #31 lands.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from canon_refs.posttrain import dpo, grpo
from canon_tests._toy_lm import ToyCausalLM
from pytest_mlcanon.testing import (
    assert_close,
    assert_grad_matches,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    randn,
)

pytestmark = pytest.mark.canon("posttrain/grpo")

SEED_REWARDS = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
A_POS, A_NEG = 1.2909944487358056, -0.7745966692414834
SEED_RATIOS = [1.5, 1.1, 0.9, 1.0, 0.5, 1.0, 1.3, 0.7]
SEED_TOKEN_MASK = torch.tensor(
    [[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 0, 0]], dtype=torch.bool
)
SEED_SURROGATE_LOSS = -0.23237900077244492
N_ACTIVE = 18


def _close(value, expected, what: str, magnitude: float | None = None, dtype=None, cond: float = 1.0) -> None:
    """``value`` matches the trusted ``expected`` to a few ulps (of ``magnitude`` where a sum cancels)."""
    assert_close(torch.as_tensor(value).detach(), torch.as_tensor(expected, dtype=torch.float64), dtype=dtype,
                 magnitude=magnitude, cond=cond, what=what)


def _seed_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seed 001's 8x3 batch: logp_old = -2 everywhere, logp = logp_old + log(ratio) per row."""
    logp_old = torch.full((8, 3), -2.0, dtype=torch.float64)
    ratios = torch.tensor(SEED_RATIOS, dtype=torch.float64)[:, None].expand(8, 3)
    advantages = torch.tensor([A_POS if r else A_NEG for r in SEED_REWARDS], dtype=torch.float64)
    return logp_old + torch.log(ratios), logp_old, advantages


# --- advantages --------------------------------------------------------------------------------------


def test_seed_001_group_of_eight():
    rewards = torch.tensor(SEED_REWARDS, dtype=torch.float64)
    adv = call_leaves_inputs_unchanged(grpo.group_advantages, rewards)
    assert adv.shape == (8,) and adv.dtype == torch.float64
    _close(adv, [A_POS if r else A_NEG for r in SEED_REWARDS], "group_advantages(seed 001 rewards)")
    _close(adv.sum(), 0.0, "group_advantages(seed 001 rewards).sum()", magnitude=8 * A_POS)
    # the divisor is the population std 0.4841229182759271, not the sample std
    _close((rewards[0] - 0.375) / adv[0], 0.4841229182759271, "the divisor read back from group_advantages")


@pytest.mark.parametrize(
    ("rewards", "expected"),
    [
        ([1.0, 0.0, 0.0, 1.0], [1.0, -1.0, -1.0, 1.0]),
        ([1.0, 0.0, 0.0, 0.0], [1.7320508075688774, -0.5773502691896258, -0.5773502691896258, -0.5773502691896258]),
        ([1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]),
    ],
)
def test_seed_003_groups(rewards, expected):
    adv = grpo.group_advantages(torch.tensor(rewards, dtype=torch.float64))
    _close(adv, expected, f"group_advantages({rewards})")
    assert torch.isfinite(adv).all()


def test_rows_are_independent_groups():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    adv = grpo.group_advantages(rewards)
    assert adv.shape == (3, 4)
    for row in range(3):
        _close(adv[row], grpo.group_advantages(rewards[row].clone()), f"group_advantages row {row} vs the row alone")
    assert torch.equal(adv[2], torch.zeros(4, dtype=torch.float64))


@pytest.mark.edge_case
def test_degenerate_group_policies():
    zeros = torch.zeros(8, dtype=torch.float64)
    assert torch.equal(grpo.group_advantages(zeros), zeros)
    # on_degenerate="raise" is documented behaviour, not input validation: a Correctness check
    with pytest.raises(ValueError):
        grpo.group_advantages(zeros, on_degenerate="raise")
    with pytest.raises(ValueError):
        grpo.group_advantages(torch.tensor([[1.0, 0.0], [3.0, 3.0]]), on_degenerate="raise")
    # a non-degenerate group passes under "raise"
    _close(grpo.group_advantages(torch.tensor([1.0, 0.0], dtype=torch.float64), on_degenerate="raise"), [1.0, -1.0],
           "group_advantages([1, 0], on_degenerate='raise')")


@pytest.mark.contract
def test_unknown_degenerate_policy():
    for policy in ("typo", "Zeros", None):
        with pytest.raises(ValueError):
            grpo.group_advantages(torch.tensor([0.0, 1.0]), on_degenerate=policy)
        with pytest.raises(ValueError):
            grpo.group_advantages(torch.tensor([0.0, 1.0]), normalize_std=False, on_degenerate=policy)


@pytest.mark.edge_case
def test_min_std_threshold_and_eps():
    nearly_flat = torch.tensor([1.0, 1.0 + 1e-9], dtype=torch.float64)
    assert torch.equal(grpo.group_advantages(nearly_flat, min_std=1e-6), torch.zeros(2, dtype=torch.float64))
    # rewards 1e-9 apart carry rounding errors of 1e-16: the advantages are off by 1e9 times that (cond 1e9)
    _close(grpo.group_advantages(nearly_flat), [-1.0, 1.0], "group_advantages([1, 1 + 1e-9])", cond=1e9)
    rewards = torch.tensor([[0.2, 0.9, 0.4, 0.4], [3.0, -1.0, 0.5, 2.0]], dtype=torch.float64)
    capstone = (rewards - rewards.mean(dim=1, keepdim=True)) / (rewards.std(dim=1, unbiased=False, keepdim=True) + 1e-6)
    _close(grpo.group_advantages(rewards, eps=1e-6), capstone, "group_advantages(eps=1e-6)", magnitude=3.0)


def test_rows_sum_to_zero_and_leave_one_out():
    rewards = torch.from_numpy(np.random.default_rng(3).random((5, 6)))
    centred = grpo.group_advantages(rewards, normalize_std=False)
    _close(centred, rewards - rewards.mean(dim=1, keepdim=True), "group_advantages(normalize_std=False)", magnitude=1.0)
    loo = call_leaves_inputs_unchanged(grpo.leave_one_out_advantages, rewards)
    for name, adv in (("centred", centred), ("leave-one-out", loo), ("normalised", grpo.group_advantages(rewards))):
        assert adv.shape == (5, 6)
        _close(adv.sum(dim=1), [0.0] * 5, f"row sums of the {name} advantages", magnitude=12.0)
    others_mean = (rewards.sum(dim=1, keepdim=True) - rewards) / 5
    _close(loo, rewards - others_mean, "leave_one_out_advantages", magnitude=2.0)


def test_exact_enumeration_bias_of_the_group_mean():
    p, G = 0.3, 8
    actions = torch.tensor(list(itertools.product((0.0, 1.0), repeat=G)), dtype=torch.float64)  # (256, 8)
    probs = (p**actions * (1 - p) ** (1 - actions)).prod(dim=1)
    score = actions - p  # d log Bernoulli / d logit
    biased = probs @ (grpo.group_advantages(actions.clone(), normalize_std=False) * score).mean(dim=1)
    unbiased = probs @ (grpo.leave_one_out_advantages(actions.clone()) * score).mean(dim=1)
    # a probability-weighted sum of 256 terms of size <= 1: a few ulps of 1 per term
    _close(biased, 0.18375, "E[group-mean advantage * score] over all 2^8 groups", magnitude=256.0)
    _close(unbiased, p * (1 - p), "E[leave-one-out advantage * score] over all 2^8 groups", magnitude=256.0)


def test_informative_groups():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.5],
                            [0.0, 0.0, 0.0, 2.0], [0.1] * 4])
    keep = grpo.informative_groups(rewards)
    assert keep.dtype == torch.bool and keep.shape == (6,)
    assert keep.tolist() == [True, False, False, False, True, False]


def test_degenerate_group_probability():
    assert abs(grpo.degenerate_group_probability(0.3, 8) - 0.05771361999999997) < 1e-15
    assert grpo.degenerate_group_probability(0.0, 8) == 1.0
    assert grpo.degenerate_group_probability(1.0, 4) == 1.0
    assert abs(grpo.degenerate_group_probability(0.5, 4) - 0.125) < 1e-15
    assert abs(grpo.degenerate_group_probability(0.3, 1) - 1.0) < 1e-15


def test_integer_rewards_are_accepted():
    adv = grpo.group_advantages(torch.tensor([[1, 0, 0, 1]]))
    assert adv.is_floating_point()
    _close(adv, [[1.0, -1.0, -1.0, 1.0]], "group_advantages(integer rewards)")


# --- k3 KL --------------------------------------------------------------------------------------------


def test_k3_kl_properties_and_value():
    logp = randn(64, seed=1, dtype=torch.float64)
    logp_ref = randn(64, seed=2, dtype=torch.float64)
    k3 = grpo.k3_kl(logp, logp_ref)
    assert k3.shape == (64,) and (k3 >= 0).all()
    assert torch.equal(grpo.k3_kl(logp, logp), torch.zeros(64, dtype=torch.float64))
    # d = log(0.25) - log(0.5) = -log 2: exp(d) - d - 1 = log 2 - 0.5
    half, quarter = torch.tensor(math.log(0.5), dtype=torch.float64), torch.tensor(math.log(0.25), dtype=torch.float64)
    _close(grpo.k3_kl(half, quarter), math.log(2.0) - 0.5, "k3_kl(log 0.5, log 0.25)", magnitude=1.0)


def test_k3_kl_is_unbiased_for_kl():
    pi = torch.softmax(randn(7, seed=4, dtype=torch.float64), dim=0)
    ref = torch.softmax(randn(7, seed=5, dtype=torch.float64), dim=0)
    expected_k3 = (pi * grpo.k3_kl(pi.log(), ref.log())).sum()
    log_size = float(torch.cat([pi.log(), ref.log()]).abs().max())  # k3 rounds at the size of the log-probs
    _close(expected_k3, (pi * (pi.log() - ref.log())).sum(), "E_pi[k3_kl] vs KL(pi || ref)", magnitude=log_size)


@pytest.mark.numerics_probe
def test_k3_kl_float32_small_differences_non_negative():
    logp = randn(4096, seed=6)
    logp_ref = logp + 1e-4 * randn(4096, seed=7)
    assert (grpo.k3_kl(logp, logp_ref) >= 0).all()


# --- the clipped surrogate ----------------------------------------------------------------------------


def test_clipped_surrogate_seed_batch():
    logp, logp_old, adv = _seed_batch()
    out = call_leaves_inputs_unchanged(grpo.clipped_surrogate, logp, logp_old, adv, SEED_TOKEN_MASK)
    # the log-probabilities are about 2 in size: the ratios carry a few ulps of that
    _close(out.clipped_ratio[0, 0], 1.2, "clipped_ratio at ratio 1.5, A > 0", magnitude=2.0)
    _close(out.clipped_ratio[4, 0], 0.8, "clipped_ratio at ratio 0.5, A < 0", magnitude=2.0)
    _close(out.loss, SEED_SURROGATE_LOSS, "clipped_surrogate(seed 8x3 batch).loss", magnitude=4.0)
    assert out.loss.shape == () and out.ratio.shape == (8, 3) and out.token_objective.shape == (8, 3)
    _close(out.ratio[SEED_TOKEN_MASK], torch.tensor(SEED_RATIOS, dtype=torch.float64)[:, None].expand(8, 3)[SEED_TOKEN_MASK],
           "clipped_surrogate(seed batch).ratio at active tokens", magnitude=2.0)
    assert not torch.allclose(out.ratio[SEED_TOKEN_MASK], out.clipped_ratio[SEED_TOKEN_MASK])
    assert torch.equal(out.token_objective[~SEED_TOKEN_MASK], torch.zeros(6, dtype=torch.float64))
    _close(-out.token_objective.sum() / N_ACTIVE, SEED_SURROGATE_LOSS, "-sum(token_objective) / #active",
           magnitude=4.0)
    # ratios 1.5, 0.5, 1.3, 0.7 fall outside [0.8, 1.2]: 2 + 2 + 3 + 1 of the 18 active tokens
    _close(out.clip_fraction, 8 / 18, "clipped_surrogate(seed batch).clip_fraction")


@pytest.mark.numerics_probe
def test_clipped_surrogate_padding_cannot_leak():
    logp, logp_old, adv = _seed_batch()
    clean = grpo.clipped_surrogate(logp, logp_old, adv, SEED_TOKEN_MASK)
    padded_logp, padded_old = logp.clone(), logp_old.clone()
    padded_logp[~SEED_TOKEN_MASK] = float("nan")
    padded_old[~SEED_TOKEN_MASK] = float("inf")
    padded = grpo.clipped_surrogate(padded_logp, padded_old, adv, SEED_TOKEN_MASK.long())
    _close(padded.loss, SEED_SURROGATE_LOSS, "clipped_surrogate(NaN/inf padding).loss", magnitude=4.0)
    assert torch.isfinite(clean.loss)
    assert torch.isfinite(padded.ratio).all() and torch.isfinite(padded.clipped_ratio).all()
    assert torch.isfinite(padded.token_objective).all()


@pytest.mark.numerics_probe
def test_surrogate_extreme_log_ratios():
    logp_old = torch.tensor([-40.0, -10.0])
    logp = torch.tensor([-10.0, -40.0], requires_grad=True)
    out = grpo.clipped_surrogate(logp, logp_old, torch.tensor([1.0, -1.0]))
    # both ratios (e^30, e^-30) are far outside the clip, so both tokens take the clipped value
    _close(out.loss, -(1.2 - 0.8) / 2, "clipped_surrogate(log-ratios of +-30).loss")
    out.loss.backward()
    assert torch.isfinite(logp.grad).all()
    assert torch.equal(logp.grad, torch.zeros(2))
    _close(out.clip_fraction, 1.0, "clipped_surrogate(log-ratios of +-30).clip_fraction")


@pytest.mark.numerics_probe
def test_low_precision_probe():
    logp, logp_old, adv = _seed_batch()
    logp_ref = logp_old - 0.25

    def loss(a, b, c, d):
        return grpo.grpo_loss(a, b, c, d, SEED_TOKEN_MASK, kl_coef=0.1)

    assert_low_precision_matches(loss, logp.float(), logp_old.float(), adv.float(), logp_ref.float())


@pytest.mark.numerics_probe
def test_advantages_with_a_large_reward_offset():
    rewards = torch.tensor([1e8 + 1.0, 1e8, 1e8, 1e8 + 1.0], dtype=torch.float64)
    # the offset costs 1e8 ulps of the unit-size advantages at most (a mean of values of size 1e8)
    _close(grpo.group_advantages(rewards), [1.0, -1.0, -1.0, 1.0], "group_advantages(rewards near 1e8)",
           magnitude=1e8)
    assert grpo.informative_groups(rewards[None]).tolist() == [True]


def test_asymmetric_clip():
    logp, logp_old, adv = _seed_batch()
    out = grpo.clipped_surrogate(logp, logp_old, adv, SEED_TOKEN_MASK, clip_low=0.2, clip_high=0.28)
    _close(out.clipped_ratio[0, 0], 1.28, "clipped_ratio at ratio 1.5, clip_high=0.28", magnitude=2.0)
    _close(out.clipped_ratio[6, 0], 1.28, "clipped_ratio at ratio 1.3, clip_high=0.28", magnitude=2.0)
    _close(out.clipped_ratio[4, 0], 0.8, "clipped_ratio at ratio 0.5, clip_low=0.2", magnitude=2.0)


def test_gradient_at_ratio_one_is_reinforce_with_group_baseline():
    _, logp_old, adv = _seed_batch()
    logp = logp_old.clone().requires_grad_(True)
    for kl_coef, logp_ref in ((0.0, torch.zeros(8, 3, dtype=torch.float64)), (0.5, logp_old.clone())):
        logp.grad = None
        grpo.grpo_loss(logp, logp_old, adv, logp_ref, SEED_TOKEN_MASK, kl_coef=kl_coef).backward()
        expected = torch.where(SEED_TOKEN_MASK, -adv[:, None] / N_ACTIVE, 0.0)
        _close(logp.grad, expected, f"d grpo_loss / d logp at ratio 1 (kl_coef={kl_coef})")


def test_grpo_loss_finite_differences():
    gen = np.random.default_rng(11)
    x = -1.0 + 0.3 * gen.standard_normal((4, 5))
    old = torch.from_numpy(-1.0 + 0.3 * gen.standard_normal((4, 5)))
    ref = torch.from_numpy(-1.0 + 0.3 * gen.standard_normal((4, 5)))
    adv = torch.tensor([1.0, -0.5, 0.25, -0.75], dtype=torch.float64)
    mask = torch.from_numpy(gen.random((4, 5)) < 0.8)

    def loss_value() -> float:
        return float(grpo.grpo_loss(torch.from_numpy(x), old, adv, ref, mask, kl_coef=0.3))

    logp = torch.from_numpy(x.copy()).requires_grad_(True)
    grpo.grpo_loss(logp, old, adv, ref, mask, kl_coef=0.3).backward()
    assert_grad_matches(loss_value, x, logp.grad.numpy())


@pytest.mark.parametrize("eps", [0.1, 0.3])
def test_sequence_level_grpo_loss_equals_capstone_formula(eps):
    logp = -3.0 + randn(16, seed=8, dtype=torch.float64)
    logp_old = logp + 0.4 * randn(16, seed=9, dtype=torch.float64)
    logp_ref = logp + 0.4 * randn(16, seed=10, dtype=torch.float64)
    adv = randn(16, seed=12, dtype=torch.float64)
    ratio = torch.exp(logp - logp_old)
    policy_loss = -torch.min(ratio * adv, torch.clamp(ratio, 1.0 - eps, 1.0 + eps) * adv).mean()
    diff = logp_ref - logp
    capstone = policy_loss + 0.02 * (torch.exp(diff) - diff - 1.0).mean()
    got = grpo.grpo_loss(logp, logp_old, adv, logp_ref, clip_low=eps, clip_high=eps)
    assert got.shape == ()
    scale = float(torch.cat([logp.abs(), (ratio * adv).abs()]).max())  # the size of the terms summed
    _close(got, capstone, f"grpo_loss(sequence level, clip {eps})", magnitude=scale)


def test_grpo_loss_kl_term():
    logp, logp_old, adv = _seed_batch()
    logp_ref = logp_old - 0.5
    plain = grpo.clipped_surrogate(logp, logp_old, adv, SEED_TOKEN_MASK).loss
    with_kl = grpo.grpo_loss(logp, logp_old, adv, logp_ref, SEED_TOKEN_MASK, kl_coef=0.1)
    d = (logp_ref - logp)[SEED_TOKEN_MASK]
    k3 = (torch.exp(d) - d - 1).mean()
    _close(with_kl, SEED_SURROGATE_LOSS + 0.1 * k3, "grpo_loss(seed batch, kl_coef=0.1)", magnitude=4.0)
    assert torch.isfinite(plain)


@pytest.mark.edge_case
def test_surrogate_single_active_token_and_float32():
    logp = torch.tensor([[-1.0, -2.0]])
    mask = torch.tensor([[False, True]])
    out = grpo.clipped_surrogate(logp, logp + 0.1, torch.tensor([2.0]), mask)
    assert out.loss.dtype == torch.float32
    # ratio exp(-0.1) = 0.905 is inside the clip: objective = ratio * A
    _close(out.loss, -2.0 * math.exp(-0.1), "clipped_surrogate(one active token, float32).loss", magnitude=4.0)


# --- errors -------------------------------------------------------------------------------------------


@pytest.mark.contract
def test_advantage_errors():
    with pytest.raises(ValueError):
        grpo.group_advantages(torch.tensor([1.0]))
    with pytest.raises(ValueError):
        grpo.group_advantages(torch.zeros(3, 1))
    with pytest.raises(ValueError):
        grpo.group_advantages(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError):
        grpo.leave_one_out_advantages(torch.tensor([[1.0, float("inf")]]))
    with pytest.raises(ValueError):
        grpo.group_advantages(torch.tensor([1.0, 0.0]), min_std=-1.0)
    with pytest.raises(ValueError):
        grpo.group_advantages(torch.tensor([1.0, 0.0]), eps=-1e-6)
    with pytest.raises(ValueError):
        grpo.degenerate_group_probability(1.5, 8)
    with pytest.raises(ValueError):
        grpo.degenerate_group_probability(0.5, 0)


@pytest.mark.contract
def test_surrogate_errors():
    logp, logp_old, adv = _seed_batch()
    with pytest.raises(ValueError):
        grpo.clipped_surrogate(logp, logp_old[:, :2], adv, SEED_TOKEN_MASK)
    with pytest.raises(ValueError):
        grpo.clipped_surrogate(logp, logp_old, adv[:7], SEED_TOKEN_MASK)
    with pytest.raises(ValueError):
        grpo.clipped_surrogate(logp, logp_old, adv[:, None].expand(8, 3), SEED_TOKEN_MASK)
    with pytest.raises(ValueError):
        grpo.clipped_surrogate(logp, logp_old, adv, SEED_TOKEN_MASK[:, :2])
    with pytest.raises(ValueError):
        grpo.clipped_surrogate(logp, logp_old, adv, torch.zeros(8, 3, dtype=torch.bool))
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError):
            grpo.clipped_surrogate(logp, logp_old, adv, SEED_TOKEN_MASK, clip_low=bad)
    with pytest.raises(ValueError):
        grpo.clipped_surrogate(logp, logp_old, adv, SEED_TOKEN_MASK, clip_high=-0.1)
    active_nan = logp.clone()
    active_nan[0, 0] = float("nan")
    with pytest.raises(ValueError):
        grpo.clipped_surrogate(active_nan, logp_old, adv, SEED_TOKEN_MASK)
    with pytest.raises(ValueError):
        grpo.grpo_loss(logp, logp_old, adv, logp_old[:, :2], SEED_TOKEN_MASK)
    with pytest.raises(ValueError):
        grpo.grpo_loss(logp, logp_old, adv, logp_old, SEED_TOKEN_MASK, kl_coef=-0.1)
    with pytest.raises(ValueError):
        grpo.k3_kl(logp, logp_old[:, :2])


# --- one GRPO step on a toy verifier ------------------------------------------------------------------

YES, NO = 10, 11


def _is_greater(prompt_ids: torch.Tensor, completion_ids: torch.Tensor) -> torch.Tensor:
    """Verifier for prompts ``[a, b]`` (digits): reward 1 when the first new token is YES iff a > b."""
    target = torch.where(prompt_ids[:, 0] > prompt_ids[:, 1], YES, NO)
    return (completion_ids[:, 0] == target).float()


def _train(seed: int, steps: int = 20) -> tuple[list[float], ToyCausalLM, torch.nn.Module, dict]:
    policy = ToyCausalLM(seed=seed)
    reference = dpo.freeze_reference(policy)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(seed)
    rewards, stats = [], {}
    for _ in range(steps):
        prompts = torch.randint(0, 10, (8, 2), generator=gen)
        stats = grpo.grpo_step(policy, reference, optimizer, prompts, _is_greater, group_size=8, max_new_tokens=2, generator=gen)
        rewards.append(stats["mean_reward"])
    return rewards, policy, reference, stats


def test_grpo_step_does_not_lower_the_reward_and_keeps_reference():
    # thresholds fixed on seeds 0-4: last-5 minus first-5 mean reward was +0.31 to +0.46
    gains = []
    for seed in range(3):
        policy = ToyCausalLM(seed=seed)
        frozen = {k: v.clone() for k, v in policy.state_dict().items()}
        rewards, policy, reference, stats = _train(seed)
        assert {"mean_reward", "informative_group_rate", "loss"} <= set(stats), "grpo_step returns at least these keys"
        assert 0.0 <= stats["informative_group_rate"] <= 1.0 and math.isfinite(stats["loss"])
        first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
        assert last >= first, f"seed {seed}: reward fell from {first:.3f} to {last:.3f}"
        gains.append(last - first)
        for key, value in reference.state_dict().items():
            assert torch.equal(value, frozen[key]), f"reference parameter {key} moved"
        assert all(p.grad is None for p in reference.parameters())
    assert sum(gains) / len(gains) > 0.15


def test_grpo_step_update_matches_reinforce_with_group_baseline():
    """One inner epoch at ratio 1 with SGD: the update is -lr * grad of -sum(A_i log pi(token)) / #tokens."""
    policy = ToyCausalLM(seed=7)
    reference = dpo.freeze_reference(policy)
    start = ToyCausalLM(seed=7)
    seen: dict[str, torch.Tensor] = {}

    def verifier(prompt_ids, completion_ids):
        seen["prompts"], seen["completions"] = prompt_ids.clone(), completion_ids.clone()
        rewards = _is_greater(prompt_ids, completion_ids)
        rewards[:4] = 1.0  # make the first group informative whatever was sampled
        rewards[0] = 0.0
        return rewards

    prompts = torch.tensor([[3, 1], [2, 8], [5, 5]])
    lr = 0.5
    stats = grpo.grpo_step(
        policy, reference, torch.optim.SGD(policy.parameters(), lr=lr), prompts, verifier,
        group_size=4, max_new_tokens=3, inner_epochs=1, generator=torch.Generator().manual_seed(1),
    )
    assert torch.equal(seen["prompts"], prompts.repeat_interleave(4, dim=0))
    rewards = verifier(seen["prompts"], seen["completions"]).reshape(3, 4)
    _close(stats["mean_reward"], float(rewards.mean()), "grpo_step(...)['mean_reward']", dtype=torch.float32)
    keep = rewards.amax(dim=1) > rewards.amin(dim=1)
    _close(stats["informative_group_rate"], float(keep.float().mean()), "grpo_step(...)['informative_group_rate']",
           dtype=torch.float32)

    sequences = torch.cat([seen["prompts"], seen["completions"]], dim=1)[keep.repeat_interleave(4)]
    adv = ((rewards - rewards.mean(dim=1, keepdim=True)) / rewards.std(dim=1, unbiased=False, keepdim=True))[keep].reshape(-1)
    logits = start(sequences)[0]
    logp = torch.log_softmax(logits[:, 1:-1], dim=-1).gather(-1, sequences[:, 2:, None])[..., 0]  # (N, 3)
    surrogate = -(adv[:, None] * logp).sum() / logp.numel()
    surrogate.backward()
    # A gradient entry sums per-token terms of size up to |A| (log-softmax derivatives are at most 1) whose
    # advantages cancel, so the update is compared at the size of those terms, lr * max|A|
    update_scale = lr * float(adv.abs().max())
    for (name, moved), original in zip(policy.named_parameters(), start.parameters(), strict=True):
        assert_close(moved, original - lr * original.grad, what=f"parameter {name} after one SGD step",
                     magnitude=max(float(original.detach().abs().max()), update_scale))
    # at ratio 1 the loss value is -(sum of A) * T_new / #tokens = 0: each group's advantages sum to 0
    _close(stats["loss"], 0.0, "grpo_step(...)['loss'] at ratio 1", dtype=torch.float32,
           magnitude=float(adv.abs().max()) * 8)



def _manual_completion_logp(model, sequences, prompt_len):
    logits = model(sequences)[0]
    logp = torch.log_softmax(logits[:, prompt_len - 1 : -1], dim=-1)
    return logp.gather(-1, sequences[:, prompt_len:, None])[..., 0]


def test_grpo_step_inner_epochs_follow_the_stated_loop():
    """Three inner epochs with SGD against a reference that differs from the policy: logp_old and logp_ref
    are computed once, before the first update; every epoch minimises grpo_loss (clip and k3 leash); the
    reported loss is the mean over the epochs; the policy is left in train mode."""
    policy = ToyCausalLM(seed=4)
    reference = dpo.freeze_reference(ToyCausalLM(seed=5))
    start, frozen = ToyCausalLM(seed=4), ToyCausalLM(seed=5)
    seen: dict[str, torch.Tensor] = {}

    def verifier(prompt_ids, completion_ids):
        seen["prompts"], seen["completions"] = prompt_ids.clone(), completion_ids.clone()
        rewards = _is_greater(prompt_ids, completion_ids)
        rewards[:4] = torch.tensor([0.0, 1.0, 1.0, 0.0])  # the first group is informative whatever was sampled
        return rewards

    lr, kl_coef, epochs = 2.0, 0.5, 3
    stats = grpo.grpo_step(
        policy, reference, torch.optim.SGD(policy.parameters(), lr=lr), torch.tensor([[3, 1], [2, 8], [5, 5]]),
        verifier, group_size=4, max_new_tokens=3, inner_epochs=epochs, kl_coef=kl_coef,
        generator=torch.Generator().manual_seed(2),
    )
    assert policy.training, "grpo_step leaves the policy in train mode"

    rewards = verifier(seen["prompts"], seen["completions"]).reshape(3, 4)
    keep = rewards.amax(dim=1) > rewards.amin(dim=1)
    sequences = torch.cat([seen["prompts"], seen["completions"]], dim=1)[keep.repeat_interleave(4)]
    adv = ((rewards - rewards.mean(dim=1, keepdim=True)) / rewards.std(dim=1, unbiased=False, keepdim=True))[keep]
    adv = adv.reshape(-1, 1)
    optimizer = torch.optim.SGD(start.parameters(), lr=lr)
    with torch.no_grad():
        logp_old, logp_ref = _manual_completion_logp(start, sequences, 2), _manual_completion_logp(frozen, sequences, 2)
    losses, clipped = [], False
    for _ in range(epochs):
        logp = _manual_completion_logp(start, sequences, 2)
        ratio = torch.exp(logp - logp_old)
        clipped |= bool(((ratio < 0.8) | (ratio > 1.2)).any())
        surrogate = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
        d = logp_ref - logp
        loss = surrogate + kl_coef * (torch.exp(d) - d - 1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert clipped, "test setup: the clip must bind in a later epoch"
    _close(stats["loss"], sum(losses) / epochs, f"grpo_step(inner_epochs={epochs}, kl_coef={kl_coef})['loss']",
           dtype=torch.float32, magnitude=max(abs(v) for v in losses) * 8)
    for (name, moved), want in zip(policy.named_parameters(), start.parameters(), strict=True):
        assert_close(moved, want.detach(), what=f"parameter {name} after {epochs} inner epochs of SGD(lr={lr})",
                     magnitude=float(want.detach().abs().max()) * 8)


def test_grpo_step_samples_at_the_given_temperature():
    # At temperature 1e-4 sampling is greedy for these logits, so every completion is the policy's argmax
    # continuation; sampling at temperature 1 draws other tokens among the 12 completions.
    policy = ToyCausalLM(seed=6)
    greedy = torch.tensor([[3, 1], [2, 8], [5, 5]]).repeat_interleave(4, dim=0)
    with torch.no_grad():
        for _ in range(3):
            greedy = torch.cat([greedy, policy(greedy)[0][:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    seen: dict[str, torch.Tensor] = {}

    def verifier(prompt_ids, completion_ids):
        seen["completions"] = completion_ids.clone()
        return torch.ones(prompt_ids.shape[0])

    grpo.grpo_step(policy, dpo.freeze_reference(policy), torch.optim.SGD(policy.parameters(), lr=1.0),
                   torch.tensor([[3, 1], [2, 8], [5, 5]]), verifier, group_size=4, max_new_tokens=3,
                   temperature=1e-4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(seen["completions"], greedy[:, 2:]), "completions at temperature 1e-4 are the argmax ones"

@pytest.mark.edge_case
def test_grpo_step_all_degenerate_groups_make_no_update():
    policy = ToyCausalLM(seed=3)
    reference = dpo.freeze_reference(policy)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    stats = grpo.grpo_step(
        policy, reference, torch.optim.SGD(policy.parameters(), lr=1.0), torch.tensor([[1, 2], [4, 0]]),
        lambda p, c: torch.ones(p.shape[0]), group_size=4, generator=torch.Generator().manual_seed(0),
    )
    assert stats["informative_group_rate"] == 0.0 and stats["loss"] == 0.0 and stats["mean_reward"] == 1.0
    for key, value in policy.state_dict().items():
        assert torch.equal(value, before[key])


@pytest.mark.contract
def test_grpo_step_errors_leave_policy_untouched():
    policy = ToyCausalLM(seed=3)
    reference = dpo.freeze_reference(policy)
    optimizer = torch.optim.SGD(policy.parameters(), lr=1.0)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    prompts = torch.tensor([[1, 2], [4, 0]])
    with pytest.raises(ValueError):
        grpo.grpo_step(policy, reference, optimizer, prompts, lambda p, c: torch.ones(3), group_size=4)
    with pytest.raises(ValueError):
        grpo.grpo_step(policy, reference, optimizer, prompts, _is_greater, group_size=1)
    with pytest.raises(ValueError):
        grpo.grpo_step(policy, reference, optimizer, prompts.float(), _is_greater)
    for key, value in policy.state_dict().items():
        assert torch.equal(value, before[key])


def test_grpo_step_on_gpt_does_not_lower_the_reward_and_keeps_reference():
    """The spec's toy verifier on the GPT of #31: "is a > b" prompts, YES/NO as the first new token."""
    from canon_refs.transformer import gpt  # imported here so a broken #31 only fails this test

    # thresholds fixed on seeds 0-4 (1 layer, Adam 1e-2): last-5 minus first-5 mean reward was +0.28 to +0.60
    gains = []
    for seed in range(2):
        torch.manual_seed(seed)
        policy = gpt.GPT(gpt.GPTConfig(vocab_size=12, max_seq_len=8, d_model=32, n_heads=4, n_layers=1))
        reference = dpo.freeze_reference(policy)
        frozen = {k: v.clone() for k, v in reference.state_dict().items()}
        optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(seed)
        rewards = []
        for _ in range(20):
            prompts = torch.randint(0, 10, (8, 2), generator=gen)
            stats = grpo.grpo_step(policy, reference, optimizer, prompts, _is_greater, group_size=8,
                                   max_new_tokens=2, generator=gen)
            assert math.isfinite(stats["loss"])
            rewards.append(stats["mean_reward"])
        first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
        assert last >= first, f"seed {seed}: reward fell from {first:.3f} to {last:.3f}"
        gains.append(last - first)
        for key, value in reference.state_dict().items():
            assert torch.equal(value, frozen[key]), f"reference parameter {key} moved"
        assert all(p.grad is None for p in reference.parameters())
    assert sum(gains) / len(gains) > 0.15
