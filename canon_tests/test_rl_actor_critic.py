"""Reference tests for #51, one-step actor-critic (docs/contract.md #51).

Training check: the corridor ``GridWorld(1, 6)``, gamma 0.9, 300 episodes, max_steps 20. Verified on
seeds 0-9 before freezing (with max_steps 20 and with the default 50): the greedy action is "right" in
all five non-goal states for every seed (smallest logit margin of "right" over the runner-up 3.5 and
3.8), and the mean discounted return of the last 20 episodes (0.650-0.656, optimum 0.6561) exceeds
that of the first 20 (0.17-0.56) by at least 0.089.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from canon_refs.rl import actor_critic as ac
from canon_refs.rl.envs import GridWorld
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    randn,
)

pytestmark = pytest.mark.canon("rl/actor_critic")
LOSS_KEYS = ("loss", "policy_loss", "value_loss", "entropy")


def _batch(B=5, A=4, seed=0, dtype=torch.float64):
    logits = randn(B, A, seed=seed, dtype=dtype, requires_grad=True)
    values = randn(B, seed=seed + 1, dtype=dtype, requires_grad=True)
    actions = torch.randint(0, A, (B,), generator=torch.Generator().manual_seed(seed + 2))
    targets = randn(B, seed=seed + 3, dtype=dtype)
    return logits, values, actions, targets


# --- the model -------------------------------------------------------------------------------------------------


def test_model_shapes_and_heads():
    model = ac.ActorCritic(6, 4, hidden=16)
    assert isinstance(model.policy_head, torch.nn.Linear) and isinstance(model.value_head, torch.nn.Linear)
    assert isinstance(model.trunk, torch.nn.Module)
    assert model.policy_head.out_features == 4 and model.value_head.out_features == 1
    logits, values = model(torch.eye(6)[:3])
    assert logits.shape == (3, 4) and values.shape == (3,)
    assert logits.dtype == torch.float32 and values.dtype == torch.float32
    # both heads read the same trunk features
    h = model.trunk(torch.eye(6)[:3])
    assert_close(logits, model.policy_head(h), what="ActorCritic logits vs policy_head(trunk(obs))")
    assert_close(values, model.value_head(h)[:, 0], what="ActorCritic values vs value_head(trunk(obs))")


@pytest.mark.edge_case
def test_model_batch_of_one():
    model = ac.ActorCritic(3, 2)
    logits, values = model(torch.zeros(1, 3))
    assert logits.shape == (1, 2) and values.shape == (1,)


@pytest.mark.contract
def test_model_errors():
    model = ac.ActorCritic(3, 2)
    with pytest.raises(ValueError):
        model(torch.zeros(3))
    with pytest.raises(ValueError):
        model(torch.zeros(2, 4))
    with pytest.raises(ValueError):
        ac.ActorCritic(3, 2, hidden=0)


# --- targets ---------------------------------------------------------------------------------------------------


def test_td_targets_worked_example():
    rewards, next_values, dones = (torch.tensor(v, dtype=torch.float64) for v in ([1.0, 0.0], [2.0, 3.0], [0.0, 1.0]))
    out = call_leaves_inputs_unchanged(ac.td_targets, rewards, next_values, dones, 0.9)
    assert out.shape == (2,) and out.dtype == torch.float64
    assert_close(out, [2.8, 0.0], magnitude=3.0, what="td_targets([1, 0], [2, 3], [0, 1], 0.9)")
    # bool dones, and a next value that carries a graph: the target is detached
    next_values = torch.tensor([2.0, 3.0], requires_grad=True)
    out = ac.td_targets(torch.tensor([1.0, 0.0]), next_values * 1.0, torch.tensor([False, True]), 0.9)
    assert not out.requires_grad and out.grad_fn is None
    assert_close(out, [2.8, 0.0], magnitude=3.0, what="td_targets(float32, bool dones)")


@pytest.mark.contract
def test_td_targets_errors():
    r = torch.zeros(3)
    with pytest.raises(ValueError):
        ac.td_targets(r, torch.zeros(2), torch.zeros(3), 0.9)
    with pytest.raises(ValueError):
        ac.td_targets(r, torch.zeros(3), torch.zeros(3, 1), 0.9)
    for gamma in (-0.1, 1.1):
        with pytest.raises(ValueError):
            ac.td_targets(r, torch.zeros(3), torch.zeros(3), gamma)


# --- the loss --------------------------------------------------------------------------------------------------


def test_loss_closed_form():
    logits, values, actions, targets = _batch()
    out = call_leaves_inputs_unchanged(ac.actor_critic_loss, logits, values, actions, targets, value_coef=0.7,
                                       entropy_coef=0.2)
    log_p = F.log_softmax(logits.detach(), dim=-1)
    adv = targets - values.detach()
    policy = -(log_p[torch.arange(5), actions] * adv).mean()
    value = ((values.detach() - targets) ** 2).mean()
    entropy = -(log_p.exp() * log_p).sum(-1).mean()
    for key, want in (("policy_loss", policy), ("value_loss", value), ("entropy", entropy),
                      ("loss", policy + 0.7 * value - 0.2 * entropy)):
        assert out[key].shape == () and out[key].dtype == torch.float64
        # log-probabilities and advantages of size ~3 enter means that cancel: compare at that size
        assert_close(out[key], want, magnitude=10.0, what=f"actor_critic_loss(...)['{key}']")


def test_policy_gradient_wrt_logits():
    logits, values, actions, targets = _batch(B=6, A=3, seed=4)
    out = ac.actor_critic_loss(logits, values, actions, targets)
    (grad,) = torch.autograd.grad(out["policy_loss"], logits)
    adv = (targets - values.detach())[:, None]
    expected = -adv * (F.one_hot(actions, 3).double() - logits.detach().softmax(-1)) / 6
    assert_close(grad, expected, magnitude=1.0, what="d policy_loss / d logits")


def test_value_gradient_and_stop_gradients():
    logits, values, actions, targets = _batch(seed=5)
    targets = targets.clone().requires_grad_(True)
    out = ac.actor_critic_loss(logits, values, actions, targets, value_coef=0.5, entropy_coef=0.0)
    g_values, g_targets = torch.autograd.grad(out["loss"], (values, targets), allow_unused=True)
    # only the value term reaches the values: d/dV 0.5 * mean((V - y)^2) = (V - y) / B
    assert_close(g_values, (values.detach() - targets.detach()) / 5, what="d loss / d values")
    assert g_targets is None or torch.count_nonzero(g_targets) == 0
    # the policy loss never reaches the values
    out = ac.actor_critic_loss(logits, values, actions, targets)
    (g,) = torch.autograd.grad(out["policy_loss"], values, allow_unused=True)
    assert g is None or torch.count_nonzero(g) == 0


def test_value_head_isolated_from_the_policy_loss():
    torch.manual_seed(0)
    model = ac.ActorCritic(6, 4)
    obs = torch.eye(6)[:4]
    actions = torch.tensor([1, 0, 3, 2])
    targets = torch.tensor([0.5, -1.0, 2.0, 0.1])
    logits, values = model(obs)
    ac.actor_critic_loss(logits, values, actions, targets)["policy_loss"].backward()
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in model.value_head.parameters())
    assert any(p.grad is not None and torch.count_nonzero(p.grad) > 0 for p in model.policy_head.parameters())
    model.zero_grad(set_to_none=True)
    logits, values = model(obs)
    ac.actor_critic_loss(logits, values, actions, targets, value_coef=0.0)["loss"].backward()
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in model.value_head.parameters())
    model.zero_grad(set_to_none=True)
    logits, values = model(obs)
    ac.actor_critic_loss(logits, values, actions, targets, value_coef=0.5)["loss"].backward()
    assert torch.count_nonzero(model.value_head.weight.grad) > 0


def test_entropy_of_uniform_policy_and_the_bonus():
    logits = torch.zeros(3, 5, dtype=torch.float64, requires_grad=True)
    values, actions, targets = torch.zeros(3, dtype=torch.float64), torch.tensor([0, 4, 2]), torch.zeros(3, dtype=torch.float64)
    low = ac.actor_critic_loss(logits, values, actions, targets, entropy_coef=0.01)
    high = ac.actor_critic_loss(logits, values, actions, targets, entropy_coef=0.1)
    assert_close(low["entropy"], math.log(5), what="entropy of uniform logits over 5 actions")
    assert high["loss"] < low["loss"]
    assert_close(low["loss"] - high["loss"], 0.09 * math.log(5), magnitude=2.0, what="the entropy bonus's share")
    # the entropy bonus pushes a peaked policy towards uniform
    peaked = torch.tensor([[3.0, 0.0, -1.0]], dtype=torch.float64, requires_grad=True)
    out = ac.actor_critic_loss(peaked, torch.zeros(1, dtype=torch.float64), torch.tensor([0]),
                               torch.zeros(1, dtype=torch.float64), entropy_coef=1.0)
    (g,) = torch.autograd.grad(out["loss"], peaked)
    assert g[0, 0] > 0 and g[0, 2] < 0


@pytest.mark.contract
def test_loss_errors():
    logits, values, actions, targets = _batch()
    with pytest.raises(ValueError):
        ac.actor_critic_loss(logits, values[:4], actions, targets)
    with pytest.raises(ValueError):
        ac.actor_critic_loss(logits, values, actions[:, None], targets)
    with pytest.raises(ValueError):
        ac.actor_critic_loss(logits, values, actions.double(), targets)
    with pytest.raises(ValueError):
        ac.actor_critic_loss(logits, values, torch.full((5,), 4), targets)
    with pytest.raises(ValueError):
        ac.actor_critic_loss(logits, values, actions, targets[:2])
    with pytest.raises(ValueError):
        ac.actor_critic_loss(logits[0], values, actions, targets)
    with pytest.raises(ValueError):
        ac.actor_critic_loss(logits, values, actions, targets, value_coef=-0.5)
    with pytest.raises(ValueError):
        ac.actor_critic_loss(logits, values, actions, targets, entropy_coef=-0.01)


@pytest.mark.numerics_probe
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_extreme_logits(dtype):
    logits = torch.tensor([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4]], dtype=dtype, requires_grad=True)
    values = torch.tensor([0.5, -0.5], dtype=dtype, requires_grad=True)
    out = ac.actor_critic_loss(logits, values, torch.tensor([1, 2]), torch.tensor([1.0, 2.0], dtype=dtype))
    assert all(torch.isfinite(out[key]) for key in LOSS_KEYS)
    out["loss"].backward()
    assert torch.isfinite(logits.grad).all() and torch.isfinite(values.grad).all()
    # row 0 is deterministic (entropy 0), row 1 uniform (entropy ln 3); log-probabilities of logits of
    # size 1e4 carry an absolute error of eps * 1e4 (C8), torch's own Categorical(logits).entropy() too
    assert_close(out["entropy"], math.log(3) / 2, magnitude=1e4, what=f"entropy of logits of +-1e4 ({dtype})")


@pytest.mark.numerics_probe
def test_fp16_probe():
    logits, values, actions, targets = _batch(B=8, A=4, seed=9, dtype=torch.float32)

    def fn(lg, v, y):
        out = ac.actor_critic_loss(lg, v, actions, y)
        return tuple(out[k] for k in LOSS_KEYS)

    assert_low_precision_matches(fn, logits.detach(), values.detach(), targets)


# --- training --------------------------------------------------------------------------------------------------


def test_solves_the_corridor():
    # max_steps = 20 (default 50) bounds the cost of a learner that never learns: 300 x 20 steps
    out = ac.train_actor_critic(GridWorld(1, 6), n_episodes=300, gamma=0.9, max_steps=20, seed=0)
    model, returns = out["model"], out["returns"]
    assert isinstance(model, ac.ActorCritic) and len(returns) == 300
    assert max(returns) <= 0.9**4 + 1e-9  # the best episode: five steps, the reward discounted four times
    with torch.no_grad():
        logits, _ = model(torch.eye(6))
    assert logits[:5].argmax(dim=-1).tolist() == [1, 1, 1, 1, 1]
    assert np.mean(returns[-20:]) > np.mean(returns[:20])
    assert np.mean(returns[-20:]) > 0.6



class _SelfLoop(GridWorld):
    """A 1x2 GridWorld whose start steps to itself with reward 1 and never terminates: every episode ends on
    the time limit. Everything but ``step`` is the real GridWorld's."""

    def step(self, action: int) -> tuple[int, float, bool]:
        return self.start_state, 1.0, False


def test_a_time_limit_still_bootstraps():
    # The stub: an episode cut by max_steps is not terminal, its last transition still bootstraps. With one
    # step per episode on a self-loop paying 1, the critic's fixed point is 1 / (1 - gamma) = 2 at gamma 0.5
    # (1.99-2.01 on seeds 0-4 after 100 episodes); treating the cut as terminal makes it 1 (0.9997-0.99999).
    out = ac.train_actor_critic(_SelfLoop(1, 2), n_episodes=100, gamma=0.5, lr=0.01, max_steps=1, seed=0)
    with torch.no_grad():
        value = float(out["model"](torch.from_numpy(GridWorld(1, 2).one_hot(0))[None])[1][0])
    assert value > 1.5, f"V(s) = {value:.4f} after training on a self-loop cut every step; 2 = 1 / (1 - gamma) expected"


def test_same_seed_same_run():
    a = ac.train_actor_critic(GridWorld(1, 4), n_episodes=15, seed=3)
    b = ac.train_actor_critic(GridWorld(1, 4), n_episodes=15, seed=3)
    assert a["returns"] == b["returns"]
    for p, q in zip(a["model"].parameters(), b["model"].parameters()):
        assert torch.equal(p, q)


@pytest.mark.contract
def test_training_errors():
    env = GridWorld(1, 6)
    with pytest.raises(ValueError):
        ac.train_actor_critic(env, gamma=1.5)
    with pytest.raises(ValueError):
        ac.train_actor_critic(env, lr=0.0)
    with pytest.raises(ValueError):
        ac.train_actor_critic(env, n_episodes=0)
