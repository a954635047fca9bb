"""Canon #60, part 7: the verifier, on-policy preference pairs, and a Bradley-Terry reward model.

Three pieces of the reward side of post-training:

* :func:`verifier_reward` scores an answer 1 or 0 against the scene graph: the verifiable reward GRPO
  uses, and the judge that builds the preference pairs.
* :func:`make_preference_pairs` builds ``(prompt, chosen, rejected)`` triples. The chosen answer is the
  gold one; the rejected answer is the SFT policy's own sample when the verifier scores it 0
  (rejection sampling, the recipe behind Llama 2's preference sets), and a random wrong token (any
  vocabulary token but the gold answer) when the policy happened to be right. Without a policy every
  rejected answer is such a random token: the "random negatives" the pipeline compares against.
* :class:`TinyRewardModel` is a copy of the policy trunk with a scalar head, trained with the
  Bradley-Terry loss ``-log sigmoid(r(chosen) - r(rejected))``.

The subtle point is on-policy negatives. A random wrong token is usually one the policy would never
give (it already knows the answer to "how many" is a digit, not ``squares``), so a pair built from it
spends its gradient on a mistake the model does not make. A rejected answer sampled from the policy
is, by construction, a mistake it does make, and that is the one worth pushing down: over seeds 0-4
the DPO stage ends 3.5 points more accurate with on-policy negatives than with random ones (0.496
against 0.460 on average; the seed reports about 6).

Shapes: ``B`` pairs in a batch (the reward model scores ``2B`` rows, chosen then rejected), ``N``
examples, ``S = N_q + T`` spliced length, ``d`` width.

Trade-off: the reward is read from the hidden state at the *answer* position (which has seen the
prompt and the answer) rather than at the last token, because rows are right-padded and the last
position of a padded row is padding; the answer position is known from ``loss_mask`` exactly. The
chosen and rejected rows go through one forward pass of ``2B`` rows instead of two passes of ``B``,
which halves the per-call overhead that dominates at this size.

What to test: the verifier on right and wrong answers; chosen is gold and rejected is wrong on every
pair; without a policy the rejected tokens spread over the whole vocabulary; with a policy that always
answers the same token, that token is the rejected answer exactly where it is wrong; the Bradley-Terry
loss at equal rewards is ``log 2``; a few reward-model steps raise the pair accuracy above 0.5.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from canon_refs.capstone import synthetic_task as task
from canon_refs.capstone.multimodal_model import TinyVLM
from canon_refs.capstone.optimizer import ClippedAdam
from canon_refs.capstone.sft_stage import SFTBatch, encode_batch, next_token_logits
from canon_refs.capstone.tiny_lm import sample_next_token


@dataclass
class PreferencePair:
    """One preference triple: the example (prompt and image), the chosen and the rejected answer token."""

    example: task.Example
    chosen: str
    rejected: str


def verifier_reward(answer: str, example: task.Example) -> float:
    """1.0 when ``answer`` equals the gold answer of ``example`` (exact match), else 0.0."""
    return 1.0 if answer == example.answer else 0.0


def verifier_rewards(answers: list[str], examples: list[task.Example]) -> Tensor:
    """``(N,)`` float32 verifier rewards of ``answers[i]`` on ``examples[i]``.

    Raises:
        ValueError: ``answers`` and ``examples`` differ in length.
    """
    if len(answers) != len(examples):
        raise ValueError(f"answers has {len(answers)} entries for {len(examples)} examples")
    return torch.tensor([verifier_reward(a, ex) for a, ex in zip(answers, examples)], dtype=torch.float32)  # (N,)


def _random_wrong_token(example: task.Example, rng: np.random.Generator) -> str:
    """A vocabulary token other than the gold answer of ``example``, drawn uniformly with ``rng``."""
    wrong = [token for token in task.ITOS if token != example.answer]   # V - 1 tokens
    return wrong[int(rng.integers(len(wrong)))]


@torch.no_grad()
def _sample_answers(policy: TinyVLM, examples: list[task.Example], generator: torch.Generator) -> list[str]:
    """One answer per example sampled from ``policy`` at temperature 1 (eval mode, restored)."""
    was_training = policy.training
    policy.eval()
    try:
        answers: list[str] = []
        for start in range(0, len(examples), 256):
            logits = next_token_logits(policy, examples[start:start + 256])  # (B, V)
            ids = sample_next_token(logits, generator=generator)         # (B,)
            answers += [task.ITOS[i] for i in ids.tolist()]
    finally:
        policy.train(was_training)
    return answers


def make_preference_pairs(examples: list[task.Example], seed: int,
                          policy: TinyVLM | None = None) -> list[PreferencePair]:
    """One pair per example: chosen = gold; rejected = the policy's wrong sample, else a random wrong token.

    With ``policy``, an answer is sampled for every example at temperature 1 (``torch.Generator``
    seeded with ``seed``); when the verifier scores it 0 it becomes the rejected answer. Otherwise,
    and always without a policy, the rejected answer is a random wrong token: drawn uniformly
    (``np.random.default_rng(seed)``) from the ``VOCAB_SIZE - 1`` vocabulary tokens other than the
    gold answer, special and question words included.

    Raises:
        ValueError: empty ``examples``.
    """
    if not examples:
        raise ValueError("examples must be a non-empty list")
    rng = np.random.default_rng(seed)
    sampled: list[str | None] = [None] * len(examples)
    if policy is not None:
        sampled = list(_sample_answers(policy, examples, torch.Generator().manual_seed(seed)))
    pairs = []
    for ex, answer in zip(examples, sampled):
        if answer is not None and verifier_reward(answer, ex) == 0.0:
            rejected = answer
        else:
            rejected = _random_wrong_token(ex, rng)
        pairs.append(PreferencePair(ex, ex.answer, rejected))
    return pairs


def _pair_batch(pairs: list[PreferencePair]) -> SFTBatch:
    """``2B`` rows: the chosen answers of ``pairs``, then their rejected answers."""
    examples = [p.example for p in pairs]
    return encode_batch(examples + examples, answers=[p.chosen for p in pairs] + [p.rejected for p in pairs])


class TinyRewardModel(nn.Module):
    """A scalar reward ``r(x, y)``: the VLM trunk plus ``nn.Linear(d, 1)`` read at the answer position.

    Args:
        trunk: the ``TinyVLM`` whose hidden states are read (owned by the reward model, not shared).
    """

    def __init__(self, trunk: TinyVLM) -> None:
        super().__init__()
        self.trunk = trunk
        self.head = nn.Linear(trunk.lm.embed_tokens.embedding_dim, 1)

    @classmethod
    def from_policy(cls, model: TinyVLM) -> TinyRewardModel:
        """A reward model whose trunk is a trainable deep copy of ``model`` (the policy is not touched)."""
        trunk = copy.deepcopy(model)
        trunk.requires_grad_(True)
        return cls(trunk)

    def forward(self, batch: SFTBatch) -> Tensor:
        """``(B,)`` rewards, read from the hidden state of each row's first ``loss_mask`` position.

        Raises:
            ValueError: a row of ``batch.loss_mask`` supervises no token.
        """
        has_answer = batch.loss_mask.amax(dim=1) > 0                     # (B,)
        if not bool(has_answer.all()):
            raise ValueError("batch has a row whose loss_mask is all zero: no answer position to read")
        hidden = self.trunk.hidden_states(batch.images, batch.input_ids, batch.attention_mask)  # (B, S, d)
        answer_index = batch.loss_mask.argmax(dim=1) + self.trunk.n_query_tokens  # (B,)
        at_answer = hidden[torch.arange(hidden.shape[0]), answer_index]  # (B, d)
        return self.head(at_answer)[:, 0]                                # (B,)


def bradley_terry_loss(chosen_rewards: Tensor, rejected_rewards: Tensor) -> Tensor:
    """``-log sigmoid(r_c - r_r)`` averaged over ``(B,)`` pairs: a scalar ``()``; ``log 2`` at a tie."""
    return -F.logsigmoid(chosen_rewards - rejected_rewards).mean()      # ()


def train_reward_model(rm: TinyRewardModel, pairs: list[PreferencePair], steps: int, batch_size: int,
                       lr: float, seed: int) -> dict[str, object]:
    """Fit ``rm`` to ``pairs`` with the Bradley-Terry loss (:class:`ClippedAdam`, gradients clipped to norm 1).

    Returns:
        ``{"losses": list[float], "loss_first", "loss_last": means of the first/last 10 steps}``.

    Raises:
        ValueError: empty ``pairs``; non-positive ``steps``, ``batch_size`` or ``lr``.
    """
    if not pairs:
        raise ValueError("pairs must be a non-empty list")
    for name, value in (("steps", steps), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")
    rng = np.random.default_rng(seed)
    optimizer = ClippedAdam(rm.parameters(), lr=lr, max_grad_norm=1.0)
    losses: list[float] = []
    rm.train()
    for _ in range(steps):
        idx = rng.integers(0, len(pairs), size=batch_size)               # (B,)
        rewards = rm(_pair_batch([pairs[int(i)] for i in idx]))          # (2*B,)
        loss = bradley_terry_loss(rewards[:batch_size], rewards[batch_size:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return {"losses": losses, "loss_first": float(np.mean(losses[:10])), "loss_last": float(np.mean(losses[-10:]))}


@torch.no_grad()
def reward_pair_accuracy(rm: TinyRewardModel, pairs: list[PreferencePair]) -> float:
    """Share of pairs with ``r(chosen) > r(rejected)`` (eval mode, restored); ties count as wrong.

    Raises:
        ValueError: empty ``pairs``.
    """
    if not pairs:
        raise ValueError("pairs must be a non-empty list")
    was_training = rm.training
    rm.eval()
    wins = 0
    try:
        for start in range(0, len(pairs), 256):
            chunk = pairs[start:start + 256]
            rewards = rm(_pair_batch(chunk))                             # (2*B,)
            wins += int((rewards[:len(chunk)] > rewards[len(chunk):]).sum())
    finally:
        rm.train(was_training)
    return wins / len(pairs)
