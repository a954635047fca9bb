"""Alternative tiny ViT (canon #39), written differently from the reference.

* ``patchify`` uses ``F.unfold`` (im2col with kernel = stride = p), whose column order is already
  ``(c, i, j)`` and whose patch order is row-major, instead of reshape + permute.
* ``PatchEmbedding`` keeps the ``Conv2d`` parameters but applies them as ``patchify(x) @ W^T + b``.
* Mean pooling is ``sum / N``; the [CLS] token is prepended with ``repeat``.

Shapes: ``B`` batch, ``C`` channels, ``p`` patch side, ``N`` patches, ``d`` width, ``K`` classes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from canon_refs.transformer.blocks import EncoderBlock


def patchify(images, patch_size):
    """(B, C, H, W) -> (B, N, C*p*p) via unfold."""
    if images.dim() != 4:
        raise ValueError("images must be 4-D")
    H, W = images.shape[-2:]
    if patch_size < 1 or H % patch_size or W % patch_size:
        raise ValueError("patch_size must divide the image size")
    cols = F.unfold(images.double(), kernel_size=patch_size, stride=patch_size)  # (B, C*p*p, N)
    return cols.transpose(1, 2).to(images.dtype)                       # (B, N, C*p*p)


class PatchEmbedding(nn.Module):
    """Conv2d parameters applied as a matmul on patchify's output."""

    def __init__(self, image_size, patch_size, in_channels, d_model):
        super().__init__()
        if image_size % patch_size:
            raise ValueError("patch_size must divide image_size")
        self.image_size, self.patch_size, self.in_channels = image_size, patch_size, in_channels
        self.n_patches = (image_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_channels, d_model, patch_size, stride=patch_size)

    def forward(self, images):
        """(B, C, H, W) -> (B, N, d)."""
        if images.dim() != 4 or images.shape[1:] != (self.in_channels, self.image_size, self.image_size):
            raise ValueError("images have the wrong channels or size")
        d = self.proj.out_channels
        weight = self.proj.weight.reshape(d, -1)                        # (d, C*p*p)
        return patchify(images, self.patch_size) @ weight.T + self.proj.bias  # (B, N, d)


class ViT(nn.Module):
    """Tiny ViT with [CLS] or mean pooling."""

    def __init__(self, image_size, patch_size, in_channels, n_classes, d_model=64, n_heads=4, n_layers=2,
                 d_ff=None, dropout=0.0, pool="cls"):
        super().__init__()
        if pool not in ("cls", "mean"):
            raise ValueError("pool must be 'cls' or 'mean'")
        self.pool = pool
        self.patch_embed = PatchEmbedding(image_size, patch_size, in_channels, d_model)
        n = self.patch_embed.n_patches
        if pool == "cls":
            self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model).normal_(std=0.02))  # (1, 1, d)
            n += 1
        else:
            self.cls_token = None
        self.pos_emb = nn.Parameter(torch.zeros(1, n, d_model).normal_(std=0.02))  # (1, n, d)
        self.blocks = nn.ModuleList([EncoderBlock(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_classes)
        self.dropout = nn.Dropout(dropout)

    def forward_features(self, images):
        """(B, C, H, W) -> (B, N(+1), d) after the final norm."""
        tokens = self.patch_embed(images)                              # (B, N, d)
        if self.cls_token is not None:
            cls = self.cls_token.repeat(tokens.size(0), 1, 1)          # (B, 1, d)
            tokens = torch.cat((cls, tokens), dim=1)                   # (B, N + 1, d)
        tokens = self.dropout(tokens + self.pos_emb)
        for blk in self.blocks:
            tokens = blk(tokens)
        return self.norm(tokens)

    def forward(self, images):
        """(B, C, H, W) -> (B, K)."""
        feats = self.forward_features(images)
        if self.pool == "cls":
            return self.head(feats[:, 0])                              # (B, K)
        return self.head(feats.sum(dim=1) / feats.size(1))             # (B, K)
