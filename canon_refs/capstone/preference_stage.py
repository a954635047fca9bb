"""Canon #60, part 8: DPO on preference pairs, then GRPO with the verifiable reward.

Both optimise the KL-regularised objective ``max E[r(x, y)] - beta KL(pi || pi_ref)``; they differ in
what stands in for ``r``.

* **DPO** needs no reward model. The objective's optimum is ``pi* = pi_ref exp(r / beta) / Z(x)``;
  solved for ``r`` and put into Bradley-Terry, ``Z(x)`` cancels (it depends on the prompt only),
  leaving ``loss = -log sigmoid(beta * margin)`` with the log-ratio margin
  ``margin = (log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l))``. :func:`dpo_loss`
  returns the margin *without* ``beta`` (1.7 for the pair ``-12, -11.5, -13, -10.8``; #55's
  ``beta``-scaled margin of the same pair is 0.17).
* **GRPO** keeps the RL loop and drops the critic: sample ``G`` answers per prompt, score them with the
  verifier, and use ``A = (r - mean_group) / (std_group + eps)`` as the advantage of every token of
  the answer, under PPO's clipped ratio and a ``k3`` KL penalty to the reference.

The subtle point is the degenerate group. With a 0/1 verifier, a group whose ``G`` samples all scored
the same has ``r - mean = 0`` everywhere: zero advantage, zero gradient, yet a full generation and two
forward passes paid for. After SFT most groups are like that (the policy is confidently right on easy
prompts and confidently wrong on hard ones), so :func:`run_grpo` draws ``oversample`` times more
prompts than it needs and keeps only the groups :func:`informative_groups` lets through, DAPO's
dynamic sampling. ``informative_group_rate`` reports the surviving share; when it collapses toward
zero the run has stopped learning.

Shapes: ``B`` rows (pairs, or ``P * G`` samples), ``T`` text length, ``V`` vocabulary, ``P`` prompts,
``G`` group size.

Trade-off: the group is sampled from one forward pass, because an answer is one token and all ``G``
samples of a prompt are draws from the same categorical; with multi-token answers each sample would
need its own decode, which is why generation dominates real RLHF wall clocks. ``k3 = expm1(d) - d``
with ``d = log pi_ref - log pi`` instead of ``exp(d) - d - 1``, because the latter cancels
catastrophically near ``d = 0`` and can come out negative in float32. The update scores the ``G``
answers of a prompt from one logit row (:func:`group_logprobs`) instead of re-encoding ``P * G``
rows, an 8x smaller forward pass at ``G = 8``; the old log-probabilities are the detached first inner
epoch's, rather than an extra no-grad pass, because no weight has moved yet then.

What to test: ``dpo_loss(-12, -11.5, -13, -10.8, 0.1)`` gives ``0.6117553388706229`` and margin 1.7;
group advantages sum to 0 per row and match #56 to 1e-5; ``informative_groups`` is False exactly on
constant rows; ``k3_kl >= 0``; ``grpo_loss = -mean(A) + kl_coef * mean(k3)`` at ratio 1; a policy that
is certain of its answers yields no informative group and no update.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from canon_refs.capstone import synthetic_task as task
from canon_refs.capstone.multimodal_model import TinyVLM
from canon_refs.capstone.optimizer import ClippedAdam
from canon_refs.capstone.reward_stage import PreferencePair, verifier_rewards
from canon_refs.capstone.sft_stage import SFTBatch, encode_batch, next_token_logits


def _check_positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_positive_float(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")


def freeze_reference(model: TinyVLM) -> TinyVLM:
    """A frozen deep copy of ``model``: eval mode, no parameter requires grad, no storage shared."""
    reference = copy.deepcopy(model)
    reference.eval()
    reference.requires_grad_(False)
    return reference


def sequence_logprob(model: TinyVLM, batch: SFTBatch) -> Tensor:
    """``(B,)`` summed log-probability of the ``loss_mask`` tokens: ``sum_t mask_t log pi(y_t | x, y_<t)``.

    Masked positions are replaced by 0 before the sum (never multiplied), so a non-finite value there
    cannot leak in.
    """
    logits = model.text_logits(batch.images, batch.input_ids, batch.attention_mask)  # (B, T, V)
    logp = F.log_softmax(logits, dim=-1)                                 # (B, T, V)
    token_logp = logp.gather(-1, batch.input_ids[:, :, None])[:, :, 0]  # (B, T)
    kept = torch.where(batch.loss_mask > 0, token_logp, torch.zeros_like(token_logp))  # (B, T)
    return kept.sum(dim=1)                                               # (B,)


def dpo_loss(policy_chosen: Tensor | float, policy_rejected: Tensor | float, ref_chosen: Tensor | float,
             ref_rejected: Tensor | float, beta: float = 0.1) -> tuple[Tensor, Tensor]:
    """DPO on summed log-probabilities ``(B,)`` (or Python floats): ``(loss (), margin (B,))``.

    ``margin`` is the log-ratio difference without ``beta``; ``loss = -log sigmoid(beta * margin).mean()``
    computed with ``logsigmoid``, finite for any margin.

    Raises:
        ValueError: ``beta`` not finite and > 0; inputs of different shapes.
    """
    _check_positive_float("beta", beta)
    inputs = (policy_chosen, policy_rejected, ref_chosen, ref_rejected)
    values = [v if isinstance(v, Tensor) else torch.as_tensor(v, dtype=torch.float64) for v in inputs]  # list[4]
    if len({tuple(v.shape) for v in values}) != 1:
        raise ValueError(f"policy_chosen, policy_rejected, ref_chosen, ref_rejected must share a shape, "
                         f"got {[tuple(v.shape) for v in values]}")
    pc, pr, rc, rr = values
    margin = (pc - rc) - (pr - rr)                                       # (B,) | ()
    loss = -F.logsigmoid(beta * margin).mean()                           # ()
    return loss, margin


def _pair_logprobs(model: TinyVLM, pairs: list[PreferencePair]) -> tuple[Tensor, Tensor]:
    """``(B,)`` chosen and ``(B,)`` rejected sequence log-probs from one forward pass of ``2B`` rows."""
    examples = [p.example for p in pairs]
    batch = encode_batch(examples + examples, answers=[p.chosen for p in pairs] + [p.rejected for p in pairs])
    logp = sequence_logprob(model, batch)                                # (2*B,)
    return logp[:len(pairs)], logp[len(pairs):]


@torch.no_grad()
def mean_dpo_margin(policy: TinyVLM, reference: TinyVLM, pairs: list[PreferencePair]) -> float:
    """Mean unscaled DPO margin (nats) of ``policy`` against ``reference`` over ``pairs``.

    Raises:
        ValueError: empty ``pairs``.
    """
    if not pairs:
        raise ValueError("pairs must be a non-empty list")
    ref_w, ref_l = _pair_logprobs(reference, pairs)
    return _margin_against(policy, pairs, ref_w, ref_l)


@torch.no_grad()
def _margin_against(policy: TinyVLM, pairs: list[PreferencePair], ref_chosen: Tensor, ref_rejected: Tensor) -> float:
    """Mean unscaled margin of ``policy`` over ``pairs`` given the reference's ``(B,)`` log-probs (eval
    mode, restored)."""
    was_training = policy.training
    policy.eval()
    try:
        pol_w, pol_l = _pair_logprobs(policy, pairs)
    finally:
        policy.train(was_training)
    _, margin = dpo_loss(pol_w, pol_l, ref_chosen, ref_rejected)
    return float(margin.mean())


def run_dpo(policy: TinyVLM, reference: TinyVLM, pairs: list[PreferencePair], steps: int = 120,
            batch_size: int = 32, lr: float = 3e-4, beta: float = 0.1, seed: int = 0) -> dict[str, object]:
    """Train ``policy`` with DPO against the frozen ``reference`` on random batches of ``pairs``.

    The reference log-probabilities of every pair are computed once up front (the reference never
    changes), so a step costs one forward and backward pass of the policy over ``2B`` rows, and the
    margin measured on the first 256 pairs before and after training reuses them.

    Returns:
        ``{"losses", "margins": list[float] per step, "margin_before", "margin_after", "loss_first",
        "loss_last": means of the first/last 10 steps}``.

    Raises:
        ValueError: empty ``pairs``; non-positive ``steps``, ``batch_size``, ``lr`` or ``beta``.
    """
    if not pairs:
        raise ValueError("pairs must be a non-empty list")
    _check_positive_int("steps", steps)
    _check_positive_int("batch_size", batch_size)
    _check_positive_float("lr", lr)
    _check_positive_float("beta", beta)
    rng = np.random.default_rng(seed)
    optimizer = ClippedAdam(policy.parameters(), lr=lr, max_grad_norm=1.0)
    with torch.no_grad():
        ref_logps = [_pair_logprobs(reference, pairs[i:i + 256]) for i in range(0, len(pairs), 256)]
    ref_chosen = torch.cat([w for w, _ in ref_logps])                    # (N,)
    ref_rejected = torch.cat([r for _, r in ref_logps])                  # (N,)
    probe = pairs[:256]
    ref_probe = (ref_chosen[:len(probe)], ref_rejected[:len(probe)])
    margin_before = _margin_against(policy, probe, *ref_probe)
    losses: list[float] = []
    margins: list[float] = []
    policy.train()
    for _ in range(steps):
        idx = rng.integers(0, len(pairs), size=batch_size)               # (B,)
        pol_w, pol_l = _pair_logprobs(policy, [pairs[int(i)] for i in idx])
        rows = torch.from_numpy(idx)                                     # (B,)
        loss, margin = dpo_loss(pol_w, pol_l, ref_chosen[rows], ref_rejected[rows], beta)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        margins.append(float(margin.detach().mean()))
    return {
        "losses": losses,
        "margins": margins,
        "margin_before": margin_before,
        "margin_after": _margin_against(policy, probe, *ref_probe),
        "loss_first": float(np.mean(losses[:10])),
        "loss_last": float(np.mean(losses[-10:])),
    }


def group_advantages(rewards: Tensor, normalize_std: bool = True, eps: float = 1e-6) -> Tensor:
    """``(P, G)`` rewards -> ``(P, G)`` advantages ``(r - mean_row) / (std_row + eps)``.

    The std is the population std. Every row sums to 0; a constant row is exactly 0 (``0 / eps``).
    ``normalize_std=False`` gives ``r - mean_row`` (Dr. GRPO).

    Raises:
        ValueError: ``rewards`` not 2-D, or ``eps`` not finite and > 0.
    """
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be (P, G), got shape {tuple(rewards.shape)}")
    _check_positive_float("eps", eps)
    centred = rewards - rewards.mean(dim=1, keepdim=True)                # (P, G)
    if not normalize_std:
        return centred                                                   # (P, G)
    std = rewards.std(dim=1, correction=0, keepdim=True)                 # (P, 1)
    return centred / (std + eps)                                         # (P, G)


def k3_kl(logp_policy: Tensor, logp_ref: Tensor) -> Tensor:
    """Schulman's ``k3`` estimate of ``KL(pi || pi_ref)`` per row: ``expm1(d) - d``, ``d = logp_ref - logp_policy``.

    Inputs and output ``(B,)``; non-negative (``e^d >= 1 + d``) and unbiased in expectation.
    """
    d = logp_ref - logp_policy                                           # (B,)
    return torch.expm1(d) - d                                            # (B,)


def grpo_loss(logp: Tensor, logp_old: Tensor, advantages: Tensor, logp_ref: Tensor, clip_eps: float = 0.2,
              kl_coef: float = 0.02) -> Tensor:
    """Clipped surrogate plus ``k3`` penalty; all inputs ``(B,)``, output a scalar ``()``.

    ``-mean(min(rho A, clip(rho, 1 - clip_eps, 1 + clip_eps) A)) + kl_coef * mean(k3)`` with
    ``rho = exp(logp - logp_old)``. At ``rho = 1`` it is ``-mean(A) + kl_coef * mean(k3)``.

    Raises:
        ValueError: inputs of different shapes, ``clip_eps <= 0`` or ``kl_coef < 0``.
    """
    if not (logp.shape == logp_old.shape == advantages.shape == logp_ref.shape):
        raise ValueError("logp, logp_old, advantages and logp_ref must share a shape")
    _check_positive_float("clip_eps", clip_eps)
    if not (math.isfinite(kl_coef) and kl_coef >= 0):
        raise ValueError(f"kl_coef must be finite and >= 0, got {kl_coef!r}")
    ratio = torch.exp(logp - logp_old)                                   # (B,)
    unclipped = ratio * advantages                                       # (B,)
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * advantages   # (B,)
    surrogate = torch.minimum(unclipped, clipped).mean()                 # ()
    return -surrogate + kl_coef * k3_kl(logp, logp_ref).mean()           # ()


@torch.no_grad()
def sample_group(model: TinyVLM, examples: list[task.Example], group_size: int, temperature: float = 1.0,
                 generator: torch.Generator | None = None) -> tuple[list[task.Example], list[str], Tensor]:
    """Sample ``G`` answers for each of ``P`` prompts and score them with the verifier.

    Returns ``(repeated_examples, answers, rewards)``: two lists of length ``P * G`` in prompt-major
    order (rows ``p * G .. p * G + G - 1`` belong to prompt ``p``) and ``(P, G)`` float32 rewards.

    Raises:
        ValueError: empty ``examples``, ``group_size < 1``, ``temperature`` not finite and > 0.
    """
    if not examples:
        raise ValueError("examples must be a non-empty list")
    _check_positive_int("group_size", group_size)
    _check_positive_float("temperature", temperature)
    logits = next_token_logits(model, examples)                          # (P, V)
    probs = torch.softmax(logits / temperature, dim=-1)                  # (P, V)
    sampled = torch.multinomial(probs, group_size, replacement=True, generator=generator)  # (P, G)
    repeated = [ex for ex in examples for _ in range(group_size)]        # list[P*G]
    answers = [task.ITOS[i] for i in sampled.reshape(-1).tolist()]       # list[P*G]
    rewards = verifier_rewards(answers, repeated).reshape(len(examples), group_size)  # (P, G)
    return repeated, answers, rewards


def group_logprobs(model: TinyVLM, prompts: list[task.Example], answer_ids: Tensor) -> Tensor:
    """``(P, G)`` log-probabilities ``log pi(a_pg | x_p)`` of one-token answers, from one forward pass.

    ``answer_ids`` is ``(P, G)`` long. Because an answer is a single token, all ``G`` answers of prompt
    ``p`` are scored by the same logit row, so the pass runs over ``P`` prompts instead of ``P * G``
    encoded rows; it equals :func:`sequence_logprob` on the ``include_eos=False`` batch of those rows.

    Raises:
        ValueError: ``answer_ids`` is not ``(len(prompts), G)``.
    """
    if answer_ids.ndim != 2 or answer_ids.shape[0] != len(prompts):
        raise ValueError(f"answer_ids must be ({len(prompts)}, G), got {tuple(answer_ids.shape)}")
    logp = F.log_softmax(next_token_logits(model, prompts), dim=-1)      # (P, V)
    return logp.gather(1, answer_ids)                                    # (P, G)


def informative_groups(rewards: Tensor) -> Tensor:
    """``(P, G)`` rewards -> ``(P,)`` bool, True where the group's rewards are not all equal.

    A constant group has zero advantage for every sample and carries no gradient.

    Raises:
        ValueError: ``rewards`` not 2-D.
    """
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be (P, G), got shape {tuple(rewards.shape)}")
    return rewards.amax(dim=1) > rewards.amin(dim=1)                     # (P,)


def run_grpo(policy: TinyVLM, reference: TinyVLM, examples: list[task.Example], steps: int = 25,
             prompts_per_step: int = 6, group_size: int = 8, inner_epochs: int = 2, lr: float = 1e-4,
             clip_eps: float = 0.2, kl_coef: float = 0.02, temperature: float = 1.0, oversample: int = 4,
             filter_degenerate: bool = True, seed: int = 0) -> dict[str, object]:
    """GRPO with the verifier as reward and DAPO-style dynamic sampling.

    Each step draws ``oversample * prompts_per_step`` prompts (``prompts_per_step`` without the
    filter), samples a group of ``G`` answers per prompt at ``temperature``, keeps up to
    ``prompts_per_step`` informative groups (any groups, in order, when ``filter_degenerate`` is
    False), and takes ``inner_epochs`` :class:`ClippedAdam` steps on them. A step with no kept group
    makes no update.

    Returns:
        ``{"losses": list[float] per update, "mean_rewards": list[float] per step (pass rate before
        filtering), "reward_first", "reward_last": means of the first/last 5 steps,
        "informative_group_rate": informative / drawn groups, "groups_used": kept groups in total}``.

    Raises:
        ValueError: empty ``examples``; non-positive ``steps``, ``prompts_per_step``, ``group_size``,
            ``inner_epochs``, ``oversample``, ``lr``, ``temperature`` or ``clip_eps``; ``kl_coef < 0``.
    """
    if not examples:
        raise ValueError("examples must be a non-empty list")
    for name, value in (("steps", steps), ("prompts_per_step", prompts_per_step), ("group_size", group_size),
                        ("inner_epochs", inner_epochs), ("oversample", oversample)):
        _check_positive_int(name, value)
    for name, fvalue in (("lr", lr), ("temperature", temperature), ("clip_eps", clip_eps)):
        _check_positive_float(name, fvalue)
    if not (math.isfinite(kl_coef) and kl_coef >= 0):
        raise ValueError(f"kl_coef must be finite and >= 0, got {kl_coef!r}")
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    optimizer = ClippedAdam(policy.parameters(), lr=lr, max_grad_norm=1.0)
    draw = prompts_per_step * oversample if filter_degenerate else prompts_per_step
    losses: list[float] = []
    mean_rewards: list[float] = []
    drawn = informative = used = 0
    for _ in range(steps):
        idx = rng.integers(0, len(examples), size=draw)                  # (P,)
        policy.eval()
        repeated, answers, rewards = sample_group(policy, [examples[int(i)] for i in idx], group_size,
                                                  temperature, generator)
        mean_rewards.append(float(rewards.mean()))
        keep = informative_groups(rewards)                               # (P,)
        drawn += draw
        informative += int(keep.sum())
        candidates = torch.nonzero(keep)[:, 0] if filter_degenerate else torch.arange(draw)  # (P_inf,) | (P,)
        kept = candidates[:prompts_per_step].tolist()
        used += len(kept)
        if not kept:
            continue
        prompts = [repeated[p * group_size] for p in kept]
        answer_ids = torch.tensor([task.STOI[a] for a in answers]).reshape(draw, group_size)[kept]  # (P_keep, G)
        advantages = group_advantages(rewards[kept]).reshape(-1)         # (P_keep*G,)
        with torch.no_grad():
            logp_ref = group_logprobs(reference, prompts, answer_ids).reshape(-1)  # (P_keep*G,)
        policy.train()
        logp_old = None
        for _ in range(inner_epochs):
            logp = group_logprobs(policy, prompts, answer_ids).reshape(-1)  # (P_keep*G,)
            if logp_old is None:
                logp_old = logp.detach()                                 # (P_keep*G,)
            loss = grpo_loss(logp, logp_old, advantages, logp_ref, clip_eps, kl_coef)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    return {
        "losses": losses,
        "mean_rewards": mean_rewards,
        "reward_first": float(np.mean(mean_rewards[:5])),
        "reward_last": float(np.mean(mean_rewards[-5:])),
        "informative_group_rate": informative / drawn,
        "groups_used": used,
    }
