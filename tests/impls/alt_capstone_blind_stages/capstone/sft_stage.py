# Blind alternative (capstone round, tester B, written from the stubs alone), with its variants v1 (terse error
# messages), v6a (DPO on Python floats in float32), v8 (colon-labelled transcript) and the '(start, stop)' prose
# comment SHP002 misread: must pass every test of capstone/agent.
"""Canon #60, part 6: supervised fine-tuning from random weights, and the batch encoding every later stage uses.

Plan: a row is ``question [observation : <n>] : answer [<eos>]``, right-padded with ``PAD_ID`` to the
longest row of the batch. ``attention_mask`` is 1 on real tokens; ``loss_mask`` is 1 only on the answer
(and the EOS), so the model is never trained to predict the question. The subtle point is the
off-by-one after splicing: the VLM puts ``N_q`` visual tokens in front, so the logit that scores text
token ``t`` sits at spliced index ``N_q + t - 1``; ``text_logits`` already does that shift for the loss,
and :func:`next_token_logits` reads the answer slot of a prompt of length ``L_b`` at ``N_q + L_b - 1``.

Shapes: images ``(B, 3, 16, 16)``, ids and masks ``(B, T)``, text logits ``(B, T, V)``, answer-slot
logits ``(B, V)``, the loss ``()``.

Trade-off: right padding keeps each row's real tokens at positions ``0..L_b-1`` so the learned positions
mean the same thing in every row; the price is that the answer slot is at a per-row index (a gather)
instead of the last column, which left padding would give. The loss is a token-mean over the
supervised tokens (not a row-mean), so rows with an EOS weigh two tokens.

What I would test: the masks on a hand-built batch (loss only on answer and EOS, padding last); that
``next_token_logits`` equals the answer-slot row of ``text_logits`` on the full batch; that padding a
row further does not change its logits (causal mask); that a short SFT lowers the loss; the
warmup/cosine endpoints; the ValueErrors.
"""
# What the rubric reads: in the docstring above, your plan (what the module computes and its subtle
# point, the shapes, a trade-off: why this way rather than another, and what you would test); a
# docstring on every public function; a shape comment at the end of every line that creates,
# reshapes, contracts or reduces a tensor: `scores = q @ k.transpose(-2, -1)  # (B, H, T_q, T_k)`.

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from canon_refs.capstone import synthetic_task as task
from canon_refs.capstone.multimodal_model import TinyVLM
from canon_refs.capstone.optimizer import ClippedAdam


@dataclass
class SFTBatch:
    """One encoded batch.

    ``images`` ``(B, 3, 16, 16)`` float32; ``input_ids`` ``(B, T)`` long, right-padded with
    ``PAD_ID``; ``attention_mask`` ``(B, T)`` long, 1 on real tokens; ``loss_mask`` ``(B, T)``
    float32, 1 on the answer token (and the EOS when included).
    """
    images: Tensor
    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor


@functools.lru_cache(maxsize=None)
def _prompt_ids(question: str, observation: str | None) -> tuple[int, ...]:
    """Token ids of ``question [observation : <obs>] :`` (cached: the question set is tiny)."""
    text = question if observation is None else f"{question} observation : {observation}"
    return tuple(task.encode_text(text + " :"))


def _check_lists(examples: list[task.Example], answers: list[str] | None,
                 observations: list[str | None] | None) -> None:
    """Raise ``ValueError`` on an empty batch or side lists of another length."""
    if len(examples) == 0:
        raise ValueError("invalid input")
    if answers is not None and len(answers) != len(examples):
        raise ValueError("invalid input")
    if observations is not None and len(observations) != len(examples):
        raise ValueError("invalid input")


def _answer_id(answer: str) -> int:
    """Id of a one-token answer; ``ValueError`` for anything else."""
    if not isinstance(answer, str) or answer not in task.STOI:
        raise ValueError("invalid input")
    return task.STOI[answer]


def _pad_rows(rows: list[list[int]]) -> tuple[Tensor, Tensor]:
    """Right-pad id rows: ``(ids (B, T) long, attention_mask (B, T) long)``."""
    width = max(len(r) for r in rows)
    if width > task.MAX_TEXT_LEN:
        raise ValueError("invalid input")
    ids = torch.full((len(rows), width), task.PAD_ID, dtype=torch.long)  # (B, T)
    attn = torch.zeros(len(rows), width, dtype=torch.long)  # (B, T)
    for b, row in enumerate(rows):
        ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)  # (L_b,)
        attn[b, : len(row)] = 1
    return ids, attn


def _stack_images(examples: list[task.Example]) -> Tensor:
    """``(B, 3, 16, 16)`` float32 images of the examples."""
    return torch.stack([ex.image for ex in examples]).float()  # (B, 3, 16, 16)


def encode_batch(examples: list[task.Example], answers: list[str] | None = None, include_eos: bool = True,
                 observations: list[str] | None = None) -> SFTBatch:
    """Encode ``prompt + answer [+ EOS]`` rows, right-padded, with the masks described on :class:`SFTBatch`.

    The prompt is ``question [observation : <obs>] :``; ``answers`` default to the gold answers and
    must each be one vocabulary token; ``observations`` (one per example, ``None`` entries allowed)
    put a tool result in the prompt.

    Raises:
        ValueError: empty ``examples``; ``answers`` or ``observations`` of another length; an answer
            that is not exactly one vocabulary token; a row longer than ``task.MAX_TEXT_LEN``.
    """
    _check_lists(examples, answers, observations)
    if answers is None:
        answers = [ex.answer for ex in examples]
    obs = observations if observations is not None else [None] * len(examples)
    rows: list[list[int]] = []
    supervised: list[tuple[int, int]] = []  # (start, stop) of the supervised span
    for ex, ans, ob in zip(examples, answers, obs):
        prompt = list(_prompt_ids(ex.question, ob))
        tail = [_answer_id(ans)] + ([task.EOS_ID] if include_eos else [])
        supervised.append((len(prompt), len(prompt) + len(tail)))
        rows.append(prompt + tail)
    ids, attn = _pad_rows(rows)  # (B, T), (B, T)
    loss_mask = torch.zeros(ids.shape, dtype=torch.float32)  # (B, T)
    for b, (start, stop) in enumerate(supervised):
        loss_mask[b, start:stop] = 1.0
    return SFTBatch(images=_stack_images(examples), input_ids=ids, attention_mask=attn, loss_mask=loss_mask)


def next_token_logits(model: TinyVLM, examples: list[task.Example],
                      observations: list[str] | None = None) -> Tensor:
    """``(B, V)`` logits of the answer slot: the token right after each (right-padded) prompt.

    One forward pass over the prompts alone; row ``b`` is read at spliced index ``N_q + L_b - 1``
    where ``L_b`` is the prompt length, which the causal mask keeps blind to the padding after it.
    Gradients flow when called outside ``no_grad``.

    Raises:
        ValueError: as :func:`encode_batch`.
    """
    _check_lists(examples, None, observations)
    obs = observations if observations is not None else [None] * len(examples)
    rows = [list(_prompt_ids(ex.question, ob)) for ex, ob in zip(examples, obs)]
    ids, attn = _pad_rows(rows)  # (B, T), (B, T)
    images = _stack_images(examples).to(next(model.parameters()).device)  # (B, 3, 16, 16)
    logits = model(images, ids.to(images.device), attn.to(images.device))  # (B, S, V)
    slot = model.n_query_tokens + attn.sum(dim=1).to(images.device) - 1  # (B,)
    return logits[torch.arange(len(rows), device=images.device), slot]  # (B, V)


def supervised_loss(model: TinyVLM, batch: SFTBatch) -> Tensor:
    """Mean negative log-likelihood over the ``loss_mask`` tokens: a scalar ``()`` tensor.

    Raises:
        ValueError: the batch supervises no token.
    """
    n_tokens = batch.loss_mask.sum()  # ()
    if n_tokens.item() <= 0:
        raise ValueError("invalid input")
    logits = model.text_logits(batch.images, batch.input_ids, batch.attention_mask)  # (B, T, V)
    nll = F.cross_entropy(logits.transpose(1, 2), batch.input_ids, reduction="none")  # (B, T)
    return (nll * batch.loss_mask).sum() / n_tokens  # ()


def warmup_cosine(step: int, steps: int, warmup: int = 20, floor: float = 0.1) -> float:
    """Learning-rate multiplier: linear warmup over ``min(warmup, steps // 4)`` steps, then a cosine
    from 1 down to ``floor``. A Python float in ``(0, 1]``."""
    n_warm = min(warmup, steps // 4)
    if step < n_warm:
        return (step + 1) / n_warm
    span = max(1, steps - n_warm - 1)
    progress = min(1.0, (step - n_warm) / span)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _observation(ex: task.Example) -> str:
    """The tool's answer for a count question, as the token the prompt carries."""
    assert ex.tool_query is not None
    return str(task.count_shapes(ex.scene, *ex.tool_query))


def run_sft(model: TinyVLM, examples: list[task.Example], steps: int, batch_size: int, lr: float,
            tool_fraction: float, seed: int) -> dict[str, object]:
    """Train ``model`` in place with :class:`ClippedAdam` on random batches of ``examples``.

    Each row of a batch is a count question with probability ``tool_fraction`` carrying the tool's
    observation in its prompt (rows outside the tool's domain never do). Gradients are clipped to
    norm 1.

    Returns:
        ``{"losses": list[float] per step, "loss_first", "loss_last": means of the first/last 10,
        "supervised_tokens": int, "tool_rows": int}``.

    Raises:
        ValueError: empty ``examples``, non-positive ``steps``/``batch_size``/``lr``, or
            ``tool_fraction`` outside [0, 1].
    """
    if len(examples) == 0:
        raise ValueError("invalid input")
    if steps <= 0 or batch_size <= 0:
        raise ValueError("invalid input")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError("invalid input")
    if not 0.0 <= tool_fraction <= 1.0:
        raise ValueError("invalid input")
    rng = np.random.default_rng(seed)
    opt = ClippedAdam(model.parameters(), lr=lr, max_grad_norm=1.0)
    model.train()
    losses: list[float] = []
    supervised_tokens = 0
    tool_rows = 0
    for step in range(steps):
        opt.lr = lr * warmup_cosine(step, steps)
        idx = rng.integers(0, len(examples), size=batch_size)  # (batch_size,)
        rows = [examples[i] for i in idx]
        use_tool = rng.random(batch_size) < tool_fraction  # (batch_size,)
        obs = [_observation(ex) if (u and ex.tool_query is not None) else None for ex, u in zip(rows, use_tool)]
        tool_rows += sum(o is not None for o in obs)
        batch = encode_batch(rows, observations=obs)
        loss = supervised_loss(model, batch)  # ()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        supervised_tokens += int(batch.loss_mask.sum().item())
    return {
        "losses": losses,
        "loss_first": float(np.mean(losses[:10])),
        "loss_last": float(np.mean(losses[-10:])),
        "supervised_tokens": supervised_tokens,
        "tool_rows": tool_rows,
    }


@torch.no_grad()
def accuracy(model: TinyVLM, examples: list[task.Example]) -> float:
    """Greedy exact-match accuracy: the share of examples whose argmax answer token is the gold answer.

    Runs in eval mode in chunks of 256 and restores ``model.training``.

    Raises:
        ValueError: empty ``examples``.
    """
    if len(examples) == 0:
        raise ValueError("invalid input")
    was_training = model.training
    model.eval()
    try:
        correct = 0
        for start in range(0, len(examples), 256):
            chunk = examples[start:start + 256]
            pred = next_token_logits(model, chunk).argmax(dim=-1)  # (B,)
            gold = torch.tensor([task.STOI[ex.answer] for ex in chunk], device=pred.device)  # (B,)
            correct += int((pred == gold).sum().item())
    finally:
        model.train(was_training)
    return correct / len(examples)
