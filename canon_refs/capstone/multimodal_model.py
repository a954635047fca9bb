"""Canon #60, part 5: the VLM, splicing ``N_q`` visual tokens in front of ``T`` text tokens.

``TinyVLM`` is the LLaVA recipe at toy size: a vision encoder turns the image into ``N_v`` patch
tokens, the projector maps them to ``N_q`` tokens in the LM's embedding space, and the causal LM reads
``[visual tokens ; text embeddings]`` as one sequence of length ``S = N_q + T``. Nothing is frozen.

The subtle point is bookkeeping, and it is done explicitly:

* position ids are ``arange(S)``: the visual tokens sit at ``0 .. N_q - 1``, the text at
  ``N_q .. N_q + T - 1``;
* the attention mask is the text mask with ``N_q`` ones in front, because an image is never padding;
* ``logits[:, i]`` predicts the token at ``i + 1``, so the logit that scores text token ``t`` sits at
  ``N_q + t - 1``. The slice ``logits[:, N_q - 1 : N_q - 1 + T]`` in :meth:`TinyVLM.text_logits`
  undoes the visual offset and the next-token shift in one step. Off by one, the model still trains,
  just to copy the current token instead of predicting the next (or to predict the token after next),
  and the loss curve looks fine.

Entry 0 of ``text_logits`` is scored from the last visual token and scores the first text token; it is
never supervised here (the first text token is part of the question), but the indexing stays uniform.

Shapes: ``B`` batch, ``C, H, W`` image, ``N_v`` patches, ``N_q`` visual tokens, ``T`` text tokens
(``T_p`` a prompt), ``S = N_q + T``, ``d`` LM width, ``V`` vocabulary.

Trade-off: :meth:`TinyVLM.generate` re-runs the full forward pass for each new token instead of
keeping a KV cache, because answers here are one or two tokens: a cache would save one forward of a
sequence of about 20 tokens and add a second code path to get wrong.

What to test: :meth:`TinyVLM.build_inputs` shapes, the ``N_q`` leading ones of the mask and
``position_ids == arange(S)``; ``text_logits == forward(...)[:, N_q - 1 : N_q - 1 + T]`` exactly (a
learner's slice shifted by one fails with the offset named); ``generate`` returns ``(B,
max_new_tokens)`` and keeps emitting ``eos_id`` after a row finishes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from canon_refs.capstone.projector import Projector
from canon_refs.capstone.tiny_lm import TinyCausalLM, sample_next_token
from canon_refs.capstone.tiny_vision_encoder import TinyVisionEncoder


class TinyVLM(nn.Module):
    """Vision encoder + projector + causal LM, trained end to end.

    Args:
        vocab_size: ``V``.
        image_size, patch_size, in_channels, d_v, vision_heads, vision_layers: the vision encoder.
        d_llm, lm_heads, lm_layers: the language model (``d_llm`` divisible by ``lm_heads`` and by the
            projector's 4 heads).
        n_query_tokens: ``N_q``, visual tokens after the projector.
        max_text_len: longest text (prompt plus answer) the position table covers; the table has
            ``N_q + max_text_len`` rows.

    Raises:
        ValueError: from the parts, for a non-positive size or an indivisible width.
    """

    def __init__(self, vocab_size: int, image_size: int = 16, patch_size: int = 4, in_channels: int = 3,
                 d_v: int = 32, vision_heads: int = 2, vision_layers: int = 2, d_llm: int = 48,
                 lm_heads: int = 4, lm_layers: int = 2, n_query_tokens: int = 8,
                 max_text_len: int = 16) -> None:
        super().__init__()
        if not isinstance(max_text_len, int) or max_text_len < 1:
            raise ValueError(f"max_text_len must be a positive int, got {max_text_len!r}")
        self.vision = TinyVisionEncoder(image_size, patch_size, in_channels, d_v, vision_heads, vision_layers)
        self.projector = Projector(d_v, d_llm, self.vision.n_tokens, n_query_tokens)
        self.lm = TinyCausalLM(vocab_size, d_llm, lm_heads, lm_layers, n_query_tokens + max_text_len)
        self.n_query_tokens = n_query_tokens
        self.max_text_len = max_text_len
        self.vocab_size = vocab_size

    def visual_embeds(self, images: Tensor) -> Tensor:
        """``(B, C, H, W)`` images -> ``(B, N_q, d)`` visual tokens the LM consumes."""
        patches = self.vision(images)                                    # (B, N_v, d_v)
        return self.projector(patches)                                   # (B, N_q, d)

    def build_inputs(self, images: Tensor, input_ids: Tensor,
                     attention_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Splice the modalities: ``(inputs_embeds (B, S, d), attention_mask (B, S), position_ids (B, S))``.

        ``attention_mask`` (``(B, T)``, 0/1, default all ones) gets ``N_q`` leading ones, in its own
        dtype; ``position_ids`` is ``arange(S)`` on every row.

        Raises:
            ValueError: ``input_ids`` not a 2-D integer tensor, longer than ``max_text_len``, or with an
                id outside the vocabulary; ``images`` or ``attention_mask`` with another batch or length.
        """
        if input_ids.ndim != 2 or input_ids.is_floating_point():
            raise ValueError(f"input_ids must be a (B, T) integer tensor, got {input_ids.dtype} {tuple(input_ids.shape)}")
        B, T = input_ids.shape
        if T > self.max_text_len:
            raise ValueError(f"input_ids has T={T} tokens, more than max_text_len={self.max_text_len}")
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= self.vocab_size):
            raise ValueError(f"input_ids must lie in [0, {self.vocab_size})")
        if images.ndim != 4 or images.shape[0] != B:
            raise ValueError(f"images must be (B={B}, C, H, W), got {tuple(images.shape)}")
        if attention_mask is None:
            attention_mask = torch.ones(B, T, dtype=torch.long, device=input_ids.device)  # (B, T)
        elif tuple(attention_mask.shape) != (B, T):
            raise ValueError(f"attention_mask must be ({B}, {T}) like input_ids, got {tuple(attention_mask.shape)}")
        visual = self.visual_embeds(images)                              # (B, N_q, d)
        text = self.lm.embed_tokens(input_ids)                           # (B, T, d)
        inputs_embeds = torch.cat([visual, text], dim=1)                 # (B, S, d)
        visual_mask = attention_mask.new_ones(B, self.n_query_tokens)    # (B, N_q)
        full_mask = torch.cat([visual_mask, attention_mask], dim=1)      # (B, S)
        S = self.n_query_tokens + T
        position_ids = torch.arange(S, device=input_ids.device).expand(B, S)  # (B, S)
        return inputs_embeds, full_mask, position_ids

    def hidden_states(self, images: Tensor, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """``(B, S, d)`` final hidden states of the spliced sequence."""
        inputs_embeds, full_mask, position_ids = self.build_inputs(images, input_ids, attention_mask)
        return self.lm.encode(inputs_embeds, full_mask, position_ids)    # (B, S, d)

    def forward(self, images: Tensor, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """``(B, S, V)`` logits over the spliced sequence; entry ``i`` scores the token at ``i + 1``."""
        hidden = self.hidden_states(images, input_ids, attention_mask)   # (B, S, d)
        return self.lm.lm_head(hidden)                                   # (B, S, V)

    def text_logits(self, images: Tensor, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Teacher-forcing view ``(B, T, V)``: entry ``t`` is the logit row that scores text token ``t``.

        It is ``forward(...)[:, N_q - 1 : N_q - 1 + T]``: ``N_q`` for the visual prefix, ``- 1`` for the
        next-token shift.
        """
        logits = self(images, input_ids, attention_mask)                 # (B, S, V)
        T = input_ids.shape[1]
        start = self.n_query_tokens - 1
        return logits[:, start:start + T, :]                             # (B, T, V)

    @torch.no_grad()
    def generate(self, images: Tensor, prompt_ids: Tensor, max_new_tokens: int = 2, greedy: bool = True,
                 temperature: float = 1.0, top_k: int | None = None, eos_id: int | None = None,
                 attention_mask: Tensor | None = None, generator: torch.Generator | None = None) -> Tensor:
        """Continue ``(B, T_p)`` prompts by ``max_new_tokens`` tokens: returns ``(B, max_new_tokens)`` new ids.

        The next token is scored by the *last* logit of the spliced sequence, so rows of a batch must
        share a prompt length (or be left-padded, with ``attention_mask`` marking the padding). Once a
        row emits ``eos_id`` it keeps emitting ``eos_id``.

        Raises:
            ValueError: ``max_new_tokens < 1`` or a prompt too long for ``max_text_len``; the
                sampler's errors (``temperature``, ``top_k``).
        """
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        if prompt_ids.ndim != 2 or prompt_ids.shape[1] + max_new_tokens > self.max_text_len:
            raise ValueError(f"prompt_ids {tuple(prompt_ids.shape)} plus max_new_tokens={max_new_tokens} "
                             f"exceeds max_text_len={self.max_text_len}")
        ids = prompt_ids                                                 # (B, T_p)
        mask = torch.ones_like(ids) if attention_mask is None else attention_mask  # (B, T_p)
        finished = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)  # (B,)
        new_tokens = []
        for _ in range(max_new_tokens):
            last = self(images, ids, mask)[:, -1, :]                     # (B, V)
            next_id = sample_next_token(last, greedy, temperature, top_k, generator)  # (B,)
            if eos_id is not None:
                next_id = next_id.masked_fill(finished, eos_id)          # (B,)
                finished = finished | (next_id == eos_id)                # (B,)
            new_tokens.append(next_id)
            ids = torch.cat([ids, next_id[:, None]], dim=1)              # (B, T_cur)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)  # (B, T_cur)
        return torch.stack(new_tokens, dim=1)                            # (B, max_new_tokens)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (``requires_grad``) of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
