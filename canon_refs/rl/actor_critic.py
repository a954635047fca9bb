"""One-step advantage actor-critic in torch (canon item #51; Sutton & Barto section 13.5, A2C's loss).

What it implements: :class:`ActorCritic`, a shared ``trunk`` with a ``policy_head`` (logits) and a
``value_head`` (state value); :func:`td_targets`, the one-step bootstrap ``r + gamma * (1 - done) * V(s')``
returned detached; :func:`actor_critic_loss`, the policy-gradient term with the TD error as advantage,
the squared value error and an entropy bonus; and :func:`train_actor_critic`, online one-step updates
on ``canon_refs.rl.envs.GridWorld`` with one-hot observations.

The subtle point an interviewer probes is where the gradient must stop. The advantage
``targets - values`` is a *weight* in the policy loss and must be detached: otherwise minimising
``-log pi(a) * (targets - values)`` also pushes ``V(s)`` up wherever ``log pi(a) < 0``, and the critic
is trained by the actor's loss. The target ``r + gamma * V(s')`` must be detached too (semi-gradient
TD): differentiating through ``V(s')`` makes the critic chase its own target. And at a terminal
transition ``V(s')`` is not bootstrapped at all (``1 - done``).

Shape letters: ``B`` transitions in a batch (``T`` for a rollout), ``A`` actions, ``obs_dim``
observation width, ``hidden`` trunk width.

Trade-off: one shared trunk for actor and critic rather than two networks, because on a 6-state
corridor the value and the policy read the same features and one trunk saves a third of the
parameters (773 instead of 1 221 at ``hidden = 64``); the price is that the value loss, weighted by
``value_coef = 0.5``, also shapes the policy's features. One-step online updates (batch of one
transition) rather than n-step rollouts keep the loop short, at the cost of a noisier gradient.

What to test: ``td_targets([1, 0], [2, 3], [0, 1], 0.9) = [2.8, 0.0]``; with ``value_coef = 0`` the value
head gets no gradient and the policy loss never reaches it; ``d policy_loss / d logits =
-adv * (onehot(a) - softmax) / B``; the entropy of zero logits is ``ln A``; the corridor is solved
(greedy "right" everywhere, returns rising towards ``0.9^4 = 0.6561``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from canon_refs.rl.envs import GridWorld


class ActorCritic(nn.Module):
    """A shared ``Linear -> tanh`` trunk with a policy head (logits) and a value head (scalar).

    Attributes (the tests read them): ``trunk``, the module whose output ``trunk(obs)`` is the tanh features
    both heads read; ``policy_head``, an ``nn.Linear(hidden, n_actions)``; ``value_head``, an ``nn.Linear(hidden, 1)``.

    Args:
        obs_dim: observation width, ``>= 1``. n_actions: ``A >= 1``. hidden: trunk width, ``>= 1``.

    Raises:
        ValueError: a size below 1.
    """

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64) -> None:
        super().__init__()
        for name, value in (("obs_dim", obs_dim), ("n_actions", n_actions), ("hidden", hidden)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.obs_dim = obs_dim
        self.trunk = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh())
        self.policy_head = nn.Linear(hidden, n_actions)
        self.value_head = nn.Linear(hidden, 1)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """``(B, obs_dim)`` observations -> logits ``(B, A)`` and values ``(B,)``.

        Raises:
            ValueError: ``obs`` not ``(B, obs_dim)``.
        """
        _check_obs(obs, self.obs_dim)
        h = self.trunk(obs)                                            # (B, hidden)
        logits = self.policy_head(h)                                   # (B, A)
        values = self.value_head(h).squeeze(-1)                        # (B,)
        return logits, values


def td_targets(rewards: Tensor, next_values: Tensor, dones: Tensor, gamma: float) -> Tensor:
    """One-step TD targets ``r + gamma * (1 - done) * V(s')``, detached: ``(T,) -> (T,)``.

    Args:
        rewards: ``(T,)`` floats. next_values: ``(T,)`` ``V(s_{t+1})``. dones: ``(T,)`` bool or 0/1.
        gamma: discount in ``[0, 1]``.

    Returns:
        ``(T,)`` in the dtype of ``rewards``, with no gradient history; the inputs are not modified.

    Raises:
        ValueError: shapes differ or are not 1-D; ``gamma`` outside ``[0, 1]``.

    Source: Sutton & Barto (2018), eq. (13.14) (the ``delta`` of one-step actor-critic).
    """
    gamma = _check_unit(gamma, "gamma")
    _check_transitions(rewards, next_values=next_values, dones=dones)
    not_done = 1.0 - dones.to(rewards.dtype)                           # (T,)
    bootstrap = gamma * not_done * next_values.to(rewards.dtype)       # (T,)
    return (rewards + bootstrap).detach()                              # (T,)


def actor_critic_loss(
    logits: Tensor,
    values: Tensor,
    actions: Tensor,
    targets: Tensor,
    *,
    value_coef: float = 0.5,
    entropy_coef: float = 0.01,
) -> dict[str, Tensor]:
    """Advantage actor-critic loss on a batch of transitions.

    ``adv = (targets - values).detach()``; ``policy_loss = -mean(log pi(a) * adv)``;
    ``value_loss = mean((values - targets)^2)``; ``entropy = mean H(pi)``;
    ``loss = policy_loss + value_coef * value_loss - entropy_coef * entropy``.

    Args:
        logits: ``(B, A)``. values: ``(B,)``. actions: ``(B,)`` integer actions in ``[0, A)``.
        targets: ``(B,)`` value targets (treated as constants).
        value_coef, entropy_coef: weights, ``>= 0``.

    Returns:
        A dict with at least the keys ``"loss"``, ``"policy_loss"``, ``"value_loss"`` and ``"entropy"``
        (extra keys are allowed), 0-d tensors in the dtype of ``logits``; the inputs are not modified.

    Raises:
        ValueError: shape mismatches, non-integer or out-of-range ``actions``, negative coefficients.

    Source: Mnih et al., "Asynchronous Methods for Deep Reinforcement Learning" (A3C), ICML 2016, eq. (1).
    """
    value_coef = _check_coef(value_coef, "value_coef")
    entropy_coef = _check_coef(entropy_coef, "entropy_coef")
    _check_batch(logits, values, actions, targets)
    log_probs = F.log_softmax(logits, dim=-1)                          # (B, A)
    chosen = log_probs.gather(1, actions.long()[:, None]).squeeze(1)   # (B,)
    targets = targets.detach().to(values.dtype)                        # (B,)
    adv = (targets - values).detach()                                  # (B,)
    policy_loss = -(chosen * adv.to(chosen.dtype)).mean()
    value_loss = ((values - targets) ** 2).mean()
    entropy = -(log_probs.exp() * log_probs).sum(dim=-1)               # (B,)
    mean_entropy = entropy.mean()
    loss = policy_loss + value_coef * value_loss - entropy_coef * mean_entropy
    return {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": mean_entropy}


def train_actor_critic(
    env: GridWorld,
    *,
    n_episodes: int = 300,
    gamma: float = 0.9,
    lr: float = 3e-3,
    max_steps: int = 50,
    seed: int = 0,
) -> dict[str, object]:
    """Online one-step actor-critic with Adam: one update per environment step.

    Seeds torch's global RNG (initialisation) with ``seed`` and samples actions from a generator seeded
    from ``seed`` (any sampling method: the same seed gives the same run). An episode ends at the goal
    (terminal: no bootstrap) or after ``max_steps`` steps (a time limit: the last transition still
    bootstraps).

    Args:
        env: a :class:`~canon_refs.rl.envs.GridWorld`: ``obs_dim``, ``n_actions``, ``reset() -> s``,
            ``step(a) -> (s', r, done)`` with int states, and ``one_hot(s)``, the float32 NumPy
            ``(obs_dim,)`` observation of state ``s``.
        n_episodes: ``>= 1``. gamma: ``[0, 1]``. lr: ``> 0``. max_steps: ``>= 1``. seed: an int.

    Returns:
        A dict with at least ``"model"`` (the trained :class:`ActorCritic`) and ``"returns"`` (a
        ``list[float]``, the discounted return ``sum_t gamma^t r_t`` of every episode); extra keys are
        allowed.

    Raises:
        ValueError: invalid hyperparameters.
    """
    gamma = _check_unit(gamma, "gamma")
    _check_training(lr, n_episodes, max_steps)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = ActorCritic(env.obs_dim, env.n_actions)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    returns: list[float] = []
    for _ in range(n_episodes):
        s = env.reset()
        discounted, discount = 0.0, 1.0
        for _ in range(max_steps):
            obs = torch.from_numpy(env.one_hot(s))[None]               # (1, obs_dim)
            logits, value = model(obs)                                 # (1, A), (1,)
            probs = logits.detach().softmax(-1)[0]                     # (A,)
            action = torch.multinomial(probs, 1, generator=generator)  # (1,)
            s_next, reward, done = env.step(int(action))
            next_obs = torch.from_numpy(env.one_hot(s_next))[None]     # (1, obs_dim)
            with torch.no_grad():
                next_value = model(next_obs)[1]                        # (1,)
            reward_t = torch.tensor([reward])                          # (1,)
            done_t = torch.tensor([float(done)])                       # (1,)
            target = td_targets(reward_t, next_value, done_t, gamma)   # (1,)
            losses = actor_critic_loss(logits, value, action, target)
            optimizer.zero_grad(set_to_none=True)
            losses["loss"].backward()
            optimizer.step()
            discounted += discount * reward
            discount *= gamma
            s = s_next
            if done:
                break
        returns.append(discounted)
    return {"model": model, "returns": returns}


def _check_unit(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number in [0, 1], got {value!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value}")
    return float(value)


def _check_coef(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return float(value)


def _check_obs(obs: Tensor, obs_dim: int) -> None:
    if obs.ndim != 2 or obs.shape[1] != obs_dim:
        raise ValueError(f"obs must have shape (B, {obs_dim}), got {tuple(obs.shape)}")


def _check_transitions(rewards: Tensor, **named: Tensor) -> None:
    if rewards.ndim != 1:
        raise ValueError(f"rewards must be 1-D (T,), got {tuple(rewards.shape)}")
    for name, t in named.items():
        if t.shape != rewards.shape:
            raise ValueError(f"{name} shape {tuple(t.shape)} must equal rewards shape {tuple(rewards.shape)}")


def _check_batch(logits: Tensor, values: Tensor, actions: Tensor, targets: Tensor) -> None:
    if logits.ndim != 2:
        raise ValueError(f"logits must be (B, A), got {tuple(logits.shape)}")
    B, A = logits.shape
    for name, t in (("values", values), ("actions", actions), ("targets", targets)):
        if t.shape != (B,):
            raise ValueError(f"{name} must have shape (B,) = ({B},), got {tuple(t.shape)}")
    if actions.dtype.is_floating_point or actions.dtype == torch.bool:
        raise ValueError(f"actions must be integer, got {actions.dtype}")
    if bool(((actions < 0) | (actions >= A)).any()):
        raise ValueError(f"actions must lie in [0, {A})")


def _check_training(lr: float, n_episodes: int, max_steps: int) -> None:
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")
    for name, value in (("n_episodes", n_episodes), ("max_steps", max_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
