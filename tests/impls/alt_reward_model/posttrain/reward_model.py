"""Alternative reward model (canon #54), written differently from the reference.

* The Bradley-Terry probability is the two-branch stable sigmoid (``1 / (1 + e^-x)`` for ``x >= 0``,
  ``e^x / (1 + e^x)`` otherwise) instead of ``exp(-softplus(-x))``; the loss is ``-logsigmoid``.
* ``logit`` is ``log(p / (1 - p))`` evaluated as ``log p - log(1 - p)`` through ``torch.special.logit``'s
  formula written out with ``log1p``.
* The last real token is found by flipping the mask and taking ``argmax`` of the first 1 from the right.
* Pooling uses ``gather`` with an expanded index instead of advanced indexing.
* Collation uses ``nn.utils.rnn.pad_sequence``.

Shapes: ``B`` pairs, ``T`` tokens, ``d`` width, ``N`` batches.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pad_sequence

_KEYS = ("chosen_ids", "chosen_mask", "rejected_ids", "rejected_mask")


def _dtype_of(*xs):
    dts = [x.dtype for x in xs if isinstance(x, Tensor) and x.is_floating_point()]
    if not dts:
        return torch.float64
    out = dts[0]
    for dt in dts[1:]:
        out = torch.promote_types(out, dt)
    return out


def bradley_terry_prob(reward_chosen, reward_rejected):
    """sigmoid(r_c - r_r) with the two-branch stable formula."""
    dtype = _dtype_of(reward_chosen, reward_rejected)
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    a = torch.as_tensor(reward_chosen, dtype=work)                     # (...,)
    b = torch.as_tensor(reward_rejected, dtype=work)                   # (...,)
    try:
        x = a - b                                                      # (...,)
    except RuntimeError as err:
        raise ValueError("reward_chosen and reward_rejected must broadcast") from err
    e = torch.exp(-x.abs())                                            # (...,)
    p = torch.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))            # (...,)
    return p.to(dtype)


def logit(p):
    """log p - log1p(-p) for finite p in (0, 1)."""
    t = torch.as_tensor(p, dtype=_dtype_of(p))                         # (...,)
    ok = torch.isfinite(t) & (t > 0) & (t < 1)                         # (...,)
    if not bool(ok.all()):
        raise ValueError("p must be finite and inside (0, 1)")
    return t.log() - (-t).log1p()


def _validate(rc, rr):
    for name, t in (("reward_chosen", rc), ("reward_rejected", rr)):
        if not isinstance(t, Tensor) or t.dim() != 1 or t.numel() == 0 or not t.is_floating_point():
            raise ValueError(f"{name} must be a floating (B,) tensor")
    if rc.shape != rr.shape:
        raise ValueError("reward_chosen and reward_rejected differ in shape")
    if not torch.isfinite(rc).all():
        raise ValueError("reward_chosen is not finite")
    if not torch.isfinite(rr).all():
        raise ValueError("reward_rejected is not finite")


def pairwise_loss(reward_chosen, reward_rejected, margin=None):
    """-logsigmoid(r_c - r_r - margin), averaged."""
    _validate(reward_chosen, reward_rejected)
    if margin is not None and (not isinstance(margin, Tensor) or margin.shape != reward_chosen.shape
                               or not torch.isfinite(margin).all()):
        raise ValueError("margin must be a finite (B,) tensor")
    out_dtype = torch.promote_types(reward_chosen.dtype, reward_rejected.dtype)
    work = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    z = reward_chosen.to(work) - reward_rejected.to(work)              # (B,)
    if margin is not None:
        z = z - margin.to(work)                                        # (B,)
    return (-F.logsigmoid(z)).mean().to(out_dtype)


def pair_accuracy(reward_chosen, reward_rejected):
    """Strict wins over pairs."""
    _validate(reward_chosen, reward_rejected)
    return (reward_chosen - reward_rejected > 0).sum().item() / reward_chosen.numel()


def last_token_index(attention_mask):
    """T - 1 - (position of the first 1 when the row is read backwards)."""
    if not isinstance(attention_mask, Tensor) or attention_mask.dim() != 2 or attention_mask.is_floating_point():
        raise ValueError("attention_mask must be (B, T) bool or int")
    m = (attention_mask != 0).long()                                   # (B, T)
    if (m.sum(dim=1) == 0).any():
        raise ValueError("attention_mask row without tokens")
    T = m.size(1)
    from_right = m.flip(1).argmax(dim=1)                               # (B,)
    return T - 1 - from_right


def collate_pairs(chosen, rejected, pad_id):
    """pad_sequence on each side separately."""
    if len(chosen) != len(rejected):
        raise ValueError("chosen and rejected must be of equal length")
    if not chosen:
        raise ValueError("chosen is empty")
    out = {}
    for side, rows in (("chosen", chosen), ("rejected", rejected)):
        if any(len(r) == 0 for r in rows):
            raise ValueError(f"{side} has an empty row")
        seqs = [torch.tensor(list(r), dtype=torch.long) for r in rows]  # list[B]
        out[f"{side}_ids"] = pad_sequence(seqs, batch_first=True, padding_value=pad_id)  # (B, T)
        ones = [torch.ones(len(r), dtype=torch.long) for r in rows]     # list[B]
        out[f"{side}_mask"] = pad_sequence(ones, batch_first=True, padding_value=0)  # (B, T)
    return out


class RewardModel(nn.Module):
    """Backbone + Linear(d, 1) read at the last real token."""

    def __init__(self, backbone, d_model):
        super().__init__()
        if d_model < 1:
            raise ValueError("d_model must be >= 1")
        self.backbone = backbone
        self.head = nn.Linear(d_model, 1)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_gpt(cls, gpt):
        """Reward model on a deep copy of ``gpt``."""
        return cls(copy.deepcopy(gpt), gpt.config.d_model)

    def forward(self, input_ids, attention_mask):
        """(B, T) ids and mask -> (B,) rewards; ValueError on a mask of another shape or an empty row."""
        if attention_mask.shape != input_ids.shape:
            raise ValueError("attention_mask must match input_ids")
        idx = last_token_index(attention_mask)                         # (B,)
        h = self.backbone.hidden_states(input_ids, attention_mask=attention_mask)  # (B, T, d)
        index = idx.view(-1, 1, 1).expand(-1, 1, h.size(-1))           # (B, 1, d)
        pooled = torch.gather(h, 1, index).squeeze(1)                  # (B, d)
        return self.head(pooled)[:, 0]                                 # (B,)


def train_reward_model(model, batches, *, steps=200, lr=1e-3, seed=0):
    """AdamW on pairwise_loss, batches in seeded epoch permutations."""
    if steps < 1:
        raise ValueError("steps must be >= 1")
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError("lr must be positive")
    batches = list(batches)
    if not batches:
        raise ValueError("batches is empty")
    for b in batches:
        if not isinstance(b, dict) or not all(k in b for k in _KEYS):
            raise ValueError("batches must be collate_pairs dicts")
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses, accs = [], []
    queue = []
    for _ in range(steps):
        if not queue:
            queue = torch.randperm(len(batches), generator=g).tolist()
        b = batches[queue.pop(0)]
        rc = model(b["chosen_ids"], b["chosen_mask"])                   # (B,)
        rr = model(b["rejected_ids"], b["rejected_mask"])               # (B,)
        loss = pairwise_loss(rc, rr)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        accs.append(pair_accuracy(rc.detach(), rr.detach()))
    return {"losses": losses, "accuracies": accs}
