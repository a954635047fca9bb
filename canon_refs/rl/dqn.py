"""Deep Q-learning with experience replay and a target network, in torch (canon item #49; Mnih et al. 2015).

What it implements: :class:`ReplayBuffer`, preallocated circular arrays sampled uniformly without
replacement; :class:`QNetwork`, an MLP from observations to one Q-value per action; :func:`dqn_targets`,
``r + gamma * (1 - done) * max_a Q_target(s', a)`` and the double-DQN variant
``r + gamma * (1 - done) * Q_target(s', argmax_a Q_online(s', a))`` (van Hasselt et al. 2016);
:func:`dqn_loss` (Huber or squared error of ``Q(s, a)`` at the taken actions); :func:`hard_update` and
:func:`soft_update` of the target network; and :func:`train_dqn`, epsilon-greedy interaction with a
``canon_refs.rl.envs.GridWorld`` through one-hot observations.

The subtle point an interviewer probes is that the target is a *constant*. It is computed under
``torch.no_grad()`` from a frozen copy of the network, so the gradient only moves ``Q(s, a)`` towards it;
differentiating through ``Q_target(s', .)`` (or computing it with the online network and keeping the
graph) turns regression into chasing a moving target, and gives the target network gradients it must
never have. Two more: ``Q(s, a)`` is *gathered* at the taken actions (not ``max_a Q(s, a)``), and a
terminal transition does not bootstrap (``1 - done``), while an episode cut by ``max_steps`` does.

Shape letters: ``B`` batch of transitions, ``A`` actions, ``obs_dim`` observation width (``S`` for
one-hot states), ``N`` buffer capacity, ``hidden`` MLP width.

Trade-off: the buffer samples *without* replacement and is preallocated rather than a Python deque of
tuples, because a batch of 64 from a buffer of 200 drawn with replacement repeats a transition with
probability ``1 - prod_{i<64} (1 - i/200) = 0.99999`` (the birthday bound), and stacking tuples costs a
Python loop per sample; the arrays cost ``N * (2 * obs_dim + 3)`` numbers (75 000 for ``N = 5000`` on the
6-state corridor). The
Huber loss (``smooth_l1_loss`` with ``beta = 1``) is the default instead of the squared error because
early targets are wrong by up to ``1 / (1 - gamma)`` and the squared error's gradient would scale with
that error.

What to test: a capacity-3 buffer after 5 adds holds the last three transitions and ``sample(3)``
returns each once; the target 2.8 (1.0 when done) and the double-DQN case where the two argmaxes
differ; that ``dqn_loss`` leaves the target network without gradients and unchanged by a step and
uses the gathered ``Q(s, a)``; ``soft_update`` with ``tau = 1``, 0 and 0.5; and the corridor, where the
greedy action after 3000 steps is "right" in every non-goal state.
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
        self.capacity = _check_int(capacity, "capacity", 1)
        self.obs_dim = _check_int(obs_dim, "obs_dim", 1)
        self.obs = np.zeros((capacity, obs_dim), dtype=np.float32)           # (N, obs_dim)
        self.next_obs = np.zeros((capacity, obs_dim), dtype=np.float32)      # (N, obs_dim)
        self.actions = np.zeros(capacity, dtype=np.int64)                    # (N,)
        self.rewards = np.zeros(capacity, dtype=np.float32)                  # (N,)
        self.dones = np.zeros(capacity, dtype=np.float32)                    # (N,)
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
        self._check_transition(obs_arr, action, reward, next_arr)
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
            A dict with at least ``"obs" (B, obs_dim)`` float32, ``"actions" (B,)`` long, ``"rewards" (B,)``
            float32, ``"next_obs" (B, obs_dim)`` float32 and ``"dones" (B,)`` float32 (copies, not views of
            the buffer; extra keys are allowed). Any uniform draw without replacement from the seeded
            generator is accepted.

        Raises:
            ValueError: ``batch_size < 1`` or ``> len(self)``.
        """
        self._check_batch_size(batch_size)
        idx = self.rng.choice(self.size, size=batch_size, replace=False)     # (B,)
        return {
            "obs": torch.from_numpy(self.obs[idx]),
            "actions": torch.from_numpy(self.actions[idx]),
            "rewards": torch.from_numpy(self.rewards[idx]),
            "next_obs": torch.from_numpy(self.next_obs[idx]),
            "dones": torch.from_numpy(self.dones[idx]),
        }

    def _check_transition(self, obs: np.ndarray, action: object, reward: float, next_obs: np.ndarray) -> None:
        for name, arr in (("obs", obs), ("next_obs", next_obs)):
            if arr.shape != (self.obs_dim,):
                raise ValueError(f"{name} must have shape ({self.obs_dim},), got {arr.shape}")
        if isinstance(action, bool) or not isinstance(action, (int, np.integer)) or action < 0:
            raise ValueError(f"action must be an int >= 0, got {action!r}")
        if not math.isfinite(float(reward)):
            raise ValueError(f"reward must be finite, got {reward!r}")

    def _check_batch_size(self, batch_size: int) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= self.size:
            raise ValueError(f"batch_size must be an int in [1, {self.size}] (len of the buffer), got {batch_size!r}")


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
        _check_obs(obs, self.obs_dim)
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
        ``(B,)`` in the dtype of ``next_q_target``, detached; the inputs are not modified.

    Raises:
        ValueError: shape mismatches; ``gamma`` outside ``[0, 1]``.

    Source: Mnih et al., Nature 518 (2015), Algorithm 1; van Hasselt, Guez, Silver, AAAI 2016, eq. (4).
    """
    gamma = _check_unit(gamma, "gamma")
    _check_target_inputs(rewards, dones, next_q_target, next_q_online)
    with torch.no_grad():
        if next_q_online is None:
            next_value = next_q_target.max(dim=1).values                     # (B,)
        else:
            best = next_q_online.argmax(dim=1)                               # (B,)
            next_value = next_q_target.gather(1, best[:, None]).squeeze(1)   # (B,)
        not_done = 1.0 - dones.to(next_value.dtype)                          # (B,)
        return rewards.to(next_value.dtype) + gamma * not_done * next_value  # (B,)


def dqn_loss(q_net: nn.Module, target_net: nn.Module, batch: dict[str, Tensor], gamma: float, *,
             double: bool = False, huber: bool = True) -> Tensor:
    """The DQN regression loss of ``Q(s, a)`` towards :func:`dqn_targets`, averaged over the batch.

    Args:
        q_net: the online network (trained). target_net: the frozen copy (evaluated under ``no_grad``).
        batch: as returned by :meth:`ReplayBuffer.sample`.
        gamma: discount in ``[0, 1]``. double: use the double-DQN target.
        huber: Huber loss (``smooth_l1_loss``, ``beta = 1``) instead of the squared error.

    Returns:
        ``()`` loss; only ``q_net`` receives gradients; ``batch`` is not modified.

    Raises:
        ValueError: ``gamma`` outside ``[0, 1]``; missing batch keys or shape mismatches.
    """
    gamma = _check_unit(gamma, "gamma")
    _check_loss_batch(batch)
    q = q_net(batch["obs"])                                                  # (B, A)
    actions = batch["actions"].long()                                        # (B,)
    q_taken = q.gather(1, actions[:, None]).squeeze(1)                       # (B,)
    with torch.no_grad():
        next_q_target = target_net(batch["next_obs"])                        # (B, A)
        next_q_online = q_net(batch["next_obs"]) if double else None         # (B, A)  None unless double
        targets = dqn_targets(batch["rewards"], batch["dones"],
                              next_q_target, gamma, next_q_online)           # (B,)
    if huber:
        return F.smooth_l1_loss(q_taken, targets.to(q_taken.dtype))
    return F.mse_loss(q_taken, targets.to(q_taken.dtype))


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

    Torch's global RNG is seeded with ``seed`` (initialisation), exploration draws from a generator seeded
    from ``seed`` and the buffer from its own (any drawing method; the same seed gives the same run). Epsilon decays linearly from
    ``epsilon_start`` to ``epsilon_end`` over ``epsilon_decay_steps``. Steps are numbered from 0; from step
    ``learning_starts`` on (once the buffer holds ``batch_size`` transitions) every step makes one Adam update
    on a sampled batch (``n_steps - learning_starts`` updates, one loss each, when the buffer is full by then); the target network is hard-updated every ``target_update`` steps. Episodes end at the goal
    (terminal) or after ``max_steps`` steps (a time limit, stored as not done so it still bootstraps).

    Args:
        env: a :class:`~canon_refs.rl.envs.GridWorld`: ``obs_dim``, ``n_actions``, ``reset() -> s``,
            ``step(a) -> (s', r, done)`` with int states, and ``one_hot(s)``, the float32 NumPy
            ``(obs_dim,)`` observation of state ``s``.
        n_steps, buffer_size, batch_size, target_update, max_steps: ints ``>= 1``.
        gamma, epsilon_start, epsilon_end: ``[0, 1]``. lr: ``> 0``.
        epsilon_decay_steps, learning_starts: ints ``>= 0``. double: double-DQN targets. seed: an int.

    Returns:
        A dict with at least ``"q_net"`` (the trained :class:`QNetwork`), ``"returns"`` (``list[float]``,
        the discounted return ``sum_t gamma^t r_t`` of every finished or cut episode) and ``"losses"``
        (``list[float]``, one per update); extra keys are allowed.

    Raises:
        ValueError: invalid hyperparameters.

    Source: Mnih et al., Nature 518 (2015), Algorithm 1.
    """
    _check_training(n_steps=n_steps, buffer_size=buffer_size, batch_size=batch_size, target_update=target_update,
                    max_steps=max_steps, epsilon_decay_steps=epsilon_decay_steps, learning_starts=learning_starts,
                    gamma=gamma, epsilon_start=epsilon_start, epsilon_end=epsilon_end, lr=lr)
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
                q_values = q_net(torch.from_numpy(obs)[None])                # (1, A)
            action = int(q_values.argmax(dim=1))
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


def _paired_parameters(target: nn.Module, source: nn.Module) -> list[tuple[Tensor, Tensor]]:
    pairs = list(zip(target.parameters(), source.parameters()))
    if len(pairs) != len(list(target.parameters())) or len(pairs) != len(list(source.parameters())):
        raise ValueError("target and source must have the same parameters")
    for t, s in pairs:
        if t.shape != s.shape:
            raise ValueError(f"target and source parameter shapes differ: {tuple(t.shape)} vs {tuple(s.shape)}")
    return pairs


def _check_obs(obs: Tensor, obs_dim: int) -> None:
    if obs.ndim != 2 or obs.shape[1] != obs_dim:
        raise ValueError(f"obs must have shape (B, {obs_dim}), got {tuple(obs.shape)}")


def _check_target_inputs(rewards: Tensor, dones: Tensor, next_q_target: Tensor, next_q_online: Tensor | None) -> None:
    if next_q_target.ndim != 2:
        raise ValueError(f"next_q_target must be (B, A), got {tuple(next_q_target.shape)}")
    B = next_q_target.shape[0]
    for name, t in (("rewards", rewards), ("dones", dones)):
        if t.shape != (B,):
            raise ValueError(f"{name} must have shape (B,) = ({B},), got {tuple(t.shape)}")
    if next_q_online is not None and next_q_online.shape != next_q_target.shape:
        raise ValueError(f"next_q_online shape {tuple(next_q_online.shape)} must equal next_q_target shape "
                         f"{tuple(next_q_target.shape)}")


def _check_loss_batch(batch: dict[str, Tensor]) -> None:
    missing = [k for k in ("obs", "actions", "rewards", "next_obs", "dones") if k not in batch]
    if missing:
        raise ValueError(f"batch is missing keys {missing}")
    B = batch["obs"].shape[0]
    if batch["actions"].shape != (B,):
        raise ValueError(f"batch['actions'] must have shape (B,) = ({B},), got {tuple(batch['actions'].shape)}")


def _check_training(*, lr: float, gamma: float, epsilon_start: float, epsilon_end: float,
                    epsilon_decay_steps: int, learning_starts: int, **positive: int) -> None:
    for name, value in positive.items():
        _check_int(value, name, 1)
    _check_int(epsilon_decay_steps, "epsilon_decay_steps", 0)
    _check_int(learning_starts, "learning_starts", 0)
    for name, unit in (("gamma", gamma), ("epsilon_start", epsilon_start), ("epsilon_end", epsilon_end)):
        _check_unit(unit, name)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")
