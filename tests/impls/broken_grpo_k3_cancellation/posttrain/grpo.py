"""Broken GRPO (#56): k3 computed literally as ``exp(d) - d - 1``, which cancels catastrophically near d = 0 and
comes out negative (down to -6e-8) in float32. Caught by the numerics probe
test_k3_kl_float32_small_differences_non_negative.
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


def _as_groups(rewards: Tensor) -> Tensor:
    """Validate rewards and view them as ``(P, G)`` floats (``(G,)`` becomes one group)."""
    if not isinstance(rewards, Tensor):
        raise ValueError(f"rewards must be a tensor, got {type(rewards).__name__}")
    if rewards.ndim not in (1, 2):
        raise ValueError(f"rewards must be (G,) or (P, G), got shape {tuple(rewards.shape)}")
    if rewards.shape[-1] < 2:
        raise ValueError(f"rewards needs a group size G >= 2, got {rewards.shape[-1]}")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards must be finite")
    return rewards.reshape(-1, rewards.shape[-1])                       # (P, G)


def _check_non_negative(value: float, name: str) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")


def group_advantages(
    rewards: Tensor,
    normalize_std: bool = True,
    *,
    eps: float = 0.0,
    min_std: float = 1e-12,
    on_degenerate: Literal["zeros", "raise"] = "zeros",
) -> Tensor:
    """Group-relative advantages ``(r - mean) / (std + eps)`` per row (seed 001, capstone).

    The std is the population std. A row whose std is ``<= min_std`` is degenerate: its advantages are
    exact zeros (``on_degenerate="zeros"``) or a ``ValueError`` mentioning "degenerate" is raised
    (``"raise"``). With ``normalize_std=False`` the result is ``r - mean`` (Dr. GRPO) and
    ``on_degenerate`` has no effect. ``eps = 1e-6`` reproduces the capstone's ``group_advantages``.

    Args:
        rewards: ``(P, G)`` or ``(G,)`` finite rewards, ``G >= 2`` (integer/bool rewards become floats).
        normalize_std: divide by the group std.
        eps: added to the std, ``>= 0``.
        min_std: degenerate threshold, ``>= 0``.
        on_degenerate: ``"zeros"`` or ``"raise"``.

    Returns:
        Advantages of the shape of ``rewards``; each row sums to 0.

    Raises:
        ValueError: non-finite rewards, wrong rank, ``G < 2``, ``eps < 0``, ``min_std < 0``, unknown
            ``on_degenerate``, or a degenerate row under ``"raise"``.
    """
    if on_degenerate not in ("zeros", "raise"):
        raise ValueError(f"on_degenerate must be 'zeros' or 'raise', got {on_degenerate!r}")
    _check_non_negative(eps, "eps")
    _check_non_negative(min_std, "min_std")
    groups = _as_groups(rewards)                                        # (P, G)
    mean = groups.mean(dim=-1, keepdim=True)                            # (P, 1)
    centred = groups - mean                                             # (P, G)
    if not normalize_std:
        return centred.reshape(rewards.shape)                           # (P, G) | (G,)
    std = groups.std(dim=-1, correction=0, keepdim=True)                # (P, 1)
    degenerate = std <= min_std                                         # (P, 1)
    if on_degenerate == "raise" and bool(degenerate.any()):
        rows = [i for i, bad in enumerate(degenerate[:, 0].tolist()) if bad]
        raise ValueError(f"rewards has degenerate groups (std <= min_std) at rows {rows}")
    safe_std = torch.where(degenerate, torch.ones_like(std), std + eps)  # (P, 1)
    advantages = torch.where(degenerate, torch.zeros_like(centred), centred / safe_std)  # (P, G)
    return advantages.reshape(rewards.shape)                            # (P, G) | (G,)


def leave_one_out_advantages(rewards: Tensor) -> Tensor:
    """``A_i = r_i - mean_{j != i} r_j = G / (G - 1) * (r_i - mean)``: the unbiased (RLOO) baseline.

    Args:
        rewards: ``(P, G)`` (or ``(G,)``) finite rewards, ``G >= 2``.

    Returns:
        The shape of ``rewards``; each row sums to 0.

    Raises:
        ValueError: non-finite rewards, wrong rank, ``G < 2``.
    """
    groups = _as_groups(rewards)                                        # (P, G)
    G = groups.shape[-1]
    centred = groups - groups.mean(dim=-1, keepdim=True)                # (P, G)
    return (centred * (G / (G - 1))).reshape(rewards.shape)             # (P, G) | (G,)


def informative_groups(rewards: Tensor) -> Tensor:
    """Groups that carry a gradient: ``(P, G) -> (P,)`` bool, True where the rewards are not all equal.

    Tested as ``max > min`` rather than ``std > 0``: the same set mathematically, but exact in floating
    point (the std of eight copies of 0.1 is not exactly 0). ``(G,)`` gives a ``()`` bool.

    Raises:
        ValueError: non-finite rewards, wrong rank, ``G < 2``.
    """
    groups = _as_groups(rewards)                                        # (P, G)
    spread = groups.amax(dim=-1) > groups.amin(dim=-1)                  # (P,)
    return spread.reshape(rewards.shape[:-1])                           # (P,) | ()


def degenerate_group_probability(p: float, group_size: int) -> float:
    """Probability that ``G`` Bernoulli(``p``) rewards are all equal: ``(1 - p)^G + p^G``.

    ``degenerate_group_probability(0.3, 8) = 0.05771361999999997`` (seed 001).

    Raises:
        ValueError: ``p`` outside ``[0, 1]``; ``group_size`` not an int ``>= 1``.
    """
    if not isinstance(p, (int, float)) or not math.isfinite(p) or not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p!r}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
    return (1.0 - p) ** group_size + p**group_size


def k3_kl(logp: Tensor, logp_ref: Tensor) -> Tensor:
    """Schulman's k3 estimator of ``KL(pi || pi_ref)``: ``exp(d) - d - 1`` with ``d = logp_ref - logp``.

    Elementwise, ``>= 0``, zero where ``logp == logp_ref``, and unbiased: ``E_{x ~ pi}[k3] = KL(pi || pi_ref)``.
    Computed as ``expm1(d) - d`` for accuracy near ``d = 0``.

    Args:
        logp: log-probabilities under the policy (samples drawn from it), any shape.
        logp_ref: the same under the reference, same shape.

    Raises:
        ValueError: shapes differ.
    """
    if logp.shape != logp_ref.shape:
        raise ValueError(f"logp_ref shape {tuple(logp_ref.shape)} must equal logp shape {tuple(logp.shape)}")
    diff = logp_ref - logp
    return torch.exp(diff) - diff - 1.0


@dataclass(frozen=True)
class ClippedSurrogate:
    """Outputs of :func:`clipped_surrogate`; tensors are ``(N, T)`` (or ``(N,)``) unless stated.

    Attributes:
        loss: ``()`` ``-(sum of token_objective over active tokens) / #active``.
        ratio: ``exp(logp - logp_old)``, exactly 1 at masked entries.
        clipped_ratio: ``ratio`` clamped to ``[1 - clip_low, 1 + clip_high]``.
        token_objective: ``min(ratio A, clipped_ratio A)`` at active entries, 0 at masked ones.
        clip_fraction: ``()`` share of active tokens whose ratio lies outside the clip range.
    """

    loss: Tensor
    ratio: Tensor
    clipped_ratio: Tensor
    token_objective: Tensor
    clip_fraction: Tensor


def _active_tokens(logp: Tensor, logp_old: Tensor, advantages: Tensor, mask: Tensor | None) -> Tensor:
    """Validate the surrogate's inputs and return the bool mask of active entries."""
    if logp.ndim not in (1, 2) or not logp.is_floating_point():
        raise ValueError(f"logp must be a floating (N, T) or (N,) tensor, got {tuple(logp.shape)}")
    if logp_old.shape != logp.shape:
        raise ValueError(f"logp_old shape {tuple(logp_old.shape)} must equal logp shape {tuple(logp.shape)}")
    if advantages.shape != logp.shape[:1]:
        raise ValueError(f"advantages must have shape (N,) = {tuple(logp.shape[:1])}, got {tuple(advantages.shape)}")
    if not bool(torch.isfinite(advantages).all()):
        raise ValueError("advantages must be finite")
    if mask is None:
        active = torch.ones_like(logp, dtype=torch.bool)                # (N, T) | (N,)
    elif mask.shape != logp.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} must equal logp shape {tuple(logp.shape)}")
    else:
        active = mask != 0                                              # (N, T) | (N,)
    if not bool(active.any()):
        raise ValueError("mask has no active token")
    if not bool(torch.isfinite(logp[active]).all()):
        raise ValueError("logp must be finite at active tokens")
    if not bool(torch.isfinite(logp_old[active]).all()):
        raise ValueError("logp_old must be finite at active tokens")
    return active


def _check_clip(clip_low: float, clip_high: float) -> None:
    if not isinstance(clip_low, (int, float)) or not math.isfinite(clip_low) or not 0.0 <= clip_low < 1.0:
        raise ValueError(f"clip_low must lie in [0, 1), got {clip_low!r}")
    if not isinstance(clip_high, (int, float)) or not math.isfinite(clip_high) or clip_high < 0:
        raise ValueError(f"clip_high must be finite and >= 0, got {clip_high!r}")


def clipped_surrogate(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    mask: Tensor | None = None,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> ClippedSurrogate:
    """The masked PPO/GRPO clipped surrogate, token-level ``(N, T)`` or sequence-level ``(N,)`` (seed 001).

    Masked entries of ``logp`` and ``logp_old`` are replaced by 0 *before* the exponential, so NaN or
    ``+-inf`` padding leaves the loss unchanged and the ratios finite. The loss is the negative mean of
    ``min(rho A, clip(rho, 1 - clip_low, 1 + clip_high) A)`` over the active tokens (every token counts
    once, so long completions weigh more than short ones).

    Args:
        logp: ``(N, T)`` or ``(N,)`` log-probabilities under the current policy (differentiable).
        logp_old: same shape, under the sampling policy.
        advantages: ``(N,)``, broadcast over tokens.
        mask: same shape as ``logp``, bool|int, ``True`` on active tokens; ``None`` means all active.
        clip_low, clip_high: the asymmetric clip range (DAPO's clip-higher uses ``clip_high > clip_low``).

    Returns:
        :class:`ClippedSurrogate` in the dtype of ``logp``.

    Raises:
        ValueError: shape mismatches, ``advantages`` not ``(N,)``, no active token, ``clip_low`` outside
            ``[0, 1)``, ``clip_high < 0``, non-finite active log-probs or advantages.
    """
    _check_clip(clip_low, clip_high)
    active = _active_tokens(logp, logp_old, advantages, mask)           # (N, T) | (N,)
    n_active = active.sum()                                             # ()
    log_ratio = torch.where(active, logp, 0.0) - torch.where(active, logp_old, 0.0)  # (N, T) | (N,)
    ratio = torch.exp(log_ratio)                                        # (N, T) | (N,)
    clipped_ratio = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)        # (N, T) | (N,)
    adv = advantages.to(logp.dtype)
    if logp.ndim == 2:
        adv = adv[:, None]                                              # (N, 1)
    objective = torch.minimum(ratio * adv, clipped_ratio * adv)         # (N, T) | (N,)
    token_objective = torch.where(active, objective, 0.0)               # (N, T) | (N,)
    loss = -(token_objective.sum() / n_active)                          # ()
    outside = (ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)      # (N, T) | (N,)
    clip_fraction = (outside & active).to(logp.dtype).sum() / n_active  # ()
    return ClippedSurrogate(loss, ratio, clipped_ratio, token_objective, clip_fraction)


def grpo_loss(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    logp_ref: Tensor,
    mask: Tensor | None = None,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    kl_coef: float = 0.02,
) -> Tensor:
    """``clipped_surrogate(...).loss + kl_coef * (masked mean of k3_kl(logp, logp_ref))``.

    Positional order as the capstone's ``grpo_loss(logp, logp_old, advantages, logp_ref, ...)``. With
    ``logp == logp_old`` (the first inner epoch) and ``kl_coef = 0`` the gradient is ``-A_i / #active``
    per active token: REINFORCE with a group baseline.

    Args:
        logp, logp_old, advantages, mask, clip_low, clip_high: as in :func:`clipped_surrogate`.
        logp_ref: same shape as ``logp``, under the frozen reference.
        kl_coef: weight of the KL leash, ``>= 0``.

    Returns:
        ``()`` loss in the dtype of ``logp``.

    Raises:
        ValueError: everything :func:`clipped_surrogate` raises; ``logp_ref`` shape mismatch or non-finite
            at active tokens; ``kl_coef`` negative or non-finite.
    """
    _check_non_negative(kl_coef, "kl_coef")
    if logp_ref.shape != logp.shape:
        raise ValueError(f"logp_ref shape {tuple(logp_ref.shape)} must equal logp shape {tuple(logp.shape)}")
    surrogate = clipped_surrogate(logp, logp_old, advantages, mask, clip_low=clip_low, clip_high=clip_high)
    active = torch.ones_like(logp, dtype=torch.bool) if mask is None else mask != 0  # (N, T) | (N,)
    if not bool(torch.isfinite(logp_ref[active]).all()):
        raise ValueError("logp_ref must be finite at active tokens")
    kl = k3_kl(torch.where(active, logp, 0.0), torch.where(active, logp_ref, 0.0))  # (N, T) | (N,)
    return surrogate.loss + kl_coef * (kl.sum() / active.sum())


def _completion_logprobs(model: nn.Module, sequences: Tensor, prompt_len: int) -> Tensor:
    """Token log-probs of the generated part: ``(N, T_0 + T_new) -> (N, T_new)``."""
    logits = model(sequences)[0]                                        # (N, T, V)
    return token_logprobs(logits[:, prompt_len - 1 : -1], sequences[:, prompt_len:])  # (N, T_new)


def grpo_step(
    policy: nn.Module,
    reference: nn.Module,
    optimizer: torch.optim.Optimizer,
    prompts: Tensor,
    reward_fn: Callable[[Tensor, Tensor], Tensor],
    *,
    group_size: int = 8,
    max_new_tokens: int = 4,
    temperature: float = 1.0,
    inner_epochs: int = 2,
    kl_coef: float = 0.02,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """One GRPO iteration: sample groups, score, drop degenerate groups, update under the clip.

    Each prompt is repeated ``group_size`` times (prompt-major) and completed with :func:`generate` (#32)
    in eval mode at ``temperature``. ``reward_fn(prompt_ids (P*G, T_0), completion_ids (P*G, T_new))``
    returns ``(P*G,)`` rewards. Groups whose rewards are all equal are dropped; the others get
    :func:`group_advantages`. ``logp_old`` (policy) and ``logp_ref`` (reference) are computed once under
    ``no_grad``; then ``inner_epochs`` optimizer steps minimise :func:`grpo_loss` on the completion tokens.
    When no group is informative, nothing is updated and ``loss`` is 0.

    Args:
        policy: the model being trained (``model(ids) -> (logits, ...)``); left in train mode.
        reference: the frozen reference (e.g. from ``dpo.freeze_reference``); never updated.
        optimizer: an optimizer over ``policy``'s parameters.
        prompts: ``(P, T_0)`` long prompt ids, ``T_0 >= 1``.
        reward_fn: the verifier.
        group_size: ``G >= 2``. max_new_tokens: ``>= 1``. temperature: ``> 0``.
        inner_epochs: ``>= 1``. kl_coef: ``>= 0``. generator: seeds the sampling (C7).

    Returns:
        ``{"mean_reward", "informative_group_rate", "loss"}``: the mean reward of all sampled completions
        (before filtering), the share of informative groups, and the mean loss over the inner epochs.

    Raises:
        ValueError: ``prompts`` not 2-D integer; invalid hyperparameters; ``reward_fn`` output not a finite
            ``(P*G,)`` tensor. All raised before any parameter update.
    """
    if not isinstance(prompts, Tensor) or prompts.ndim != 2 or prompts.dtype.is_floating_point or prompts.shape[1] < 1:
        raise ValueError("prompts must be a 2-D integer (P, T_0) tensor with T_0 >= 1")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size must be an int >= 2, got {group_size!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    if isinstance(inner_epochs, bool) or not isinstance(inner_epochs, int) or inner_epochs < 1:
        raise ValueError(f"inner_epochs must be an int >= 1, got {inner_epochs!r}")
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be finite and > 0, got {temperature!r}")
    _check_non_negative(kl_coef, "kl_coef")

    P, T_0 = prompts.shape
    G = group_size
    repeated = prompts.long().repeat_interleave(G, dim=0)               # (R, T_0)
    policy.eval()
    sequences = generate(policy, repeated, max_new_tokens, temperature=temperature, generator=generator)  # (R, T)
    completions = sequences[:, T_0:]                                    # (R, T_new)
    rewards = reward_fn(repeated, completions)
    if not isinstance(rewards, Tensor) or rewards.shape != (P * G,):
        shape = tuple(rewards.shape) if isinstance(rewards, Tensor) else type(rewards).__name__
        raise ValueError(f"reward_fn must return a ({P * G},) tensor, got {shape}")
    if not bool(torch.isfinite(rewards.float()).all()):
        raise ValueError("reward_fn returned non-finite rewards")
    groups = rewards.reshape(P, G).to(torch.get_default_dtype())        # (P, G)
    keep = informative_groups(groups)                                   # (P,)
    stats = {
        "mean_reward": float(groups.mean()),
        "informative_group_rate": float(keep.float().mean()),
        "loss": 0.0,
    }
    policy.train()
    if not bool(keep.any()):
        return stats

    advantages = group_advantages(groups[keep]).reshape(-1)             # (N,)
    batch = sequences[keep.repeat_interleave(G)]                        # (N, T)
    with torch.no_grad():
        logp_old = _completion_logprobs(policy, batch, T_0)             # (N, T_new)
        logp_ref = _completion_logprobs(reference, batch, T_0)          # (N, T_new)
    losses = []
    for _ in range(inner_epochs):
        logp = _completion_logprobs(policy, batch, T_0)                 # (N, T_new)
        loss = grpo_loss(logp, logp_old, advantages.to(logp.dtype), logp_ref, kl_coef=kl_coef)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    stats["loss"] = sum(losses) / len(losses)
    return stats
