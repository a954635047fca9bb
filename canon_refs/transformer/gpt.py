"""Canon #31: a tiny decoder-only GPT, end to end: config, model, next-token targets, loss, batches, training.

``GPT`` embeds tokens (plus learned positions, or RoPE inside attention), runs ``n_layers`` pre-norm
``DecoderBlock``s (#30) without cross-attention, applies a final norm and projects to the vocabulary with
a head tied to the token embedding. ``forward`` returns ``(logits, loss)``; with ``kv_caches`` (#33) it
continues a sequence one chunk at a time, which is what ``generate`` (#32) uses.

The subtle point is the alignment of targets. ``forward`` takes targets **aligned position-wise**:
``targets[:, t]`` is the label of ``logits[:, t]``, i.e. the token *after* position ``t``; the shift is done
once, by ``make_next_token_targets`` (or ``get_batch``), never again inside the loss. Shifting twice,
or not at all, still trains on the period-7 toy (it learns "copy" or "skip two") and only an exact
check of the targets or of the loss against ``F.cross_entropy`` catches it. The second is the offset
with a cache: default positions are ``arange(past, past + T)`` and the causal mask is bottom-right
aligned (#27), so a cached step sees the same positions as a full forward.

Shape letters: ``B`` batch, ``T`` tokens in this call, ``T_total`` cached + new tokens, ``d`` model width,
``V`` vocabulary, ``L`` layers, ``N`` data length (``get_batch``).

Trade-off: the head is tied to the token embedding (``lm_head.weight is tok_emb.weight``) instead of
being a separate ``V x d`` matrix, because the two play the same role (token <-> vector) and tying
saves ``V · d`` parameters: 38.6M of GPT-2 small's 124M (``50257 x 768``). The price is that input and
output embeddings cannot specialise, which matters little at this size. The loss is written as
``log_softmax`` + ``gather`` rather than ``log(softmax)``, because the latter turns a probability that
underflows to 0 into ``-inf``.

What to test: logits ``(B, T, V)`` and an initial loss near ``ln V``, the tied head, ``num_parameters``
against the closed form, causality, ``make_next_token_targets`` on the quoted examples, ``lm_loss`` against
``F.cross_entropy``, right and left padding against the unpadded forward, cached forward against the full
one, ``train_gpt`` reaching loss < 0.1 on a period-7 sequence, and the RoPE/SwiGLU/GQA configurations.
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

_LOW_PRECISION = (torch.float16, torch.bfloat16)


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
    """Decoder-only transformer language model.

    Args:
        config: a ``GPTConfig``, kept as given in ``self.config``.

    Attributes: ``tok_emb (V, d)``; ``pos_emb (max_seq_len, d)`` or None with RoPE; ``rope`` (one
    ``RotaryEmbedding`` shared by every block) or None; ``blocks`` (``ModuleList`` of
    ``DecoderBlock(cross_attention=False)``); ``norm_f``; ``lm_head (d -> V, no bias)``, whose weight *is*
    ``tok_emb.weight`` when ``config.tie_weights``. Parameters are float32, initialised ``N(0, 0.02)`` for
    every Linear/Embedding weight, the residual output projections included, and zero for biases (GPT-2's
    ``0.02``; its extra ``1/sqrt(2 * n_layers)`` scaling of the residual projections is not used here).

    Raises ValueError for an invalid config (non-positive sizes, ``d_model % n_heads``, unknown options).
    Source: Radford et al. 2019 (GPT-2); Karpathy's nanoGPT for the layout.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        _check_config(config)
        self.config = config
        d, H = config.d_model, config.n_heads
        self.tok_emb = nn.Embedding(config.vocab_size, d)
        self.pos_emb = nn.Embedding(config.max_seq_len, d) if config.pos == "learned" else None
        self.rope = RotaryEmbedding(d // H, max_positions=config.max_seq_len) if config.pos == "rope" else None
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            DecoderBlock(d, H, config.d_ff, config.dropout, cross_attention=False, n_kv_heads=config.n_kv_heads,
                         rope=self.rope, ffn=config.ffn, norm=config.norm, norm_first=True, bias=config.bias)
            for _ in range(config.n_layers)
        )
        self.norm_f = nn.LayerNorm(d, bias=config.bias) if config.norm == "layernorm" else RMSNorm(d, eps=1e-5)
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        if config.tie_weights:
            self.lm_head.weight = self.tok_emb.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """``N(0, 0.02)`` for Linear and Embedding weights, zeros for Linear biases; norms keep (1, 0)."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def hidden_states(self, idx: Tensor, *, attention_mask: Tensor | None = None,
                      position_ids: Tensor | None = None,
                      kv_caches: list[KVCache] | None = None) -> Tensor:
        """The residual stream after ``norm_f``: ``idx (B, T)`` -> ``(B, T, d)``.

        Args:
            idx: ``(B, T)`` integer token ids in ``[0, V)``.
            attention_mask: ``(B, T_total)`` bool|int over cached + new tokens, True/1 = real token.
            position_ids: ``(T,)`` or ``(B, T)`` positions; default ``arange(past, past + T)`` with
                ``past = kv_caches[0].length``. Left-padded batches pass ``positions_from_mask(mask)`` (#27).
            kv_caches: one ``KVCache`` per layer (see ``new_kv_caches``); the new keys/values are appended.

        Raises ValueError, before any cache is written, for ``idx`` that is not 2-D integer or holds ids
        outside ``[0, V)``, more tokens (cached + new) than ``max_seq_len`` or than the caches hold, a wrong
        number of caches, bad ``position_ids`` or an ``attention_mask`` that is not ``(B, T_total)``.
        """
        self._check_inputs(idx, attention_mask, position_ids, kv_caches)
        T = idx.shape[1]
        past = 0 if kv_caches is None else int(kv_caches[0].length)
        positions = position_ids
        if positions is None:
            positions = torch.arange(past, past + T, device=idx.device)  # (T,)
        x = self.tok_emb(idx)                                            # (B, T, d)
        if self.pos_emb is not None:
            x = x + self.pos_emb(positions)                              # (B, T, d)
        x = self.drop(x)                                                 # (B, T, d)
        for i, block in enumerate(self.blocks):
            cache = None if kv_caches is None else kv_caches[i]
            x = block(x, attention_mask=attention_mask, kv_cache=cache,  # (B, T, d)
                      positions=positions)
        return self.norm_f(x)                                            # (B, T, d)

    def forward(self, idx: Tensor, targets: Tensor | None = None, *, attention_mask: Tensor | None = None,
                position_ids: Tensor | None = None,
                kv_caches: list[KVCache] | None = None) -> tuple[Tensor, Tensor | None]:
        """``idx (B, T)`` -> ``(logits (B, T, V), loss () or None)``.

        ``targets (B, T)`` integer, aligned position-wise (``targets[:, t]`` labels ``logits[:, t]``; -100 is
        ignored); the loss is ``lm_loss(logits, targets)``. Other arguments as in ``hidden_states``.
        Raises ValueError for a ``targets`` shape other than ``idx``'s and everything ``hidden_states`` raises.
        """
        _check_targets(idx, targets)
        h = self.hidden_states(idx, attention_mask=attention_mask, position_ids=position_ids,  # (B, T, d)
                               kv_caches=kv_caches)
        logits = self.lm_head(h)                                         # (B, T, V)
        loss = None if targets is None else lm_loss(logits, targets)
        return logits, loss

    def new_kv_caches(self, batch_size: int, max_len: int | None = None) -> list[KVCache]:
        """One empty ``KVCache(batch_size, H_kv, d_h, max_len)`` per layer, in the parameters' dtype/device.

        ``max_len`` defaults to ``config.max_seq_len``. Raises ValueError if ``max_len`` is not in
        ``[1, max_seq_len]`` (positions beyond it have no embedding) or ``batch_size < 1``.
        """
        max_len = self.config.max_seq_len if max_len is None else max_len
        if not 1 <= max_len <= self.config.max_seq_len:
            raise ValueError(f"max_len must be in [1, max_seq_len={self.config.max_seq_len}], got {max_len}")
        H_kv = self.config.n_kv_heads or self.config.n_heads
        head_dim = self.config.d_model // self.config.n_heads
        weight = self.tok_emb.weight
        return [KVCache(batch_size, H_kv, head_dim, max_len, dtype=weight.dtype, device=weight.device)
                for _ in range(self.config.n_layers)]

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Number of unique parameters (the tied head counted once).

        For the default config this is ``V·d + T_max·d + L·(4d² + 4d + 2·d·d_ff + d_ff + d + 4d) + 2d``.
        ``exclude_embeddings`` leaves out the token and position embedding tables.
        """
        total = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            total -= self.tok_emb.weight.numel()
            if self.pos_emb is not None:
                total -= self.pos_emb.weight.numel()
        return total

    def _check_inputs(self, idx: Tensor, attention_mask: Tensor | None, position_ids: Tensor | None,
                      kv_caches: list[KVCache] | None) -> None:
        """Every ValueError of ``hidden_states``, raised before any cache is written."""
        _check_ids(idx, "idx")
        B, T = idx.shape
        V = self.config.vocab_size
        if idx.numel() and (idx.min() < 0 or idx.max() >= V):
            raise ValueError(f"idx holds ids outside [0, vocab_size={V}): [{int(idx.min())}, {int(idx.max())}]")
        if kv_caches is not None and len(kv_caches) != self.config.n_layers:
            raise ValueError(f"kv_caches must hold one cache per layer ({self.config.n_layers}), got {len(kv_caches)}")
        past = 0 if kv_caches is None else int(kv_caches[0].length)
        if kv_caches is not None and past + T > kv_caches[0].k.shape[-2]:
            raise ValueError(f"idx: {past} cached + {T} new tokens exceed the kv_caches capacity "
                             f"{kv_caches[0].k.shape[-2]}")
        if past + T > self.config.max_seq_len:
            raise ValueError(f"idx: {past} cached + {T} new tokens exceed max_seq_len={self.config.max_seq_len}")
        if attention_mask is not None and (attention_mask.is_floating_point()
                                           or tuple(attention_mask.shape) != (B, past + T)):
            raise ValueError(f"attention_mask must be a bool|int (B, T_total) = ({B}, {past + T}) mask, "
                             f"got {attention_mask.dtype} {tuple(attention_mask.shape)}")
        if position_ids is None:
            return
        if position_ids.is_floating_point() or position_ids.dtype == torch.bool:
            raise ValueError(f"position_ids must be an integer tensor, got {position_ids.dtype}")
        if position_ids.shape not in ((T,), (B, T)):
            raise ValueError(f"position_ids must be (T,) or (B, T) = ({B}, {T}), got {tuple(position_ids.shape)}")
        if position_ids.numel() and (position_ids.min() < 0 or position_ids.max() >= self.config.max_seq_len):
            raise ValueError(f"position_ids must lie in [0, max_seq_len={self.config.max_seq_len})")


def make_next_token_targets(input_ids: Tensor, attention_mask: Tensor | None = None,
                            prompt_lengths: Tensor | None = None, ignore_index: int = -100) -> Tensor:
    """Position-wise targets for next-token training: ``(B, T)`` long.

    ``targets[:, t] = input_ids[:, t + 1]``, replaced by ``ignore_index`` when position ``t + 1`` is padding
    (``attention_mask[:, t + 1]`` false) or inside the prompt (``t + 1 < prompt_lengths``, counted from
    column 0), and always in the last column. ``[[5, 6, 7, 8]]`` with ``prompt_lengths=[2]`` gives
    ``[[-100, 7, 8, -100]]``; with ``attention_mask=[[1, 1, 1, 0]]`` it gives ``[[6, 7, -100, -100]]``.

    Raises ValueError for ``input_ids`` not 2-D integer with ``T >= 1``, an ``attention_mask`` of another shape or floating,
    ``prompt_lengths`` not ``(B,)`` integer or negative.
    """
    if prompt_lengths is not None:
        prompt_lengths = torch.as_tensor(prompt_lengths, device=input_ids.device)  # (B,)
    _check_target_args(input_ids, attention_mask, prompt_lengths)
    B, T = input_ids.shape
    ids = input_ids.long()                                               # (B, T)
    keep = torch.ones(B, T - 1, dtype=torch.bool, device=ids.device)     # (B, T - 1)
    if attention_mask is not None:
        keep = keep & (attention_mask[:, 1:] != 0)                       # (B, T - 1)
    if prompt_lengths is not None:
        next_pos = torch.arange(1, T, device=ids.device)[None, :]        # (1, T - 1)
        keep = keep & (next_pos >= prompt_lengths[:, None])              # (B, T - 1)
    shifted = ids[:, 1:].masked_fill(~keep, ignore_index)                # (B, T - 1)
    last = torch.full((B, 1), ignore_index, dtype=torch.long,            # (B, 1)
                      device=ids.device)
    return torch.cat([shifted, last], dim=1)                             # (B, T)


def lm_loss(logits: Tensor, targets: Tensor, ignore_index: int = -100) -> Tensor:
    """Mean cross-entropy over the positions whose target is not ``ignore_index``; ``()`` in logits' dtype.

    ``logits (B, T, V)`` floating, ``targets (B, T)`` integer aligned position-wise. Equals
    ``F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=ignore_index)`` where some
    target is active; float16/bfloat16 logits are computed in float32 and the loss cast back. A batch with
    no active target returns 0 (not NaN), still connected to the autograd graph of ``logits``.

    Raises ValueError for logits that are not 3-D floating, targets whose shape is not ``(B, T)``, or
    active targets outside ``[0, V)``.
    """
    _check_loss_args(logits, targets, ignore_index)
    B, T, V = logits.shape
    flat_logits = logits.reshape(B * T, V)                               # (B*T, V)
    flat_targets = targets.reshape(B * T).long()                         # (B*T,)
    active = flat_targets != ignore_index                                # (B*T,)
    n_active = int(active.sum())
    if n_active == 0:
        return logits.sum() * 0.0
    work = flat_logits.float() if logits.dtype in _LOW_PRECISION else flat_logits
    logp = F.log_softmax(work, dim=-1)                                   # (B*T, V)
    safe = flat_targets.masked_fill(~active, 0)                          # (B*T,)
    picked = logp.gather(1, safe[:, None])[:, 0]                         # (B*T,)
    nll = torch.where(active, -picked, torch.zeros_like(picked))         # (B*T,)
    return (nll.sum() / n_active).to(logits.dtype)


def get_batch(data: Tensor, batch_size: int, seq_len: int,
              generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Random windows of a token stream: ``data (N,)`` -> inputs ``(B, T)`` and targets ``(B, T)``, long.

    Window starts are uniform in ``[0, N - T)``; ``targets[:, t] = data[start + t + 1]`` (already shifted,
    so ``model(x, y)`` needs no further shift). Raises ValueError if ``data`` is not a 1-D integer tensor,
    ``batch_size`` or ``seq_len`` is < 1, or ``N <= seq_len``.
    """
    _check_stream(data, batch_size, seq_len)
    starts = torch.randint(0, data.numel() - seq_len, (batch_size,),     # (B,)
                           generator=generator)
    offsets = torch.arange(seq_len)                                      # (T,)
    index = (starts[:, None] + offsets[None, :]).to(data.device)         # (B, T)
    return data[index].long(), data[index + 1].long()                    # (B, T), (B, T)


def train_gpt(model: GPT, data: Tensor, *, steps: int = 300, batch_size: int = 16, seq_len: int = 32,
              lr: float = 3e-3, grad_clip: float | None = 1.0, seed: int = 0) -> dict[str, list[float]]:
    """Train ``model`` on random windows of ``data`` with AdamW; returns a history dict.

    The history holds ``"losses"``: one float per step (the training loss of that step's batch); an
    implementation may add other keys.

    AdamW(lr, weight_decay=0) over the parameters that require grad (so a LoRA-wrapped model, #38, trains
    only its adapters); global-norm gradient clipping at ``grad_clip`` (None = off); batches drawn by
    ``get_batch`` from a generator seeded with ``seed``. The model is left in train mode.

    Raises ValueError, before any update, for ``steps < 1``, ``lr`` not finite and > 0, ``grad_clip <= 0``,
    ``seq_len`` above ``model.config.max_seq_len`` and everything ``get_batch`` raises.
    """
    _check_training(model, data, steps, batch_size, seq_len, lr, grad_clip)
    generator = torch.Generator().manual_seed(seed)
    params: Sequence[nn.Parameter] = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    model.train()
    losses: list[float] = []
    for _ in range(steps):
        x, y = get_batch(data, batch_size, seq_len, generator)           # (B, T), (B, T)
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        optimizer.step()
        losses.append(float(loss.detach()))
    return {"losses": losses}


def _check_targets(idx: Tensor, targets: Tensor | None) -> None:
    """ValueError unless ``idx`` (and ``targets``, when given) are 2-D integer tensors of one shape."""
    _check_ids(idx, "idx")
    if targets is not None:
        _check_ids(targets, "targets")
        if targets.shape != idx.shape:
            raise ValueError(f"targets shape {tuple(targets.shape)} must equal idx shape {tuple(idx.shape)}")


def _check_target_args(input_ids: Tensor, attention_mask: Tensor | None, prompt_lengths: Tensor | None) -> None:
    """ValueError for the argument errors :func:`make_next_token_targets` documents."""
    _check_ids(input_ids, "input_ids")
    B, T = input_ids.shape
    if T < 1:
        raise ValueError("input_ids must hold at least one position (T >= 1)")
    if attention_mask is not None and (attention_mask.is_floating_point() or attention_mask.shape != input_ids.shape):
        raise ValueError(f"attention_mask must be a bool|int mask of shape {(B, T)}, got {tuple(attention_mask.shape)}")
    if prompt_lengths is not None and (prompt_lengths.shape != (B,) or prompt_lengths.is_floating_point()
                                       or bool((prompt_lengths < 0).any())):
        raise ValueError(f"prompt_lengths must be a (B,) = ({B},) tensor of integers >= 0, got {prompt_lengths}")


def _check_loss_args(logits: Tensor, targets: Tensor, ignore_index: int) -> None:
    """ValueError for the argument errors :func:`lm_loss` documents."""
    if logits.dim() != 3 or not logits.is_floating_point():
        raise ValueError(f"logits must be a floating (B, T, V) tensor, got {logits.dtype} {tuple(logits.shape)}")
    _check_ids(targets, "targets")
    B, T, V = logits.shape
    if targets.shape != (B, T):
        raise ValueError(f"targets must be (B, T) = ({B}, {T}), got {tuple(targets.shape)}")
    active = targets[targets != ignore_index]
    if bool(((active < 0) | (active >= V)).any()):
        raise ValueError(f"targets must lie in [0, V={V}) or equal ignore_index={ignore_index}")


def _check_stream(data: Tensor, batch_size: int, seq_len: int) -> None:
    """ValueError for the argument errors :func:`get_batch` documents."""
    if not isinstance(data, Tensor) or data.dim() != 1 or data.is_floating_point() or data.dtype == torch.bool:
        raise ValueError("data must be a 1-D integer tensor of token ids")
    if batch_size < 1 or seq_len < 1:
        raise ValueError(f"batch_size and seq_len must be >= 1, got {batch_size} and {seq_len}")
    if data.numel() <= seq_len:
        raise ValueError(f"data has {data.numel()} tokens; it needs more than seq_len={seq_len}")


def _check_training(model: GPT, data: Tensor, steps: int, batch_size: int, seq_len: int, lr: float,
                    grad_clip: float | None) -> None:
    """ValueError, before any update, for the argument errors :func:`train_gpt` documents."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")
    if grad_clip is not None and not grad_clip > 0:
        raise ValueError(f"grad_clip must be > 0 or None, got {grad_clip!r}")
    if seq_len > model.config.max_seq_len:
        raise ValueError(f"seq_len={seq_len} exceeds model.config.max_seq_len={model.config.max_seq_len}")
    _check_stream(data, batch_size, seq_len)


def _check_config(config: GPTConfig) -> None:
    """ValueError naming the first invalid field of ``config``."""
    for name in ("vocab_size", "max_seq_len", "d_model", "n_heads", "n_layers"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"config.{name} must be an int >= 1, got {value!r}")
    if config.d_model % config.n_heads != 0:
        raise ValueError(f"config.n_heads={config.n_heads} must divide config.d_model={config.d_model}")
    if config.pos not in ("learned", "rope"):
        raise ValueError(f"config.pos must be 'learned' or 'rope', got {config.pos!r}")
    if config.pos == "rope" and (config.d_model // config.n_heads) % 2 != 0:
        raise ValueError(f"config.pos='rope' needs an even head width, got d_model/n_heads = "
                         f"{config.d_model // config.n_heads}")
    if config.ffn not in ("gelu", "swiglu"):
        raise ValueError(f"config.ffn must be 'gelu' or 'swiglu', got {config.ffn!r}")
    if config.norm not in ("layernorm", "rmsnorm"):
        raise ValueError(f"config.norm must be 'layernorm' or 'rmsnorm', got {config.norm!r}")
    if config.n_kv_heads is not None and (config.n_kv_heads < 1 or config.n_heads % config.n_kv_heads != 0):
        raise ValueError(f"config.n_kv_heads={config.n_kv_heads} must be >= 1 and divide n_heads={config.n_heads}")
    if not 0.0 <= config.dropout < 1.0:
        raise ValueError(f"config.dropout must be in [0, 1), got {config.dropout!r}")


def _check_ids(ids: Tensor, name: str) -> None:
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.is_floating_point() or ids.dtype == torch.bool:
        shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(f"{name} must be a 2-D integer (B, T) tensor of token ids, got {shape}")
