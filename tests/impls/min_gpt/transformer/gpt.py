"""Canon #31: a tiny decoder-only GPT, end to end: config, model, next-token loss, batches, training.

Plan: token embedding (+ learned positions, or RoPE inside attention), a stack of causal pre-norm
DecoderBlocks, a final norm and an LM head tied to the token embedding (saves V*d parameters).
Targets are aligned position-wise (already shifted), the loss is a masked mean of -log_softmax at the
target, computed in float32 for half logits, and returns a graph-connected zero when nothing is
active instead of the NaN of 0/0. Training: random windows, AdamW, global-norm clipping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from canon_refs.nn.normalization_torch import RMSNorm
from canon_refs.transformer.blocks import DecoderBlock
from canon_refs.transformer.kv_cache import KVCache
from canon_refs.transformer.positional import RotaryEmbedding

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["GPT", "GPTConfig", "get_batch", "lm_loss", "make_next_token_targets", "train_gpt"]


@dataclass
class GPTConfig:
    """Hyperparameters of ``GPT``; validated when the model is built.

    ``d_ff=None`` means the FFN's default width (4d for GELU, ``swiglu_hidden_dim(d)`` for SwiGLU);
    ``n_kv_heads=None`` means multi-head attention, an int means grouped-query attention (#35).
    """
    vocab_size: int
    max_seq_len: int = 64
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int | None = None
    dropout: float = 0.0
    ffn: Literal["gelu", "swiglu"] = "gelu"
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    pos: Literal["learned", "rope"] = "learned"
    n_kv_heads: int | None = None
    bias: bool = True
    tie_weights: bool = True


class GPT(nn.Module):
    """Decoder-only transformer language model (GPT-2 layout)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        c = config
        self.config = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_emb = nn.Embedding(c.max_seq_len, c.d_model) if c.pos == "learned" else None
        self.rope = RotaryEmbedding(c.d_model // c.n_heads, c.max_seq_len) if c.pos == "rope" else None
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList([
            DecoderBlock(c.d_model, c.n_heads, c.d_ff, c.dropout, cross_attention=False,
                         n_kv_heads=c.n_kv_heads, rope=self.rope, ffn=c.ffn, norm=c.norm, bias=c.bias)
            for _ in range(c.n_layers)
        ])
        self.norm_f = nn.LayerNorm(c.d_model, bias=c.bias) if c.norm == "layernorm" else RMSNorm(c.d_model)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.apply(self._init_weights)
        if c.tie_weights:
            self.lm_head.weight = self.tok_emb.weight

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def hidden_states(self, idx: Tensor, *, attention_mask: Tensor | None = None,
                      position_ids: Tensor | None = None,
                      kv_caches: list[KVCache] | None = None) -> Tensor:
        """The residual stream after ``norm_f``: ``idx (B, T)`` -> ``(B, T, d)``."""
        T = idx.shape[1]
        past = kv_caches[0].length if kv_caches else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + T, device=idx.device)  # (T,)
        x = self.tok_emb(idx)  # (B, T, d)
        if self.pos_emb is not None:
            x = x + self.pos_emb(position_ids)  # (T, d) or (B, T, d) broadcasts
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            cache = kv_caches[i] if kv_caches else None
            x = block(x, attention_mask=attention_mask, kv_cache=cache, positions=position_ids)
        return self.norm_f(x)

    def forward(self, idx: Tensor, targets: Tensor | None = None, *, attention_mask: Tensor | None = None,
                position_ids: Tensor | None = None,
                kv_caches: list[KVCache] | None = None) -> tuple[Tensor, Tensor | None]:
        """``idx (B, T)`` -> ``(logits (B, T, V), loss () or None)``."""
        h = self.hidden_states(idx, attention_mask=attention_mask, position_ids=position_ids,
                               kv_caches=kv_caches)
        logits = self.lm_head(h)  # (B, T, V)
        loss = lm_loss(logits, targets) if targets is not None else None
        return logits, loss

    def new_kv_caches(self, batch_size: int, max_len: int | None = None) -> list[KVCache]:
        """One empty ``KVCache(batch_size, H_kv, d_h, max_len)`` per layer, in the parameters' dtype/device."""
        c = self.config
        max_len = c.max_seq_len if max_len is None else max_len
        n_kv = c.n_heads if c.n_kv_heads is None else c.n_kv_heads
        p = self.tok_emb.weight
        return [KVCache(batch_size, n_kv, c.d_model // c.n_heads, max_len, dtype=p.dtype, device=p.device)
                for _ in range(c.n_layers)]

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Number of unique parameters (the tied head counted once)."""
        n = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            n -= self.tok_emb.weight.numel()
            if self.pos_emb is not None:
                n -= self.pos_emb.weight.numel()
        return n


def make_next_token_targets(input_ids: Tensor, attention_mask: Tensor | None = None,
                            prompt_lengths: Tensor | None = None, ignore_index: int = -100) -> Tensor:
    """Position-wise targets for next-token training: ``(B, T)`` long, ``targets[:, t] = input_ids[:, t+1]``."""
    B, T = input_ids.shape
    targets = torch.full((B, T), ignore_index, dtype=torch.long, device=input_ids.device)
    targets[:, :-1] = input_ids[:, 1:]
    keep = torch.ones(B, T, dtype=torch.bool, device=input_ids.device)
    keep[:, -1] = False
    if attention_mask is not None:
        keep[:, :-1] &= attention_mask[:, 1:].bool()
    if prompt_lengths is not None:
        nxt = torch.arange(1, T + 1, device=input_ids.device)[None, :]  # (1, T) index of the label token
        keep &= nxt >= torch.as_tensor(prompt_lengths, device=input_ids.device)[:, None]
    return targets.masked_fill(~keep, ignore_index)


def lm_loss(logits: Tensor, targets: Tensor, ignore_index: int = -100) -> Tensor:
    """Mean cross-entropy over the positions whose target is not ``ignore_index``; ``()`` in logits' dtype."""
    work = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    logp = F.log_softmax(work, dim=-1)  # (B, T, V)
    active = targets != ignore_index  # (B, T)
    if not active.any():
        return logits.sum() * 0
    safe = torch.where(active, targets, torch.zeros_like(targets)).long()
    nll = -logp.gather(-1, safe[..., None]).squeeze(-1)  # (B, T)
    loss = (nll * active).sum() / active.sum()
    return loss.to(logits.dtype)


def get_batch(data: Tensor, batch_size: int, seq_len: int,
              generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Random windows of a token stream: ``data (N,)`` -> inputs ``(B, T)`` and targets ``(B, T)``, long."""
    N = data.shape[0]
    starts = torch.randint(0, N - seq_len, (batch_size,), generator=generator)  # (B,)
    offs = torch.arange(seq_len)  # (T,)
    idx = starts[:, None] + offs[None, :]  # (B, T)
    data = data.long()
    return data[idx], data[idx + 1]


def train_gpt(model: GPT, data: Tensor, *, steps: int = 300, batch_size: int = 16, seq_len: int = 32,
              lr: float = 3e-3, grad_clip: float | None = 1.0, seed: int = 0) -> dict[str, list[float]]:
    """Train ``model`` on random windows of ``data`` with AdamW; returns ``{"losses": [...]}``."""
    gen = torch.Generator().manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    model.train()
    device = next(model.parameters()).device
    losses = []
    for _ in range(steps):
        x, y = get_batch(data, batch_size, seq_len, generator=gen)
        _, loss = model(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        opt.step()
        losses.append(loss.item())
    return {"losses": losses}
