"""Canon #60, part 6: supervised fine-tuning from random weights, and the batch format every stage shares.

A training row is ``question [observation : <n>] : answer <eos>``, right-padded to the longest row of
the batch. :func:`encode_batch` returns the ids, the attention mask, and a ``loss_mask`` that is 1 on
the answer token (and the EOS) only: the loss is the mean negative log-likelihood of those tokens,
read through ``TinyVLM.text_logits`` so that entry ``t`` scores token ``t``. The same batch format
feeds the reward model, DPO (``sequence_logprob`` sums log-probs over ``loss_mask``) and GRPO.

The subtle point is that ``tool_fraction`` of the count-question rows carry the tool's result in the
prompt (``observation : 3``). Without those rows the model has never seen an observation, and the
agent loop of part 9 would feed it a context it cannot read: the tool would be called and ignored.
SFT is where the model learns the tool's output format, long before any RL.

Shapes: ``B`` batch, ``T`` padded text length, ``V`` vocabulary, ``N_q`` visual tokens.

Trade-off: the loss is averaged over supervised tokens rather than over rows or all positions,
because only 2 of about 8 tokens per row are supervised: averaging over all positions would shrink
the gradient fourfold and make the learning rate depend on the padding. Prompt tokens are not
supervised at all, so no capacity is spent on modelling the question distribution.

What to test: ``loss_mask`` is 1 exactly on the answer (and EOS) positions, ``attention_mask`` is 1
exactly on the real tokens; :func:`next_token_logits` equals the ``text_logits`` row of the answer
slot; a short :func:`run_sft` lowers the loss; :func:`accuracy` restores ``model.training``.
"""

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


@functools.lru_cache(maxsize=4096)
def _prompt_ids(question: str, observation: str | None) -> tuple[int, ...]:
    """Token ids of ``question [observation : <n>] :`` (cached: the same questions recur)."""
    text = question if observation is None else f"{question} observation : {observation}"
    return tuple(task.encode_text(text + " :"))


def _pad(rows: list[list[int]]) -> tuple[Tensor, Tensor]:
    """Right-pad token rows with ``PAD_ID``: ``(B, T)`` long ids and the ``(B, T)`` long 0/1 mask."""
    T = max(len(r) for r in rows)
    ids = torch.tensor([r + [task.PAD_ID] * (T - len(r)) for r in rows])  # (B, T)
    lengths = torch.tensor([len(r) for r in rows])                       # (B,)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()          # (B, T)
    return ids, mask


def _check_lengths(examples: list[task.Example], name: str, values: list[str] | None) -> None:
    if values is not None and len(values) != len(examples):
        raise ValueError(f"{name} has {len(values)} entries for {len(examples)} examples")


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
    if not examples:
        raise ValueError("examples must be a non-empty list")
    _check_lengths(examples, "answers", answers)
    _check_lengths(examples, "observations", observations)
    rows: list[list[int]] = []
    answer_pos: list[int] = []
    for i, ex in enumerate(examples):
        answer = ex.answer if answers is None else answers[i]
        if answer not in task.STOI:
            raise ValueError(f"answers[{i}] = {answer!r} is not one vocabulary token")
        observation = None if observations is None else observations[i]
        prompt = _prompt_ids(ex.question, observation)
        row = [*prompt, task.STOI[answer]] + ([task.EOS_ID] if include_eos else [])
        if len(row) > task.MAX_TEXT_LEN:
            raise ValueError(f"examples[{i}] encodes to {len(row)} tokens, more than MAX_TEXT_LEN={task.MAX_TEXT_LEN}")
        rows.append(row)
        answer_pos.append(len(prompt))
    input_ids, attention_mask = _pad(rows)                               # (B, T), (B, T)
    positions = torch.arange(input_ids.shape[1])[None, :]                # (1, T)
    first = torch.tensor(answer_pos)[:, None]                            # (B, 1)
    n_supervised = 2 if include_eos else 1
    loss_mask = ((positions >= first) & (positions < first + n_supervised)).float()  # (B, T)
    images = torch.stack([ex.image for ex in examples])                  # (B, 3, 16, 16)
    return SFTBatch(images, input_ids, attention_mask, loss_mask)


def next_token_logits(model: TinyVLM, examples: list[task.Example],
                      observations: list[str] | None = None) -> Tensor:
    """``(B, V)`` logits of the answer slot: the token right after each (right-padded) prompt.

    One forward pass over the prompts alone; row ``b`` is read at spliced index ``N_q + L_b - 1``
    where ``L_b`` is the prompt length, which the causal mask keeps blind to the padding after it.
    Gradients flow when called outside ``no_grad``.

    Raises:
        ValueError: as :func:`encode_batch`.
    """
    if not examples:
        raise ValueError("examples must be a non-empty list")
    _check_lengths(examples, "observations", observations)
    prompts = [_prompt_ids(ex.question, None if observations is None else observations[i])
               for i, ex in enumerate(examples)]
    ids, mask = _pad([list(p) for p in prompts])                         # (B, T), (B, T)
    images = torch.stack([ex.image for ex in examples])                  # (B, 3, 16, 16)
    logits = model(images, ids, mask)                                    # (B, S, V)
    last = model.n_query_tokens + mask.sum(dim=1) - 1                    # (B,)
    return logits[torch.arange(len(examples)), last]                     # (B, V)


def supervised_loss(model: TinyVLM, batch: SFTBatch) -> Tensor:
    """Mean negative log-likelihood over the ``loss_mask`` tokens: a scalar ``()`` tensor.

    Raises:
        ValueError: the batch supervises no token.
    """
    n_tokens = batch.loss_mask.sum()                                     # ()
    if float(n_tokens) == 0:
        raise ValueError("batch has an all-zero loss_mask: nothing to supervise")
    logits = model.text_logits(batch.images, batch.input_ids, batch.attention_mask)  # (B, T, V)
    logp = F.log_softmax(logits, dim=-1)                                 # (B, T, V)
    token_logp = logp.gather(-1, batch.input_ids[:, :, None])[:, :, 0]  # (B, T)
    masked = torch.where(batch.loss_mask > 0, token_logp, torch.zeros_like(token_logp))  # (B, T)
    return -masked.sum() / n_tokens                                      # ()


def _check_positive(name: str, value: float, integer: bool) -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive {'int' if integer else 'number'}, got {value!r}")


def warmup_cosine(step: int, steps: int, warmup: int = 20, floor: float = 0.1) -> float:
    """Learning-rate multiplier: linear warmup over ``min(warmup, steps // 4)`` steps, then a cosine
    from 1 down to ``floor``. A Python float in ``(0, 1]``."""
    warm = max(1, min(warmup, steps // 4))
    if step < warm:
        return (step + 1) / warm
    progress = (step - warm) / max(1, steps - warm)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


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
    if not examples:
        raise ValueError("examples must be a non-empty list")
    _check_positive("steps", steps, integer=True)
    _check_positive("batch_size", batch_size, integer=True)
    _check_positive("lr", lr, integer=False)
    if not 0.0 <= tool_fraction <= 1.0:
        raise ValueError(f"tool_fraction must lie in [0, 1], got {tool_fraction!r}")
    rng = np.random.default_rng(seed)
    optimizer = ClippedAdam(model.parameters(), lr=lr, max_grad_norm=1.0)
    losses: list[float] = []
    supervised = 0
    tool_rows = 0
    model.train()
    for step in range(steps):
        optimizer.lr = lr * warmup_cosine(step, steps)
        idx = rng.integers(0, len(examples), size=batch_size)            # (batch_size,)
        with_tool = rng.random(batch_size) < tool_fraction               # (batch_size,)
        chunk = [examples[int(i)] for i in idx]
        observations = [
            str(task.count_shapes(ex.scene, *ex.tool_query)) if use and ex.tool_query is not None else None
            for ex, use in zip(chunk, with_tool)
        ]
        tool_rows += sum(o is not None for o in observations)
        batch = encode_batch(chunk, observations=observations)
        loss = supervised_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        supervised += int(batch.loss_mask.sum())
    return {
        "losses": losses,
        "loss_first": float(np.mean(losses[:10])),
        "loss_last": float(np.mean(losses[-10:])),
        "supervised_tokens": supervised,
        "tool_rows": tool_rows,
    }


@torch.no_grad()
def accuracy(model: TinyVLM, examples: list[task.Example]) -> float:
    """Greedy exact-match accuracy: the share of examples whose argmax answer token is the gold answer.

    Runs in eval mode in chunks of 256 and restores ``model.training``.

    Raises:
        ValueError: empty ``examples``.
    """
    if not examples:
        raise ValueError("examples must be a non-empty list")
    was_training = model.training
    model.eval()
    correct = 0
    try:
        for start in range(0, len(examples), 256):
            chunk = examples[start:start + 256]
            predicted = next_token_logits(model, chunk).argmax(dim=-1)   # (B,)
            gold = torch.tensor([task.STOI[ex.answer] for ex in chunk])  # (B,)
            correct += int((predicted == gold).sum())
    finally:
        model.train(was_training)
    return correct / len(examples)
