"""The PPO update step in torch: the clipped surrogate, the KL leash, and minibatch epochs (canon item #53).

What it implements: :func:`ppo_clip_objective`, the per-sample ``min(rho * A, clip(rho, 1 - eps, 1 + eps) * A)``
of Schulman et al. (2017); :func:`kl_penalized_reward`, the RLHF reward ``R - beta * (log pi - log pi_ref)``
(seed 003's leash); :func:`ppo_loss`, the full loss on a batch (clipped policy term, optionally clipped
value term, entropy bonus, and the diagnostics ``approx_kl`` and ``clip_fraction``); and
:func:`ppo_update`, several epochs of shuffled minibatch steps on one rollout with gradient-norm
clipping and early stopping on the KL.

The subtle point an interviewer probes is which side of the clip is active. The ``min`` takes the more
pessimistic surrogate, so gains are capped once the ratio leaves the band in the direction the
advantage pushes (``rho = 1.5, A = 2`` gives ``1.2 * 2 = 2.4`` and no gradient), while losses are never
capped (``rho = 1.5, A = -1`` gives ``-1.5`` with the full gradient ``-1``): a step that made a bad action
more likely is always penalised in full. Seed 003's table: ratios ``[1.1, 1.5, 0.5, 1.5]`` with
advantages ``[3, 2, -1, -1]`` give ``[3.3, 2.4, -0.8, -1.5]`` and ``d/d rho = [3, 0, 0, -1]``.

Shape letters: ``B`` samples in the rollout batch, ``M`` samples in a minibatch, ``A`` actions,
``obs_dim`` observation width (any trailing observation shape is passed through as ``...``).

Trade-off: ``approx_kl`` is Schulman's ``k3 = (rho - 1) - log rho``, computed as ``expm1(d) - d`` with
``d = log rho``, instead of the naive ``-mean(log rho)``: ``k3`` is non-negative sample by sample and
unbiased, whereas ``-mean(log rho)`` can be negative on a minibatch; and ``expm1`` rather than
``exp(d) - 1``, because in float32 at ``d = 1e-4`` the naive form carries the rounding of ``rho``
(``6e-8``, more than the answer ``5e-9``). That is harmless for a diagnostic compared with a ``target_kl``
of ``1e-2``, so the tests accept either form to a few ulps of ``rho``. The value loss uses ``0.5 * mean((V - R)^2)``
so its gradient is ``(V - R) / B``, matching the usual ``vf_coef = 0.5`` convention.

What to test: seed 003's clip table and its gradients, ``L(1.3, 2) == L(1.6, 2)``, the leash values
0.931 and 1.069, that the first epoch (``new == old``) gives ``policy_loss = -mean(A)``,
``approx_kl = 0``, ``clip_fraction = 0`` and the vanilla policy gradient, that value clipping picks the
larger error, that normalised advantages have mean 0 and unit std, and that :func:`ppo_update`
raises the probability of positive-advantage actions, stops early under a tight ``target_kl``, and keeps
ratios closer to 1 with ``clip_eps = 0.2`` than with ``0.99``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

METRICS = ("loss", "policy_loss", "value_loss", "approx_kl", "clip_fraction")
#: The std that normalises advantages: the population's (correction 0); the sample's (1) is accepted too.
_ADVANTAGE_STD_CORRECTION = 0


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
    eps = _check_eps(eps, "eps")
    rho = _as_tensor(ratio)
    adv = _as_tensor(advantage).to(rho.dtype) if rho.is_floating_point() else _as_tensor(advantage)
    return torch.minimum(rho * adv, rho.clamp(1.0 - eps, 1.0 + eps) * adv)


def _as_tensor(x: Tensor | float) -> Tensor:
    """Tensors pass through; Python numbers and lists become float64 tensors."""
    if isinstance(x, Tensor):
        return x
    return torch.as_tensor(x, dtype=torch.float64)                       # (...,)


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
    beta = _check_coef(beta, "beta")
    return _as_tensor(reward) - beta * (_as_tensor(logp) - _as_tensor(logp_ref))


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
    ``normalize_advantages`` the advantages become ``(A - mean) / (std + 1e-8)`` first, with the batch's
    population or sample std (both are accepted). The inputs are not modified.

    Args:
        new_logp: ``(B,)`` log-probabilities of the taken actions under the current policy.
        old_logp: ``(B,)`` the same under the policy that sampled them (constants, no grad).
        advantages, returns: ``(B,)`` constants. values: ``(B,)`` current value predictions.
        old_values: ``(B,)`` value predictions at sampling time (required with ``value_clip``).
        entropy: optional ``(B,)`` policy entropies. clip_eps: ``(0, 1)``. value_clip: ``None`` or ``> 0``.
        vf_coef, ent_coef: ``>= 0``. normalize_advantages: normalise within the batch.

    Returns:
        A dict with at least the keys ``"loss"``, ``"policy_loss"``, ``"value_loss"``, ``"entropy"``,
        ``"approx_kl"`` and ``"clip_fraction"`` (extra keys are allowed): 0-d tensors in the dtype of
        ``new_logp``; ``approx_kl = mean((rho - 1) - log rho)`` and ``clip_fraction = mean(|rho - 1| >
        clip_eps)`` are detached diagnostics; ``entropy`` is 0 when not given.

    Raises:
        ValueError: shapes differ or are not ``(B,)`` with ``B >= 1``, ``old_logp.requires_grad``,
            ``clip_eps`` outside ``(0, 1)``, ``value_clip <= 0`` or without ``old_values``, negative
            coefficients.

    Source: Schulman et al. (2017), eq. (9); the value clipping of OpenAI baselines' ppo2.
    """
    clip_eps = _check_eps(clip_eps, "clip_eps")
    value_clip = _check_positive_or_none(value_clip, "value_clip")
    vf_coef = _check_coef(vf_coef, "vf_coef")
    ent_coef = _check_coef(ent_coef, "ent_coef")
    _check_loss_inputs(new_logp, old_logp, advantages, values, returns, old_values, entropy, value_clip)

    dtype = new_logp.dtype
    adv = advantages.detach().to(dtype)                                  # (B,)
    if normalize_advantages:
        adv = (adv - adv.mean()) / (adv.std(correction=_ADVANTAGE_STD_CORRECTION) + 1e-8)  # (B,)
    log_ratio = new_logp - old_logp.to(dtype)                            # (B,)
    ratio = torch.exp(log_ratio)                                         # (B,)
    policy_loss = -ppo_clip_objective(ratio, adv, clip_eps).mean()

    target = returns.detach().to(values.dtype)                           # (B,)
    value_error = (values - target) ** 2                                 # (B,)
    if value_clip is not None:
        old_v = old_values.detach().to(values.dtype)                     # (B,)
        delta = (values - old_v).clamp(-value_clip, value_clip)          # (B,)
        clipped_error = (old_v + delta - target) ** 2                    # (B,)
        value_error = torch.maximum(value_error, clipped_error)          # (B,)
    value_loss = 0.5 * value_error.mean()

    if entropy is None:
        entropy = torch.zeros_like(new_logp)                             # (B,)
    mean_entropy = entropy.mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * mean_entropy
    with torch.no_grad():
        approx_kl = (torch.expm1(log_ratio) - log_ratio).mean()  # k3 without the cancellation of exp(d) - 1
        clip_fraction = ((ratio - 1.0).abs() > clip_eps).to(dtype).mean()
    return {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": mean_entropy,
            "approx_kl": approx_kl, "clip_fraction": clip_fraction}


def _check_loss_inputs(new_logp: Tensor, old_logp: Tensor, advantages: Tensor, values: Tensor, returns: Tensor,
                       old_values: Tensor | None, entropy: Tensor | None, value_clip: float | None) -> None:
    if new_logp.ndim != 1 or new_logp.shape[0] < 1:
        raise ValueError(f"new_logp must be (B,) with B >= 1, got {tuple(new_logp.shape)}")
    named = {"old_logp": old_logp, "advantages": advantages, "values": values, "returns": returns,
             "old_values": old_values, "entropy": entropy}
    for name, t in named.items():
        if t is not None and t.shape != new_logp.shape:
            raise ValueError(f"{name} shape {tuple(t.shape)} must equal new_logp shape {tuple(new_logp.shape)}")
    if old_logp.requires_grad:
        raise ValueError("old_logp must not require grad: it belongs to the sampling policy (detach it)")
    if value_clip is not None and old_values is None:
        raise ValueError("value_clip needs old_values")


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
        A dict with at least the keys ``"loss"``, ``"policy_loss"``, ``"value_loss"``, ``"approx_kl"`` and
        ``"clip_fraction"`` (extra keys are allowed): one float per optimizer step taken, measured on that
        step's minibatch before the step. The same ``seed`` gives the same history and parameters.

    Raises:
        ValueError: invalid hyperparameters or batch (missing keys, shape mismatches, float actions,
            ``old_logp`` requiring grad, ``value_clip`` without ``old_values``), before any update.

    Source: Schulman et al. (2017), Algorithm 1; the early stop on KL of OpenAI Spinning Up's PPO.
    """
    _check_update_arguments(epochs, minibatch_size, clip_eps, vf_coef, ent_coef, max_grad_norm, target_kl,
                            value_clip)
    B = _check_batch(batch, value_clip)
    generator = torch.Generator().manual_seed(seed)
    history: dict[str, list[float]] = {key: [] for key in METRICS}
    for _ in range(epochs):
        order = torch.randperm(B, generator=generator)                   # (B,)
        for start in range(0, B, minibatch_size):
            idx = order[start : start + minibatch_size]                  # (M,)
            logits, values = model(batch["obs"][idx])                    # (M, A), (M,)
            log_probs = F.log_softmax(logits, dim=-1)                    # (M, A)
            actions = batch["actions"][idx].long()                       # (M,)
            new_logp = log_probs.gather(1, actions[:, None]).squeeze(1)  # (M,)
            entropy = -(log_probs.exp() * log_probs).sum(dim=-1)         # (M,)
            out = ppo_loss(new_logp, batch["old_logp"][idx], batch["advantages"][idx], values,
                           batch["returns"][idx],
                           old_values=batch["old_values"][idx] if "old_values" in batch else None,
                           entropy=entropy, clip_eps=clip_eps, value_clip=value_clip, vf_coef=vf_coef,
                           ent_coef=ent_coef)
            if target_kl is not None and float(out["approx_kl"]) > 1.5 * target_kl:
                return history
            optimizer.zero_grad(set_to_none=True)
            out["loss"].backward()
            if max_grad_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            for key in METRICS:
                history[key].append(float(out[key].detach()))
    return history


def _check_update_arguments(epochs: int, minibatch_size: int, clip_eps: float, vf_coef: float, ent_coef: float,
                            max_grad_norm: float | None, target_kl: float | None, value_clip: float | None) -> None:
    for name, value in (("epochs", epochs), ("minibatch_size", minibatch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    _check_eps(clip_eps, "clip_eps")
    _check_coef(vf_coef, "vf_coef")
    _check_coef(ent_coef, "ent_coef")
    for name, optional in (("max_grad_norm", max_grad_norm), ("target_kl", target_kl), ("value_clip", value_clip)):
        _check_positive_or_none(optional, name)


def _check_batch(batch: dict[str, Tensor], value_clip: float | None) -> int:
    """Validate a rollout batch; return its size ``B``."""
    required = ("obs", "actions", "old_logp", "advantages", "returns")
    missing = [k for k in required if k not in batch]
    if missing:
        raise ValueError(f"batch is missing keys {missing}")
    obs = batch["obs"]
    if obs.ndim < 1 or obs.shape[0] < 1:
        raise ValueError(f"batch['obs'] must be (B, ...) with B >= 1, got {tuple(obs.shape)}")
    B = obs.shape[0]
    for key in ("actions", "old_logp", "advantages", "returns", "old_values"):
        if key in batch and batch[key].shape != (B,):
            raise ValueError(f"batch['{key}'] must have shape (B,) = ({B},), got {tuple(batch[key].shape)}")
    if batch["actions"].dtype.is_floating_point:
        raise ValueError("batch['actions'] must be integer")
    if batch["old_logp"].requires_grad:
        raise ValueError("batch['old_logp'] must not require grad (old_logp is a constant)")
    if value_clip is not None and "old_values" not in batch:
        raise ValueError("value_clip needs batch['old_values']")
    return B


def _check_eps(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
        raise ValueError(f"{name} must lie in (0, 1), got {value!r}")
    return float(value)


def _check_coef(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return float(value)


def _check_positive_or_none(value: float | None, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be None or finite and > 0, got {value!r}")
    return float(value)
