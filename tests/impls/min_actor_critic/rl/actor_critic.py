"""One-step advantage actor-critic in torch (canon item #51; Sutton & Barto section ...

Plan: a shared trunk with a policy head and a value head. The critic's one-step TD target
r + gamma V(s') gives the advantage; it is detached because the actor should follow the critic's
estimate, not push the critic around. Entropy bonus keeps exploration alive early.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from canon_refs.rl.envs import GridWorld


class ActorCritic(nn.Module):
    """A shared ``Linear -> tanh`` trunk with a policy head (logits) and a value head (scalar).

    Args:
        obs_dim: observation width, ``>= 1``. n_actions: ``A >= 1``. hidden: trunk width, ``>= 1``.

    Raises:
        ValueError: a size below 1.
    """

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh())
        self.policy_head = nn.Linear(hidden, n_actions)
        self.value_head = nn.Linear(hidden, 1)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """``(B, obs_dim)`` observations -> logits ``(B, A)`` and values ``(B,)``.

        Raises:
            ValueError: ``obs`` not ``(B, obs_dim)``.
        """
        h = self.trunk(obs)                                            # (B, hidden)
        return self.policy_head(h), self.value_head(h).squeeze(-1)     # (B, A), (B,)


def td_targets(rewards: Tensor, next_values: Tensor, dones: Tensor, gamma: float) -> Tensor:
    """One-step TD targets ``r + gamma * (1 - done) * V(s')``, detached: ``(T,) -> (T,)``.

    Args:
        rewards: ``(T,)`` floats. next_values: ``(T,)`` ``V(s_{t+1})``. dones: ``(T,)`` bool or 0/1.
        gamma: discount in ``[0, 1]``.

    Returns:
        ``(T,)`` in the dtype of ``rewards``, with no gradient history.

    Raises:
        ValueError: shapes differ or are not 1-D; ``gamma`` outside ``[0, 1]``.

    Source: Sutton & Barto (2018), eq. (13.14) (the ``delta`` of one-step actor-critic).
    """
    not_done = 1.0 - dones.to(rewards.dtype)
    return (rewards + gamma * not_done * next_values.to(rewards.dtype)).detach()


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
        ``{"loss", "policy_loss", "value_loss", "entropy"}``, 0-d tensors in the dtype of ``logits``.

    Raises:
        ValueError: shape mismatches, non-integer or out-of-range ``actions``, negative coefficients.

    Source: Mnih et al., "Asynchronous Methods for Deep Reinforcement Learning" (A3C), ICML 2016, eq. (1).
    """
    logp = F.log_softmax(logits, dim=-1)                                   # (B, A)
    logp_a = logp.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)     # (B,)
    targets = targets.detach().to(values.dtype)
    adv = (targets - values).detach()
    policy_loss = -(logp_a * adv).mean()
    value_loss = ((values - targets) ** 2).mean()
    entropy = -(logp.exp() * logp).sum(-1).mean()
    loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
    out = {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}
    return {k: v.to(logits.dtype) for k, v in out.items()}


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

    Seeds torch's global RNG (initialisation) with ``seed`` and samples actions with a
    ``torch.Generator`` seeded from ``seed``. An episode ends at the goal (terminal: no bootstrap) or
    after ``max_steps`` steps (a time limit: the last transition still bootstraps).

    Args:
        env: a :class:`~canon_refs.rl.envs.GridWorld` (``obs_dim``, ``n_actions``, ``one_hot``,
            ``reset``, ``step``).
        n_episodes: ``>= 1``. gamma: ``[0, 1]``. lr: ``> 0``. max_steps: ``>= 1``. seed: an int.

    Returns:
        ``{"model": ActorCritic, "returns": list[float]}``, the discounted return
        ``sum_t gamma^t r_t`` of every episode.

    Raises:
        ValueError: invalid hyperparameters.
    """
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = ActorCritic(env.obs_dim, env.n_actions)
    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def obs_of(state):
        return torch.as_tensor(env.one_hot(state), dtype=torch.float32).reshape(1, -1)

    returns: list[float] = []
    for _ in range(n_episodes):
        s = env.reset()
        ret, disc = 0.0, 1.0
        for _ in range(max_steps):
            logits, value = model(obs_of(s))
            a = torch.multinomial(torch.softmax(logits.detach(), -1), 1, generator=gen).view(1)
            s_next, r, done = env.step(int(a))
            with torch.no_grad():
                _, next_value = model(obs_of(s_next))
            target = td_targets(torch.tensor([float(r)]), next_value, torch.tensor([float(done)]), gamma)
            losses = actor_critic_loss(logits, value, a, target)
            opt.zero_grad()
            losses["loss"].backward()
            opt.step()
            ret += disc * float(r)
            disc *= gamma
            s = s_next
            if done:
                break
        returns.append(ret)
    return {"model": model, "returns": returns}
