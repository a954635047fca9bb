"""Simplified GRPO (group relative policy optimisation) for verifiable rewards, in torch.

Plan: for every prompt, sample a group of G completions, score each with a verifier, and use the
group itself as the baseline: the advantage of a completion is its reward minus the group mean,
divided by the group's population std. Groups where every completion got the same reward carry no
signal and are dropped. The policy is then updated a few times on those samples with the PPO
clipped surrogate on per-token probability ratios, plus a k3 estimate of KL(pi || pi_ref) that keeps
it near the frozen reference.

Subtle point: the degenerate group. If all G rewards are equal the std is 0 and (r - mean) / std is
0 / 0; such a group gets advantage 0 (or an error, if the caller asks), which is also why it is
dropped before the update. Its probability (1 - p)^G + p^G is not small: 5.8% for p = 0.3, G = 8.
The second subtle point is padding in the surrogate: masked log-probs are replaced by 0 before the
exp, so a NaN or inf in a padded slot gives ratio 1 there and cannot reach the loss.

Shapes: rewards (P, G) or (G,); group mean and std (P, 1); advantages (P, G), flattened to (P*G,);
token log-probs, ratios and the token objective (N, T) (or (N,) at sequence level); loss ().

Trade-off: the group mean instead of a learned value baseline, because it costs no critic network
and no second forward pass; the price is a small bias (each sample is part of its own baseline):
E[A * score] is 0.18375 instead of p(1 - p) = 0.21 for p = 0.3, G = 8, which the leave-one-out
baseline G / (G - 1) * (r - mean) removes. The k3 estimator exp(d) - d - 1 is used rather than the
plain log-ratio because it is never negative, and I write it as expm1(d) - d so that float32 keeps
that property for tiny d.

What I would test: the seed group [1,0,0,1,0,0,1,0] -> 1.29099 and -0.77460, [1,1,1,1] -> zeros,
rows summing to 0, the exact 2^8 enumeration of the baseline bias, the seed's clipped surrogate
(-0.232379), that NaN/inf padding cannot leak, the REINFORCE gradient -A / #active at ratio 1, and a
few steps on an "is a > b" verifier raising the mean reward while the reference stays put.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from canon_refs.posttrain.dpo import token_logprobs
from canon_refs.transformer.generation import generate


def _groups(rewards: Tensor) -> Tensor:
    """rewards (P, G) or (G,) as a finite floating (P, G) tensor with G >= 2, or ValueError naming rewards."""
    r = torch.as_tensor(rewards)                                                # (...,)
    if not r.is_floating_point():
        r = r.to(torch.get_default_dtype())
    if r.dim() not in (1, 2) or r.shape[-1] < 2:
        raise ValueError(f"rewards must be (G,) or (P, G) with G >= 2, got shape {tuple(r.shape)}")
    if not bool(torch.isfinite(r).all()):
        raise ValueError("rewards must be finite")
    return r if r.dim() == 2 else r[None]                                       # (P, G)


def group_advantages(rewards: Tensor, normalize_std: bool = True, *, eps: float = 0.0,
                     min_std: float = 1e-12,
                     on_degenerate: Literal["zeros", "raise"] = "zeros") -> Tensor:
    """Group-relative advantages: (r - mean) / (population std + eps) within each row.

    rewards (P, G) or (G,) -> same shape, floating. A row whose std is <= min_std is all zeros
    ("zeros") or raises ValueError mentioning "degenerate" ("raise"). With normalize_std=False the
    result is r - mean. eps = 1e-6 reproduces the capstone's group_advantages. Raises ValueError for
    non-finite rewards, G < 2, an unknown on_degenerate, or negative eps / min_std.
    """
    if on_degenerate not in ("zeros", "raise"):
        raise ValueError(f"on_degenerate must be 'zeros' or 'raise', got {on_degenerate!r}")
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be finite and >= 0, got {eps}")
    if not (math.isfinite(min_std) and min_std >= 0):
        raise ValueError(f"min_std must be finite and >= 0, got {min_std}")
    grouped = _groups(rewards)                                                  # (P, G)
    centred = grouped - grouped.mean(dim=1, keepdim=True)                       # (P, G)
    if normalize_std:
        spread = centred.pow(2).mean(dim=1, keepdim=True).sqrt()                # (P, 1)
        flat = spread <= min_std
        if on_degenerate == "raise" and bool(flat.any()):
            rows = torch.nonzero(flat[:, 0]).flatten().tolist()
            raise ValueError(f"degenerate group(s) {rows}: every reward in the group is the same")
        safe = torch.where(flat, torch.ones_like(spread), spread + eps)         # (P, 1)
        centred = torch.where(flat, torch.zeros_like(centred), centred / safe)  # (P, G)
    return centred if torch.as_tensor(rewards).dim() == 2 else centred[0]       # (P, G) | (G,)


def leave_one_out_advantages(rewards: Tensor) -> Tensor:
    """r_i minus the mean of the other G - 1 rewards of its row, G / (G - 1) * (r_i - mean).

    rewards (P, G) or (G,) -> same shape. Unbiased, unlike the plain group mean. Raises ValueError
    for non-finite rewards or G < 2.
    """
    grouped = _groups(rewards)                                                  # (P, G)
    G = grouped.shape[1]
    total = grouped.sum(dim=1, keepdim=True)                                    # (P, 1)
    others = (total - grouped) / (G - 1)
    out = grouped - others
    return out if torch.as_tensor(rewards).dim() == 2 else out[0]               # (P, G) | (G,)


def informative_groups(rewards: Tensor) -> Tensor:
    """(P, G) rewards -> (P,) bool: True where the group's rewards are not all equal (std > 0)."""
    grouped = _groups(rewards)                                                  # (P, G)
    return grouped.amax(dim=1) > grouped.amin(dim=1)                            # (P,)


def degenerate_group_probability(p: float, group_size: int) -> float:
    """Chance that G Bernoulli(p) rewards are all equal: (1 - p)^G + p^G.

    Raises ValueError for p outside [0, 1] or group_size < 1.
    """
    if not (0.0 <= p <= 1.0):
        raise ValueError(f"p must be a probability in [0, 1], got {p}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    return float((1.0 - p) ** group_size + p ** group_size)


def k3_kl(logp: Tensor, logp_ref: Tensor) -> Tensor:
    """Elementwise k3 estimator of KL(pi || pi_ref) from samples of pi: exp(d) - d - 1 with
    d = logp_ref - logp (Schulman, "Approximating KL divergence", 2020). Non-negative, 0 when equal,
    unbiased in expectation. Raises ValueError when logp_ref's shape differs from logp's.
    """
    if logp_ref.shape != logp.shape:
        raise ValueError(f"logp_ref must have logp's shape {tuple(logp.shape)}, got {tuple(logp_ref.shape)}")
    d = logp_ref - logp
    return (torch.expm1(d) - d).clamp_min(0.0)


@dataclass(frozen=True)
class ClippedSurrogate:
    """Result of ``clipped_surrogate``: loss (); ratio, clipped_ratio and token_objective shaped like
    logp (masked slots: ratio 1, objective 0); clip_fraction (), the share of active tokens whose ratio
    lies outside [1 - clip_low, 1 + clip_high]."""

    loss: Tensor
    ratio: Tensor
    clipped_ratio: Tensor
    token_objective: Tensor
    clip_fraction: Tensor


def _active(logp: Tensor, mask: Tensor | None) -> Tensor:
    """The bool mask of active entries (all True without a mask); ValueError naming mask."""
    if mask is None:
        return torch.ones_like(logp, dtype=torch.bool)                          # (N, T) | (N,)
    if mask.shape != logp.shape:
        raise ValueError(f"mask must have logp's shape {tuple(logp.shape)}, got {tuple(mask.shape)}")
    active = mask != 0
    if not bool(active.any()):
        raise ValueError("mask has no active token")
    return active


def _finite_where(t: Tensor, active: Tensor, name: str) -> Tensor:
    """t with inactive entries set to 0; ValueError naming ``name`` if an active entry is not finite."""
    if not bool(torch.isfinite(t[active]).all()):
        raise ValueError(f"{name} has non-finite values at active positions")
    return torch.where(active, t, torch.zeros_like(t))                          # (...,)


def clipped_surrogate(logp: Tensor, logp_old: Tensor, advantages: Tensor, mask: Tensor | None = None, *,
                      clip_low: float = 0.2, clip_high: float = 0.2) -> ClippedSurrogate:
    """PPO's clipped objective (Schulman et al., 2017, eq. 7), negated and averaged over active tokens.

    logp, logp_old (N, T) per token or (N,) per sequence; advantages (N,), broadcast over tokens;
    mask like logp (bool or 0/1) or None. loss = -sum(min(rho A, clip(rho, 1 - clip_low, 1 + clip_high) A))
    / #active. Raises ValueError for shape mismatches, advantages not (N,), no active token,
    clip_low outside [0, 1), clip_high < 0, or non-finite active log-probs.
    """
    if not (0.0 <= clip_low < 1.0):
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low}")
    if not (math.isfinite(clip_high) and clip_high >= 0.0):
        raise ValueError(f"clip_high must be finite and >= 0, got {clip_high}")
    if logp.dim() not in (1, 2):
        raise ValueError(f"logp must be (N, T) or (N,), got shape {tuple(logp.shape)}")
    if logp_old.shape != logp.shape:
        raise ValueError(f"logp_old must have logp's shape {tuple(logp.shape)}, got {tuple(logp_old.shape)}")
    if tuple(advantages.shape) != (logp.shape[0],):
        raise ValueError(f"advantages must be ({logp.shape[0]},), got {tuple(advantages.shape)}")
    active = _active(logp, mask)
    new = _finite_where(logp, active, "logp")
    old = _finite_where(logp_old, active, "logp_old")
    adv = advantages[:, None] if logp.dim() == 2 else advantages                # (N, 1) | (N,)
    ratio = torch.exp(new - old)
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    best = torch.minimum(ratio * adv, clipped * adv)
    objective = torch.where(active, best, torch.zeros_like(best))               # (N, T) | (N,)
    count = active.sum()
    outside = ((ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)) & active
    return ClippedSurrogate(
        loss=-objective.sum() / count,
        ratio=ratio,
        clipped_ratio=clipped,
        token_objective=objective,
        clip_fraction=outside.sum().to(ratio.dtype) / count,
    )


def grpo_loss(logp: Tensor, logp_old: Tensor, advantages: Tensor, logp_ref: Tensor,
              mask: Tensor | None = None, *, clip_low: float = 0.2, clip_high: float = 0.2,
              kl_coef: float = 0.02) -> Tensor:
    """Clipped surrogate loss plus kl_coef times the masked mean of k3_kl(logp, logp_ref): a () tensor.

    Shapes as in ``clipped_surrogate``; logp_ref like logp. The positional order is the capstone's.
    Raises ValueError for kl_coef < 0, a logp_ref shape mismatch or non-finite active logp_ref,
    and everything ``clipped_surrogate`` raises.
    """
    if not (math.isfinite(kl_coef) and kl_coef >= 0):
        raise ValueError(f"kl_coef must be finite and >= 0, got {kl_coef}")
    if logp_ref.shape != logp.shape:
        raise ValueError(f"logp_ref must have logp's shape {tuple(logp.shape)}, got {tuple(logp_ref.shape)}")
    policy_part = clipped_surrogate(logp, logp_old, advantages, mask, clip_low=clip_low, clip_high=clip_high)
    active = _active(logp, mask)
    ref = _finite_where(logp_ref, active, "logp_ref")
    new = torch.where(active, logp, torch.zeros_like(logp))                     # (N, T) | (N,)
    kl = torch.where(active, k3_kl(new, ref), torch.zeros_like(ref))            # (N, T) | (N,)
    return policy_part.loss + kl_coef * kl.sum() / active.sum()


def _completion_logps(model: nn.Module, sequences: Tensor, prompt_len: int) -> Tensor:
    """log pi(token) for each completion token of sequences (N, T_0 + T_new): (N, T_new)."""
    logits = model(sequences)[0]                                                # (N, T, V)
    targets = sequences[:, prompt_len:]
    return token_logprobs(logits[:, prompt_len - 1:-1], targets)                # (N, T_new)


def grpo_step(policy: nn.Module, reference: nn.Module, optimizer: torch.optim.Optimizer,
              prompts: Tensor, reward_fn: Callable[[Tensor, Tensor], Tensor], *, group_size: int = 8,
              max_new_tokens: int = 4, temperature: float = 1.0, inner_epochs: int = 2,
              kl_coef: float = 0.02, generator: torch.Generator | None = None) -> dict[str, float]:
    """One GRPO step: sample G completions per prompt, score, drop degenerate groups, update.

    prompts (P, T_0) long; reward_fn(prompt_ids (P*G, T_0), completion_ids (P*G, T_new)) -> (P*G,).
    Sampling uses ``generate`` (#32) with ``temperature`` and ``generator``. The surviving samples get
    ``inner_epochs`` optimizer steps on ``grpo_loss`` against the log-probs at sampling time; the
    reference runs under no_grad. Returns {"mean_reward", "informative_group_rate", "loss"} (loss: mean
    over the inner epochs, 0.0 when every group was degenerate and nothing was updated). Raises
    ValueError, before any update, for bad prompts, group_size < 2, bad hyperparameters, or a
    reward_fn output that is not a finite (P*G,) tensor.
    """
    if prompts.dim() != 2 or prompts.dtype.is_floating_point or prompts.dtype == torch.bool:
        raise ValueError(f"prompts must be a (P, T_0) integer tensor, "
                         f"got {prompts.dtype} {tuple(prompts.shape)}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size must be an int >= 2, got {group_size!r}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be finite and > 0, got {temperature}")
    if inner_epochs < 1:
        raise ValueError(f"inner_epochs must be >= 1, got {inner_epochs}")
    if not (math.isfinite(kl_coef) and kl_coef >= 0):
        raise ValueError(f"kl_coef must be finite and >= 0, got {kl_coef}")
    P, T_0 = prompts.shape
    G = group_size
    expanded = prompts.long().repeat_interleave(G, dim=0)                       # (P*G, T_0)
    sequences = generate(policy, expanded, max_new_tokens,                      # (P*G, T_0 + T_new)
                         temperature=temperature, generator=generator)
    rewards = reward_fn(expanded, sequences[:, T_0:])
    well_formed = isinstance(rewards, Tensor) and tuple(rewards.shape) == (P * G,)
    if not well_formed or not bool(torch.isfinite(rewards).all()):
        got = tuple(rewards.shape) if isinstance(rewards, Tensor) else type(rewards).__name__
        raise ValueError(f"reward_fn must return a finite ({P * G},) tensor, got {got}")
    grouped = rewards.to(torch.float32).reshape(P, G)                           # (P, G)
    keep = informative_groups(grouped)                                          # (P,)
    stats = {"mean_reward": grouped.mean().item(), "informative_group_rate": keep.float().mean().item(),
             "loss": 0.0}
    if not bool(keep.any()):
        return stats
    adv = group_advantages(grouped[keep]).flatten()                             # (N,)
    batch = sequences[keep.repeat_interleave(G)]                                # (N, T)
    with torch.no_grad():
        logp_old = _completion_logps(policy, batch, T_0)                        # (N, T_new)
        logp_ref = _completion_logps(reference, batch, T_0)                     # (N, T_new)
    losses = []
    for _ in range(inner_epochs):
        logp = _completion_logps(policy, batch, T_0)                            # (N, T_new)
        loss = grpo_loss(logp, logp_old, adv, logp_ref, kl_coef=kl_coef)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    stats["loss"] = sum(losses) / len(losses)
    return stats
