"""Alternative DPO and GRPO for the capstone (#60), written differently from the reference: the DPO loss
as ``softplus(-beta * margin)``; token log-probs as ``logits - logsumexp`` picked with a one-hot einsum
and summed through ``masked_fill``; the reference log-probs recomputed every DPO step; advantages
divided by ``sqrt(mean((r - mean)^2))``; ``k3`` as ``exp(d) - d - 1`` evaluated in float64; the clipped
surrogate as a ``torch.where`` on the sign of the advantage; Gumbel-max group sampling; the degenerate
test as ``std > 0``; and the GRPO update through the general multi-token path (every one of the
``P * G`` rows encoded and scored by :func:`sequence_logprob`, with a separate no-grad pass for the old
log-probabilities). Must pass every test of capstone/agent.

Shapes: ``B`` rows, ``T`` text length, ``V`` vocabulary, ``P`` prompts, ``G`` group size. Trade-off:
slower than the reference because it re-encodes ``P * G`` rows instead of ``P`` prompts; what to test
is the same list as the reference's.
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
from canon_refs.capstone.reward_stage import PreferencePair, verifier_rewards
from canon_refs.capstone.sft_stage import SFTBatch, encode_batch, next_token_logits


def _positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def freeze_reference(model: TinyVLM) -> TinyVLM:
    """Frozen deep copy: parameters without grad, eval mode."""
    frozen = copy.deepcopy(model)
    for parameter in frozen.parameters():
        parameter.requires_grad = False
    return frozen.eval()


def sequence_logprob(model: TinyVLM, batch: SFTBatch) -> Tensor:
    """``(B,)`` sum of ``log pi(y_t)`` over the positions where ``loss_mask`` is 1."""
    logits = model.text_logits(batch.images, batch.input_ids, batch.attention_mask)  # (B, T, V)
    logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)       # (B, T, V)
    one_hot = F.one_hot(batch.input_ids, logits.shape[-1]).to(logp.dtype)  # (B, T, V)
    picked = torch.einsum("btv,btv->bt", logp, one_hot)                  # (B, T)
    return picked.masked_fill(batch.loss_mask == 0, 0.0).sum(dim=1)      # (B,)


def dpo_loss(policy_chosen: Tensor | float, policy_rejected: Tensor | float, ref_chosen: Tensor | float,
             ref_rejected: Tensor | float, beta: float = 0.1) -> tuple[Tensor, Tensor]:
    """``(softplus(-beta * margin).mean(), margin)`` with the unscaled log-ratio margin."""
    _positive("beta", beta)
    raw = (policy_chosen, policy_rejected, ref_chosen, ref_rejected)
    pc, pr, rc, rr = (v if isinstance(v, Tensor) else torch.as_tensor(v, dtype=torch.float64) for v in raw)  # (B,) | (), (B,) | (), (B,) | (), (B,) | ()
    if not (pc.shape == pr.shape == rc.shape == rr.shape):
        raise ValueError("policy_chosen, policy_rejected, ref_chosen and ref_rejected must have one shape")
    margin = (pc - pr) - (rc - rr)                                       # (B,) | ()
    return F.softplus(-beta * margin).mean(), margin


def _logprobs_of(model: TinyVLM, pairs: list[PreferencePair], which: str) -> Tensor:
    examples = [p.example for p in pairs]
    return sequence_logprob(model, encode_batch(examples, answers=[getattr(p, which) for p in pairs]))  # (B,)


@torch.no_grad()
def mean_dpo_margin(policy: TinyVLM, reference: TinyVLM, pairs: list[PreferencePair]) -> float:
    """Mean unscaled margin over ``pairs`` (four forward passes, policy in eval mode, mode restored)."""
    if not pairs:
        raise ValueError("pairs must not be empty")
    mode = policy.training
    policy.eval()
    margin = dpo_loss(_logprobs_of(policy, pairs, "chosen"), _logprobs_of(policy, pairs, "rejected"),
                      _logprobs_of(reference, pairs, "chosen"), _logprobs_of(reference, pairs, "rejected"))[1]
    policy.train(mode)
    return float(margin.mean())


def run_dpo(policy: TinyVLM, reference: TinyVLM, pairs: list[PreferencePair], steps: int = 120,
            batch_size: int = 32, lr: float = 3e-4, beta: float = 0.1, seed: int = 0) -> dict[str, object]:
    """DPO with the reference re-scored every step."""
    if not pairs:
        raise ValueError("pairs must not be empty")
    _positive_int("steps", steps)
    _positive_int("batch_size", batch_size)
    _positive("lr", lr)
    _positive("beta", beta)
    rng = np.random.default_rng(seed)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    before = mean_dpo_margin(policy, reference, pairs[:256])
    losses, margins = [], []
    policy.train()
    for _ in range(steps):
        chunk = [pairs[int(i)] for i in rng.integers(0, len(pairs), size=batch_size)]  # list[B]
        with torch.no_grad():
            ref_c, ref_r = _logprobs_of(reference, chunk, "chosen"), _logprobs_of(reference, chunk, "rejected")
        loss, margin = dpo_loss(_logprobs_of(policy, chunk, "chosen"), _logprobs_of(policy, chunk, "rejected"),
                                ref_c, ref_r, beta)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        margins.append(margin.mean().item())
    return {"losses": losses, "margins": margins, "margin_before": before,
            "margin_after": mean_dpo_margin(policy, reference, pairs[:256]),
            "loss_first": float(np.mean(losses[:10])), "loss_last": float(np.mean(losses[-10:]))}


def group_advantages(rewards: Tensor, normalize_std: bool = True, eps: float = 1e-6) -> Tensor:
    """``(P, G) -> (P, G)``: ``(r - mean) / (sqrt(mean((r - mean)^2)) + eps)``."""
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be 2-D (P, G), got {tuple(rewards.shape)}")
    _positive("eps", eps)
    deviation = rewards - rewards.mean(dim=-1, keepdim=True)             # (P, G)
    if not normalize_std:
        return deviation                                                 # (P, G)
    spread = deviation.pow(2).mean(dim=-1, keepdim=True).sqrt()          # (P, 1)
    return deviation / (spread + eps)                                    # (P, G)


def k3_kl(logp_policy: Tensor, logp_ref: Tensor) -> Tensor:
    """``exp(d) - d - 1`` with ``d = logp_ref - logp_policy``, evaluated in float64 and cast back."""
    d = (logp_ref - logp_policy).double()                                # (B,)
    return (torch.exp(d) - d - 1.0).clamp_min(0.0).to(logp_policy.dtype)  # (B,)


def grpo_loss(logp: Tensor, logp_old: Tensor, advantages: Tensor, logp_ref: Tensor, clip_eps: float = 0.2,
              kl_coef: float = 0.02) -> Tensor:
    """PPO clip written as a bound on the ratio chosen by the sign of ``A``, plus the k3 penalty."""
    if not (logp.shape == logp_old.shape == advantages.shape == logp_ref.shape):
        raise ValueError("logp, logp_old, advantages and logp_ref must have one shape")
    _positive("clip_eps", clip_eps)
    if not (math.isfinite(kl_coef) and kl_coef >= 0):
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef!r}")
    ratio = (logp - logp_old).exp()                                      # (B,)
    bounded = torch.where(advantages >= 0, ratio.clamp(max=1.0 + clip_eps), ratio.clamp(min=1.0 - clip_eps))  # (B,)
    return -(bounded * advantages).mean() + kl_coef * k3_kl(logp, logp_ref).mean()  # ()


@torch.no_grad()
def sample_group(model: TinyVLM, examples: list[task.Example], group_size: int, temperature: float = 1.0,
                 generator: torch.Generator | None = None) -> tuple[list[task.Example], list[str], Tensor]:
    """Gumbel-max sampling of ``G`` answers per prompt: ``argmax(logits / T + Gumbel noise)``."""
    if not examples:
        raise ValueError("examples must not be empty")
    _positive_int("group_size", group_size)
    _positive("temperature", temperature)
    scaled = next_token_logits(model, examples) / temperature            # (P, V)
    uniform = torch.rand(len(examples), group_size, scaled.shape[-1], generator=generator)  # (P, G, V)
    gumbel = -torch.log(-torch.log(uniform.clamp(1e-20, 1.0 - 1e-7)))    # (P, G, V)
    sampled = (scaled[:, None, :] + gumbel).argmax(dim=-1)               # (P, G)
    repeated = [examples[p] for p in range(len(examples)) for _ in range(group_size)]  # list[P*G]
    answers = [task.ITOS[i] for i in sampled.flatten().tolist()]         # list[P*G]
    rewards = verifier_rewards(answers, repeated).view(len(examples), group_size)  # (P, G)
    return repeated, answers, rewards


def group_logprobs(model: TinyVLM, prompts: list[task.Example], answer_ids: Tensor) -> Tensor:
    """``(P, G)`` answer log-probs through :func:`sequence_logprob` on the ``P * G`` encoded rows."""
    if answer_ids.ndim != 2 or answer_ids.shape[0] != len(prompts):
        raise ValueError(f"answer_ids must be ({len(prompts)}, G), got {tuple(answer_ids.shape)}")
    P, G = answer_ids.shape
    rows = encode_batch([ex for ex in prompts for _ in range(G)],
                        answers=[task.ITOS[i] for i in answer_ids.flatten().tolist()], include_eos=False)
    return sequence_logprob(model, rows).view(P, G)                      # (P, G)


def informative_groups(rewards: Tensor) -> Tensor:
    """``(P, G) -> (P,)``: the population std of the group is positive."""
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be 2-D (P, G), got {tuple(rewards.shape)}")
    return rewards.std(dim=-1, correction=0) > 0                         # (P,)


def run_grpo(policy: TinyVLM, reference: TinyVLM, examples: list[task.Example], steps: int = 25,
             prompts_per_step: int = 6, group_size: int = 8, inner_epochs: int = 2, lr: float = 1e-4,
             clip_eps: float = 0.2, kl_coef: float = 0.02, temperature: float = 1.0, oversample: int = 4,
             filter_degenerate: bool = True, seed: int = 0) -> dict[str, object]:
    """GRPO through the general multi-token path, with dynamic sampling of informative groups."""
    if not examples:
        raise ValueError("examples must not be empty")
    for name, value in (("steps", steps), ("prompts_per_step", prompts_per_step), ("group_size", group_size),
                        ("inner_epochs", inner_epochs), ("oversample", oversample)):
        _positive_int(name, value)
    for name, fvalue in (("lr", lr), ("temperature", temperature), ("clip_eps", clip_eps)):
        _positive(name, fvalue)
    if not (math.isfinite(kl_coef) and kl_coef >= 0):
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef!r}")
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    n_draw = prompts_per_step * (oversample if filter_degenerate else 1)
    stats = {"drawn": 0, "informative": 0, "used": 0}
    losses, mean_rewards = [], []
    for _ in range(steps):
        drawn = [examples[int(i)] for i in rng.integers(0, len(examples), size=n_draw)]  # list[P]
        policy.eval()
        repeated, answers, rewards = sample_group(policy, drawn, group_size, temperature, generator)
        mean_rewards.append(rewards.mean().item())
        mask = informative_groups(rewards)                               # (P,)
        stats["drawn"] += n_draw
        stats["informative"] += int(mask.sum().item())
        order = [p for p in range(n_draw) if bool(mask[p])] if filter_degenerate else list(range(n_draw))
        chosen = order[:prompts_per_step]
        stats["used"] += len(chosen)
        if not chosen:
            continue
        rows = [p * group_size + g for p in chosen for g in range(group_size)]
        batch = encode_batch([repeated[r] for r in rows], answers=[answers[r] for r in rows], include_eos=False)
        advantages = torch.cat([group_advantages(rewards[p:p + 1])[0] for p in chosen])  # (P_keep*G,)
        with torch.no_grad():
            logp_old = sequence_logprob(policy, batch)                   # (P_keep*G,)
            logp_ref = sequence_logprob(reference, batch)                # (P_keep*G,)
        policy.train()
        for _ in range(inner_epochs):
            loss = grpo_loss(sequence_logprob(policy, batch), logp_old, advantages, logp_ref, clip_eps, kl_coef)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
    return {"losses": losses, "mean_rewards": mean_rewards,
            "reward_first": float(np.mean(mean_rewards[:5])), "reward_last": float(np.mean(mean_rewards[-5:])),
            "informative_group_rate": stats["informative"] / stats["drawn"], "groups_used": stats["used"]}
