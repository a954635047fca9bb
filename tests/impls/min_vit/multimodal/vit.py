"""Canon #39: a tiny Vision Transformer (ViT): patchify, patch embedding, [CLS] or ...

Plan: cut the image into p x p patches and embed each with one linear map, implemented as a stride-p
Conv2d because that is the same linear map applied per patch; prepend a learned [CLS] token (or
mean-pool the patch tokens instead), add learned position embeddings, run pre-norm encoder blocks,
apply a final LayerNorm and classify from the pooled state.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from canon_refs.transformer.blocks import EncoderBlock

__all__ = ["PatchEmbedding", "ViT", "patchify"]


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut images into flattened non-overlapping patches: ``(B, C, H_in, W_in) -> (B, N, C*p*p)``."""
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p)  # (B, C, Gh, p, Gw, p)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, Gh, Gw, C, p, p)
    return x.reshape(B, (H // p) * (W // p), C * p * p)  # (B, N, C*p*p)


class PatchEmbedding(nn.Module):
    """Linear projection of flattened patches, as a strided convolution: ``(B, C, H_in, W_in) -> (B, N, d)``."""

    def __init__(self, image_size: int, patch_size: int, in_channels: int, d_model: int) -> None:
        super().__init__()
        self.image_size = image_size
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.n_patches = (image_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_channels, d_model, patch_size, stride=patch_size)

    def forward(self, images: Tensor) -> Tensor:
        """``images (B, C, H_in, W_in)`` -> ``(B, N, d)``, patches row-major."""
        return self.proj(images).flatten(2).transpose(1, 2)  # (B, N, d)


class ViT(nn.Module):
    """Vision Transformer classifier: ``(B, C, H_in, W_in) -> (B, K)`` logits."""

    def __init__(self, image_size: int, patch_size: int, in_channels: int, n_classes: int,
                 d_model: int = 64, n_heads: int = 4, n_layers: int = 2, d_ff: int | None = None,
                 dropout: float = 0.0, pool: Literal["cls", "mean"] = "cls") -> None:
        super().__init__()
        self.pool = pool
        self.patch_embed = PatchEmbedding(image_size, patch_size, in_channels, d_model)
        n_tokens = self.patch_embed.n_patches
        if pool == "cls":
            self.cls_token = nn.Parameter(torch.randn(1, 1, d_model) * 0.02)
            n_tokens += 1
        else:
            self.cls_token = None
        self.pos_emb = nn.Parameter(torch.randn(1, n_tokens, d_model) * 0.02)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([EncoderBlock(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_classes)

    def forward_features(self, images: Tensor) -> Tensor:
        """Token states after the final norm: ``(B, N + 1, d)`` ([CLS] first) or ``(B, N, d)``."""
        x = self.patch_embed(images)  # (B, N, d)
        if self.cls_token is not None:
            cls = self.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, d)
            x = torch.cat([cls, x], dim=1)  # (B, N + 1, d)
        x = self.drop(x + self.pos_emb)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward(self, images: Tensor) -> Tensor:
        """Class logits ``(B, K)`` from the [CLS] state or the mean patch state."""
        h = self.forward_features(images)
        pooled = h[:, 0] if self.cls_token is not None else h.mean(dim=1)  # (B, d)
        return self.head(pooled)  # (B, K)
