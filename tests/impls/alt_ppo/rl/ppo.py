"""The PPO update written differently (alternative for #53).

The clipped surrogate in its sign-split form, ``A >= 0: min(rho, 1 + eps) * A`` and
``A < 0: max(rho, 1 - eps) * A``; ``approx_kl`` computed in float64 and cast back; the value loss with
``F.mse_loss`` and ``torch.where``; log-probabilities and entropies from ``torch.distributions.Categorical``;
minibatches from ``torch.split`` of one permutation per epoch. Shapes: ``B`` samples, ``M`` minibatch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.distributions import Categorical

KEYS = ("loss", "policy_loss", "value_loss", "approx_kl", "clip_fraction")


def _t(x):
    return x if torch.is_tensor(x) else torch.tensor(x, dtype=torch.float64)  # (...,)


def ppo_clip_objective(ratio, advantage, eps=0.2):
    if not 0 < eps < 1:
        raise ValueError(f"eps must lie in (0, 1), got {eps}")
    rho = _t(ratio)
    adv = _t(advantage).to(rho.dtype)
    capped_up = torch.clamp(rho, max=1 + eps) * adv
    capped_down = torch.clamp(rho, min=1 - eps) * adv
    return torch.where(adv >= 0, capped_up, capped_down)


def kl_penalized_reward(reward, logp, logp_ref, beta):
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta must be >= 0, got {beta}")
    return _t(reward) + beta * (_t(logp_ref) - _t(logp))


def ppo_loss(new_logp, old_logp, advantages, values, returns, *, old_values=None, entropy=None, clip_eps=0.2,
             value_clip=None, vf_coef=0.5, ent_coef=0.0, normalize_advantages=False):
    if not 0 < clip_eps < 1:
        raise ValueError("clip_eps must lie in (0, 1)")
    if value_clip is not None and not value_clip > 0:
        raise ValueError("value_clip must be > 0")
    if vf_coef < 0 or ent_coef < 0:
        raise ValueError("vf_coef and ent_coef must be >= 0")
    if new_logp.dim() != 1 or len(new_logp) == 0:
        raise ValueError("new_logp must be (B,)")
    for name, t in (("old_logp", old_logp), ("advantages", advantages), ("values", values), ("returns", returns),
                    ("old_values", old_values), ("entropy", entropy)):
        if t is not None and tuple(t.shape) != tuple(new_logp.shape):
            raise ValueError(f"{name} has the wrong shape")
    if old_logp.requires_grad:
        raise ValueError("old_logp must be detached")
    if value_clip is not None and old_values is None:
        raise ValueError("value_clip requires old_values")
    adv = advantages.detach().to(new_logp.dtype)
    if normalize_advantages:
        centred = adv - adv.mean()
        adv = centred / (centred.pow(2).mean().sqrt() + 1e-8)
    d = new_logp - old_logp.to(new_logp.dtype)
    rho = d.exp()
    policy_loss = -ppo_clip_objective(rho, adv, clip_eps).mean()
    y = returns.detach().to(values.dtype)
    if value_clip is None:
        value_loss = 0.5 * F.mse_loss(values, y)
    else:
        vo = old_values.detach().to(values.dtype)
        vc = vo + torch.clamp(values - vo, -value_clip, value_clip)
        e1 = F.mse_loss(values, y, reduction="none")
        e2 = F.mse_loss(vc, y, reduction="none")
        value_loss = 0.5 * torch.where(e1 >= e2, e1, e2).mean()
    ent = entropy.mean() if entropy is not None else new_logp.new_zeros(())  # ()
    loss = policy_loss + vf_coef * value_loss - ent_coef * ent
    d64 = d.detach().double()
    approx_kl = (d64.exp() - 1 - d64).mean().to(new_logp.dtype)
    clip_fraction = (torch.abs(rho.detach() - 1) > clip_eps).float().mean().to(new_logp.dtype)
    return {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": ent,
            "approx_kl": approx_kl, "clip_fraction": clip_fraction}


def ppo_update(model, optimizer, batch, *, epochs=4, minibatch_size=64, clip_eps=0.2, vf_coef=0.5, ent_coef=0.0,
               max_grad_norm=0.5, target_kl=None, value_clip=None, seed=0):
    if epochs < 1:
        raise ValueError("epochs must be >= 1")
    if minibatch_size < 1:
        raise ValueError("minibatch_size must be >= 1")
    if not 0 < clip_eps < 1:
        raise ValueError("clip_eps must lie in (0, 1)")
    if value_clip is not None and value_clip <= 0:
        raise ValueError("value_clip must be > 0")
    for key in ("obs", "actions", "old_logp", "advantages", "returns"):
        if key not in batch:
            raise ValueError(f"batch lacks {key}")
    n = len(batch["obs"])
    for key in ("actions", "old_logp", "advantages", "returns", "old_values"):
        if key in batch and tuple(batch[key].shape) != (n,):
            raise ValueError(f"{key} must be (B,)")
    if batch["old_logp"].requires_grad:
        raise ValueError("old_logp must be detached")
    if value_clip is not None and "old_values" not in batch:
        raise ValueError("value_clip requires old_values")
    gen = torch.Generator()
    gen.manual_seed(seed)
    log = {k: [] for k in KEYS}
    for _ in range(epochs):
        for idx in torch.split(torch.randperm(n, generator=gen), minibatch_size):  # list[K]
            logits, values = model(batch["obs"][idx])                        # (M, A), (M,)
            dist = Categorical(logits=logits)
            out = ppo_loss(dist.log_prob(batch["actions"][idx]), batch["old_logp"][idx], batch["advantages"][idx],
                           values, batch["returns"][idx], entropy=dist.entropy(), clip_eps=clip_eps,
                           old_values=batch["old_values"][idx] if "old_values" in batch else None,
                           value_clip=value_clip, vf_coef=vf_coef, ent_coef=ent_coef)
            if target_kl is not None and out["approx_kl"].item() > 1.5 * target_kl:
                return log
            optimizer.zero_grad()
            out["loss"].backward()
            if max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            for k in KEYS:
                log[k].append(out[k].item())
    return log
