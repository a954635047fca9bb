"""Actor-critic written differently (alternative for #51).

The policy term uses ``F.cross_entropy`` (the negative log-likelihood of the taken action), the value
term ``F.mse_loss``, the entropy ``logsumexp(z) - sum p z`` on max-shifted logits; terminal targets come from ``torch.where``.
The training loop evaluates the network on every one-hot state at once and samples by inverse CDF.
Shapes: ``B`` transitions, ``A`` actions, ``S`` states.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class ActorCritic(nn.Module):
    def __init__(self, obs_dim, n_actions, hidden=64):
        super().__init__()
        if min(obs_dim, n_actions, hidden) < 1:
            raise ValueError("obs_dim, n_actions and hidden must be >= 1")
        self.obs_dim = obs_dim
        self.trunk = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh())
        self.policy_head = nn.Linear(hidden, n_actions)
        self.value_head = nn.Linear(hidden, 1)

    def forward(self, obs):
        if obs.dim() != 2 or obs.size(-1) != self.obs_dim:
            raise ValueError(f"obs must be (B, {self.obs_dim})")
        features = self.trunk(obs)                                           # (B, hidden)
        return self.policy_head(features), self.value_head(features)[:, 0]   # (B, A), (B,)


def td_targets(rewards, next_values, dones, gamma):
    if not 0 <= gamma <= 1:
        raise ValueError("gamma must lie in [0, 1]")
    if next_values.shape != rewards.shape or rewards.dim() != 1:
        raise ValueError("next_values must match rewards (T,)")
    if dones.shape != rewards.shape:
        raise ValueError("dones must match rewards (T,)")
    with torch.no_grad():
        boot = rewards + gamma * next_values.to(rewards.dtype)
        return torch.where(dones.bool(), rewards, boot)


def actor_critic_loss(logits, values, actions, targets, *, value_coef=0.5, entropy_coef=0.01):
    if value_coef < 0 or entropy_coef < 0:
        raise ValueError("value_coef and entropy_coef must be >= 0 " + ("(value_coef)" if value_coef < 0 else "(entropy_coef)"))
    if logits.dim() != 2:
        raise ValueError("logits must be (B, A)")
    B, A = logits.shape
    if values.shape != (B,):
        raise ValueError("values must be (B,)")
    if actions.shape != (B,) or actions.is_floating_point() or actions.dtype == torch.bool:
        raise ValueError("actions must be integer (B,)")
    if actions.numel() and (actions.min() < 0 or actions.max() >= A):
        raise ValueError("actions out of range")
    if targets.shape != (B,):
        raise ValueError("targets must be (B,)")
    y = targets.detach().to(values.dtype)
    nll = F.cross_entropy(logits, actions.long(), reduction="none")         # (B,)
    policy_loss = (nll * (y - values).detach()).mean()
    value_loss = F.mse_loss(values, y)
    z = logits - logits.amax(dim=-1, keepdim=True)                          # (B, A)
    p = z.softmax(-1)
    entropy = (torch.logsumexp(z, -1) - (p * z).sum(-1)).mean()             # ()
    loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
    return {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}


def train_actor_critic(env, *, n_episodes=300, gamma=0.9, lr=3e-3, max_steps=50, seed=0):
    if not 0 <= gamma <= 1:
        raise ValueError("gamma must lie in [0, 1]")
    if not lr > 0 or not math.isfinite(lr):
        raise ValueError("lr must be > 0")
    if n_episodes < 1 or max_steps < 1:
        raise ValueError("n_episodes and max_steps must be >= 1")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    net = ActorCritic(env.obs_dim, env.n_actions)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    states = torch.stack([torch.from_numpy(env.one_hot(s)) for s in range(env.n_states)])  # (S, S)
    history = []
    for _ in range(n_episodes):
        s, ret, t, done = env.reset(), 0.0, 0, False
        while not done and t < max_steps:
            logits, values = net(states)                                     # (S, A), (S,)
            cdf = logits[s].detach().softmax(-1).cumsum(0)
            a = min(int(torch.searchsorted(cdf, torch.rand(1, generator=gen) * cdf[-1])), env.n_actions - 1)
            s2, r, done = env.step(a)
            y = td_targets(torch.tensor([r]), values[s2 : s2 + 1].detach(), torch.tensor([done]), gamma)
            out = actor_critic_loss(logits[s : s + 1], values[s : s + 1], torch.tensor([a]), y)
            opt.zero_grad()
            out["loss"].backward()
            opt.step()
            ret += gamma**t * r
            s, t = s2, t + 1
        history.append(ret)
    return {"model": net, "returns": history}
