"""Alternative DPO (#55), written differently from the reference: the loss as ``-logsigmoid``, the weight
as ``exp(-softplus(margin))``, token log-probs as ``logits - logsumexp`` picked with a one-hot einsum,
the masked sum by ``masked_fill``, the KL optimum by ``log_softmax(...).exp()`` and a cyclic batch order
from a NumPy generator. Must pass every test of posttrain/dpo.

Shapes: ``B`` pairs, ``T`` tokens, ``V`` vocabulary, ``A`` actions.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

_KEYS = ("chosen_ids", "chosen_mask", "chosen_completion_mask",
         "rejected_ids", "rejected_mask", "rejected_completion_mask")


@dataclass(frozen=True)
class DPOOutput:
    """Loss, per-pair losses, margin (with beta), implicit rewards, weight and accuracy."""

    loss: Tensor
    losses: Tensor
    margin: Tensor
    chosen_rewards: Tensor
    rejected_rewards: Tensor
    weight: Tensor
    accuracy: Tensor


def _beta_ok(beta: float) -> None:
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be a finite positive number, got {beta!r}")


def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta: float = 0.1) -> DPOOutput:
    """DPO loss on summed log-probs; inputs broadcast to (B,) or ()."""
    _beta_ok(beta)
    raw = dict(policy_chosen=policy_chosen, policy_rejected=policy_rejected,
               ref_chosen=ref_chosen, ref_rejected=ref_rejected)
    out_dtype = torch.float64
    floats = [v.dtype for v in raw.values() if torch.is_tensor(v) and v.is_floating_point()]
    if floats:
        out_dtype = floats[0]
        for dt in floats[1:]:
            out_dtype = torch.promote_types(out_dtype, dt)
    work = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    conv = {}
    for key, val in raw.items():
        conv[key] = val.to(work) if torch.is_tensor(val) else torch.tensor(val, dtype=work)  # (B,) | ()
        if torch.isnan(conv[key]).any() or torch.isinf(conv[key]).any():
            raise ValueError(f"{key} contains a non-finite value")
    try:
        stacked = torch.stack(torch.broadcast_tensors(*conv.values()))              # (4, B) | (4,)
    except RuntimeError as exc:
        raise ValueError("policy_chosen/policy_rejected/ref_chosen/ref_rejected shapes are incompatible") from exc
    if stacked.ndim > 2:
        raise ValueError("policy_chosen etc. must broadcast to (B,) or ()")
    signs = torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=work)                        # (4,)
    margin = beta * torch.einsum("k,k...->...", signs, stacked)                      # (B,) | ()
    chosen = beta * (stacked[0] - stacked[2])
    rejected = beta * (stacked[1] - stacked[3])
    losses = -F.logsigmoid(margin)
    weight = torch.exp(-F.softplus(margin))
    return DPOOutput(losses.mean().to(out_dtype), losses.to(out_dtype), margin.to(out_dtype),
                     chosen.to(out_dtype), rejected.to(out_dtype), weight.to(out_dtype), margin > 0)


def token_logprobs(logits: Tensor, labels: Tensor) -> Tensor:
    """(B, T, V), (B, T) -> (B, T) log-probabilities of the labels."""
    if logits.dim() != 3 or not torch.is_floating_point(logits):
        raise ValueError("logits must be a 3-D floating tensor")
    if labels.dim() != 2 or torch.is_floating_point(labels) or labels.dtype == torch.bool \
            or tuple(labels.shape) != tuple(logits.shape[:2]):
        raise ValueError("labels must be integer ids shaped like logits[..., 0]")
    V = logits.shape[-1]
    if ((labels < 0) | (labels >= V)).any():
        raise ValueError("labels out of range")
    norm = logits - torch.logsumexp(logits, dim=-1, keepdim=True)                    # (B, T, V)
    onehot = F.one_hot(labels.long(), V).to(logits.dtype)                            # (B, T, V)
    return torch.einsum("btv,btv->bt", norm, onehot)                                 # (B, T)


def masked_sequence_logprob(token_logps: Tensor, completion_mask: Tensor) -> Tensor:
    """(B, T), (B, T) -> (B,) sum over completion positions; masked entries filled with 0 first."""
    if token_logps.dim() != 2 or not torch.is_floating_point(token_logps):
        raise ValueError("token_logps must be 2-D floating")
    if tuple(completion_mask.shape) != tuple(token_logps.shape):
        raise ValueError("completion_mask must match token_logps")
    on = completion_mask.bool() if completion_mask.dtype == torch.bool else completion_mask != 0  # (B, T)
    if (on.sum(dim=-1) == 0).any():
        raise ValueError("completion_mask: some row has no completion token")
    filled = token_logps.masked_fill(~on, 0.0)
    if not torch.isfinite(filled).all():
        raise ValueError("token_logps: non-finite value at a completion position")
    return filled.sum(dim=-1)                                                        # (B,)


def sequence_logprob(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, completion_mask: Tensor) -> Tensor:
    """(B,) summed log-probability of the completion tokens."""
    if input_ids.dim() != 2 or torch.is_floating_point(input_ids) or input_ids.shape[-1] < 2:
        raise ValueError("input_ids must be integer (B, T) with T >= 2")
    if attention_mask.shape != input_ids.shape or completion_mask.shape != input_ids.shape:
        raise ValueError("attention_mask and completion_mask must match input_ids")
    out = model(input_ids, attention_mask=attention_mask.bool())
    logits = out[0] if isinstance(out, tuple) else out                               # (B, T, V)
    per_token = token_logprobs(logits[:, :-1, :], input_ids[:, 1:])                  # (B, T - 1)
    return masked_sequence_logprob(per_token, completion_mask[:, 1:])                # (B,)


def freeze_reference(model: nn.Module) -> nn.Module:
    """Frozen deep copy in eval mode."""
    frozen = copy.deepcopy(model).eval()
    frozen.requires_grad_(False)
    return frozen


def kl_regularized_optimum(ref_probs, rewards, beta: float) -> Tensor:
    """pi* ∝ pi_ref exp(R / beta), via log_softmax."""
    _beta_ok(beta)
    dt = ref_probs.dtype if torch.is_tensor(ref_probs) and ref_probs.is_floating_point() else torch.float64
    p = torch.as_tensor(ref_probs).to(dt)                                            # (..., A)
    r = torch.as_tensor(rewards).to(dt)                                              # (..., A)
    if p.shape != r.shape or p.dim() == 0:
        raise ValueError("rewards must have the shape of ref_probs")
    if (p < 0).any() or not torch.isfinite(p).all() or (p.sum(-1) <= 0).any():
        raise ValueError("ref_probs must be non-negative finite probabilities")
    if not torch.isfinite(r).all():
        raise ValueError("rewards must be finite")
    return torch.log_softmax(torch.log(p) + r / beta, dim=-1).exp()                 # (..., A)


def run_dpo(policy: nn.Module, reference: nn.Module, batches: Iterable[dict[str, Tensor]], *,
            steps: int = 50, lr: float = 1e-4, beta: float = 0.1, seed: int = 0) -> dict[str, list[float]]:
    """DPO training loop with AdamW(weight_decay=0)."""
    _beta_ok(beta)
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError("lr must be positive")
    if not isinstance(steps, int) or steps <= 0:
        raise ValueError("steps must be positive")
    data = list(batches)
    if len(data) == 0 or any(not isinstance(b, dict) or set(_KEYS) - set(b) for b in data):
        raise ValueError("batches must be non-empty dicts with the six DPO keys")
    order = np.random.default_rng(seed).permutation(len(data))                       # (N,)
    opt = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    log = {"losses": [], "margins": [], "accuracies": []}
    for step in range(steps):
        b = data[int(order[step % len(data)])]
        with torch.no_grad():
            rc = sequence_logprob(reference, b["chosen_ids"], b["chosen_mask"], b["chosen_completion_mask"])
            rr = sequence_logprob(reference, b["rejected_ids"], b["rejected_mask"], b["rejected_completion_mask"])
        pc = sequence_logprob(policy, b["chosen_ids"], b["chosen_mask"], b["chosen_completion_mask"])
        pr = sequence_logprob(policy, b["rejected_ids"], b["rejected_mask"], b["rejected_completion_mask"])
        res = dpo_loss(pc, pr, rc, rr, beta)
        opt.zero_grad()
        res.loss.backward()
        opt.step()
        log["losses"].append(res.loss.item())
        log["margins"].append(res.margin.mean().item())
        log["accuracies"].append(res.accuracy.double().mean().item())
    return log
