"""Alternative #31: the same GPT with the loss, targets and batches written another way.

``lm_loss`` is ``logsumexp(logits) - logits[target]`` (no ``log_softmax`` tensor), targets come from
``torch.roll`` plus masks, ``get_batch`` slices windows of ``seq_len + 1`` tokens with ``unfold``, and the
forward adds position embeddings through an explicit ``(B, T)`` position grid.
Shape letters: ``B`` batch, ``T`` tokens, ``d`` width, ``V`` vocabulary, ``W`` windows in the data.
Trade-off: ``unfold`` views every window at once instead of gathering indices, because that is one
strided view; it costs nothing until indexed. Test: passes every #31 check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from canon_refs.nn.normalization_torch import RMSNorm
from canon_refs.transformer.blocks import DecoderBlock
from canon_refs.transformer.kv_cache import KVCache
from canon_refs.transformer.positional import RotaryEmbedding

__all__ = ["GPT", "GPTConfig", "get_batch", "lm_loss", "make_next_token_targets", "train_gpt"]


@dataclass
class GPTConfig:
    """GPT hyperparameters."""

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


def _integer_2d(t: Tensor, name: str) -> None:
    if not isinstance(t, Tensor) or t.ndim != 2 or t.dtype in (torch.bool,) or t.dtype.is_floating_point:
        raise ValueError(f"{name} must be a 2-D integer tensor")


class GPT(nn.Module):
    """Decoder-only LM; same API as the reference."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        c = config
        for name in ("vocab_size", "max_seq_len", "d_model", "n_heads", "n_layers"):
            if getattr(c, name) < 1:
                raise ValueError(f"{name} must be positive")
        if c.d_model % c.n_heads:
            raise ValueError("n_heads must divide d_model")
        if c.pos not in ("learned", "rope") or c.ffn not in ("gelu", "swiglu") or c.norm not in ("layernorm", "rmsnorm"):
            bad = "pos" if c.pos not in ("learned", "rope") else "ffn" if c.ffn not in ("gelu", "swiglu") else "norm"
            raise ValueError(f"unknown {bad} option")
        if c.n_kv_heads is not None and (c.n_kv_heads < 1 or c.n_heads % c.n_kv_heads):
            raise ValueError("n_kv_heads must divide n_heads")
        self.config = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_emb = nn.Embedding(c.max_seq_len, c.d_model) if c.pos == "learned" else None
        rope = RotaryEmbedding(c.d_model // c.n_heads, c.max_seq_len) if c.pos == "rope" else None
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList([
            DecoderBlock(c.d_model, c.n_heads, c.d_ff, c.dropout, n_kv_heads=c.n_kv_heads, rope=rope,
                         ffn=c.ffn, norm=c.norm, bias=c.bias) for _ in range(c.n_layers)])
        self.norm_f = nn.LayerNorm(c.d_model, bias=c.bias) if c.norm == "layernorm" else RMSNorm(c.d_model, 1e-5)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                with torch.no_grad():
                    module.weight.normal_(0.0, 0.02)
                    if getattr(module, "bias", None) is not None:
                        module.bias.zero_()
        if c.tie_weights:
            self.lm_head.weight = self.tok_emb.weight

    def hidden_states(self, idx: Tensor, *, attention_mask: Tensor | None = None,
                      position_ids: Tensor | None = None, kv_caches: list[KVCache] | None = None) -> Tensor:
        """``(B, T) -> (B, T, d)``."""
        _integer_2d(idx, "idx")
        c = self.config
        B, T = idx.shape
        if ((idx < 0) | (idx >= c.vocab_size)).any():
            raise ValueError("idx out of range")
        if kv_caches is not None and len(kv_caches) != len(self.blocks):
            raise ValueError("kv_caches needs one cache per block")
        past = kv_caches[0].length if kv_caches else 0
        if kv_caches and past + T > kv_caches[0].k.shape[2]:
            raise ValueError("idx does not fit in kv_caches")
        if past + T > c.max_seq_len:
            raise ValueError("idx longer than max_seq_len")
        if attention_mask is not None and (attention_mask.dtype.is_floating_point or attention_mask.shape != (B, past + T)):
            raise ValueError("attention_mask must be (B, T_total)")
        if position_ids is None:
            grid = (torch.arange(T) + past).expand(B, T)                 # (B, T)
        else:
            if position_ids.shape not in ((T,), (B, T)) or position_ids.dtype.is_floating_point:
                raise ValueError("position_ids must be (T,) or (B, T) integers")
            grid = position_ids.expand(B, T)                             # (B, T)
        x = self.tok_emb(idx)                                            # (B, T, d)
        if self.pos_emb is not None:
            x = x + self.pos_emb(grid)                                   # (B, T, d)
        x = self.drop(x)                                                 # (B, T, d)
        for layer, block in enumerate(self.blocks):
            x = block(x, attention_mask=attention_mask,                  # (B, T, d)
                      kv_cache=kv_caches[layer] if kv_caches else None, positions=grid)
        return self.norm_f(x)                                            # (B, T, d)

    def forward(self, idx: Tensor, targets: Tensor | None = None, *, attention_mask: Tensor | None = None,
                position_ids: Tensor | None = None,
                kv_caches: list[KVCache] | None = None) -> tuple[Tensor, Tensor | None]:
        """``(B, T) -> ((B, T, V), loss)``."""
        _integer_2d(idx, "idx")
        if targets is not None and targets.shape != idx.shape:
            raise ValueError("targets must have the shape of idx")
        logits = self.lm_head(self.hidden_states(idx, attention_mask=attention_mask,  # (B, T, V)
                                                 position_ids=position_ids, kv_caches=kv_caches))
        return logits, (lm_loss(logits, targets) if targets is not None else None)

    def new_kv_caches(self, batch_size: int, max_len: int | None = None) -> list[KVCache]:
        """One cache per block."""
        c = self.config
        length = max_len or c.max_seq_len
        if length > c.max_seq_len:
            raise ValueError("max_len above max_seq_len")
        return [KVCache(batch_size, c.n_kv_heads or c.n_heads, c.d_model // c.n_heads, length) for _ in self.blocks]

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Unique parameter count."""
        unique = {id(p): p for p in self.parameters()}
        skip = set()
        if exclude_embeddings:
            skip = {id(self.tok_emb.weight)} | ({id(self.pos_emb.weight)} if self.pos_emb is not None else set())
        return sum(p.numel() for k, p in unique.items() if k not in skip)


def make_next_token_targets(input_ids: Tensor, attention_mask: Tensor | None = None,
                            prompt_lengths: Tensor | None = None, ignore_index: int = -100) -> Tensor:
    """``(B, T) -> (B, T)`` via ``roll``."""
    _integer_2d(input_ids, "input_ids")
    B, T = input_ids.shape
    targets = torch.roll(input_ids.long(), shifts=-1, dims=1)           # (B, T)
    drop = torch.zeros(B, T, dtype=torch.bool)                           # (B, T)
    drop[:, -1] = True
    if attention_mask is not None:
        if attention_mask.shape != (B, T) or attention_mask.dtype.is_floating_point:
            raise ValueError("attention_mask must be a (B, T) bool|int mask")
        drop |= torch.roll(attention_mask == 0, shifts=-1, dims=1)
    if prompt_lengths is not None:
        lengths = torch.as_tensor(prompt_lengths)                        # (B,)
        drop |= (torch.arange(T) + 1)[None, :] < lengths[:, None]       # (B, T)
    return targets.masked_fill(drop, ignore_index)                       # (B, T)


def lm_loss(logits: Tensor, targets: Tensor, ignore_index: int = -100) -> Tensor:
    """``logsumexp - target logit``, averaged over active positions."""
    if logits.ndim != 3:
        raise ValueError("logits must be (B, T, V)")
    if targets.shape != logits.shape[:2]:
        raise ValueError("targets must be (B, T)")
    V = logits.shape[-1]
    active = targets != ignore_index                                     # (B, T)
    if ((targets[active] < 0) | (targets[active] >= V)).any():
        raise ValueError("targets out of range")
    if not active.any():
        return logits.sum() * 0.0
    work = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    lse = torch.logsumexp(work, dim=-1)                                  # (B, T)
    chosen = work.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T)
    per_token = (lse - chosen)[active]
    return per_token.mean().to(logits.dtype)


def get_batch(data: Tensor, batch_size: int, seq_len: int,
              generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Windows of ``seq_len + 1`` tokens from ``unfold``; inputs and shifted targets ``(B, T)``."""
    if data.ndim != 1 or data.dtype.is_floating_point or data.numel() <= seq_len:
        raise ValueError("data must be a 1-D integer tensor longer than seq_len")
    windows = data.unfold(0, seq_len + 1, 1)                             # (W, T + 1)
    pick = torch.randint(0, windows.shape[0], (batch_size,), generator=generator)  # (B,)
    chunk = windows[pick].long()                                         # (B, T + 1)
    return chunk[:, :-1], chunk[:, 1:]                                   # (B, T), (B, T)


def train_gpt(model: GPT, data: Tensor, *, steps: int = 300, batch_size: int = 16, seq_len: int = 32,
              lr: float = 3e-3, grad_clip: float | None = 1.0, seed: int = 0) -> dict[str, list[float]]:
    """AdamW training on random windows; returns ``{"losses": [...]}``."""
    if steps < 1 or not (lr > 0 and math.isfinite(lr)):
        raise ValueError("steps must be >= 1 and lr > 0")
    if seq_len > model.config.max_seq_len:
        raise ValueError("seq_len above max_seq_len")
    gen = torch.Generator().manual_seed(seed)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.0)
    model.train()
    out = []
    for _ in range(steps):
        x, y = get_batch(data, batch_size, seq_len, gen)                 # (B, T), (B, T)
        loss = model(x, y)[1]
        opt.zero_grad()
        loss.backward()
        if grad_clip:
            nn.utils.clip_grad_norm_(trainable, grad_clip)
        opt.step()
        out.append(loss.item())
    return {"losses": out}
