"""DPO loss (Rafailov et al., 2023) with the helpers to get sequence log-probs out of a causal LM.

Plan: the implicit reward of a response is beta * (log pi(y|x) - log pi_ref(y|x)); DPO pushes the
chosen reward above the rejected one with the loss -log sigmoid(margin), where the margin is the
difference of the two rewards. The sequence log-probs are sums of per-token log-probs over the
completion tokens; logits at position t predict token t + 1, hence the shift by one.

Subtle point: the masked positions must contribute exactly 0, so I use torch.where instead of
multiplying by the mask (0 * NaN is NaN).

Shapes: logits (B, T, V), token log-probs (B, T), sequence log-probs and losses (B,).

Trade-off: -logsigmoid instead of log(sigmoid(.)) because the latter is -inf for very negative
margins.

What I would test: the seed numbers for pair I (loss 0.6118) and the batch of three pairs, that NaN in
masked positions does not leak, and that training raises the margin.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NAMES = ("policy_chosen", "policy_rejected", "ref_chosen", "ref_rejected")
KEYS = ("chosen_ids", "chosen_mask", "chosen_completion_mask",
        "rejected_ids", "rejected_mask", "rejected_completion_mask")


@dataclass(frozen=True)
class DPOOutput:
    """loss (), and per pair (B,): losses, margin (includes beta), chosen/rejected rewards, weight, accuracy."""

    loss: Tensor
    losses: Tensor
    margin: Tensor
    chosen_rewards: Tensor
    rejected_rewards: Tensor
    weight: Tensor
    accuracy: Tensor


def dpo_loss(policy_chosen: Tensor | float, policy_rejected: Tensor | float,
             ref_chosen: Tensor | float, ref_rejected: Tensor | float, beta: float = 0.1) -> DPOOutput:
    """DPO loss for sequence log-probs (B,) or (). Raises ValueError for bad beta or non-finite inputs."""
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be finite and > 0, got {beta}")
    ts = []
    for name, value in zip(NAMES, (policy_chosen, policy_rejected, ref_chosen, ref_rejected)):
        t = value if torch.is_tensor(value) else torch.tensor(value, dtype=torch.float64)   # (B,) | ()
        if not torch.isfinite(t).all():
            raise ValueError(f"{name} must be finite")
        ts.append(t)
    try:
        pc, pr, rc, rr = torch.broadcast_tensors(*ts)
    except RuntimeError as e:
        raise ValueError(f"policy_chosen, policy_rejected, ref_chosen, ref_rejected do not broadcast: {e}") from e
    dtype = pc.dtype
    if dtype in (torch.float16, torch.bfloat16):
        pc, pr, rc, rr = pc.float(), pr.float(), rc.float(), rr.float()
    chosen_rewards = beta * (pc - rc)                              # (B,) | ()
    rejected_rewards = beta * (pr - rr)                            # (B,) | ()
    margin = rejected_rewards - chosen_rewards                     # (B,) | ()
    losses = -F.logsigmoid(margin)                                 # (B,) | ()
    weight = torch.sigmoid(-margin)                                # (B,) | ()
    return DPOOutput(losses.mean().to(dtype), losses.to(dtype), margin.to(dtype), chosen_rewards.to(dtype),
                     rejected_rewards.to(dtype), weight.to(dtype), margin > 0)


def token_logprobs(logits: Tensor, labels: Tensor) -> Tensor:
    """(B, T, V) logits, (B, T) labels -> (B, T) log-probs of the labels. ValueError on bad shapes or ids."""
    if logits.dim() != 3:
        raise ValueError(f"logits must be (B, T, V), got {tuple(logits.shape)}")
    if labels.shape != logits.shape[:2]:
        raise ValueError(f"labels must be {tuple(logits.shape[:2])}, got {tuple(labels.shape)}")
    if (labels < 0).any() or (labels >= logits.shape[-1]).any():
        raise ValueError("labels out of range")
    logp = torch.log_softmax(logits, dim=-1)                       # (B, T, V)
    return logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)       # (B, T)


def masked_sequence_logprob(token_logps: Tensor, completion_mask: Tensor) -> Tensor:
    """Sum of (B, T) token log-probs over the completion mask -> (B,). ValueError on bad shapes or NaN."""
    if token_logps.dim() != 2:
        raise ValueError(f"token_logps must be 2-D, got {tuple(token_logps.shape)}")
    if completion_mask.shape != token_logps.shape:
        raise ValueError(f"completion_mask must have shape {tuple(token_logps.shape)}")
    m = completion_mask.bool()
    if not m.any(dim=1).all():
        raise ValueError("completion_mask has an empty row")
    if not torch.isfinite(token_logps[m]).all():
        raise ValueError("token_logps is not finite on the completion")
    return torch.where(m, token_logps, 0.0).sum(dim=1)            # (B,)


def sequence_logprob(model: nn.Module, input_ids: Tensor, attention_mask: Tensor,
                     completion_mask: Tensor) -> Tensor:
    """Sum of log pi(token) over completion tokens: (B, T) ids and masks -> (B,)."""
    logits = model(input_ids, attention_mask=attention_mask)[0]    # (B, T, V)
    logps = token_logprobs(logits[:, :-1], input_ids[:, 1:])
    return masked_sequence_logprob(logps, completion_mask[:, 1:])  # (B,)


def freeze_reference(model: nn.Module) -> nn.Module:
    """Deep copy in eval mode with no gradients."""
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def kl_regularized_optimum(ref_probs: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """pi*(a) proportional to pi_ref(a) exp(R(a) / beta), in log space, float64. ValueError on bad input."""
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be finite and > 0, got {beta}")
    ref = torch.as_tensor(ref_probs, dtype=torch.float64)          # (..., A)
    r = torch.as_tensor(rewards, dtype=torch.float64)              # (..., A)
    if r.shape != ref.shape:
        raise ValueError("rewards must have the same shape as ref_probs")
    if (ref < 0).any() or (ref > 1).any():
        raise ValueError("ref_probs must be in [0, 1]")
    return torch.softmax(torch.log(ref) + r / beta, dim=-1)


def run_dpo(policy: nn.Module, reference: nn.Module, batches: Iterable[dict[str, Tensor]], *,
            steps: int = 50, lr: float = 1e-4, beta: float = 0.1, seed: int = 0) -> dict[str, list[float]]:
    """DPO training with AdamW; returns losses, margins and accuracies per step. ValueError on bad args."""
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be finite and > 0, got {beta}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    batches = list(batches)
    if not batches or any(any(key not in b for key in KEYS) for b in batches):
        raise ValueError("batches must be a non-empty list of dicts with the six DPO keys")
    opt = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    hist = {"losses": [], "margins": [], "accuracies": []}
    for step in range(steps):
        if step % len(batches) == 0:
            order = torch.randperm(len(batches), generator=g)      # (n,)
        b = batches[int(order[step % len(batches)])]
        pc = sequence_logprob(policy, b["chosen_ids"], b["chosen_mask"], b["chosen_completion_mask"])
        pr = sequence_logprob(policy, b["rejected_ids"], b["rejected_mask"], b["rejected_completion_mask"])
        with torch.no_grad():
            rc = sequence_logprob(reference, b["chosen_ids"], b["chosen_mask"], b["chosen_completion_mask"])
            rr = sequence_logprob(reference, b["rejected_ids"], b["rejected_mask"], b["rejected_completion_mask"])
        out = dpo_loss(pc, pr, rc, rr, beta)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        hist["losses"].append(out.loss.item())
        hist["margins"].append(out.margin.mean().item())
        hist["accuracies"].append(out.accuracy.float().mean().item())
    return hist
