"""Direct Preference Optimization (DPO): the loss, the sequence log-probabilities it consumes, and a loop.

DPO trains a policy on preference pairs ``(x, y_chosen, y_rejected)`` without a reward model. The
KL-regularised optimum ``pi*(y|x) = pi_ref(y|x) exp(r(x, y)/beta) / Z(x)`` is inverted for the reward,
``r = beta log(pi/pi_ref) + beta log Z(x)``, and substituted into Bradley-Terry; ``Z(x)`` cancels because
it depends on the prompt only, leaving a logistic loss on the implicit-reward margin::

    margin = beta * [(log pi(y_c) - log pi_ref(y_c)) - (log pi(y_r) - log pi_ref(y_r))]
    loss   = softplus(-margin) = -log sigmoid(margin)

The subtle point an interviewer probes is the bookkeeping around the sequence log-probability, not the
loss: ``log pi(y|x)`` sums token log-probs over the completion only, the logits at position ``t`` score the
token at ``t + 1`` (so ``logits[:, :-1]`` meet ``input_ids[:, 1:]`` and ``completion_mask[:, 1:]``), and
masked entries are replaced by 0 *before* the sum (``torch.where``). Multiplying by the mask instead lets
a NaN or an infinite placeholder at a padded position leak in, because ``nan * 0`` is still NaN. Token
log-probabilities come from ``log_softmax`` (max-subtracted), never ``log(softmax(.))``, so a logit gap of
1e4 gives a finite -1e4 rather than ``-inf``.

Naming: ``margin`` here includes ``beta`` (the seed-001 convention and the implicit-reward margin
``chosen_rewards - rejected_rewards``); the capstone's ``dpo_loss`` returns the margin without ``beta``.

Shape letters: ``B`` pairs in a batch, ``T`` sequence length (``T_c`` chosen, ``T_r`` rejected), ``V``
vocabulary size, ``N`` batches handed to :func:`run_dpo`, ``A`` actions of the toy KL optimum.

Trade-off: the loss is ``softplus(-margin)`` rather than ``-log(sigmoid(margin))`` because at a margin of
-1000 the sigmoid underflows to 0 in float64 and its log is ``-inf``, whereas softplus returns exactly
1000; likewise :func:`kl_regularized_optimum` works in log space instead of multiplying by
``exp(R/beta)``, which overflows once ``R/beta > 709`` (``beta = 1e-3`` with ``R = 1``). Half-precision
inputs to :func:`dpo_loss` are upcast to float32: sequence log-probs around -12 differ in the second
decimal, below the float16 spacing of 0.0078 at that magnitude.

What to test: the seed-001 pairs I and II (margin, loss, weight to 1e-12), the three-pair batch built from
token log-probs with a sentinel in the masked column, that -1e9 or NaN at masked positions leaves the sums
bitwise unchanged, the +-1000 margin extremes, the gradient ``-beta * weight / B``, the closed-form KL
optimum, a manual gather-and-sum check of :func:`sequence_logprob`, and that :func:`run_dpo` raises the
margin while the frozen reference stays bitwise unchanged.
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

_BATCH_KEYS = (
    "chosen_ids",
    "chosen_mask",
    "chosen_completion_mask",
    "rejected_ids",
    "rejected_mask",
    "rejected_completion_mask",
)
_LOW_PRECISION = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class DPOOutput:
    """Everything :func:`dpo_loss` computes, all in the (broadcast) input dtype.

    Attributes:
        loss: ``()`` mean of ``losses``.
        losses: ``(B,)`` or ``()`` per-pair ``-log sigmoid(margin)``.
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
    computed in float32 and cast back. The loss is exact for every finite margin (a margin of -1000
    gives a loss of 1000 and a weight of 1, in float32 as in float64). The inputs are not modified.

    Returns:
        :class:`DPOOutput`; ``margin`` includes ``beta``; ``accuracy`` is ``margin > 0`` (a tie is wrong).

    Raises:
        ValueError: ``beta`` non-finite or ``<= 0``; a non-finite log-probability; shapes that do not
            broadcast, or broadcast to more than one dimension.
    """
    _check_beta(beta)
    dtype = _promoted_dtype(policy_chosen, policy_rejected, ref_chosen, ref_rejected)
    compute = torch.float32 if dtype in _LOW_PRECISION else dtype
    named = {"policy_chosen": policy_chosen, "policy_rejected": policy_rejected,
             "ref_chosen": ref_chosen, "ref_rejected": ref_rejected}
    values = [torch.as_tensor(v, dtype=compute) for v in named.values()]    # (B,) | () each
    _check_logprobs(dict(zip(named, values)))
    pc, pr, rc, rr = torch.broadcast_tensors(*values)                       # (B,) | (), (B,) | (), (B,) | (), (B,) | ()

    chosen_logratio = pc - rc                                               # (B,) | ()
    rejected_logratio = pr - rr                                             # (B,) | ()
    margin = beta * (chosen_logratio - rejected_logratio)                   # (B,) | ()
    losses = F.softplus(-margin)                                            # (B,) | ()  softplus(-z) = -log sigmoid(z)
    weight = torch.sigmoid(-margin)                                         # (B,) | ()
    return DPOOutput(
        loss=losses.mean().to(dtype),
        losses=losses.to(dtype),
        margin=margin.to(dtype),
        chosen_rewards=(beta * chosen_logratio).to(dtype),
        rejected_rewards=(beta * rejected_logratio).to(dtype),
        weight=weight.to(dtype),
        accuracy=margin > 0,
    )


def _check_beta(beta: float) -> None:
    if not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 0:
        raise ValueError(f"beta must be finite and > 0, got {beta!r}")


def _promoted_dtype(*values: Tensor | float) -> torch.dtype:
    """The promoted floating dtype of the tensor arguments; float64 when none is a floating tensor."""
    float_dtypes = [v.dtype for v in values if isinstance(v, Tensor) and v.is_floating_point()]
    return functools.reduce(torch.promote_types, float_dtypes) if float_dtypes else torch.float64


def _check_logprobs(named: dict[str, Tensor]) -> None:
    """``ValueError`` on a non-finite log-probability or shapes that do not broadcast to ``(B,)`` or ``()``."""
    for name, value in named.items():
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{name} must hold finite log-probabilities")
    shapes = [tuple(value.shape) for value in named.values()]
    try:
        shape = torch.broadcast_shapes(*shapes)
    except RuntimeError as err:
        raise ValueError(f"{', '.join(named)} must broadcast to one shape, got {shapes}") from err
    if len(shape) > 1:
        raise ValueError(f"{', '.join(named)} must be (B,) or (), got {tuple(shape)}")


def token_logprobs(logits: Tensor, labels: Tensor) -> Tensor:
    """``log softmax(logits)[b, t, labels[b, t]]``: the log-probability of each label token.

    Args:
        logits: ``(B, T, V)`` floating scores; row ``t`` is the distribution of ``labels[:, t]``.
        labels: ``(B, T)`` integer ids in ``[0, V)``.

    Returns:
        ``(B, T)`` in the dtype of ``logits``; finite for any finite logits (a logit gap of 1e4 gives -1e4).

    Raises:
        ValueError: ``logits`` not 3-D floating; ``labels`` not 2-D integer, not matching
            ``logits.shape[:2]``, or outside ``[0, V)``.
    """
    _check_token_inputs(logits, labels)
    logp = torch.log_softmax(logits, dim=-1)                                # (B, T, V)
    return logp.gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)         # (B, T)


def masked_sequence_logprob(token_logps: Tensor, completion_mask: Tensor) -> Tensor:
    """Sum of token log-probs over the completion positions: ``(B, T), (B, T) -> (B,)``.

    An entry where the mask is off never affects the result, whatever it holds (NaN, ``+-inf``, a
    sentinel): the sums are bitwise those of the active entries alone, and gradients reach the active
    entries only. The inputs are not modified.

    Args:
        token_logps: ``(B, T)`` floating log-probabilities.
        completion_mask: ``(B, T)`` bool or 0/1 int; ``True`` marks a completion token.

    Raises:
        ValueError: either argument not 2-D or the shapes differ; a row without completion token; a
            non-finite active entry.
    """
    active = _check_masked_inputs(token_logps, completion_mask)             # (B, T)
    kept = torch.where(active, token_logps, torch.zeros_like(token_logps))  # (B, T)
    return kept.sum(dim=1)                                                  # (B,)


def sequence_logprob(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, completion_mask: Tensor) -> Tensor:
    """``log pi(y|x) = sum_t log pi(input_ids[:, t] | input_ids[:, :t])`` over the completion positions.

    Runs ``model(input_ids, attention_mask=...)`` (any model returning ``(logits, _)`` with logits
    ``(B, T, V)``, such as the GPT of #31). The token at position ``t`` is scored by the logits at
    ``t - 1`` and counts when ``completion_mask[:, t]`` is set; the first token has no prefix, so it is
    never scored. Differentiable with respect to the model's parameters.

    Args:
        model: the policy or the frozen reference.
        input_ids: ``(B, T)`` long, prompt followed by completion (and padding), ``T >= 2``.
        attention_mask: ``(B, T)`` bool|int, ``True`` on real tokens.
        completion_mask: ``(B, T)`` bool|int, ``True`` on completion tokens.

    Returns:
        ``(B,)`` in the dtype of the logits.

    Raises:
        ValueError: ``input_ids`` not 2-D integer or ``T < 2``; a mask whose shape differs from
            ``input_ids``; a row with no completion token after the first position.
    """
    _check_sequence_inputs(input_ids, attention_mask, completion_mask)
    logits = model(input_ids, attention_mask=attention_mask != 0)[0]        # (B, T, V)
    token_logps = token_logprobs(logits[:, :-1], input_ids[:, 1:])          # (B, T - 1)
    return masked_sequence_logprob(token_logps, completion_mask[:, 1:])     # (B,)


def _check_token_inputs(logits: Tensor, labels: Tensor) -> None:
    if logits.ndim != 3 or not logits.is_floating_point():
        raise ValueError(f"logits must be a floating (B, T, V) tensor, got {logits.dtype} {tuple(logits.shape)}")
    if labels.ndim != 2 or labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise ValueError(f"labels must be an integer (B, T) tensor, got {labels.dtype} {tuple(labels.shape)}")
    if labels.shape != logits.shape[:2]:
        raise ValueError(f"labels shape {tuple(labels.shape)} must equal logits.shape[:2] {tuple(logits.shape[:2])}")
    V = logits.shape[-1]
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= V):
        raise ValueError(f"labels must lie in [0, {V})")


def _check_masked_inputs(token_logps: Tensor, completion_mask: Tensor) -> Tensor:
    """The bool mask ``completion_mask != 0``; ``ValueError`` on bad shapes, an empty row or a non-finite
    active log-probability."""
    if token_logps.ndim != 2 or not token_logps.is_floating_point():
        raise ValueError(f"token_logps must be a floating (B, T) tensor, got {tuple(token_logps.shape)}")
    if completion_mask.shape != token_logps.shape:
        raise ValueError(
            f"completion_mask shape {tuple(completion_mask.shape)} must equal token_logps shape "
            f"{tuple(token_logps.shape)}"
        )
    active = completion_mask != 0                                           # (B, T)
    if not bool(active.any(dim=1).all()):
        raise ValueError("completion_mask has a row with no completion token")
    if not bool(torch.isfinite(token_logps[active]).all()):
        raise ValueError("token_logps must be finite at every completion position")
    return active


def _check_sequence_inputs(input_ids: Tensor, attention_mask: Tensor, completion_mask: Tensor) -> None:
    if input_ids.ndim != 2 or input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must be an integer (B, T) tensor, got {input_ids.dtype} {tuple(input_ids.shape)}")
    if input_ids.shape[1] < 2:
        raise ValueError("input_ids needs T >= 2: the first token has no prefix to be scored from")
    if attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} must equal input_ids shape")
    if completion_mask.shape != input_ids.shape:
        raise ValueError(f"completion_mask shape {tuple(completion_mask.shape)} must equal input_ids shape")


def freeze_reference(model: nn.Module) -> nn.Module:
    """A frozen deep copy of ``model``: ``eval()`` mode and ``requires_grad=False`` on every parameter.

    The copy shares no storage with ``model``, so training the policy cannot move ``pi_ref``
    (capstone ``preference_stage.freeze_reference``).
    """
    reference = copy.deepcopy(model)
    reference.eval()
    for param in reference.parameters():
        param.requires_grad_(False)
    return reference


def kl_regularized_optimum(ref_probs: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """The maximiser of ``E_pi[R] - beta KL(pi || pi_ref)``: ``pi*(a) ∝ pi_ref(a) exp(R(a)/beta)`` (seed 003).

    Finite for any finite rewards and ``beta`` (``R / beta`` of 1e3 included); actions with
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
    _check_beta(beta)
    dtype = ref_probs.dtype if isinstance(ref_probs, Tensor) and ref_probs.is_floating_point() else torch.float64
    ref = torch.as_tensor(ref_probs, dtype=dtype)                           # (..., A)
    reward = torch.as_tensor(rewards, dtype=dtype)                          # (..., A)
    _check_optimum_inputs(ref, reward)
    log_weights = torch.log(ref) + reward / beta                            # (..., A)
    return torch.softmax(log_weights, dim=-1)                               # (..., A)


def _check_optimum_inputs(ref: Tensor, reward: Tensor) -> None:
    if ref.ndim == 0 or reward.shape != ref.shape:
        raise ValueError(f"rewards shape {tuple(reward.shape)} must equal ref_probs shape {tuple(ref.shape)}")
    if not bool(torch.isfinite(ref).all()) or bool((ref < 0).any()) or not bool((ref.sum(dim=-1) > 0).all()):
        raise ValueError("ref_probs must be finite, non-negative, with positive mass in every row")
    if not bool(torch.isfinite(reward).all()):
        raise ValueError("rewards must be finite")


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
    bool|int). Batches are visited in epochs, each a fresh permutation drawn from ``seed``, so two runs
    with the same seed return the same history. The reference runs under ``no_grad``; the optimizer is
    ``AdamW(lr, weight_decay=0)`` on ``policy`` only.

    Returns:
        A dict with at least the keys ``"losses"``, ``"margins"`` and ``"accuracies"`` (extra keys are
        allowed): per step, the batch's mean loss, mean margin (with ``beta``) and share of pairs with a
        positive margin.

    Raises:
        ValueError: ``steps < 1``, ``lr`` or ``beta`` non-finite or ``<= 0``, ``batches`` empty or a batch
            missing a key or with mismatched shapes; all checked before the first update.
    """
    batch_list = list(batches)
    _check_run_arguments(batch_list, steps, lr, beta)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    history: dict[str, list[float]] = {"losses": [], "margins": [], "accuracies": []}
    order: list[int] = []
    policy.train()
    for _ in range(steps):
        if not order:
            perm = torch.randperm(len(batch_list), generator=generator)     # (N,)
            order = perm.tolist()
        batch = batch_list[order.pop(0)]
        chosen = (batch["chosen_ids"], batch["chosen_mask"], batch["chosen_completion_mask"])
        rejected = (batch["rejected_ids"], batch["rejected_mask"], batch["rejected_completion_mask"])
        with torch.no_grad():
            ref_chosen = sequence_logprob(reference, *chosen)               # (B,)
            ref_rejected = sequence_logprob(reference, *rejected)           # (B,)
        policy_chosen = sequence_logprob(policy, *chosen)                   # (B,)
        policy_rejected = sequence_logprob(policy, *rejected)               # (B,)
        out = dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta=beta)
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        optimizer.step()
        history["losses"].append(float(out.loss.detach()))
        history["margins"].append(float(out.margin.detach().mean()))
        history["accuracies"].append(float(out.accuracy.float().mean()))
    return history


def _check_run_arguments(batch_list: list[dict[str, Tensor]], steps: int, lr: float, beta: float) -> None:
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")
    _check_beta(beta)
    if not batch_list:
        raise ValueError("batches must hold at least one batch")
    for i, batch in enumerate(batch_list):
        _check_batch(batch, i)


def _check_batch(batch: object, index: int) -> None:
    if not isinstance(batch, dict) or any(key not in batch for key in _BATCH_KEYS):
        raise ValueError(f"batches[{index}] must be a dict with keys {', '.join(_BATCH_KEYS)}")
    for side in ("chosen", "rejected"):
        ids = batch[f"{side}_ids"]
        if not isinstance(ids, Tensor) or ids.ndim != 2:
            raise ValueError(f"batches[{index}]['{side}_ids'] must be a (B, T) tensor")
        for key in (f"{side}_mask", f"{side}_completion_mask"):
            if not isinstance(batch[key], Tensor) or batch[key].shape != ids.shape:
                raise ValueError(f"batches[{index}]['{key}'] must have the shape of '{side}_ids'")
    if batch["chosen_ids"].shape[0] != batch["rejected_ids"].shape[0]:
        raise ValueError(f"batches[{index}] has different numbers of chosen and rejected rows")
