"""CLIP-style contrastive learning: the similarity logits, the symmetric InfoNCE loss, a two-tower ...

Plan: L2-normalise both embeddings so the dot product is a cosine, multiply by a learned inverse
temperature exp(logit_scale) capped at 100 (an uncapped scale makes training unstable), and use the
in-batch pairs as the only positives: cross-entropy over rows (image -> text) and over columns
(text -> image), averaged. Zero-shot: nearest class-prompt embedding; retrieval: diagonal argmax.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["CLIP", "clip_logits", "clip_loss", "retrieval_accuracy", "zero_shot_predict"]


def clip_logits(image_emb: Tensor, text_emb: Tensor, logit_scale: Tensor | float,
                max_scale: float = 100.0) -> Tensor:
    """Scaled cosine similarities ``min(exp(logit_scale), max_scale) * norm(image) @ norm(text).T``: ``(B, B_t)``."""
    if isinstance(logit_scale, Tensor):
        scale = logit_scale.exp().clamp(max=max_scale)
    else:
        scale = math.exp(min(logit_scale, math.log(max_scale)))  # cap in log space: no overflow
    img = F.normalize(image_emb, dim=-1)  # (B, d)
    txt = F.normalize(text_emb, dim=-1)  # (B_t, d)
    logits = scale * (img @ txt.T)  # (B, B_t)
    return logits.to(image_emb.dtype)


def clip_loss(image_emb: Tensor, text_emb: Tensor, logit_scale: Tensor | float,
              max_scale: float = 100.0) -> Tensor:
    """Symmetric contrastive loss ``(CE(logits, arange(B)) + CE(logits.T, arange(B))) / 2``."""
    logits = clip_logits(image_emb, text_emb, logit_scale, max_scale)  # (B, B)
    labels = torch.arange(logits.shape[0], device=logits.device)
    work = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    loss = (F.cross_entropy(work, labels) + F.cross_entropy(work.T, labels)) / 2
    return loss.to(image_emb.dtype)


class CLIP(nn.Module):
    """Two towers, bias-free projections to ``d_embed``, unit-norm embeddings and a learned temperature."""

    def __init__(self, image_encoder: nn.Module, text_encoder: nn.Module, d_image: int, d_text: int,
                 d_embed: int, init_temperature: float = 0.07, max_scale: float = 100.0) -> None:
        super().__init__()
        self.image_encoder = image_encoder
        self.text_encoder = text_encoder
        self.image_proj = nn.Linear(d_image, d_embed, bias=False)
        self.text_proj = nn.Linear(d_text, d_embed, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1.0 / init_temperature), dtype=torch.float32))
        self.max_scale = max_scale

    def encode_image(self, images) -> Tensor:
        """Images -> ``(B, d_embed)`` unit-norm embeddings."""
        return F.normalize(self.image_proj(self.image_encoder(images)), dim=-1)

    def encode_text(self, texts) -> Tensor:
        """Texts -> ``(B, d_embed)`` unit-norm embeddings."""
        return F.normalize(self.text_proj(self.text_encoder(texts)), dim=-1)

    def forward(self, images, texts) -> tuple[Tensor, Tensor]:
        """Paired batches -> ``(loss (), logits_per_image (B, B))``."""
        img = self.encode_image(images)
        txt = self.encode_text(texts)
        logits = clip_logits(img, txt, self.logit_scale, self.max_scale)  # (B, B)
        loss = clip_loss(img, txt, self.logit_scale, self.max_scale)
        return loss, logits


def zero_shot_predict(image_emb: Tensor, class_emb: Tensor) -> Tensor:
    """Zero-shot classification: ``argmax_k cos(image_emb[n], class_emb[k])``, ``(N,)`` long."""
    sims = F.normalize(image_emb, dim=-1) @ F.normalize(class_emb, dim=-1).T  # (N, K)
    return sims.argmax(dim=-1)


def retrieval_accuracy(logits: Tensor) -> tuple[float, float]:
    """Top-1 retrieval accuracy of a paired batch in both directions: ``(image_to_text, text_to_image)``."""
    target = torch.arange(logits.shape[0], device=logits.device)
    i2t = (logits.argmax(dim=1) == target).float().mean().item()
    t2i = (logits.argmax(dim=0) == target).float().mean().item()
    return i2t, t2i
