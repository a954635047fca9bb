"""Alternative CLIP (canon #41): einsum similarities, normalisation by rsqrt, the cross-entropy written
with logsumexp, and the scale computed as ``exp(logit_scale).clamp(max=max_scale)``.

Differences from the reference: no ``F.normalize`` and no ``F.cross_entropy``; the symmetric loss is
``mean(logsumexp over rows) + mean(logsumexp over columns)`` minus twice the mean diagonal, halved,
which is the same quantity, because the diagonal term is shared by both directions.

Shape letters: ``B`` images, ``B_t`` texts, ``d`` width, ``N`` images and ``K`` classes in zero-shot.
What to test: the same checks as the reference.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def _unit(x: Tensor) -> Tensor:
    return x * torch.rsqrt(x.pow(2).sum(dim=-1, keepdim=True).clamp_min(1e-24))


def _check(a: Tensor, b: Tensor, name_b: str) -> None:
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"image_emb and {name_b} must be 2-D")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"{name_b} width {b.shape[1]} differs from image_emb width {a.shape[1]}")


def clip_logits(image_emb: Tensor, text_emb: Tensor, logit_scale: Tensor | float,
                max_scale: float = 100.0) -> Tensor:
    """``(B, d), (B_t, d) -> (B, B_t)`` capped-scale cosine similarities."""
    _check(image_emb, text_emb, "text_emb")
    if not max_scale > 0:
        raise ValueError("max_scale must be > 0")
    scale = torch.as_tensor(logit_scale, dtype=image_emb.dtype).exp().clamp(max=max_scale)  # ()
    return scale * torch.einsum("id,jd->ij", _unit(image_emb), _unit(text_emb.to(image_emb.dtype)))  # (B, B_t)


def clip_loss(image_emb: Tensor, text_emb: Tensor, logit_scale: Tensor | float,
              max_scale: float = 100.0) -> Tensor:
    """``(B, d), (B, d) -> ()`` symmetric InfoNCE."""
    _check(image_emb, text_emb, "text_emb")
    if image_emb.shape[0] != text_emb.shape[0] or image_emb.shape[0] == 0:
        raise ValueError("text_emb must pair one-to-one with image_emb, and B must be >= 1")
    logits = clip_logits(image_emb, text_emb, logit_scale, max_scale)  # (B, B)
    diag = logits.diagonal().mean()                                  # ()
    rows = torch.logsumexp(logits, dim=1).mean()                     # ()
    cols = torch.logsumexp(logits, dim=0).mean()                     # ()
    return (rows + cols) / 2 - diag


class CLIP(nn.Module):
    """Two towers with bias-free projections and a learned, capped temperature."""

    def __init__(self, image_encoder: nn.Module, text_encoder: nn.Module, d_image: int, d_text: int,
                 d_embed: int, init_temperature: float = 0.07, max_scale: float = 100.0) -> None:
        super().__init__()
        if init_temperature <= 0:
            raise ValueError("init_temperature must be > 0")
        if max_scale <= 0:
            raise ValueError("max_scale must be > 0")
        self.image_encoder, self.text_encoder = image_encoder, text_encoder
        self.image_proj = nn.Linear(d_image, d_embed, bias=False)
        self.text_proj = nn.Linear(d_text, d_embed, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(-math.log(init_temperature)))  # ()
        self.max_scale = max_scale

    def encode_image(self, images) -> Tensor:
        """``(B, d_embed)`` unit vectors."""
        return _unit(self.image_proj(self.image_encoder(images)))  # (B, d_embed)

    def encode_text(self, texts) -> Tensor:
        """``(B, d_embed)`` unit vectors."""
        return _unit(self.text_proj(self.text_encoder(texts)))  # (B, d_embed)

    def forward(self, images, texts) -> tuple[Tensor, Tensor]:
        """``(loss, logits_per_image)``."""
        img, txt = self.encode_image(images), self.encode_text(texts)
        return (clip_loss(img, txt, self.logit_scale, self.max_scale),
                clip_logits(img, txt, self.logit_scale, self.max_scale))


def zero_shot_predict(image_emb: Tensor, class_emb: Tensor) -> Tensor:
    """``(N, d), (K, d) -> (N,)`` long, the most similar class."""
    _check(image_emb, class_emb, "class_emb")
    return torch.einsum("nd,kd->nk", image_emb, _unit(class_emb.to(image_emb.dtype))).argmax(dim=1)  # (N,)


def retrieval_accuracy(logits: Tensor) -> tuple[float, float]:
    """``(B, B) -> (image->text, text->image)`` top-1 accuracy."""
    if logits.ndim != 2 or logits.shape[0] != logits.shape[1] or logits.shape[0] == 0:
        raise ValueError("logits must be a non-empty square matrix")
    hits = torch.arange(logits.shape[0])                             # (B,)
    return (float((logits.max(dim=1).indices == hits).float().mean()),
            float((logits.max(dim=0).indices == hits).float().mean()))
