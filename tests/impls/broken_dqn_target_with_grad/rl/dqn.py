"""DQN with one classic mistake (broken variant of #49): the target is computed with gradients on.

Neither ``dqn_targets`` nor ``dqn_loss`` wraps the target in ``torch.no_grad()`` (or detaches it), so
``loss.backward()`` fills the target network's ``.grad`` and regresses the target towards the
prediction. Caught by ``test_loss_leaves_the_target_network_alone`` and ``test_targets_worked_example``.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from canon_refs.rl.envs import GridWorld


def _check_unit(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number in [0, 1], got {value!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value}")
    return float(value)


def _check_int(value: object, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


class ReplayBuffer:
    """A circular experience buffer on preallocated NumPy arrays.

    Args:
        capacity: ``N >= 1`` transitions; the oldest is overwritten when full.
        obs_dim: observation width. seed: seeds the sampling generator ``np.random.default_rng(seed)``.

    Raises:
        ValueError: ``capacity < 1`` or ``obs_dim < 1``.
    """

    def __init__(self, capacity: int, obs_dim: int, seed: int = 0) -> None:
        self.capacity = _check_int(capacity, "capacity", 1)
        self.obs_dim = _check_int(obs_dim, "obs_dim", 1)
        self.obs = np.zeros((capacity, obs_dim), dtype=np.float32)          # (N, obs_dim)
        self.next_obs = np.zeros((capacity, obs_dim), dtype=np.float32)     # (N, obs_dim)
        self.actions = np.zeros(capacity, dtype=np.int64)                   # (N,)
        self.rewards = np.zeros(capacity, dtype=np.float32)                 # (N,)
        self.dones = np.zeros(capacity, dtype=np.float32)                   # (N,)
        self.position = 0
        self.size = 0
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        """Number of stored transitions, ``<= capacity``."""
        return self.size

    def add(self, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, done: bool) -> None:
        """Store one transition, overwriting the oldest when full.

        Raises:
            ValueError: ``obs`` or ``next_obs`` not of shape ``(obs_dim,)``; ``action`` not an int
                ``>= 0``; ``reward`` not finite. Nothing is stored then.
        """
        obs_arr = np.asarray(obs, dtype=np.float32)                          # (obs_dim,)
        next_arr = np.asarray(next_obs, dtype=np.float32)                    # (obs_dim,)
        for name, arr in (("obs", obs_arr), ("next_obs", next_arr)):
            if arr.shape != (self.obs_dim,):
                raise ValueError(f"{name} must have shape ({self.obs_dim},), got {arr.shape}")
        if isinstance(action, bool) or not isinstance(action, (int, np.integer)) or action < 0:
            raise ValueError(f"action must be an int >= 0, got {action!r}")
        if not math.isfinite(float(reward)):
            raise ValueError(f"reward must be finite, got {reward!r}")
        i = self.position
        self.obs[i] = obs_arr
        self.next_obs[i] = next_arr
        self.actions[i] = int(action)
        self.rewards[i] = float(reward)
        self.dones[i] = float(bool(done))
        self.position = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int) -> dict[str, Tensor]:
        """``batch_size`` distinct stored transitions, uniformly at random, as tensors.

        Returns:
            ``{"obs": (B, obs_dim) float32, "actions": (B,) long, "rewards": (B,) float32,
            "next_obs": (B, obs_dim) float32, "dones": (B,) float32}`` (copies, not views of the buffer).

        Raises:
            ValueError: ``batch_size < 1`` or ``> len(self)``.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= self.size:
            raise ValueError(f"batch_size must be an int in [1, {self.size}] (len of the buffer), got {batch_size!r}")
        idx = self.rng.choice(self.size, size=batch_size, replace=False)     # (B,)
        return {
            "obs": torch.from_numpy(self.obs[idx]),
            "actions": torch.from_numpy(self.actions[idx]),
            "rewards": torch.from_numpy(self.rewards[idx]),
            "next_obs": torch.from_numpy(self.next_obs[idx]),
            "dones": torch.from_numpy(self.dones[idx]),
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
        self.obs_dim = _check_int(obs_dim, "obs_dim", 1)
        _check_int(n_actions, "n_actions", 1)
        _check_int(hidden, "hidden", 1)
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_actions)
        )

    def forward(self, obs: Tensor) -> Tensor:
        """``(B, obs_dim) -> (B, A)``.

        Raises:
            ValueError: ``obs`` not ``(B, obs_dim)``.
        """
        if obs.ndim != 2 or obs.shape[1] != self.obs_dim:
            raise ValueError(f"obs must have shape (B, {self.obs_dim}), got {tuple(obs.shape)}")
        return self.net(obs)                                                 # (B, A)


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
    gamma = _check_unit(gamma, "gamma")
    if next_q_target.ndim != 2:
        raise ValueError(f"next_q_target must be (B, A), got {tuple(next_q_target.shape)}")
    B = next_q_target.shape[0]
    for name, t in (("rewards", rewards), ("dones", dones)):
        if t.shape != (B,):
            raise ValueError(f"{name} must have shape (B,) = ({B},), got {tuple(t.shape)}")
    if next_q_online is not None and next_q_online.shape != next_q_target.shape:
        raise ValueError(f"next_q_online shape {tuple(next_q_online.shape)} must equal next_q_target shape "
                         f"{tuple(next_q_target.shape)}")
    if True:  # no torch.no_grad(): the target keeps its graph
        if next_q_online is None:
            next_value = next_q_target.max(dim=1).values                     # (B,)
        else:
            best = next_q_online.argmax(dim=1)                               # (B,)
            next_value = next_q_target.gather(1, best[:, None]).squeeze(1)   # (B,)
        not_done = 1.0 - dones.to(next_value.dtype)                          # (B,)
        return rewards.to(next_value.dtype) + gamma * not_done * next_value


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
    gamma = _check_unit(gamma, "gamma")
    missing = [k for k in ("obs", "actions", "rewards", "next_obs", "dones") if k not in batch]
    if missing:
        raise ValueError(f"batch is missing keys {missing}")
    q = q_net(batch["obs"])                                                  # (B, A)
    actions = batch["actions"].long()
    if actions.shape != q.shape[:1]:
        raise ValueError(f"batch['actions'] must have shape (B,) = ({q.shape[0]},), got {tuple(actions.shape)}")
    q_taken = q.gather(1, actions[:, None]).squeeze(1)                       # (B,)
    next_q_target = target_net(batch["next_obs"])                            # (B, A)
    if True:
        next_q_online = q_net(batch["next_obs"]) if double else None         # (B, A)  None unless double
        targets = dqn_targets(batch["rewards"], batch["dones"], next_q_target, gamma, next_q_online)  # (B,)
    if huber:
        return F.smooth_l1_loss(q_taken, targets.to(q_taken.dtype))
    return F.mse_loss(q_taken, targets.to(q_taken.dtype))


def _paired_parameters(target: nn.Module, source: nn.Module) -> list[tuple[Tensor, Tensor]]:
    pairs = list(zip(target.parameters(), source.parameters()))
    if len(pairs) != len(list(target.parameters())) or len(pairs) != len(list(source.parameters())):
        raise ValueError("target and source must have the same parameters")
    for t, s in pairs:
        if t.shape != s.shape:
            raise ValueError(f"target and source parameter shapes differ: {tuple(t.shape)} vs {tuple(s.shape)}")
    return pairs


def hard_update(target: nn.Module, source: nn.Module) -> None:
    """Copy every parameter (and buffer) of ``source`` into ``target``, in place.

    Raises:
        ValueError: the two modules' parameters do not match in number and shape.
    """
    _paired_parameters(target, source)
    target.load_state_dict(source.state_dict())


def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak averaging in place: ``theta_t <- tau * theta_s + (1 - tau) * theta_t``.

    ``tau = 1`` copies exactly and ``tau = 0`` leaves ``target`` bitwise unchanged.

    Raises:
        ValueError: ``tau`` outside ``[0, 1]``; mismatched parameters (checked before any change).

    Source: Lillicrap et al., "Continuous control with deep reinforcement learning" (DDPG), 2016.
    """
    tau = _check_unit(tau, "tau")
    pairs = _paired_parameters(target, source)
    with torch.no_grad():
        for t, s in pairs:
            t.mul_(1.0 - tau).add_(s, alpha=tau)


def _adam(params: object, lr: float) -> torch.optim.Optimizer:
    """Adam, fused where the CPU kernel exists (torch >= 2.4): the step of a small MLP is 3x cheaper."""
    params = list(params)  # type: ignore[call-overload]
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, lr=lr)


def _epsilon_at(step: int, start: float, end: float, decay_steps: int) -> float:
    """Linear decay from ``start`` to ``end`` over ``decay_steps`` steps, then constant."""
    fraction = min(1.0, step / decay_steps) if decay_steps > 0 else 1.0
    return start + fraction * (end - start)


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
    for name, value in (("n_steps", n_steps), ("buffer_size", buffer_size), ("batch_size", batch_size),
                        ("target_update", target_update), ("max_steps", max_steps)):
        _check_int(value, name, 1)
    _check_int(epsilon_decay_steps, "epsilon_decay_steps", 0)
    _check_int(learning_starts, "learning_starts", 0)
    gamma = _check_unit(gamma, "gamma")
    epsilon_start = _check_unit(epsilon_start, "epsilon_start")
    epsilon_end = _check_unit(epsilon_end, "epsilon_end")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    q_net = QNetwork(env.obs_dim, env.n_actions)
    target_net = copy.deepcopy(q_net).requires_grad_(False)
    optimizer = _adam(q_net.parameters(), lr)
    buffer = ReplayBuffer(buffer_size, env.obs_dim, seed=seed)
    returns: list[float] = []
    losses: list[float] = []
    s, episode_step, discounted, discount = env.reset(), 0, 0.0, 1.0
    for step in range(n_steps):
        obs = env.one_hot(s)
        if rng.random() < _epsilon_at(step, epsilon_start, epsilon_end, epsilon_decay_steps):
            action = int(rng.integers(env.n_actions))
        else:
            with torch.no_grad():
                action = int(q_net(torch.from_numpy(obs)[None]).argmax(dim=1))
        s_next, reward, done = env.step(action)
        buffer.add(obs, action, reward, env.one_hot(s_next), done)
        discounted += discount * reward
        discount *= gamma
        episode_step += 1
        s = s_next
        if done or episode_step >= max_steps:
            returns.append(discounted)
            s, episode_step, discounted, discount = env.reset(), 0, 0.0, 1.0
        if step >= learning_starts and len(buffer) >= batch_size:
            loss = dqn_loss(q_net, target_net, buffer.sample(batch_size), gamma, double=double)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        if (step + 1) % target_update == 0:
            hard_update(target_net, q_net)
    return {"q_net": q_net, "returns": returns, "losses": losses}
