"""Deep Q-learning with experience replay and a target network, in torch (canon ...

Plan: Q-learning with a neural Q function, stabilised two ways: a replay buffer (sampling
decorrelates consecutive transitions) and a target network that is only synced every C steps, so
the regression target does not move with every gradient step. Double DQN picks the argmax with the
online net instead of the target net to reduce the max-operator's overestimation bias.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from canon_refs.rl.envs import GridWorld


class ReplayBuffer:
    """A circular experience buffer on preallocated NumPy arrays.

    Args:
        capacity: ``N >= 1`` transitions; the oldest is overwritten when full.
        obs_dim: observation width. seed: seeds the sampling generator ``np.random.default_rng(seed)``.

    Raises:
        ValueError: ``capacity < 1`` or ``obs_dim < 1``.
    """

    def __init__(self, capacity: int, obs_dim: int, seed: int = 0) -> None:
        self.capacity, self.obs_dim = capacity, obs_dim
        self.rng = np.random.default_rng(seed)
        self.obs = np.zeros((capacity, obs_dim), dtype=np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), dtype=np.float32)
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.dones = np.zeros(capacity, dtype=np.float32)
        self.pos = 0
        self.size = 0

    def __len__(self) -> int:
        """Number of stored transitions, ``<= capacity``."""
        return self.size

    def add(self, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, done: bool) -> None:
        """Store one transition, overwriting the oldest when full.

        Raises:
            ValueError: ``obs`` or ``next_obs`` not of shape ``(obs_dim,)``; ``action`` not an int
                ``>= 0``; ``reward`` not finite. Nothing is stored then.
        """
        i = self.pos
        self.obs[i], self.next_obs[i] = obs, next_obs
        self.actions[i], self.rewards[i], self.dones[i] = action, reward, float(done)
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int) -> dict[str, Tensor]:
        """``batch_size`` distinct stored transitions, uniformly at random, as tensors.

        Returns:
            ``{"obs": (B, obs_dim) float32, "actions": (B,) long, "rewards": (B,) float32,
            "next_obs": (B, obs_dim) float32, "dones": (B,) float32}`` (copies, not views of the buffer).

        Raises:
            ValueError: ``batch_size < 1`` or ``> len(self)``.
        """
        idx = self.rng.choice(self.size, size=batch_size, replace=False)
        return {
            "obs": torch.from_numpy(self.obs[idx].copy()),
            "actions": torch.from_numpy(self.actions[idx].copy()),
            "rewards": torch.from_numpy(self.rewards[idx].copy()),
            "next_obs": torch.from_numpy(self.next_obs[idx].copy()),
            "dones": torch.from_numpy(self.dones[idx].copy()),
        }


class QNetwork(nn.Module):
    """``Linear -> ReLU -> Linear -> ReLU -> Linear``: observations to one Q-value per action.

    Args:
        obs_dim: ``>= 1``. n_actions: ``A >= 1``. hidden: ``>= 1``.

    Raises:
        ValueError: a size below 1.
    """

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, n_actions))

    def forward(self, obs: Tensor) -> Tensor:
        """``(B, obs_dim) -> (B, A)``.

        Raises:
            ValueError: ``obs`` not ``(B, obs_dim)``.
        """
        return self.net(obs)


def dqn_targets(rewards: Tensor, dones: Tensor, next_q_target: Tensor, gamma: float,
                next_q_online: Tensor | None = None) -> Tensor:
    """Bootstrapped DQN targets, without gradient.

    ``r + gamma * (1 - done) * max_a Q_target(s', a)``; with ``next_q_online`` (double DQN) the action is
    chosen by the online network and evaluated by the target one:
    ``r + gamma * (1 - done) * Q_target(s', argmax_a Q_online(s', a))``.

    Args:
        rewards: ``(B,)``. dones: ``(B,)`` bool or 0/1. next_q_target: ``(B, A)``.
        gamma: discount in ``[0, 1]``. next_q_online: optional ``(B, A)``.

    Returns:
        ``(B,)`` in the dtype of ``next_q_target``, detached.

    Raises:
        ValueError: shape mismatches; ``gamma`` outside ``[0, 1]``.

    Source: Mnih et al., Nature 518 (2015), Algorithm 1; van Hasselt, Guez, Silver, AAAI 2016, eq. (4).
    """
    with torch.no_grad():
        if next_q_online is None:
            next_v = next_q_target.max(dim=1).values                                        # (B,)
        else:
            a_star = next_q_online.argmax(dim=1, keepdim=True)                              # (B, 1)
            next_v = next_q_target.gather(1, a_star).squeeze(1)                             # (B,)
        not_done = 1.0 - dones.to(next_q_target.dtype)
        return (rewards.to(next_q_target.dtype) + gamma * not_done * next_v).detach()


def dqn_loss(q_net: nn.Module, target_net: nn.Module, batch: dict[str, Tensor], gamma: float, *,
             double: bool = False, huber: bool = True) -> Tensor:
    """The DQN regression loss of ``Q(s, a)`` towards :func:`dqn_targets`, averaged over the batch.

    Args:
        q_net: the online network (trained). target_net: the frozen copy (evaluated under ``no_grad``).
        batch: as returned by :meth:`ReplayBuffer.sample`.
        gamma: discount in ``[0, 1]``. double: use the double-DQN target.
        huber: Huber loss (``smooth_l1_loss``, ``beta = 1``) instead of the squared error.

    Returns:
        ``()`` loss; only ``q_net`` receives gradients.

    Raises:
        ValueError: ``gamma`` outside ``[0, 1]``; missing batch keys or shape mismatches.
    """
    q = q_net(batch["obs"]).gather(1, batch["actions"].long().unsqueeze(1)).squeeze(1)    # (B,)
    with torch.no_grad():
        next_t = target_net(batch["next_obs"])
        next_o = q_net(batch["next_obs"]) if double else None
        y = dqn_targets(batch["rewards"], batch["dones"], next_t, gamma, next_o)
    return F.smooth_l1_loss(q, y, beta=1.0) if huber else F.mse_loss(q, y)


def hard_update(target: nn.Module, source: nn.Module) -> None:
    """Copy every parameter (and buffer) of ``source`` into ``target``, in place.

    Raises:
        ValueError: the two modules' parameters do not match in number and shape.
    """
    target.load_state_dict(source.state_dict())


def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak averaging in place: ``theta_t <- tau * theta_s + (1 - tau) * theta_t``.

    ``tau = 1`` copies exactly and ``tau = 0`` leaves ``target`` bitwise unchanged.

    Raises:
        ValueError: ``tau`` outside ``[0, 1]``; mismatched parameters (checked before any change).

    Source: Lillicrap et al., "Continuous control with deep reinforcement learning" (DDPG), 2016.
    """
    with torch.no_grad():
        for pt, ps in zip(target.parameters(), source.parameters()):
            if tau == 0.0:
                continue
            if tau == 1.0:
                pt.copy_(ps)
            else:
                pt.mul_(1.0 - tau).add_(ps, alpha=tau)


def train_dqn(
    env: GridWorld,
    *,
    n_steps: int = 3000,
    buffer_size: int = 5000,
    batch_size: int = 64,
    gamma: float = 0.99,
    lr: float = 1e-3,
    epsilon_start: float = 1.0,
    epsilon_end: float = 0.05,
    epsilon_decay_steps: int = 2000,
    target_update: int = 200,
    learning_starts: int = 200,
    max_steps: int = 50,
    double: bool = False,
    seed: int = 0,
) -> dict[str, object]:
    """Train a :class:`QNetwork` on ``env`` for ``n_steps`` environment steps.

    Torch's global RNG is seeded with ``seed`` (initialisation), exploration uses
    ``np.random.default_rng(seed)`` and the buffer its own generator. Epsilon decays linearly from
    ``epsilon_start`` to ``epsilon_end`` over ``epsilon_decay_steps``. From step ``learning_starts`` on
    (once the buffer holds ``batch_size`` transitions) every step makes one Adam update on a sampled
    batch; the target network is hard-updated every ``target_update`` steps. Episodes end at the goal
    (terminal) or after ``max_steps`` steps (a time limit, stored as not done so it still bootstraps).

    Args:
        env: a :class:`~canon_refs.rl.envs.GridWorld` (``obs_dim``, ``n_actions``, ``one_hot``,
            ``reset``, ``step``).
        n_steps, buffer_size, batch_size, target_update, max_steps: ints ``>= 1``.
        gamma, epsilon_start, epsilon_end: ``[0, 1]``. lr: ``> 0``.
        epsilon_decay_steps, learning_starts: ints ``>= 0``. double: double-DQN targets. seed: an int.

    Returns:
        ``{"q_net": QNetwork, "returns": list[float], "losses": list[float]}``: the trained network,
        the discounted return ``sum_t gamma^t r_t`` of every finished or cut episode, and every loss.

    Raises:
        ValueError: invalid hyperparameters.

    Source: Mnih et al., Nature 518 (2015), Algorithm 1.
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    q_net = QNetwork(env.obs_dim, env.n_actions)
    target_net = copy.deepcopy(q_net)
    for p in target_net.parameters():
        p.requires_grad_(False)
    opt = torch.optim.Adam(q_net.parameters(), lr=lr)
    buf = ReplayBuffer(buffer_size, env.obs_dim, seed=seed)
    returns: list[float] = []
    losses: list[float] = []

    def obs_of(s):
        return np.asarray(env.one_hot(s), dtype=np.float32).reshape(-1)

    s = env.reset()
    ep_ret, disc, ep_len = 0.0, 1.0, 0
    for step in range(n_steps):
        frac = 1.0 if epsilon_decay_steps == 0 else min(1.0, step / epsilon_decay_steps)
        eps = epsilon_start + frac * (epsilon_end - epsilon_start)
        o = obs_of(s)
        if rng.random() < eps:
            a = int(rng.integers(env.n_actions))
        else:
            with torch.no_grad():
                a = int(q_net(torch.from_numpy(o)[None]).argmax(dim=1).item())
        s_next, r, done = env.step(a)
        buf.add(o, a, float(r), obs_of(s_next), bool(done))   # a time-limit cut is stored as not done
        ep_ret += disc * float(r)
        disc *= gamma
        ep_len += 1
        s = s_next
        if done or ep_len >= max_steps:
            returns.append(ep_ret)
            s = env.reset()
            ep_ret, disc, ep_len = 0.0, 1.0, 0
        if step >= learning_starts and len(buf) >= batch_size:
            loss = dqn_loss(q_net, target_net, buf.sample(batch_size), gamma, double=double)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        if (step + 1) % target_update == 0:
            hard_update(target_net, q_net)
    return {"q_net": q_net, "returns": returns, "losses": losses}
