"""CLIP-style contrastive learning: the similarity logits, the symmetric InfoNCE loss, a two-tower ...

TODO: your plan (not implemented yet).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["CLIP", "clip_logits", "clip_loss", "retrieval_accuracy", "zero_shot_predict"]


def clip_logits(image_emb: Tensor, text_emb: Tensor, logit_scale: Tensor | float,
                max_scale: float = 100.0) -> Tensor:
    """Scaled cosine similarities ``min(exp(logit_scale), max_scale) * norm(image) @ norm(text).T``.

    Args:
        image_emb: ``(B, d)`` image embeddings (any norm; normalised here).
        text_emb: ``(B_t, d)`` text embeddings (any norm; normalised here).
        logit_scale: ``()`` tensor (a parameter; gradients flow through it below the cap) or float.
        max_scale: the cap on ``exp(logit_scale)`` (> 0).

    Returns:
        ``(B, B_t)`` logits in the dtype of ``image_emb``; entry ``(i, j)`` scores image ``i`` against
        text ``j``.

    Raises:
        ValueError: an embedding is not 2-D floating, the widths differ, ``max_scale <= 0``.

    Source: Radford et al., "Learning Transferable Visual Models From Natural Language Supervision"
    (2021), Figure 3 pseudocode.
    """
    raise NotImplementedError("clip_logits: not implemented yet")


def clip_loss(image_emb: Tensor, text_emb: Tensor, logit_scale: Tensor | float,
              max_scale: float = 100.0) -> Tensor:
    """Symmetric contrastive loss ``(CE(logits, arange(B)) + CE(logits.T, arange(B))) / 2``.

    Args:
        image_emb: ``(B, d)`` image embeddings; row ``i`` is paired with ``text_emb[i]``.
        text_emb: ``(B, d)`` text embeddings.
        logit_scale: ``()`` tensor or float, the log of the inverse temperature.
        max_scale: the cap on ``exp(logit_scale)``.

    Returns:
        ``()`` loss in the dtype of ``image_emb`` (0 for B = 1: a single pair is always "retrieved").

    Raises:
        ValueError: widths differ, ``B != B_t``, ``B = 0``, ``max_scale <= 0``.

    Source: Radford et al. (2021), Figure 3 (``loss = (loss_i + loss_t) / 2``); InfoNCE (van den Oord et
    al., 2018).
    """
    raise NotImplementedError("clip_loss: not implemented yet")


class CLIP(nn.Module):
    """Two towers, bias-free projections to ``d_embed``, unit-norm embeddings and a learned temperature.

    Args:
        image_encoder: maps a batch of images to ``(B, d_image)`` features.
        text_encoder: maps a batch of texts (e.g. ``(B,)`` or ``(B, T)`` token ids) to ``(B, d_text)``.
        d_image, d_text, d_embed: widths (>= 1).
        init_temperature: initial temperature ``tau`` (> 0); ``logit_scale`` starts at ``ln(1 / tau)``
            (2.659260036932778 for 0.07).
        max_scale: cap on ``exp(logit_scale)`` (> 0).

    Attributes:
        image_proj, text_proj: ``nn.Linear`` without bias, ``d_image -> d_embed`` and ``d_text -> d_embed``.
        logit_scale: ``()`` float32 ``nn.Parameter``.

    Raises:
        ValueError: in ``__init__``, a width < 1, ``init_temperature <= 0`` or ``max_scale <= 0``.

    Source: Radford et al. (2021), Sec. 2.5 (temperature initialised to 0.07, clipped at 100).
    """

    def __init__(self, image_encoder: nn.Module, text_encoder: nn.Module, d_image: int, d_text: int,
                 d_embed: int, init_temperature: float = 0.07, max_scale: float = 100.0) -> None:
        raise NotImplementedError("CLIP.__init__: not implemented yet")

    def encode_image(self, images) -> Tensor:
        """Images -> ``(B, d_embed)`` unit-norm embeddings."""
        raise NotImplementedError("CLIP.encode_image: not implemented yet")

    def encode_text(self, texts) -> Tensor:
        """Texts -> ``(B, d_embed)`` unit-norm embeddings."""
        raise NotImplementedError("CLIP.encode_text: not implemented yet")

    def forward(self, images, texts) -> tuple[Tensor, Tensor]:
        """Paired batches -> ``(loss (), logits_per_image (B, B))``; ``logits_per_image[i, j]`` scores
        image ``i`` against text ``j`` (its transpose is ``logits_per_text``)."""
        raise NotImplementedError("CLIP.forward: not implemented yet")


def zero_shot_predict(image_emb: Tensor, class_emb: Tensor) -> Tensor:
    """Zero-shot classification: each image takes the class whose (normalised) embedding is most similar.

    Args:
        image_emb: ``(N, d)`` image embeddings.
        class_emb: ``(K, d)`` embeddings of one prompt per class ("a photo of a {class}").

    Returns:
        ``(N,)`` long class indices, ``argmax_k cos(image_emb[n], class_emb[k])``.

    Raises:
        ValueError: an input is not 2-D floating, or the widths differ.

    Source: Radford et al. (2021), Sec. 3.1.2.
    """
    raise NotImplementedError("zero_shot_predict: not implemented yet")


def retrieval_accuracy(logits: Tensor) -> tuple[float, float]:
    """Top-1 retrieval accuracy of a paired batch in both directions.

    Args:
        logits: ``(B, B)`` similarities, entry ``(i, j)`` = image ``i`` vs text ``j``; pair ``i`` is the
            diagonal.

    Returns:
        ``(image_to_text, text_to_image)``: the fraction of rows whose argmax is the diagonal, and the
        fraction of columns whose argmax is the diagonal, as Python floats in [0, 1].

    Raises:
        ValueError: ``logits`` is not a square, non-empty 2-D tensor.

    Source: standard recall@1 of image-text retrieval (Radford et al., 2021, Sec. 3.1.4).
    """
    raise NotImplementedError("retrieval_accuracy: not implemented yet")
