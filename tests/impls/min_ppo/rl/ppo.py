"""The PPO update step in torch: the clipped surrogate, the KL leash, ...

Plan: maximise the clipped surrogate min(rho A, clip(rho) A), which removes the incentive to move
rho outside [1-eps, 1+eps] (a pessimistic bound instead of a hard trust region like TRPO's); add a
(optionally clipped) value loss and an entropy bonus; run a few epochs of shuffled minibatches.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

METRICS = ("loss", "policy_loss", "value_loss", "approx_kl", "clip_fraction")


def ppo_clip_objective(ratio: Tensor | float, advantage: Tensor | float, eps: float = 0.2) -> Tensor:
    """PPO's clipped surrogate, elementwise: ``min(rho * A, clip(rho, 1 - eps, 1 + eps) * A)``.

    Args:
        ratio: ``pi_new(a) / pi_old(a)``, any shape (a float or list becomes a float64 tensor).
        advantage: broadcastable to ``ratio``.
        eps: clip range in ``(0, 1)``.

    Returns:
        The objective to *maximise*, of the broadcast shape; differentiable in ``ratio``.

    Raises:
        ValueError: ``eps`` outside ``(0, 1)``.

    Source: Schulman et al., "Proximal Policy Optimization Algorithms" (2017), eq. (7); seed 003's table.
    """
    ratio = ratio if isinstance(ratio, Tensor) else torch.as_tensor(ratio, dtype=torch.float64)
    advantage = advantage if isinstance(advantage, Tensor) else torch.as_tensor(advantage, dtype=ratio.dtype)
    return torch.minimum(ratio * advantage, torch.clamp(ratio, 1.0 - eps, 1.0 + eps) * advantage)


def kl_penalized_reward(reward: Tensor | float, logp: Tensor | float, logp_ref: Tensor | float,
                        beta: float) -> Tensor:
    """The leashed reward ``R - beta * (log pi(a) - log pi_ref(a))``, elementwise.

    A sample whose probability doubled relative to the reference pays ``beta * ln 2`` (1.0 becomes
    0.931 at ``beta = 0.1``); one whose probability halved earns it back (1.069).

    Args:
        reward, logp, logp_ref: tensors or numbers (numbers become float64 tensors), broadcastable.
        beta: leash strength, finite and ``>= 0``.

    Raises:
        ValueError: ``beta`` negative or not finite.

    Source: Ziegler et al. (2019), eq. (2); Ouyang et al. (2022), eq. (2); seed 003.
    """
    reward, logp, logp_ref = (x if isinstance(x, Tensor) else torch.as_tensor(x, dtype=torch.float64)
                              for x in (reward, logp, logp_ref))
    return reward - beta * (logp - logp_ref)


def ppo_loss(
    new_logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    values: Tensor,
    returns: Tensor,
    *,
    old_values: Tensor | None = None,
    entropy: Tensor | None = None,
    clip_eps: float = 0.2,
    value_clip: float | None = None,
    vf_coef: float = 0.5,
    ent_coef: float = 0.0,
    normalize_advantages: bool = False,
) -> dict[str, Tensor]:
    """PPO's loss on one (mini)batch of ``B`` samples.

    ``rho = exp(new_logp - old_logp)``; ``policy_loss = -mean(ppo_clip_objective(rho, A, clip_eps))``;
    ``value_loss = 0.5 * mean((V - R)^2)``, or with ``value_clip`` the elementwise maximum of that error
    and the error of ``V_old + clip(V - V_old, -value_clip, value_clip)``;
    ``loss = policy_loss + vf_coef * value_loss - ent_coef * mean(entropy)``. With
    ``normalize_advantages`` the advantages become ``(A - mean) / (std_population + 1e-8)`` first.

    Args:
        new_logp: ``(B,)`` log-probabilities of the taken actions under the current policy.
        old_logp: ``(B,)`` the same under the policy that sampled them (constants, no grad).
        advantages, returns: ``(B,)`` constants. values: ``(B,)`` current value predictions.
        old_values: ``(B,)`` value predictions at sampling time (required with ``value_clip``).
        entropy: optional ``(B,)`` policy entropies. clip_eps: ``(0, 1)``. value_clip: ``None`` or ``> 0``.
        vf_coef, ent_coef: ``>= 0``. normalize_advantages: normalise within the batch.

    Returns:
        ``{"loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"}``: 0-d tensors
        in the dtype of ``new_logp``; ``approx_kl = mean((rho - 1) - log rho)`` and
        ``clip_fraction = mean(|rho - 1| > clip_eps)`` are detached diagnostics; ``entropy`` is 0 when
        not given.

    Raises:
        ValueError: shapes differ or are not ``(B,)`` with ``B >= 1``, ``old_logp.requires_grad``,
            ``clip_eps`` outside ``(0, 1)``, ``value_clip <= 0`` or without ``old_values``, negative
            coefficients.

    Source: Schulman et al. (2017), eq. (9); the value clipping of OpenAI baselines' ppo2.
    """
    adv = advantages.detach()
    if normalize_advantages:
        adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
    log_ratio = new_logp - old_logp.detach()
    rho = torch.exp(log_ratio)
    policy_loss = -ppo_clip_objective(rho, adv, clip_eps).mean()
    err = (values - returns) ** 2
    if value_clip is not None:
        v_clipped = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
        err = torch.maximum(err, (v_clipped - returns) ** 2)
    value_loss = 0.5 * err.mean()
    ent = entropy.mean() if entropy is not None else torch.zeros((), dtype=new_logp.dtype)
    loss = policy_loss + vf_coef * value_loss - ent_coef * ent
    with torch.no_grad():
        approx_kl = ((rho - 1.0) - log_ratio).mean()
        clip_fraction = ((rho - 1.0).abs() > clip_eps).to(new_logp.dtype).mean()
    out = {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": ent,
           "approx_kl": approx_kl, "clip_fraction": clip_fraction}
    return {k: v.to(new_logp.dtype) for k, v in out.items()}


def ppo_update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, Tensor],
    *,
    epochs: int = 4,
    minibatch_size: int = 64,
    clip_eps: float = 0.2,
    vf_coef: float = 0.5,
    ent_coef: float = 0.0,
    max_grad_norm: float | None = 0.5,
    target_kl: float | None = None,
    value_clip: float | None = None,
    seed: int = 0,
) -> dict[str, list[float]]:
    """Run PPO's inner loop on one rollout: ``epochs`` passes of shuffled minibatch steps.

    Every epoch draws a fresh permutation (``torch.randperm`` with a generator seeded by ``seed``) and
    takes one optimizer step per minibatch of ``minibatch_size`` samples (the last one may be smaller).
    ``model(obs)`` must return ``(logits (M, A), values (M,))``. Before each step, if ``target_kl`` is
    set and the minibatch's ``approx_kl > 1.5 * target_kl``, the update stops (that step is not taken).
    Gradients are clipped to ``max_grad_norm`` with ``torch.nn.utils.clip_grad_norm_``.

    Args:
        model: the actor-critic being trained. optimizer: over ``model``'s parameters.
        batch: ``"obs" (B, ...)``, ``"actions" (B,)`` long, ``"old_logp" (B,)``, ``"advantages" (B,)``,
            ``"returns" (B,)``, optional ``"old_values" (B,)``; all constants.
        epochs, minibatch_size: ``>= 1``. clip_eps: ``(0, 1)``. vf_coef, ent_coef: ``>= 0``.
        max_grad_norm, target_kl, value_clip: ``None`` or ``> 0``. seed: seeds the shuffling.

    Returns:
        ``{"loss", "policy_loss", "value_loss", "approx_kl", "clip_fraction"}``: one float per optimizer
        step taken, measured on that step's minibatch before the step.

    Raises:
        ValueError: invalid hyperparameters or batch (missing keys, shape mismatches, float actions,
            ``old_logp`` requiring grad, ``value_clip`` without ``old_values``), before any update.

    Source: Schulman et al. (2017), Algorithm 1; the early stop on KL of OpenAI Spinning Up's PPO.
    """
    gen = torch.Generator().manual_seed(seed)
    B = batch["actions"].shape[0]
    hist: dict[str, list[float]] = {k: [] for k in METRICS}
    for _ in range(epochs):
        perm = torch.randperm(B, generator=gen)
        for start in range(0, B, minibatch_size):
            idx = perm[start:start + minibatch_size]
            logits, values = model(batch["obs"][idx])
            logp_all = F.log_softmax(logits, dim=-1)                                # (M, A)
            new_logp = logp_all.gather(-1, batch["actions"][idx].unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)                          # (M,)
            old_values = batch["old_values"][idx] if "old_values" in batch else None
            out = ppo_loss(new_logp, batch["old_logp"][idx], batch["advantages"][idx], values,
                           batch["returns"][idx], old_values=old_values, entropy=entropy,
                           clip_eps=clip_eps, value_clip=value_clip, vf_coef=vf_coef, ent_coef=ent_coef)
            if target_kl is not None and out["approx_kl"].item() > 1.5 * target_kl:
                return hist
            optimizer.zero_grad()
            out["loss"].backward()
            if max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            for k in METRICS:
                hist[k].append(out[k].item())
    return hist
