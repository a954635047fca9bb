"""Simplified GRPO / RLVR: group-relative advantages, the clipped surrogate with a k3 ...

Plan: sample G completions per prompt, use the group's own reward statistics as the baseline
instead of a learned critic, drop groups whose rewards are all equal (zero advantage, no signal),
and optimise the PPO clipped surrogate per token with a k3 KL penalty to the frozen reference.
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
    r = rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())
    mean = r.mean(dim=-1, keepdim=True)
    centered = r - mean
    if not normalize_std:
        return centered
    std = r.std(dim=-1, keepdim=True, unbiased=False)
    degenerate = std <= min_std
    if on_degenerate == "raise" and bool(degenerate.any()):
        raise ValueError("degenerate group: all rewards equal (std <= min_std)")
    adv = centered / torch.where(degenerate, torch.ones_like(std), std + eps)
    return torch.where(degenerate, torch.zeros_like(adv), adv)


def leave_one_out_advantages(rewards: Tensor) -> Tensor:
    """``A_i = r_i - mean_{j != i} r_j = G / (G - 1) * (r_i - mean)``: the unbiased (RLOO) baseline.

    Args:
        rewards: ``(P, G)`` (or ``(G,)``) finite rewards, ``G >= 2``.

    Returns:
        The shape of ``rewards``; each row sums to 0.

    Raises:
        ValueError: non-finite rewards, wrong rank, ``G < 2``.
    """
    r = rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())
    G = r.shape[-1]
    return G / (G - 1) * (r - r.mean(dim=-1, keepdim=True))


def informative_groups(rewards: Tensor) -> Tensor:
    """Groups that carry a gradient: ``(P, G) -> (P,)`` bool, True where the rewards are not all equal.

    Tested as ``max > min`` rather than ``std > 0``: the same set mathematically, but exact in floating
    point (the std of eight copies of 0.1 is not exactly 0). ``(G,)`` gives a ``()`` bool.

    Raises:
        ValueError: non-finite rewards, wrong rank, ``G < 2``.
    """
    return rewards.amax(dim=-1) > rewards.amin(dim=-1)


def degenerate_group_probability(p: float, group_size: int) -> float:
    """Probability that ``G`` Bernoulli(``p``) rewards are all equal: ``(1 - p)^G + p^G``.

    ``degenerate_group_probability(0.3, 8) = 0.05771361999999997`` (seed 001).

    Raises:
        ValueError: ``p`` outside ``[0, 1]``; ``group_size`` not an int ``>= 1``.
    """
    return (1.0 - p) ** group_size + p ** group_size


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
    d = logp_ref - logp
    return torch.expm1(d) - d


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
    m = torch.ones_like(logp, dtype=torch.bool) if mask is None else mask.bool()
    zero = torch.zeros_like(logp)
    lp = torch.where(m, logp, zero)
    lp_old = torch.where(m, logp_old.to(logp.dtype), zero)
    ratio = torch.exp(lp - lp_old)                                   # exactly 1 where masked
    adv = advantages.to(logp.dtype)
    if logp.dim() == 2:
        adv = adv[:, None]                                           # (N, 1) broadcast over tokens
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    obj = torch.where(m, torch.minimum(ratio * adv, clipped * adv), zero)
    n_active = m.sum()
    loss = -obj.sum() / n_active
    outside = ((ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)) & m
    clip_fraction = (outside.to(logp.dtype).sum() / n_active).detach()
    return ClippedSurrogate(loss=loss, ratio=ratio, clipped_ratio=clipped, token_objective=obj,
                            clip_fraction=clip_fraction)


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
    sur = clipped_surrogate(logp, logp_old, advantages, mask, clip_low=clip_low, clip_high=clip_high)
    m = torch.ones_like(logp, dtype=torch.bool) if mask is None else mask.bool()
    zero = torch.zeros_like(logp)
    kl = torch.where(m, k3_kl(torch.where(m, logp, zero), torch.where(m, logp_ref.to(logp.dtype), zero)), zero)
    return sur.loss + kl_coef * kl.sum() / m.sum()


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
    P, T0 = prompts.shape
    G = group_size
    ids_in = prompts.repeat_interleave(G, dim=0)                       # (P*G, T0), prompt-major
    was_training = policy.training
    policy.eval()
    with torch.no_grad():
        seqs = generate(policy, ids_in, max_new_tokens, temperature=temperature, generator=generator)
    policy.train(was_training)
    completions = seqs[:, T0:]                                         # (P*G, T_new)
    rewards = reward_fn(ids_in, completions).to(torch.get_default_dtype()).reshape(P, G)
    keep = informative_groups(rewards)                                 # (P,)
    stats = {"mean_reward": rewards.mean().item(), "informative_group_rate": keep.float().mean().item(),
             "loss": 0.0}
    if not bool(keep.any()):
        return stats
    adv = group_advantages(rewards[keep]).reshape(-1)                  # (N,)
    rows = keep.repeat_interleave(G)                                   # (P*G,)
    seqs = seqs[rows]

    def completion_logp(model):
        logits = model(seqs)[0]                                        # (N, T, V)
        return token_logprobs(logits[:, T0 - 1:-1], seqs[:, T0:])       # (N, T_new)

    with torch.no_grad():
        logp_old = completion_logp(policy)
        logp_ref = completion_logp(reference)
    losses = []
    for _ in range(inner_epochs):
        loss = grpo_loss(completion_logp(policy), logp_old, adv, logp_ref, kl_coef=kl_coef)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    stats["loss"] = sum(losses) / len(losses)
    return stats
