"""Canon #54: a reward model with a pairwise (Bradley-Terry) head on top ...

Plan: a scalar head on the backbone's hidden state at the last real token, trained with the
Bradley-Terry pairwise loss -log sigmoid(r_c - r_r), written as softplus(-(r_c - r_r)) because that
stays finite for large gaps where log(sigmoid(.)) underflows to log 0.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

if TYPE_CHECKING:
    from canon_refs.transformer.gpt import GPT

__all__ = [
    "RewardModel",
    "bradley_terry_prob",
    "collate_pairs",
    "last_token_index",
    "logit",
    "pair_accuracy",
    "pairwise_loss",
    "train_reward_model",
]


def _float_args(*xs):
    """Tensors in a common floating compute dtype (float64 for Python numbers) and the output dtype."""
    ts = [x for x in xs if isinstance(x, Tensor)]
    dtype = functools.reduce(torch.promote_types, [t.dtype for t in ts]) if ts else torch.float64
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    return [torch.as_tensor(x, dtype=compute) for x in xs], dtype


def bradley_terry_prob(reward_chosen: Tensor | float, reward_rejected: Tensor | float) -> Tensor:
    """``P(chosen preferred) = sigmoid(r_c - r_r)``, computed as ``exp(-softplus(-(r_c - r_r)))`` (seed 001).

    Args:
        reward_chosen, reward_rejected: broadcastable tensors of any shape ``(...)`` or Python floats.

    Returns:
        ``(...)`` probabilities in the promoted floating dtype (float64 for Python numbers; float16 and
        bfloat16 are computed in float32 and cast back). ``delta = 1000`` gives exactly 1.0 and
        ``delta = -1000`` exactly 0.0 in float64, with no overflow on the way.

    Raises:
        ValueError: the two arguments do not broadcast (``reward_chosen`` / ``reward_rejected``).
    """
    (rc, rr), dtype = _float_args(reward_chosen, reward_rejected)
    return torch.exp(-F.softplus(-(rc - rr))).to(dtype)


def logit(p: Tensor | float) -> Tensor:
    """The inverse of the sigmoid, ``log p - log1p(-p)``: a win rate back to a reward gap (seed 001).

    Args:
        p: probabilities, a tensor of any shape ``(...)`` or a Python float, each finite and in ``(0, 1)``.

    Returns:
        ``(...)`` in the floating dtype of ``p`` (float64 for Python numbers). ``logit(0.75) = ln 3``.

    Raises:
        ValueError: an entry of ``p`` that is non-finite or outside the open interval ``(0, 1)``.
    """
    (p,), dtype = _float_args(p)
    return (torch.log(p) - torch.log1p(-p)).to(dtype)


def pairwise_loss(reward_chosen: Tensor, reward_rejected: Tensor, margin: Tensor | None = None) -> Tensor:
    """The Bradley-Terry loss ``mean_b -log sigmoid(r_c[b] - r_r[b] - margin[b])``, as a softplus.

    Args:
        reward_chosen, reward_rejected: ``(B,)`` finite floating rewards; row ``b`` of each side forms a pair.
        margin: optional ``(B,)`` required gap (Llama 2's rating margin); the loss is zero only once
            ``r_c - r_r`` exceeds it by a lot.

    Returns:
        ``()`` mean loss in the dtype of the rewards (float16/bfloat16 computed in float32 and cast back).
        Equal rewards give ``ln 2``; ``delta = 1e4`` gives 0 and ``delta = -1e4`` gives 1e4, both finite.

    Raises:
        ValueError: rewards not non-empty 1-D floating, of different shapes, or non-finite; ``margin``
            not of shape ``(B,)`` or non-finite.
    """
    dtype = reward_chosen.dtype
    compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    delta = reward_chosen.to(compute) - reward_rejected.to(compute)
    if margin is not None:
        delta = delta - margin.to(compute)
    return F.softplus(-delta).mean().to(dtype)


def pair_accuracy(reward_chosen: Tensor, reward_rejected: Tensor) -> float:
    """Share of pairs with ``r_c > r_r`` strictly; a tie counts as wrong.

    Args:
        reward_chosen, reward_rejected: ``(B,)`` finite floating rewards.

    Returns:
        A Python float in ``[0, 1]``.

    Raises:
        ValueError: as :func:`pairwise_loss` for the rewards.
    """
    return (reward_chosen > reward_rejected).float().mean().item()


def last_token_index(attention_mask: Tensor) -> Tensor:
    """Index of the last real token of each row: ``(B, T)`` bool|int mask -> ``(B,)`` long.

    For a right-padded row of length ``L`` this is ``L - 1``; it is computed as the largest position whose
    mask is set, so it holds for any padding side.

    Raises:
        ValueError: ``attention_mask`` not 2-D, floating, or with a row that has no real token.
    """
    m = attention_mask.bool()
    pos = torch.arange(m.shape[1], device=m.device).expand_as(m)
    return torch.where(m, pos, torch.full_like(pos, -1)).max(dim=1).values.long()


def collate_pairs(chosen: Sequence[Sequence[int]], rejected: Sequence[Sequence[int]], pad_id: int) -> dict[str, Tensor]:
    """Batch preference pairs; each side right-padded independently to its own longest row (seed 002).

    Args:
        chosen, rejected: ``B`` token-id sequences each; ``chosen[b]`` competes with ``rejected[b]``.
        pad_id: the id written into padded positions (their mask is 0, so its value never matters).

    Returns:
        ``{"chosen_ids", "chosen_mask"}`` of shape ``(B, T_c)`` and ``{"rejected_ids", "rejected_mask"}`` of
        shape ``(B, T_r)``, all ``torch.long``; ``T_c``/``T_r`` are the longest chosen/rejected lengths.

    Raises:
        ValueError: ``chosen`` and ``rejected`` of different lengths, or empty, or holding an empty
            sequence; ``pad_id`` not an int.
    """
    def pad(seqs):
        T = max(len(x) for x in seqs)
        ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), T), dtype=torch.long)
        for i, x in enumerate(seqs):
            ids[i, : len(x)] = torch.as_tensor(list(x), dtype=torch.long)
            mask[i, : len(x)] = 1
        return ids, mask

    c_ids, c_mask = pad(chosen)
    r_ids, r_mask = pad(rejected)
    return {"chosen_ids": c_ids, "chosen_mask": c_mask, "rejected_ids": r_ids, "rejected_mask": r_mask}


class RewardModel(nn.Module):
    """A backbone plus a scalar head read at the last real token: ``(B, T) -> (B,)`` rewards.

    Args:
        backbone: any module with ``hidden_states(input_ids, attention_mask=...) -> (B, T, d)``, such as
            the GPT of #31 (its hidden states are taken after the final norm).
        d_model: the backbone width ``d``.

    Attributes: ``backbone``; ``head``, ``Linear(d, 1)`` with ``N(0, 0.02)`` weight and zero bias (float32).
    Source: Ouyang et al. 2022 (InstructGPT, section 3.5); seed 002 for the pair data.

    Raises:
        ValueError: ``d_model < 1``; a backbone without ``hidden_states``.
    """

    def __init__(self, backbone: nn.Module, d_model: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(d_model, 1)
        nn.init.normal_(self.head.weight, mean=0.0, std=0.02)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_gpt(cls, gpt: GPT) -> RewardModel:
        """A reward model on a deep copy of ``gpt`` (the policy is left untouched); width ``gpt.config.d_model``."""
        return cls(copy.deepcopy(gpt), gpt.config.d_model)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Rewards at the last real token: ``input_ids (B, T)`` long, ``attention_mask (B, T)`` bool|int -> ``(B,)``.

        Raises:
            ValueError: ``input_ids`` not a 2-D integer tensor; ``attention_mask`` of another shape or with
                an all-zero row; whatever the backbone raises for its inputs.
        """
        h = self.backbone.hidden_states(input_ids, attention_mask=attention_mask)  # (B, T, d)
        idx = last_token_index(attention_mask)                                     # (B,)
        h_last = h[torch.arange(h.shape[0], device=h.device), idx]                 # (B, d)
        return self.head(h_last).squeeze(-1)                                       # (B,)


def train_reward_model(
    model: RewardModel,
    batches: Iterable[dict[str, Tensor]],
    *,
    steps: int = 200,
    lr: float = 1e-3,
    seed: int = 0,
) -> dict[str, list[float]]:
    """Train ``model`` on preference batches with :func:`pairwise_loss` for ``steps`` AdamW steps.

    Each batch is a :func:`collate_pairs` dict. Batches are visited in epochs, each a fresh permutation
    drawn from a generator seeded with ``seed``; the optimizer is ``AdamW(lr, weight_decay=0)``.

    Returns:
        ``{"losses", "accuracies"}``: per step, the batch loss and its :func:`pair_accuracy`.

    Raises:
        ValueError: ``steps < 1``; ``lr`` non-finite or ``<= 0``; ``batches`` empty or a batch missing a key
            or with mismatched shapes; all checked before the first update.
    """
    batches = list(batches)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    hist: dict[str, list[float]] = {"losses": [], "accuracies": []}
    order: list[int] = []
    model.train()
    for _ in range(steps):
        if not order:
            order = torch.randperm(len(batches), generator=gen).tolist()
        b = batches[order.pop(0)]
        rc = model(b["chosen_ids"], b["chosen_mask"])
        rr = model(b["rejected_ids"], b["rejected_mask"])
        loss = pairwise_loss(rc, rr)
        opt.zero_grad()
        loss.backward()
        opt.step()
        hist["losses"].append(loss.item())
        hist["accuracies"].append(pair_accuracy(rc.detach(), rr.detach()))
    return hist
