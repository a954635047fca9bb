"""Reference tests for #53, the PPO update step (docs/contract.md #53; clip table and KL leash from seed 003).

``ppo_update`` runs on a fixed contextual bandit batch: 4 one-hot contexts, 2 actions, the action
``context % 2`` has advantage +1 and the other -1, a linear policy and value head (``_TinyActorCritic``).
Verified on seeds 0-7 before freezing: 4 epochs x 4 minibatches raise the probability of every
positive-advantage action by 0.106-0.302 (threshold > 0); ``target_kl = 1e-4`` stops after 1 of 16
steps; after 50 full-batch SGD epochs the largest ratio is 1.26-1.78 with ``clip_eps = 0.2`` against
1.99-4.19 with ``0.99`` (smallest gap 0.69).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from canon_refs.rl import ppo
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    randn,
    rounded_close,
)

pytestmark = pytest.mark.canon("rl/ppo")

RATIOS = [1.1, 1.5, 0.5, 1.5]
ADVANTAGES = [3.0, 2.0, -1.0, -1.0]
REQUIRED_LOSS_KEYS = {"loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"}
REQUIRED_HISTORY_KEYS = {"loss", "policy_loss", "value_loss", "approx_kl", "clip_fraction"}


def _close(value, expected, what, magnitude=None):
    """``value`` matches the trusted ``expected`` to a few ulps of ``magnitude`` (default: its own size);
    pass the size of the terms where a mean or a difference cancels."""
    assert_close(torch.as_tensor(value).detach(), torch.as_tensor(expected, dtype=torch.float64).detach(),
                 magnitude=magnitude, what=what)


class _TinyActorCritic(nn.Module):
    def __init__(self, obs_dim: int = 4, n_actions: int = 2) -> None:
        super().__init__()
        self.policy = nn.Linear(obs_dim, n_actions)
        self.value = nn.Linear(obs_dim, 1)

    def forward(self, obs):
        return self.policy(obs), self.value(obs).squeeze(-1)


def _contextual_batch(seed: int = 0, B: int = 64):
    torch.manual_seed(seed)
    model = _TinyActorCritic()
    g = torch.Generator().manual_seed(seed)
    contexts = torch.randint(0, 4, (B,), generator=g)
    obs = torch.eye(4)[contexts]
    with torch.no_grad():
        logits, values = model(obs)
        actions = torch.multinomial(logits.softmax(-1), 1, generator=g).squeeze(1)
        old_logp = logits.log_softmax(-1).gather(1, actions[:, None]).squeeze(1)
    advantages = torch.where(actions == contexts % 2, 1.0, -1.0)
    batch = {"obs": obs, "actions": actions, "old_logp": old_logp, "advantages": advantages,
             "returns": advantages.clone(), "old_values": values}
    return model, batch


def _good_action_probs(model):
    with torch.no_grad():
        probs = model(torch.eye(4))[0].softmax(-1)
    return probs[torch.arange(4), torch.tensor([0, 1, 0, 1])]


def _max_ratio(model, batch):
    with torch.no_grad():
        logp = model(batch["obs"])[0].log_softmax(-1).gather(1, batch["actions"][:, None]).squeeze(1)
    return float((logp - batch["old_logp"]).exp().max())


# --- the clipped objective ------------------------------------------------------------------------------------


def test_seed_clip_table():
    out = ppo.ppo_clip_objective(RATIOS, ADVANTAGES)
    assert out.shape == (4,) and out.dtype == torch.float64
    _close(out, [3.3, 2.4, -0.8, -1.5], "ppo_clip_objective(seed 003 ratios, advantages)")


def test_clip_table_gradients():
    ratio = torch.tensor(RATIOS, dtype=torch.float64, requires_grad=True)
    ppo.ppo_clip_objective(ratio, torch.tensor(ADVANTAGES, dtype=torch.float64)).sum().backward()
    # no gradient where the clip binds (rows 2, 3), the full gradient elsewhere: row 4 is penalised in full
    _close(ratio.grad, [3.0, 0.0, 0.0, -1.0], "d ppo_clip_objective / d ratio (seed 003)")


def test_clip_caps_gains_beyond_the_band():
    a, b = ppo.ppo_clip_objective(1.3, 2.0), ppo.ppo_clip_objective(1.6, 2.0)
    assert a.shape == () and a.dtype == torch.float64
    assert torch.equal(a, b)
    _close(a, 2.4, "ppo_clip_objective(1.3, 2.0)")
    # inside the band the objective is plain rho * A; losses below the band are capped, above are not
    _close(ppo.ppo_clip_objective(1.05, -2.0), -2.1, "ppo_clip_objective(1.05, -2.0)")
    _close(ppo.ppo_clip_objective(0.5, 2.0), 1.0, "ppo_clip_objective(0.5, 2.0)")
    _close(ppo.ppo_clip_objective(0.5, -2.0, eps=0.3), -1.4, "ppo_clip_objective(0.5, -2.0, eps=0.3)")


def test_clip_objective_keeps_float32():
    out = ppo.ppo_clip_objective(torch.tensor([1.0, 2.0]), torch.tensor([1.0, -1.0]))
    assert out.dtype == torch.float32


@pytest.mark.contract
def test_clip_objective_errors():
    for eps in (0.0, 1.0, -0.2, 1.5):
        with pytest.raises(ValueError):
            ppo.ppo_clip_objective(1.0, 1.0, eps=eps)


# --- the KL leash -----------------------------------------------------------------------------------------------


def test_kl_leash_values():
    down = ppo.kl_penalized_reward(1.0, math.log(0.6), math.log(0.3), 0.1)
    up = ppo.kl_penalized_reward(1.0, math.log(0.15), math.log(0.3), 0.1)
    assert down.dtype == torch.float64 and down.shape == ()
    # log-probabilities of size ~2 enter through a difference: compare at their size
    _close(down, 0.9306852819440055, "kl_penalized_reward(1, log 0.6, log 0.3, 0.1)", magnitude=2.0)
    _close(up, 1.0693147180559945, "kl_penalized_reward(1, log 0.15, log 0.3, 0.1)", magnitude=2.0)
    assert rounded_close(float(down), 0.931, 3) and rounded_close(float(up), 1.069, 3)
    _close(ppo.kl_penalized_reward(1.0, math.log(0.6), math.log(0.3), 0.0), 1.0, "kl_penalized_reward(beta=0)")
    rewards = torch.tensor([1.0, 0.0], dtype=torch.float64)
    logp = torch.log(torch.tensor([0.6, 0.2], dtype=torch.float64))
    logp_ref = torch.log(torch.tensor([0.3, 0.4], dtype=torch.float64))
    got = call_leaves_inputs_unchanged(ppo.kl_penalized_reward, rewards, logp, logp_ref, 0.5)
    _close(got, [1.0 - 0.5 * math.log(2.0), 0.5 * math.log(2.0)], "kl_penalized_reward(batch of 2, beta=0.5)",
           magnitude=2.0)


@pytest.mark.contract
def test_kl_leash_errors():
    for beta in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            ppo.kl_penalized_reward(1.0, -1.0, -1.0, beta)


# --- the loss ---------------------------------------------------------------------------------------------------


def _loss_inputs(B=8, seed=0, dtype=torch.float64):
    old = -torch.rand(B, generator=torch.Generator().manual_seed(seed), dtype=dtype) - 0.5
    new = (old + 0.3 * randn(B, seed=seed + 1, dtype=dtype)).requires_grad_(True)
    adv = randn(B, seed=seed + 2, dtype=dtype)
    values = randn(B, seed=seed + 3, dtype=dtype, requires_grad=True)
    returns = randn(B, seed=seed + 4, dtype=dtype)
    return new, old, adv, values, returns


def test_first_epoch_is_the_vanilla_policy_gradient():
    _, old, adv, values, returns = _loss_inputs()
    new = old.clone().requires_grad_(True)
    out = ppo.ppo_loss(new, old, adv.clone(), values, returns)
    _close(out["policy_loss"], -adv.mean(), "ppo_loss(new == old).policy_loss", magnitude=float(adv.abs().max()))
    assert float(out["approx_kl"]) == 0.0 and float(out["clip_fraction"]) == 0.0
    (grad,) = torch.autograd.grad(out["policy_loss"], new)
    _close(grad, -adv / 8, "d policy_loss / d new_logp at new == old")


def test_loss_closed_form():
    new, old, adv, values, returns = _loss_inputs(seed=3)
    entropy = torch.rand(8, dtype=torch.float64)
    ratio = (new.detach() - old).exp()
    surrogate = torch.minimum(ratio * adv, ratio.clamp(0.9, 1.1) * adv)
    policy = -surrogate.mean()
    value = 0.5 * ((values.detach() - returns) ** 2).mean()
    scale = float(torch.cat([surrogate.abs(), (values.detach() - returns) ** 2]).max())  # size of the terms
    out = ppo.ppo_loss(new, old.clone(), adv.clone(), values, returns.clone(), entropy=entropy.clone(), clip_eps=0.1,
                       vf_coef=0.7, ent_coef=0.05)
    assert REQUIRED_LOSS_KEYS <= set(out), f"ppo_loss must return at least {sorted(REQUIRED_LOSS_KEYS)}"
    _close(out["policy_loss"], policy, "ppo_loss(...)['policy_loss']", magnitude=scale)
    _close(out["value_loss"], value, "ppo_loss(...)['value_loss']", magnitude=scale)
    _close(out["entropy"], entropy.mean(), "ppo_loss(...)['entropy']")
    _close(out["loss"], policy + 0.7 * value - 0.05 * entropy.mean(), "ppo_loss(...)['loss']", magnitude=scale)
    _close(out["approx_kl"], ((ratio - 1) - ratio.log()).mean(), "ppo_loss(...)['approx_kl']", magnitude=1.0)
    _close(out["clip_fraction"], ((ratio - 1).abs() > 0.1).double().mean(), "ppo_loss(...)['clip_fraction']")
    assert 0 < float(out["clip_fraction"]) < 1, "the sample should mix clipped and unclipped rows"
    assert not out["approx_kl"].requires_grad and not out["clip_fraction"].requires_grad
    # the value gradient is vf_coef * (V - R) / B
    (g_values,) = torch.autograd.grad(out["loss"], values)
    _close(g_values, 0.7 * (values.detach() - returns) / 8, "d loss / d values")


def test_value_clipping_picks_the_larger_error():
    old_values = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    values = torch.tensor([1.0, 3.0, 1.1], dtype=torch.float64, requires_grad=True)
    returns = torch.tensor([2.0, 0.0, 5.0], dtype=torch.float64)
    zeros = torch.zeros(3, dtype=torch.float64)
    out = ppo.ppo_loss(zeros, zeros, zeros, values, returns, old_values=old_values, value_clip=0.2)
    # row 0: unclipped (1 - 2)^2 = 1, clipped (0.2 - 2)^2 = 3.24 -> 3.24; row 1: 9 vs 0.04 -> 9;
    # row 2: inside the clip range, both are (1.1 - 5)^2
    errors = [3.24, 9.0, 3.9**2]
    _close(out["value_loss"], 0.5 * sum(errors) / 3, "ppo_loss(value_clip=0.2)['value_loss']", magnitude=25.0)
    (grad,) = torch.autograd.grad(out["loss"], values)
    # row 0 follows the clipped branch, whose clamp is saturated: no gradient
    # d loss / dV = vf_coef * 0.5 * d(error)/dV / B with vf_coef = 0.5
    _close(grad, 0.5 * 0.5 * torch.tensor([0.0, 2 * 3.0, 2 * (1.1 - 5.0)], dtype=torch.float64) / 3,
           "d loss / d values with value_clip=0.2", magnitude=5.0)
    plain = ppo.ppo_loss(zeros, zeros, zeros, values, returns)
    _close(plain["value_loss"], 0.5 * (1.0 + 9.0 + 3.9**2) / 3, "ppo_loss(no value clip)['value_loss']",
           magnitude=25.0)


def test_normalized_advantages_have_mean_zero_and_unit_std():
    _, old, adv, values, returns = _loss_inputs(seed=5)
    adv = adv * 7.0 + 3.0
    centred = adv - adv.mean()
    new = old.clone().requires_grad_(True)
    out = ppo.ppo_loss(new, old, adv.clone(), values, returns, normalize_advantages=True)
    (grad,) = torch.autograd.grad(out["policy_loss"], new)
    normalized = -grad * 8
    # (A - mean) / (std + 1e-8): the population and the sample std are both accepted, so read the scale
    # back from the output and check it is one of the two
    scale = float((centred * centred).sum() / (centred * normalized).sum())
    candidates = [float(adv.std(correction=c)) + 1e-8 for c in (0, 1)]
    assert any(abs(scale - c) <= 1e-9 * c for c in candidates), (
        f"normalize_advantages divided by {scale!r}; expected the population std + 1e-8 ({candidates[0]!r}) "
        f"or the sample std + 1e-8 ({candidates[1]!r})")
    _close(normalized, centred / scale, "the normalised advantages", magnitude=float(centred.abs().max()) / scale)
    _close(out["policy_loss"], 0.0, "ppo_loss(new == old, normalize_advantages=True)['policy_loss']",
           magnitude=float(centred.abs().max()) / scale)


@pytest.mark.edge_case
def test_constant_advantages_normalize_to_zero_and_batch_of_one():
    old = torch.tensor([-1.0, -2.0], dtype=torch.float64)
    new = old.clone().requires_grad_(True)
    out = ppo.ppo_loss(new, old, torch.full((2,), 3.0, dtype=torch.float64), torch.zeros(2, dtype=torch.float64),
                       torch.zeros(2, dtype=torch.float64), normalize_advantages=True)
    assert torch.isfinite(out["loss"])
    _close(out["policy_loss"], 0.0, "ppo_loss(constant advantages, normalize_advantages=True)['policy_loss']",
           magnitude=3.0)
    one = ppo.ppo_loss(torch.tensor([-0.5]), torch.tensor([-0.7]), torch.tensor([2.0]), torch.tensor([0.0]),
                       torch.tensor([1.0]))
    _close(one["policy_loss"], -min(math.exp(0.2), 1.2) * 2.0, "ppo_loss(batch of one, float32)['policy_loss']")


def test_loss_leaves_its_inputs_unchanged():
    new, old, adv, values, returns = _loss_inputs(seed=6)
    adv = adv * 4.0 + 1.0
    call_leaves_inputs_unchanged(ppo.ppo_loss, new, old, adv, values, returns, old_values=returns + 0.5,
                                 entropy=torch.rand(8, dtype=torch.float64), value_clip=0.2,
                                 normalize_advantages=True)


@pytest.mark.contract
def test_loss_errors():
    new, old, adv, values, returns = _loss_inputs()
    with pytest.raises(ValueError):
        ppo.ppo_loss(new, old.clone().requires_grad_(True), adv, values, returns)
    with pytest.raises(ValueError):
        ppo.ppo_loss(new, old, adv[:5], values, returns)
    with pytest.raises(ValueError):
        ppo.ppo_loss(new, old, adv, values, returns[:, None])
    with pytest.raises(ValueError):
        ppo.ppo_loss(new, old, adv, values, returns, old_values=torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ValueError):
        ppo.ppo_loss(new, old, adv, values, returns, value_clip=0.2)
    for clip in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError):
            ppo.ppo_loss(new, old, adv, values, returns, clip_eps=clip)
    with pytest.raises(ValueError):
        ppo.ppo_loss(new, old, adv, values, returns, old_values=values.detach(), value_clip=0.0)
    with pytest.raises(ValueError):
        ppo.ppo_loss(new, old, adv, values, returns, vf_coef=-1.0)
    with pytest.raises(ValueError):
        ppo.ppo_loss(new[:, None], old, adv, values, returns)


@pytest.mark.numerics_probe
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_approx_kl_is_accurate_for_tiny_log_ratios(dtype):
    # k3 = (rho - 1) - log rho at |log rho| <= 1e-4 is ~5e-9: the two terms cancel at the size of rho (1),
    # so a correct implementation is within a few ulps of 1 in its dtype. That is 1.9e-6 in float32
    # (the stated formula with rho rounded to float32 passes; any form is accepted) and 3.6e-15 in
    # float64, where k1 (-mean(log rho), -1e-4) or a sign error fails. Non-negative up to that rounding.
    old = torch.full((4,), -0.7, dtype=dtype)
    for d in (1e-4, -1e-4, 3e-5):
        new = old + d
        d64 = (new - old).double()  # the log-ratio the dtype actually represents
        exact = (torch.expm1(d64) - d64).mean()
        out = ppo.ppo_loss(new, old, torch.ones(4, dtype=dtype), torch.zeros(4, dtype=dtype),
                           torch.zeros(4, dtype=dtype))
        assert_close(out["approx_kl"].detach(), exact, dtype=dtype, magnitude=1.0,
                     what=f"ppo_loss(log-ratio {d:g}, {dtype})['approx_kl']")


@pytest.mark.numerics_probe
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_extreme_log_ratios_stay_finite(dtype):
    old = torch.zeros(4, dtype=dtype)
    new = torch.tensor([40.0, -40.0, 40.0, -40.0], dtype=dtype, requires_grad=True)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=dtype)
    out = ppo.ppo_loss(new, old, adv, torch.zeros(4, dtype=dtype), torch.zeros(4, dtype=dtype))
    assert all(torch.isfinite(v) for v in out.values())
    out["loss"].backward()
    assert torch.isfinite(new.grad).all()
    _close(out["clip_fraction"], 1.0, "ppo_loss(log-ratios of +-40)['clip_fraction']")
    # the clip removes the gradient of rows 0 (gain capped) and 3 (loss below the band capped); row 2 (a
    # bad action made e^40 times likelier) keeps its huge gradient, row 1 its vanishing one
    assert new.grad[0] == 0 and new.grad[3] == 0
    assert new.grad[2] > 1e16
    _close(new.grad[1], -math.exp(-40.0) / 4, f"d loss / d new_logp at a log-ratio of -40 ({dtype})")


@pytest.mark.numerics_probe
def test_fp16_probe():
    new, old, adv, values, returns = _loss_inputs(seed=7, dtype=torch.float32)

    def fn(n, o, v):
        out = ppo.ppo_loss(n, o, adv, v, returns)
        return out["loss"], out["policy_loss"], out["value_loss"]

    assert_low_precision_matches(fn, new.detach(), old, values.detach())


# --- the update -------------------------------------------------------------------------------------------------


def test_update_raises_positive_advantage_actions():
    model, batch = _contextual_batch(0)
    before = _good_action_probs(model)
    history = ppo.ppo_update(model, torch.optim.Adam(model.parameters(), lr=0.05), batch, epochs=4,
                             minibatch_size=16, seed=0)
    assert REQUIRED_HISTORY_KEYS <= set(history), f"ppo_update's history needs {sorted(REQUIRED_HISTORY_KEYS)}"
    assert all(len(history[key]) == 16 for key in REQUIRED_HISTORY_KEYS)
    assert all(isinstance(x, float) for x in history["loss"])
    # the first minibatch is scored by the sampling policy itself: new_logp equals old_logp up to the
    # rounding of a differently batched forward, so k3 is 0 to a few float32 ulps of rho (1); one Adam
    # step of 0.05 before scoring would give ~1e-3
    assert_close(history["approx_kl"][0], 0.0, dtype=torch.float32, magnitude=1.0,
                 what="ppo_update(...)['approx_kl'][0] (scored before the first step)")
    assert history["clip_fraction"][0] == 0.0
    assert torch.all(_good_action_probs(model) > before)


def test_update_minibatch_count_with_a_ragged_last_minibatch():
    model, batch = _contextual_batch(1, B=50)
    history = ppo.ppo_update(model, torch.optim.SGD(model.parameters(), lr=0.01), batch, epochs=3,
                             minibatch_size=16, seed=1)
    assert len(history["loss"]) == 3 * 4



def test_update_full_batch_step_reports_the_stated_losses():
    # One epoch, one minibatch of the whole batch: the permutation cannot matter, so the step's history is
    # the stated loss of the batch under the model before the step, with ratios away from 1 (old_logp
    # shifted), returns unlike the advantages, and an entropy bonus. The policy term is left out (the stub does
    # not say whether ppo_update normalises advantages); loss - policy_loss = vf_coef * value_loss - ent_coef *
    # entropy is checked instead.
    model, batch = _contextual_batch(7)
    g = torch.Generator().manual_seed(7)
    batch["old_logp"] = batch["old_logp"] + 0.3 * torch.randn(64, generator=g)
    batch["returns"] = torch.randn(64, generator=g)
    with torch.no_grad():
        logits, values = model(batch["obs"])
        log_probs = logits.log_softmax(-1)
        new_logp = log_probs.gather(1, batch["actions"][:, None]).squeeze(1)
        log_ratio = new_logp - batch["old_logp"]
        ratio = log_ratio.exp()
        value_loss = 0.5 * ((values - batch["returns"]) ** 2).mean()
        entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
    want = {
        "value_loss": value_loss,
        "loss - policy_loss": 0.5 * value_loss - 0.1 * entropy,
        "approx_kl": (ratio - 1 - log_ratio).mean(),
        "clip_fraction": ((ratio - 1).abs() > 0.2).float().mean(),
    }
    history = ppo.ppo_update(model, torch.optim.SGD(model.parameters(), lr=0.01), batch, epochs=1,
                             minibatch_size=64, ent_coef=0.1, seed=7)
    assert len(history["loss"]) == 1
    got = {key: history[key][0] for key in ("value_loss", "approx_kl", "clip_fraction")}
    got["loss - policy_loss"] = history["loss"][0] - history["policy_loss"][0]
    for key, value in want.items():
        assert_close(torch.tensor(got[key]), value.double(), dtype=torch.float32, magnitude=4.0,
                     what=f"ppo_update(one full-batch step, ent_coef=0.1): {key} of step 0")


def test_target_kl_stops_at_the_first_minibatch_over_one_and_a_half_target():
    # The stop rule is stated: before a step, stop when the minibatch's approx_kl > 1.5 * target_kl. Runs with
    # one seed take the same steps until they stop, so a target is read off a free run: one that a step's
    # KL exceeds but not by the factor 1.5, so the run must go past it and stop at the first larger KL.
    model, batch = _contextual_batch(2)
    free = ppo.ppo_update(model, torch.optim.Adam(model.parameters(), lr=0.05), batch, epochs=4,
                          minibatch_size=16, seed=2)["approx_kl"]
    for j in range(1, len(free)):
        target = free[j] / 1.2
        over = [i for i, kl in enumerate(free) if kl > 1.5 * target]
        if (over and over[0] > j and over[0] % 4 != 0 and free[over[0]] > 1.51 * target
                and all(kl < 1.49 * target for kl in free[: over[0]])):
            break
    else:
        pytest.fail("test setup: no target separates the stop rule from a stop at target_kl")
    model, batch = _contextual_batch(2)
    history = ppo.ppo_update(model, torch.optim.Adam(model.parameters(), lr=0.05), batch, epochs=4,
                             minibatch_size=16, target_kl=target, seed=2)
    assert len(history["loss"]) == over[0], (
        f"with target_kl={target:.3g}, the approx_kl of the free run's steps {[round(k, 6) for k in free]} "
        f"first exceed 1.5 * target_kl at step {over[0]}, so {over[0]} steps are taken; got {len(history['loss'])}")

def test_target_kl_stops_early():
    model, batch = _contextual_batch(2)
    history = ppo.ppo_update(model, torch.optim.Adam(model.parameters(), lr=0.05), batch, epochs=4,
                             minibatch_size=16, target_kl=1e-4, seed=2)
    assert 1 <= len(history["loss"]) < 16
    assert all(kl <= 1.5e-4 for kl in history["approx_kl"])


def test_clip_keeps_ratios_near_one_over_many_epochs():
    maxima = {}
    for eps in (0.2, 0.99):
        model, batch = _contextual_batch(3)
        ppo.ppo_update(model, torch.optim.SGD(model.parameters(), lr=0.5), batch, epochs=50, minibatch_size=64,
                       clip_eps=eps, max_grad_norm=None, seed=3)
        maxima[eps] = _max_ratio(model, batch)
    assert maxima[0.2] < maxima[0.99]
    assert maxima[0.99] > 1.9


def test_gradient_norm_is_clipped():
    deltas = {}
    for max_norm in (0.5, None):
        model, batch = _contextual_batch(4)
        batch["advantages"] = batch["advantages"] * 100.0
        start = torch.cat([p.detach().flatten() for p in model.parameters()])
        ppo.ppo_update(model, torch.optim.SGD(model.parameters(), lr=1.0), batch, epochs=1, minibatch_size=64,
                       max_grad_norm=max_norm, seed=4)
        end = torch.cat([p.detach().flatten() for p in model.parameters()])
        deltas[max_norm] = float((end - start).norm())
    assert deltas[0.5] <= 0.5 + 1e-5  # one SGD step of a gradient clipped to norm 0.5 (float32 rounding aside)
    assert deltas[None] > 5.0


def test_value_clip_in_update_and_determinism():
    runs = []
    for _ in range(2):
        model, batch = _contextual_batch(5)
        history = ppo.ppo_update(model, torch.optim.Adam(model.parameters(), lr=0.05), batch, epochs=2,
                                 minibatch_size=32, value_clip=0.1, seed=5)
        runs.append((history, [p.detach().clone() for p in model.parameters()]))
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(p, q) for p, q in zip(runs[0][1], runs[1][1]))


@pytest.mark.contract
def test_update_errors_before_any_step():
    model, batch = _contextual_batch(6)
    params = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    bad = [
        ({"epochs": 0}, batch, "epochs"),
        ({"minibatch_size": 0}, batch, "minibatch_size"),
        ({"clip_eps": 1.0}, batch, "clip_eps"),
        ({"value_clip": 0.0}, batch, "value_clip"),
        ({}, {**batch, "old_logp": batch["old_logp"].clone().requires_grad_(True)}, "old_logp"),
        ({}, {**batch, "advantages": batch["advantages"][:10]}, "advantages"),
        ({}, {k: v for k, v in batch.items() if k != "returns"}, "returns"),
        ({"value_clip": 0.2}, {k: v for k, v in batch.items() if k != "old_values"}, "old_values"),
    ]
    for kwargs, b, _arg in bad:
        with pytest.raises(ValueError):
            ppo.ppo_update(model, opt, b, **kwargs)
    assert all(torch.equal(p, q) for p, q in zip(params, model.parameters()))
