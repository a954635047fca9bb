"""CLIP in the style many people write it: norms by hand with a small eps guard, cross-entropy as
logsumexp minus the diagonal.

Plan: cosine logits = capped exp(logit_scale) times unit vectors' dot products; the loss is the mean of the
two directions' in-batch cross-entropies. Dividing by ``||x|| + 1e-8`` instead of ``F.normalize``'s
``max(||x||, eps)`` changes a logit by about 1e-8 relative, below float32's spacing, because the eps is
tiny beside any real embedding's norm. Test: orthonormal pairs give scale on the diagonal, 0 elsewhere.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

EPS = 1e-8


def _unit(x: Tensor) -> Tensor:
    return x / (x.pow(2).sum(-1, keepdim=True).sqrt() + EPS)  # (N, d)


def _scale(logit_scale: Tensor | float, max_scale: float) -> Tensor | float:
    if torch.is_tensor(logit_scale):
        return torch.clamp(torch.exp(logit_scale), max=max_scale)
    return min(math.exp(min(logit_scale, 50.0)), max_scale)


def clip_logits(image_emb: Tensor, text_emb: Tensor, logit_scale: Tensor | float,
                max_scale: float = 100.0) -> Tensor:
    """``(B, B_t)`` scaled cosines, in the dtype of ``image_emb``."""
    if image_emb.ndim != 2 or text_emb.ndim != 2 or image_emb.shape[1] != text_emb.shape[1] or max_scale <= 0:
        raise ValueError("clip_logits: need (B, d) and (B_t, d) embeddings and max_scale > 0")
    sims = torch.einsum("id,jd->ij", _unit(image_emb), _unit(text_emb.to(image_emb.dtype)))  # (B, B_t)
    return (_scale(logit_scale, max_scale) * sims).to(image_emb.dtype)


def clip_loss(image_emb: Tensor, text_emb: Tensor, logit_scale: Tensor | float,
              max_scale: float = 100.0) -> Tensor:
    """Symmetric InfoNCE over the in-batch pairs, a ``()`` tensor."""
    logits = clip_logits(image_emb, text_emb, logit_scale, max_scale)  # (B, B)
    wide = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    diag = wide.diagonal()  # (B,)
    rows = (wide.logsumexp(dim=1) - diag).mean()  # ()
    cols = (wide.logsumexp(dim=0) - diag).mean()  # ()
    return ((rows + cols) / 2).to(logits.dtype)


class CLIP(nn.Module):
    """Two encoders, linear projections without bias, a learned log inverse temperature."""

    def __init__(self, image_encoder: nn.Module, text_encoder: nn.Module, d_image: int, d_text: int,
                 d_embed: int, init_temperature: float = 0.07, max_scale: float = 100.0) -> None:
        super().__init__()
        self.image_encoder, self.text_encoder = image_encoder, text_encoder
        self.image_proj = nn.Linear(d_image, d_embed, bias=False)
        self.text_proj = nn.Linear(d_text, d_embed, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(-math.log(init_temperature)))  # ()
        self.max_scale = max_scale

    def encode_image(self, images: Tensor) -> Tensor:
        """``(B, d_embed)`` unit vectors."""
        return _unit(self.image_proj(self.image_encoder(images)))  # (B, d_embed)

    def encode_text(self, texts: Tensor) -> Tensor:
        """``(B, d_embed)`` unit vectors."""
        return _unit(self.text_proj(self.text_encoder(texts)))  # (B, d_embed)

    def forward(self, images: Tensor, texts: Tensor) -> tuple[Tensor, Tensor]:
        """``(loss, logits_per_image)``."""
        img, txt = self.encode_image(images), self.encode_text(texts)
        return (clip_loss(img, txt, self.logit_scale, self.max_scale),
                clip_logits(img, txt, self.logit_scale, self.max_scale))


def zero_shot_predict(image_emb: Tensor, class_emb: Tensor) -> Tensor:
    """``(N,)`` index of the most similar class embedding."""
    return (_unit(image_emb) @ _unit(class_emb.to(image_emb.dtype)).T).argmax(dim=1)  # (N,)


def retrieval_accuracy(logits: Tensor) -> tuple[float, float]:
    """Top-1 accuracy image -> text and text -> image of a paired ``(B, B)`` batch."""
    target = torch.arange(logits.shape[0])  # (B,)
    return ((logits.argmax(1) == target).double().mean().item(),
            (logits.argmax(0) == target).double().mean().item())
