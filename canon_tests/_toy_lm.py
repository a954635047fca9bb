"""A tiny deterministic causal language model for the tests of #32 (generation), #55 (DPO) and #56 (GRPO).

It stands in for the GPT of #31 so those items can be tested on their own: same call convention
(``model(idx, targets=None, *, attention_mask=None, position_ids=None, kv_caches=None) -> (logits, loss)``),
a ``config`` with ``vocab_size`` and ``max_seq_len``, and ``new_kv_caches``. The mixer is causal mean
pooling rather than attention: position ``t`` sees ``[h_t ; mean(h_s for s <= t, s real)]``, so it is
causal, honours ``attention_mask`` (padded tokens never enter the mean), needs no position embedding
(left padding is exact) and is still order-sensitive at the last position, which is what a one-token
verifier task needs. Parameters come from a local generator, so two models built with the same seed
are identical whatever the global RNG state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class ToyConfig:
    vocab_size: int
    max_seq_len: int
    d_model: int


class ToyCache:
    """Running masked sum and count of the pooled stream: the toy's analogue of a KV cache."""

    def __init__(self, batch_size: int, d_model: int, max_len: int) -> None:
        self.total = torch.zeros(batch_size, d_model)
        self.count = torch.zeros(batch_size, 1)
        self.max_len = max_len
        self.length = 0


class ToyCausalLM(nn.Module):
    """Embedding -> causal masked mean pooling -> tanh mixer -> linear head; returns ``(logits, loss)``."""

    def __init__(self, vocab_size: int = 12, d_model: int = 16, max_seq_len: int = 16, seed: int = 0) -> None:
        super().__init__()
        self.config = ToyConfig(vocab_size, max_seq_len, d_model)
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.mix = nn.Linear(2 * d_model, d_model)
        self.lm_head = nn.Linear(d_model, vocab_size)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.tok_emb.weight.copy_(torch.randn(vocab_size, d_model, generator=gen))
            for layer in (self.mix, self.lm_head):
                fan_in = layer.weight.shape[1]
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) / fan_in**0.5)
                layer.bias.zero_()

    def new_kv_caches(self, batch_size: int, max_len: int | None = None) -> list[ToyCache]:
        return [ToyCache(batch_size, self.config.d_model, max_len or self.config.max_seq_len)]

    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        *,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        kv_caches: list[ToyCache] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        if idx.ndim != 2 or idx.dtype != torch.long:
            raise ValueError("idx must be a (B, T) long tensor")
        if int(idx.min()) < 0 or int(idx.max()) >= self.config.vocab_size:
            raise ValueError("idx holds ids outside [0, vocab_size)")
        B, T = idx.shape
        cache = kv_caches[0] if kv_caches is not None else None
        past = cache.length if cache is not None else 0
        limit = cache.max_len if cache is not None else self.config.max_seq_len
        if past + T > min(limit, self.config.max_seq_len):
            raise ValueError(f"sequence of {past + T} tokens exceeds max_seq_len {self.config.max_seq_len}")
        h = self.tok_emb(idx)
        if attention_mask is None:
            weight = torch.ones(B, T, 1, dtype=h.dtype)
        else:
            weight = (attention_mask[:, -T:] != 0).to(h.dtype)[..., None]
        total = torch.cumsum(h * weight, dim=1)
        count = torch.cumsum(weight, dim=1)
        if cache is not None:
            total = total + cache.total[:, None, :]
            count = count + cache.count[:, None, :]
            cache.total = total[:, -1].detach()
            cache.count = count[:, -1].detach()
            cache.length += T
        pooled = total / count.clamp_min(1.0)
        logits = self.lm_head(torch.tanh(self.mix(torch.cat([h, pooled], dim=-1))))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1), ignore_index=-100)
        return logits, loss
