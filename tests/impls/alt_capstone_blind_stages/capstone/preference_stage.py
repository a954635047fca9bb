# Blind alternative (capstone round, tester B, written from the stubs alone), with its variants v1 (terse error
# messages), v6a (DPO on Python floats in float32), v8 (colon-labelled transcript) and the '(start, stop)' prose
# comment SHP002 misread: must pass every test of capstone/agent.
"""Canon #60, part 8: DPO on preference pairs, then GRPO with the verifier as the reward.

Plan. DPO: ``margin = (log pi(y_c|x) - log pi_ref(y_c|x)) - (log pi(y_r|x) - log pi_ref(y_r|x))`` on
summed sequence log-probabilities, ``loss = -logsigmoid(beta * margin).mean()``; the reference is a frozen
deep copy of the SFT policy and its log-probabilities are computed once. GRPO: sample a group of ``G``
one-token answers per prompt, score them with the verifier, turn rewards into group-relative
advantages ``(r - mean) / (std + eps)``, and minimise the PPO-clipped surrogate plus a ``k3`` KL penalty
to the reference. The subtle point is degenerate groups: a group whose answers all scored the same has
zero advantage everywhere and carries no gradient, so prompts are oversampled and only informative
groups are kept (DAPO's dynamic sampling).

Shapes: sequence log-probs ``(B,)``, text logits ``(B, T, V)``, GRPO rewards/advantages/log-probs
``(P, G)``, answer-slot logits ``(P, V)``, losses ``()``.

Trade-off: answers are single tokens, so the ``G`` answers of a prompt are all scored by one logit row;
:func:`group_logprobs` runs ``P`` rows instead of ``P * G`` and gathers ``G`` entries from each (``G``
times cheaper than re-encoding every sample). Masked positions in :func:`sequence_logprob` are replaced
with ``torch.where`` rather than multiplied by 0, so an inf/NaN log-prob at a padding slot cannot make
``0 * inf = NaN``.

What I would test: the quoted DPO value (``-12, -11.5, -13, -10.8`` -> margin 1.7); DPO loss ``log 2`` at
margin 0 and finite at margin +-1e4; advantage rows summing to 0 and a constant row giving exactly 0;
``k3 >= 0`` and 0 at equal log-probs; ``grpo_loss = -mean(A) + c * mean(k3)`` at ratio 1; the clip
stopping the gradient outside ``[1 - eps, 1 + eps]`` on the right side; ``group_logprobs`` against
``sequence_logprob`` on the encoded rows; prompt-major order in ``sample_group``.
"""
# What the rubric reads: in the docstring above, your plan (what the module computes and its subtle
# point, the shapes, a trade-off: why this way rather than another, and what you would test); a
# docstring on every public function; a shape comment at the end of every line that creates,
# reshapes, contracts or reduces a tensor: `scores = q @ k.transpose(-2, -1)  # (B, H, T_q, T_k)`.

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


def freeze_reference(model: TinyVLM) -> TinyVLM:
    """A frozen deep copy of ``model``: eval mode, no parameter requires grad, no storage shared."""
    ref = copy.deepcopy(model)
    ref.eval()
    ref.requires_grad_(False)
    return ref


def sequence_logprob(model: TinyVLM, batch: SFTBatch) -> Tensor:
    """``(B,)`` summed log-probability of the ``loss_mask`` tokens: ``sum_t mask_t log pi(y_t | x, y_<t)``.

    Masked positions are replaced by 0 before the sum (never multiplied), so a non-finite value there
    cannot leak in.
    """
    logits = model.text_logits(batch.images, batch.input_ids, batch.attention_mask)  # (B, T, V)
    logp = F.log_softmax(logits, dim=-1)  # (B, T, V)
    token_logp = logp.gather(-1, batch.input_ids.unsqueeze(-1)).squeeze(-1)  # (B, T)
    token_logp = torch.where(batch.loss_mask > 0, token_logp, torch.zeros_like(token_logp))
    return token_logp.sum(dim=1)  # (B,)


def _as_tensor(x: Tensor | float) -> Tensor:
    """A tensor view of a log-probability argument (Python floats become float64 scalars)."""
    return torch.as_tensor(x, dtype=torch.get_default_dtype()) if not isinstance(x, Tensor) else x


def dpo_loss(policy_chosen: Tensor | float, policy_rejected: Tensor | float, ref_chosen: Tensor | float,
             ref_rejected: Tensor | float, beta: float = 0.1) -> tuple[Tensor, Tensor]:
    """DPO on summed log-probabilities ``(B,)`` (or Python floats): ``(loss (), margin (B,))``.

    ``margin`` is the log-ratio difference without ``beta``; ``loss = -log sigmoid(beta * margin).mean()``
    computed with ``logsigmoid``, finite for any margin.

    Raises:
        ValueError: ``beta`` not finite and > 0; inputs of different shapes.
    """
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError("invalid input")
    pc, pr, rc, rr = (_as_tensor(x) for x in (policy_chosen, policy_rejected, ref_chosen, ref_rejected))
    if not (pc.shape == pr.shape == rc.shape == rr.shape):
        raise ValueError("invalid input")
    margin = (pc - rc) - (pr - rr)  # (B,) | ()
    loss = -F.logsigmoid(beta * margin).mean()  # ()
    return loss, margin


def _pair_logprobs(model: TinyVLM, pairs: list[PreferencePair]) -> tuple[Tensor, Tensor]:
    """Summed log-probs of the chosen and the rejected answers, from one ``2B``-row pass: ``(B,), (B,)``."""
    examples = [p.example for p in pairs]
    answers = [p.chosen for p in pairs] + [p.rejected for p in pairs]
    batch = encode_batch(examples + examples, answers=answers)
    logp = sequence_logprob(model, batch)  # (2B,)
    chosen, rejected = logp.chunk(2)  # (B,) each
    return chosen, rejected


@torch.no_grad()
def _pair_logprobs_chunked(model: TinyVLM, pairs: list[PreferencePair], chunk: int = 256) -> tuple[Tensor, Tensor]:
    """:func:`_pair_logprobs` over many pairs in chunks, without gradients: ``(N,), (N,)``."""
    parts = [_pair_logprobs(model, pairs[s:s + chunk]) for s in range(0, len(pairs), chunk)]
    chosen = torch.cat([c for c, _ in parts])  # (N,)
    rejected = torch.cat([r for _, r in parts])  # (N,)
    return chosen, rejected


@torch.no_grad()
def mean_dpo_margin(policy: TinyVLM, reference: TinyVLM, pairs: list[PreferencePair]) -> float:
    """Mean unscaled DPO margin (nats) of ``policy`` against ``reference`` over ``pairs``.

    Raises:
        ValueError: empty ``pairs``.
    """
    if len(pairs) == 0:
        raise ValueError("invalid input")
    pc, pr = _pair_logprobs_chunked(policy, pairs)  # (N,), (N,)
    rc, rr = _pair_logprobs_chunked(reference, pairs)  # (N,), (N,)
    _, margin = dpo_loss(pc, pr, rc, rr)  # (), (N,)
    return margin.mean().item()


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
    if len(pairs) == 0:
        raise ValueError("invalid input")
    if steps <= 0 or batch_size <= 0:
        raise ValueError("invalid input")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError("invalid input")
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError("invalid input")
    ref_chosen, ref_rejected = _pair_logprobs_chunked(reference, pairs)  # (N,), (N,)
    probe = pairs[:256]
    n_probe = len(probe)

    def probe_margin() -> float:
        pc, pr = _pair_logprobs_chunked(policy, probe)  # (n_probe,), (n_probe,)
        _, m = dpo_loss(pc, pr, ref_chosen[:n_probe], ref_rejected[:n_probe], beta)  # (), (n_probe,)
        return m.mean().item()

    margin_before = probe_margin()
    rng = np.random.default_rng(seed)
    opt = ClippedAdam(policy.parameters(), lr=lr, max_grad_norm=1.0)
    policy.train()
    losses: list[float] = []
    margins: list[float] = []
    for _ in range(steps):
        idx = rng.integers(0, len(pairs), size=batch_size)  # (B,)
        pc, pr = _pair_logprobs(policy, [pairs[i] for i in idx])  # (B,), (B,)
        index = torch.as_tensor(idx, dtype=torch.long)
        loss, margin = dpo_loss(pc, pr, ref_chosen[index], ref_rejected[index], beta)  # (), (B,)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        margins.append(margin.mean().item())
    margin_after = probe_margin()
    return {
        "losses": losses,
        "margins": margins,
        "margin_before": margin_before,
        "margin_after": margin_after,
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
    if rewards.dim() != 2:
        raise ValueError("invalid input")
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError("invalid input")
    centred = rewards - rewards.mean(dim=1, keepdim=True)  # (P, G)
    if not normalize_std:
        return centred
    std = rewards.std(dim=1, unbiased=False, keepdim=True)  # (P, 1)
    return centred / (std + eps)


def k3_kl(logp_policy: Tensor, logp_ref: Tensor) -> Tensor:
    """Schulman's ``k3`` estimate of ``KL(pi || pi_ref)`` per row: ``expm1(d) - d``, ``d = logp_ref - logp_policy``.

    Inputs and output ``(B,)``; non-negative (``e^d >= 1 + d``) and unbiased in expectation.
    """
    d = logp_ref - logp_policy
    return torch.expm1(d) - d


def grpo_loss(logp: Tensor, logp_old: Tensor, advantages: Tensor, logp_ref: Tensor, clip_eps: float = 0.2,
              kl_coef: float = 0.02) -> Tensor:
    """Clipped surrogate plus ``k3`` penalty; all inputs ``(B,)``, output a scalar ``()``.

    ``-mean(min(rho A, clip(rho, 1 - clip_eps, 1 + clip_eps) A)) + kl_coef * mean(k3)`` with
    ``rho = exp(logp - logp_old)``. At ``rho = 1`` it is ``-mean(A) + kl_coef * mean(k3)``.

    Raises:
        ValueError: inputs of different shapes, ``clip_eps <= 0`` or ``kl_coef < 0``.
    """
    if not (logp.shape == logp_old.shape == advantages.shape == logp_ref.shape):
        raise ValueError("invalid input")
    if not clip_eps > 0:
        raise ValueError("invalid input")
    if not kl_coef >= 0:
        raise ValueError("invalid input")
    ratio = torch.exp(logp - logp_old)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * advantages
    surrogate = torch.minimum(unclipped, clipped).mean()  # ()
    return -surrogate + kl_coef * k3_kl(logp, logp_ref).mean()  # ()


@torch.no_grad()
def sample_group(model: TinyVLM, examples: list[task.Example], group_size: int, temperature: float = 1.0,
                 generator: torch.Generator | None = None) -> tuple[list[task.Example], list[str], Tensor]:
    """Sample ``G`` answers for each of ``P`` prompts and score them with the verifier.

    Returns ``(repeated_examples, answers, rewards)``: two lists of length ``P * G`` in prompt-major
    order (rows ``p * G .. p * G + G - 1`` belong to prompt ``p``) and ``(P, G)`` float32 rewards.

    Raises:
        ValueError: empty ``examples``, ``group_size < 1``, ``temperature`` not finite and > 0.
    """
    if len(examples) == 0:
        raise ValueError("invalid input")
    if group_size < 1:
        raise ValueError("invalid input")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError("invalid input")
    logits = next_token_logits(model, examples)  # (P, V)
    probs = F.softmax(logits.float() / temperature, dim=-1)  # (P, V)
    ids = torch.multinomial(probs, group_size, replacement=True, generator=generator)  # (P, G)
    answers = [task.ITOS[i] for i in ids.reshape(-1).tolist()]  # list[P*G]
    repeated = [ex for ex in examples for _ in range(group_size)]  # list[P*G]
    rewards = verifier_rewards(answers, repeated).view(len(examples), group_size)  # (P, G)
    return repeated, answers, rewards


def group_logprobs(model: TinyVLM, prompts: list[task.Example], answer_ids: Tensor) -> Tensor:
    """``(P, G)`` log-probabilities ``log pi(a_pg | x_p)`` of one-token answers, from one forward pass.

    ``answer_ids`` is ``(P, G)`` long. Because an answer is a single token, all ``G`` answers of prompt
    ``p`` are scored by the same logit row, so the pass runs over ``P`` prompts instead of ``P * G``
    encoded rows; it equals :func:`sequence_logprob` on the ``include_eos=False`` batch of those rows.

    Raises:
        ValueError: ``answer_ids`` is not ``(len(prompts), G)``.
    """
    if answer_ids.dim() != 2 or answer_ids.shape[0] != len(prompts):
        raise ValueError("invalid input")
    logits = next_token_logits(model, prompts)  # (P, V)
    logp = F.log_softmax(logits, dim=-1)  # (P, V)
    return logp.gather(1, answer_ids.to(logp.device))  # (P, G)


def informative_groups(rewards: Tensor) -> Tensor:
    """``(P, G)`` rewards -> ``(P,)`` bool, True where the group's rewards are not all equal.

    A constant group has zero advantage for every sample and carries no gradient.

    Raises:
        ValueError: ``rewards`` not 2-D.
    """
    if rewards.dim() != 2:
        raise ValueError("invalid input")
    return rewards.amax(dim=1) != rewards.amin(dim=1)  # (P,)


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
    if len(examples) == 0:
        raise ValueError("invalid input")
    for name, value in (("steps", steps), ("prompts_per_step", prompts_per_step), ("group_size", group_size),
                        ("inner_epochs", inner_epochs), ("oversample", oversample)):
        if value <= 0:
            raise ValueError("invalid input")
    for name, fvalue in (("lr", lr), ("temperature", temperature), ("clip_eps", clip_eps)):
        if not (math.isfinite(fvalue) and fvalue > 0):
            raise ValueError("invalid input")
    if not kl_coef >= 0:
        raise ValueError("invalid input")
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = ClippedAdam(policy.parameters(), lr=lr, max_grad_norm=1.0)
    policy.train()
    n_draw = oversample * prompts_per_step if filter_degenerate else prompts_per_step
    losses: list[float] = []
    mean_rewards: list[float] = []
    informative_total = 0
    drawn_total = 0
    groups_used = 0
    for _ in range(steps):
        idx = rng.integers(0, len(examples), size=n_draw)  # (n_draw,)
        drawn = [examples[i] for i in idx]
        _, answers, rewards = sample_group(policy, drawn, group_size, temperature, gen)  # list[n_draw*G], (n_draw, G)
        mean_rewards.append(rewards.mean().item())
        informative = informative_groups(rewards)  # (n_draw,)
        informative_total += int(informative.sum().item())
        drawn_total += n_draw
        if filter_degenerate:
            keep = informative.nonzero().flatten()[:prompts_per_step].tolist()
        else:
            keep = list(range(min(prompts_per_step, n_draw)))
        if not keep:
            continue
        groups_used += len(keep)
        prompts = [drawn[p] for p in keep]
        answer_ids = torch.tensor([[task.STOI[answers[p * group_size + g]] for g in range(group_size)]
                                   for p in keep], dtype=torch.long)  # (P, G)
        advantages = group_advantages(rewards[keep])  # (P, G)
        with torch.no_grad():
            logp_old = group_logprobs(policy, prompts, answer_ids)  # (P, G)
            logp_ref = group_logprobs(reference, prompts, answer_ids)  # (P, G)
        for _ in range(inner_epochs):
            logp = group_logprobs(policy, prompts, answer_ids)  # (P, G)
            loss = grpo_loss(logp.flatten(), logp_old.flatten(), advantages.flatten(), logp_ref.flatten(),
                             clip_eps, kl_coef)  # ()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return {
        "losses": losses,
        "mean_rewards": mean_rewards,
        "reward_first": float(np.mean(mean_rewards[:5])),
        "reward_last": float(np.mean(mean_rewards[-5:])),
        "informative_group_rate": informative_total / drawn_total,
        "groups_used": groups_used,
    }
