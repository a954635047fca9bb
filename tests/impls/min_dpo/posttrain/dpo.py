"""Direct Preference Optimization (DPO): the loss, the sequence log-probabilities it consumes, and ...

Plan: DPO turns the RLHF objective into a logistic loss on the margin of implicit rewards
beta * (log pi - log pi_ref) between chosen and rejected completions. Sequence log-probs are
summed token log-probs (log_softmax + gather) over completion positions after the one-token shift.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class DPOOutput:
    """Everything :func:`dpo_loss` computes, all in the (broadcast) input dtype.

    Attributes:
        loss: ``()`` mean of ``losses``.
        losses: ``(B,)`` or ``()`` per-pair ``softplus(-margin)``.
        margin: ``(B,)`` ``beta * [(pi_c - ref_c) - (pi_r - ref_r)] = chosen_rewards - rejected_rewards``.
        chosen_rewards: ``(B,)`` implicit reward ``beta * (pi_c - ref_c)``.
        rejected_rewards: ``(B,)`` implicit reward ``beta * (pi_r - ref_r)``.
        weight: ``(B,)`` ``sigmoid(-margin)``, the magnitude of ``d losses_i / d margin_i``.
        accuracy: ``(B,)`` bool, ``margin > 0``.
    """
    loss: Tensor
    losses: Tensor
    margin: Tensor
    chosen_rewards: Tensor
    rejected_rewards: Tensor
    weight: Tensor
    accuracy: Tensor


def dpo_loss(
    policy_chosen: Tensor | float,
    policy_rejected: Tensor | float,
    ref_chosen: Tensor | float,
    ref_rejected: Tensor | float,
    beta: float = 0.1,
) -> DPOOutput:
    """The DPO loss from summed completion log-probabilities (Rafailov et al. 2023, eq. 7; seed 001).

    Args:
        policy_chosen, policy_rejected: ``log pi(y|x)`` of the chosen / rejected completions, ``(B,)``
            tensors or Python floats; gradients flow through them.
        ref_chosen, ref_rejected: the same under the frozen reference.
        beta: strength of the implicit KL leash, finite and ``> 0``.

    The four inputs broadcast to one shape, ``(B,)`` or ``()``. The dtype is the promoted floating dtype
    of the tensor inputs (float64 when all four are Python numbers, as in seed 001); float16/bfloat16 are
    computed in float32 and cast back.

    Returns:
        :class:`DPOOutput`; ``margin`` includes ``beta``.

    Raises:
        ValueError: ``beta`` non-finite or ``<= 0``; a non-finite log-probability (the message names the
            argument); shapes that do not broadcast, or broadcast to more than one dimension.
    """
    ts = [x for x in (policy_chosen, policy_rejected, ref_chosen, ref_rejected) if isinstance(x, Tensor)]
    dtype = functools.reduce(torch.promote_types, [t.dtype for t in ts]) if ts else torch.float64
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    pc, pr, rc, rr = (torch.as_tensor(x, dtype=compute) for x in (policy_chosen, policy_rejected, ref_chosen, ref_rejected))
    chosen = beta * (pc - rc)
    rejected = beta * (pr - rr)
    chosen, rejected = torch.broadcast_tensors(chosen, rejected)
    margin = chosen - rejected
    losses = F.softplus(-margin)  # = -log sigmoid(margin), stable
    out = dict(loss=losses.mean(), losses=losses, margin=margin, chosen_rewards=chosen,
               rejected_rewards=rejected, weight=torch.sigmoid(-margin))
    out = {k: v.to(dtype) for k, v in out.items()}
    return DPOOutput(accuracy=margin > 0, **out)


def token_logprobs(logits: Tensor, labels: Tensor) -> Tensor:
    """``log softmax(logits)[b, t, labels[b, t]]``: the log-probability of each label token.

    Args:
        logits: ``(B, T, V)`` floating scores; row ``t`` is the distribution of ``labels[:, t]``.
        labels: ``(B, T)`` integer ids in ``[0, V)``.

    Returns:
        ``(B, T)`` in the dtype of ``logits``. Uses ``log_softmax`` (max-subtracted), never
        ``log(softmax(.))``, so a logit gap of 1e4 gives a finite -1e4 rather than ``-inf``.

    Raises:
        ValueError: ``logits`` not 3-D floating; ``labels`` not 2-D integer, not matching
            ``logits.shape[:2]``, or outside ``[0, V)``.
    """
    logp = F.log_softmax(logits, dim=-1)
    return logp.gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)


def masked_sequence_logprob(token_logps: Tensor, completion_mask: Tensor) -> Tensor:
    """Sum of token log-probs over the completion positions: ``(B, T), (B, T) -> (B,)``.

    Masked entries are replaced by 0 *before* summing (``torch.where``, not a product with the mask), so
    a NaN, ``+-inf`` or sentinel there cannot change the result: the sums are bitwise those of the active
    entries alone. Gradients reach the active entries only.

    Args:
        token_logps: ``(B, T)`` floating log-probabilities.
        completion_mask: ``(B, T)`` bool or 0/1 int; ``True`` marks a completion token.

    Raises:
        ValueError: either argument not 2-D or the shapes differ; a row without completion token
            (``completion_mask``); a non-finite active entry (``token_logps``).
    """
    mask = completion_mask.bool()
    return torch.where(mask, token_logps, torch.zeros_like(token_logps)).sum(dim=-1)


def sequence_logprob(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, completion_mask: Tensor) -> Tensor:
    """``log pi(y|x) = sum_t log pi(input_ids[:, t] | input_ids[:, :t])`` over the completion positions.

    Runs ``model(input_ids, attention_mask=...)`` (any model returning ``(logits, _)`` with logits
    ``(B, T, V)``, such as the GPT of #31), then scores ``logits[:, :-1]`` against ``input_ids[:, 1:]``
    and keeps the positions where ``completion_mask[:, 1:]`` is set: the first token has no prefix, so it
    can never be scored. Differentiable with respect to the model's parameters.

    Args:
        model: the policy or the frozen reference.
        input_ids: ``(B, T)`` long, prompt followed by completion (and padding), ``T >= 2``.
        attention_mask: ``(B, T)`` bool|int, ``True`` on real tokens.
        completion_mask: ``(B, T)`` bool|int, ``True`` on completion tokens.

    Returns:
        ``(B,)`` in the dtype of the logits.

    Raises:
        ValueError: ``input_ids`` not 2-D integer or ``T < 2``; a mask whose shape differs from
            ``input_ids``; a row with no completion token after the shift (``completion_mask``).
    """
    logits, _ = model(input_ids, attention_mask=attention_mask)
    tok = token_logprobs(logits[:, :-1], input_ids[:, 1:])
    return masked_sequence_logprob(tok, completion_mask[:, 1:])


def freeze_reference(model: nn.Module) -> nn.Module:
    """A frozen deep copy of ``model``: ``eval()`` mode and ``requires_grad=False`` on every parameter.

    The copy shares no storage with ``model``, so training the policy cannot move ``pi_ref``
    (capstone ``preference_stage.freeze_reference``).
    """
    ref = copy.deepcopy(model)
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def kl_regularized_optimum(ref_probs: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """The maximiser of ``E_pi[R] - beta KL(pi || pi_ref)``: ``pi*(a) ∝ pi_ref(a) exp(R(a)/beta)`` (seed 003).

    Computed in log space, ``softmax(log pi_ref + R/beta)``, so ``beta = 1e-3`` stays finite; actions with
    ``pi_ref(a) = 0`` get probability exactly 0.

    Args:
        ref_probs: ``(..., A)`` non-negative reference probabilities (tensor or sequence), each row with
            positive mass.
        rewards: ``(..., A)`` finite rewards, same shape.
        beta: finite, ``> 0``.

    Returns:
        ``(..., A)`` probabilities summing to 1 along the last axis, in the floating dtype of
        ``ref_probs`` (float64 for lists).

    Raises:
        ValueError: ``beta`` non-finite or ``<= 0``; shape mismatch; negative / non-finite ``ref_probs`` or a
            row without mass; non-finite ``rewards``.
    """
    p = ref_probs if isinstance(ref_probs, Tensor) else torch.as_tensor(ref_probs, dtype=torch.float64)
    if not p.is_floating_point():
        p = p.to(torch.float64)
    r = torch.as_tensor(rewards, dtype=p.dtype)
    logits = torch.log(p) + r / beta  # log 0 = -inf -> probability exactly 0
    return torch.softmax(logits, dim=-1)


def run_dpo(
    policy: nn.Module,
    reference: nn.Module,
    batches: Iterable[dict[str, Tensor]],
    *,
    steps: int = 50,
    lr: float = 1e-4,
    beta: float = 0.1,
    seed: int = 0,
) -> dict[str, list[float]]:
    """Train ``policy`` with DPO against the frozen ``reference`` for ``steps`` optimizer steps.

    Each batch is a dict with ``chosen_ids``, ``chosen_mask``, ``chosen_completion_mask`` ``(B, T_c)`` and
    ``rejected_ids``, ``rejected_mask``, ``rejected_completion_mask`` ``(B, T_r)`` (ids long, masks
    bool|int). Batches are visited in epochs, each a fresh permutation drawn from ``seed``. The reference
    runs under ``no_grad``; the optimizer is ``AdamW(lr, weight_decay=0)`` on ``policy`` only.

    Returns:
        ``{"losses", "margins", "accuracies"}``: per step, the batch's mean loss, mean margin (with
        ``beta``) and share of pairs with a positive margin.

    Raises:
        ValueError: ``steps < 1``, ``lr`` or ``beta`` non-finite or ``<= 0``, ``batches`` empty or a batch
            missing a key or with mismatched shapes; all checked before the first update.
    """
    batches = list(batches)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    reference.eval()
    opt = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    hist: dict[str, list[float]] = {"losses": [], "margins": [], "accuracies": []}
    order: list[int] = []
    for _ in range(steps):
        if not order:
            order = torch.randperm(len(batches), generator=gen).tolist()
        b = batches[order.pop(0)]
        pc = sequence_logprob(policy, b["chosen_ids"], b["chosen_mask"], b["chosen_completion_mask"])
        pr = sequence_logprob(policy, b["rejected_ids"], b["rejected_mask"], b["rejected_completion_mask"])
        with torch.no_grad():
            rc = sequence_logprob(reference, b["chosen_ids"], b["chosen_mask"], b["chosen_completion_mask"])
            rr = sequence_logprob(reference, b["rejected_ids"], b["rejected_mask"], b["rejected_completion_mask"])
        out = dpo_loss(pc, pr, rc, rr, beta=beta)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        hist["losses"].append(out.loss.item())
        hist["margins"].append(out.margin.mean().item())
        hist["accuracies"].append(out.accuracy.float().mean().item())
    return hist
