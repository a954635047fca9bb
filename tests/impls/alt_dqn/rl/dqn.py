"""DQN written differently (alternative for #49).

The buffer stores torch tensors and samples with ``rng.permutation(len)[:B]``; the targets select with a
one-hot mask instead of ``gather``; the Huber loss is written out with ``torch.where``; Polyak averaging
uses ``lerp_``; the target network is refreshed with ``copy_`` parameter by parameter.
Shapes: ``B`` batch, ``A`` actions, ``N`` capacity, ``obs_dim`` observation width.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn


class ReplayBuffer:
    def __init__(self, capacity, obs_dim, seed=0):
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity, self.obs_dim = capacity, obs_dim
        self.store = {
            "obs": torch.zeros(capacity, obs_dim),                          # (N, obs_dim)
            "actions": torch.zeros(capacity, dtype=torch.long),             # (N,)
            "rewards": torch.zeros(capacity),                               # (N,)
            "next_obs": torch.zeros(capacity, obs_dim),                     # (N, obs_dim)
            "dones": torch.zeros(capacity),                                 # (N,)
        }
        self.count = 0
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return min(self.count, self.capacity)

    def add(self, obs, action, reward, next_obs, done):
        o = torch.as_tensor(np.asarray(obs, dtype=np.float32))              # (obs_dim,)
        n = torch.as_tensor(np.asarray(next_obs, dtype=np.float32))         # (obs_dim,)
        if tuple(o.shape) != (self.obs_dim,):
            raise ValueError("obs has the wrong shape")
        if tuple(n.shape) != (self.obs_dim,):
            raise ValueError("next_obs has the wrong shape")
        slot = self.count % self.capacity
        for key, value in (("obs", o), ("actions", action), ("rewards", reward), ("next_obs", n),
                           ("dones", float(done))):
            self.store[key][slot] = value
        self.count += 1

    def sample(self, batch_size):
        if not 1 <= batch_size <= len(self):
            raise ValueError(f"batch_size must lie in [1, {len(self)}]")
        idx = torch.from_numpy(self.rng.permutation(len(self))[:batch_size])  # (B,)
        return {k: v[idx].clone() for k, v in self.store.items()}


class QNetwork(nn.Module):
    def __init__(self, obs_dim, n_actions, hidden=64):
        super().__init__()
        self.obs_dim = obs_dim
        self.l1, self.l2, self.l3 = nn.Linear(obs_dim, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, n_actions)

    def forward(self, obs):
        if obs.dim() != 2 or obs.shape[-1] != self.obs_dim:
            raise ValueError("obs must be (B, obs_dim)")
        h = torch.relu(self.l1(obs))                                        # (B, hidden)
        h = torch.relu(self.l2(h))                                          # (B, hidden)
        return self.l3(h)                                                   # (B, A)


def dqn_targets(rewards, dones, next_q_target, gamma, next_q_online=None):
    if not 0 <= gamma <= 1:
        raise ValueError("gamma must lie in [0, 1]")
    if next_q_target.dim() != 2:
        raise ValueError("next_q_target must be (B, A)")
    if rewards.shape != next_q_target.shape[:1]:
        raise ValueError("rewards must be (B,)")
    if dones.shape != next_q_target.shape[:1]:
        raise ValueError("dones must be (B,)")
    if next_q_online is not None and next_q_online.shape != next_q_target.shape:
        raise ValueError("next_q_online must match next_q_target")
    q_t = next_q_target.detach()
    if next_q_online is None:
        nxt = q_t.amax(dim=-1)                                              # (B,)
    else:
        pick = nn.functional.one_hot(next_q_online.detach().argmax(-1), q_t.shape[-1]).to(q_t.dtype)  # (B, A)
        nxt = (pick * q_t).sum(dim=-1)                                      # (B,)
    r = rewards.detach().to(q_t.dtype)
    return torch.where(dones.bool(), r, r + gamma * nxt)


def dqn_loss(q_net, target_net, batch, gamma, *, double=False, huber=True):
    if not 0 <= gamma <= 1:
        raise ValueError("gamma must lie in [0, 1]")
    q = q_net(batch["obs"])                                                 # (B, A)
    if batch["actions"].shape != q.shape[:1]:
        raise ValueError("actions must be (B,)")
    q_sa = (q * nn.functional.one_hot(batch["actions"].long(), q.shape[1]).to(q.dtype)).sum(dim=1)  # (B,)
    with torch.no_grad():
        y = dqn_targets(batch["rewards"], batch["dones"], target_net(batch["next_obs"]), gamma,
                        q_net(batch["next_obs"]) if double else None)
    err = q_sa - y.to(q_sa.dtype)
    if huber:
        return torch.where(err.abs() < 1, 0.5 * err**2, err.abs() - 0.5).mean()
    return (err**2).mean()


def _check(target, source):
    a, b = list(target.parameters()), list(source.parameters())
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        raise ValueError("target and source differ")
    return a, b


def hard_update(target, source):
    with torch.no_grad():
        for t, s in zip(*_check(target, source)):
            t.copy_(s)


def soft_update(target, source, tau):
    if not 0 <= tau <= 1:
        raise ValueError("tau must lie in [0, 1]")
    with torch.no_grad():
        for t, s in zip(*_check(target, source)):
            t.lerp_(s, tau)


def train_dqn(env, *, n_steps=3000, buffer_size=5000, batch_size=64, gamma=0.99, lr=1e-3, epsilon_start=1.0,
              epsilon_end=0.05, epsilon_decay_steps=2000, target_update=200, learning_starts=200, max_steps=50,
              double=False, seed=0):
    if not 0 <= gamma <= 1:
        raise ValueError("gamma must lie in [0, 1]")
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = QNetwork(env.obs_dim, env.n_actions)
    tgt = copy.deepcopy(net)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    buf = ReplayBuffer(buffer_size, env.obs_dim, seed)
    rets, losses = [], []
    s, t, ret = env.reset(), 0, 0.0
    for step in range(n_steps):
        eps = epsilon_end + (epsilon_start - epsilon_end) * max(0.0, 1 - step / max(epsilon_decay_steps, 1))
        o = env.one_hot(s)
        if rng.random() < eps:
            a = int(rng.integers(env.n_actions))
        else:
            with torch.no_grad():
                a = int(net(torch.tensor(o)[None]).argmax())
        s2, r, done = env.step(a)
        buf.add(o, a, r, env.one_hot(s2), done)
        ret += gamma**t * r
        s, t = s2, t + 1
        if done or t == max_steps:
            rets.append(ret)
            s, t, ret = env.reset(), 0, 0.0
        if step >= learning_starts and len(buf) >= batch_size:
            loss = dqn_loss(net, tgt, buf.sample(batch_size), gamma, double=double)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        if (step + 1) % target_update == 0:
            hard_update(tgt, net)
    return {"q_net": net, "returns": rets, "losses": losses}
