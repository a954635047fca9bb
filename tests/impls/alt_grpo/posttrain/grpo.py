"""Alternative GRPO (#56), written differently from the reference: advantages from ``var(correction=0)``
with ``rsqrt`` and a masked fill, leave-one-out from ``(sum - r) / (G - 1)``, informative groups as
"some entry differs from the first", the surrogate in log space (``clamp`` on the log-ratio, then
``exp``) with a float mask and ``einsum`` reductions, and a grpo_step that builds the completion
log-probs by one-hot contraction. Must pass every test of posttrain/grpo.

Shapes: ``P`` prompts, ``G`` group size, ``N`` rows, ``T`` tokens, ``V`` vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from canon_refs.transformer.generation import generate


def _groups(rewards: Tensor) -> Tensor:
    if not torch.is_tensor(rewards) or rewards.dim() not in (1, 2) or rewards.shape[-1] < 2:
        raise ValueError("rewards must be a (G,) or (P, G) tensor with G >= 2")
    r = rewards if rewards.is_floating_point() else rewards.float()
    if torch.isnan(r).any() or torch.isinf(r).any():
        raise ValueError("rewards contain non-finite values")
    return r.view(-1, r.shape[-1]) if r.is_contiguous() else r.reshape(-1, r.shape[-1])  # (P, G)


def group_advantages(rewards: Tensor, normalize_std: bool = True, *, eps: float = 0.0,
                     min_std: float = 1e-12, on_degenerate: Literal["zeros", "raise"] = "zeros") -> Tensor:
    """(r - mean) / (std + eps) per group; degenerate groups -> zeros or raise."""
    if on_degenerate != "zeros" and on_degenerate != "raise":
        raise ValueError("on_degenerate: expected 'zeros' or 'raise'")
    for name, val in (("eps", eps), ("min_std", min_std)):
        if not (isinstance(val, (int, float)) and math.isfinite(val) and val >= 0):
            raise ValueError(f"{name} must be a finite non-negative number")
    r = _groups(rewards)                                                          # (P, G)
    dev = r - r.mean(dim=1, keepdim=True)                                         # (P, G)
    if not normalize_std:
        return dev.reshape(rewards.shape)                                         # (P, G) | (G,)
    var = r.var(dim=1, correction=0, keepdim=True)                                # (P, 1)
    std = var.sqrt()
    flat = std <= min_std
    if flat.any() and on_degenerate == "raise":
        raise ValueError("degenerate reward group (zero spread) in rewards")
    if eps == 0.0:
        scaled = dev * torch.rsqrt(var.masked_fill(flat, 1.0))
    else:
        scaled = dev / (std + eps).masked_fill(flat, 1.0)
    return scaled.masked_fill(flat, 0.0).reshape(rewards.shape)                   # (P, G) | (G,)


def leave_one_out_advantages(rewards: Tensor) -> Tensor:
    """r_i - mean of the others."""
    r = _groups(rewards)                                                          # (P, G)
    others = (r.sum(dim=1, keepdim=True) - r) / (r.shape[1] - 1)                  # (P, G)
    return (r - others).reshape(rewards.shape)                                    # (P, G) | (G,)


def informative_groups(rewards: Tensor) -> Tensor:
    """(P, G) -> (P,) True where some reward differs from the first."""
    r = _groups(rewards)                                                          # (P, G)
    return (r != r[:, :1]).any(dim=1).reshape(rewards.shape[:-1])                 # (P,) | ()


def degenerate_group_probability(p: float, group_size: int) -> float:
    """(1 - p)^G + p^G."""
    if not (isinstance(p, (int, float)) and 0.0 <= p <= 1.0):
        raise ValueError("p must be a probability")
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size <= 0:
        raise ValueError("group_size must be a positive int")
    return math.exp(group_size * math.log1p(-p)) + p**group_size if p < 1.0 else 1.0


def k3_kl(logp: Tensor, logp_ref: Tensor) -> Tensor:
    """k3 = exp(d) - 1 - d with d = logp_ref - logp (expm1 form)."""
    if tuple(logp.shape) != tuple(logp_ref.shape):
        raise ValueError("logp_ref and logp shapes differ")
    d = logp_ref - logp
    return torch.special.expm1(d) - d


@dataclass(frozen=True)
class ClippedSurrogate:
    """loss, ratio, clipped_ratio, token_objective, clip_fraction."""

    loss: Tensor
    ratio: Tensor
    clipped_ratio: Tensor
    token_objective: Tensor
    clip_fraction: Tensor


def _float_mask(logp: Tensor, logp_old: Tensor, advantages: Tensor, mask: Tensor | None) -> Tensor:
    if logp.dim() not in (1, 2) or not logp.is_floating_point():
        raise ValueError("logp must be floating (N, T) or (N,)")
    if logp_old.shape != logp.shape:
        raise ValueError("logp_old must match logp")
    if advantages.dim() != 1 or advantages.shape[0] != logp.shape[0]:
        raise ValueError("advantages must be (N,)")
    if not torch.isfinite(advantages).all():
        raise ValueError("advantages must be finite")
    if mask is not None and mask.shape != logp.shape:
        raise ValueError("mask must match logp")
    m = torch.ones_like(logp) if mask is None else (mask != 0).to(logp.dtype)    # (N, T) | (N,)
    if m.sum() == 0:
        raise ValueError("mask selects no token")
    on = m.bool()
    if not torch.isfinite(logp.masked_select(on)).all():
        raise ValueError("logp has non-finite active entries")
    if not torch.isfinite(logp_old.masked_select(on)).all():
        raise ValueError("logp_old has non-finite active entries")
    return m


def clipped_surrogate(logp: Tensor, logp_old: Tensor, advantages: Tensor, mask: Tensor | None = None, *,
                      clip_low: float = 0.2, clip_high: float = 0.2) -> ClippedSurrogate:
    """Clipped surrogate computed with a float mask; log-ratio zeroed before exp."""
    if not (isinstance(clip_low, (int, float)) and math.isfinite(clip_low) and 0 <= clip_low < 1):
        raise ValueError("clip_low must be in [0, 1)")
    if not (isinstance(clip_high, (int, float)) and math.isfinite(clip_high) and clip_high >= 0):
        raise ValueError("clip_high must be >= 0")
    m = _float_mask(logp, logp_old, advantages, mask)                             # (N, T) | (N,)
    on = m.bool()
    delta = (logp.masked_fill(~on, 0.0) - logp_old.masked_fill(~on, 0.0))
    ratio = delta.exp()
    clipped = ratio.clamp(min=1.0 - clip_low, max=1.0 + clip_high)
    a = advantages.to(logp.dtype)
    a = a.unsqueeze(-1) if logp.dim() == 2 else a                                 # (N, 1) | (N,)
    obj = torch.where(ratio * a < clipped * a, ratio * a, clipped * a) * m
    count = m.sum()
    outside = ((ratio - 1.0 < -clip_low) | (ratio - 1.0 > clip_high)).to(logp.dtype) * m
    flat_obj = obj.reshape(-1)                                                    # (N*T,) | (N,)
    loss = -torch.einsum("i,i->", flat_obj, torch.ones_like(flat_obj)) / count    # ()
    return ClippedSurrogate(loss, ratio, clipped, obj, outside.sum() / count)


def grpo_loss(logp: Tensor, logp_old: Tensor, advantages: Tensor, logp_ref: Tensor, mask: Tensor | None = None, *,
              clip_low: float = 0.2, clip_high: float = 0.2, kl_coef: float = 0.02) -> Tensor:
    """Surrogate loss + kl_coef * masked mean k3."""
    if not (isinstance(kl_coef, (int, float)) and math.isfinite(kl_coef) and kl_coef >= 0):
        raise ValueError("kl_coef must be >= 0")
    if logp_ref.shape != logp.shape:
        raise ValueError("logp_ref must match logp")
    sur = clipped_surrogate(logp, logp_old, advantages, mask, clip_low=clip_low, clip_high=clip_high)
    m = torch.ones_like(logp) if mask is None else (mask != 0).to(logp.dtype)    # (N, T) | (N,)
    on = m.bool()
    if not torch.isfinite(logp_ref.masked_select(on)).all():
        raise ValueError("logp_ref has non-finite active entries")
    kl = k3_kl(logp.masked_fill(~on, 0.0), logp_ref.masked_fill(~on, 0.0)) * m
    return sur.loss + kl_coef * kl.sum() / m.sum()


def grpo_step(policy: nn.Module, reference: nn.Module, optimizer: torch.optim.Optimizer, prompts: Tensor,
              reward_fn: Callable[[Tensor, Tensor], Tensor], *, group_size: int = 8, max_new_tokens: int = 4,
              temperature: float = 1.0, inner_epochs: int = 2, kl_coef: float = 0.02,
              generator: torch.Generator | None = None) -> dict[str, float]:
    """Sample, score, filter, update."""
    if not torch.is_tensor(prompts) or prompts.dim() != 2 or prompts.is_floating_point():
        raise ValueError("prompts must be integer (P, T_0)")
    if not isinstance(group_size, int) or group_size < 2:
        raise ValueError("group_size must be >= 2")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    if not isinstance(inner_epochs, int) or inner_epochs < 1:
        raise ValueError("inner_epochs must be >= 1")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError("temperature must be > 0")
    if not (isinstance(kl_coef, (int, float)) and math.isfinite(kl_coef) and kl_coef >= 0):
        raise ValueError("kl_coef must be >= 0")
    n_prompts, t0 = prompts.shape
    rows = torch.arange(n_prompts).repeat_interleave(group_size)                  # (R,)
    prompt_rows = prompts.long()[rows]                                            # (R, T_0)
    policy.eval()
    seqs = generate(policy, prompt_rows, max_new_tokens, temperature=temperature, generator=generator)  # (R, T)
    r = reward_fn(prompt_rows, seqs[:, t0:])
    if not torch.is_tensor(r) or tuple(r.shape) != (n_prompts * group_size,):
        raise ValueError("reward_fn must return one reward per sampled completion")
    r = r.double()
    if not torch.isfinite(r).all():
        raise ValueError("reward_fn returned non-finite rewards")
    table = r.view(n_prompts, group_size)                                         # (P, G)
    good = informative_groups(table)                                              # (P,)
    out = {"mean_reward": table.mean().item(), "informative_group_rate": good.double().mean().item(), "loss": 0.0}
    policy.train()
    if good.sum() == 0:
        return out
    adv = group_advantages(table[good]).flatten().float()                         # (N,)
    sel = seqs.view(n_prompts, group_size, -1)[good].flatten(0, 1)                # (N, T)

    def completion_logp(model: nn.Module) -> Tensor:
        logits = model(sel)[0][:, t0 - 1:-1]                                      # (N, T_new, V)
        onehot = F.one_hot(sel[:, t0:], logits.shape[-1]).to(logits.dtype)       # (N, T_new, V)
        return torch.einsum("ntv,ntv->nt", torch.log_softmax(logits, dim=-1), onehot)  # (N, T_new)

    with torch.no_grad():
        old = completion_logp(policy)
        ref = completion_logp(reference)
    total = 0.0
    for _ in range(inner_epochs):
        loss = grpo_loss(completion_logp(policy), old, adv, ref, kl_coef=kl_coef)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    out["loss"] = total / inner_epochs
    return out
