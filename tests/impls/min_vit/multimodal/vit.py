"""Canon #39: a tiny Vision Transformer (ViT): patchify, patch embedding, [CLS] or ...

TODO: your plan (not implemented yet).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from canon_refs.transformer.blocks import EncoderBlock

__all__ = ["PatchEmbedding", "ViT", "patchify"]


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut images into flattened non-overlapping patches: ``(B, C, H_in, W_in) -> (B, N, C*p*p)``.

    Patches are ordered row-major over the ``(H_in/p, W_in/p)`` grid; inside a patch the values are in
    ``(c, i, j)`` order, the order of ``nn.Conv2d(C, d, p, stride=p).weight.reshape(d, -1)``. Keeps the dtype.

    Raises:
        ValueError: ``images`` not 4-D; ``patch_size < 1`` or not dividing ``H_in`` and ``W_in``.
    """
    raise NotImplementedError("patchify: not implemented yet")


class PatchEmbedding(nn.Module):
    """Linear projection of flattened patches, as a strided convolution: ``(B, C, H_in, W_in) -> (B, N, d)``.

    Args:
        image_size: side ``H_in = W_in`` of the square input images.
        patch_size: side ``p``; must divide ``image_size``.
        in_channels: ``C``.
        d_model: embedding width ``d``.

    Attributes: ``proj`` (``nn.Conv2d(C, d, p, stride=p)``), ``n_patches`` (``(image_size / p)**2``),
    ``image_size``, ``patch_size``, ``in_channels``. Float32 parameters.
    Raises ValueError for ``image_size % patch_size != 0`` or a non-positive size.
    Source: Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words", eq. 1.
    """

    def __init__(self, image_size: int, patch_size: int, in_channels: int, d_model: int) -> None:
        raise NotImplementedError("PatchEmbedding.__init__: not implemented yet")

    def forward(self, images: Tensor) -> Tensor:
        """``images (B, C, H_in, W_in)`` -> ``(B, N, d)``, patches row-major as in :func:`patchify`.

        Raises ValueError when ``images`` is not ``(B, in_channels, image_size, image_size)``.
        """
        raise NotImplementedError("PatchEmbedding.forward: not implemented yet")


class ViT(nn.Module):
    """Vision Transformer classifier: ``(B, C, H_in, W_in) -> (B, K)`` logits.

    Args:
        image_size, patch_size, in_channels: as :class:`PatchEmbedding`.
        n_classes: ``K``.
        d_model, n_heads, n_layers, d_ff, dropout: encoder width, heads, depth, FFN width (default 4d),
            dropout (after the position embeddings and inside the blocks).
        pool: ``"cls"`` (read the prepended [CLS] token) or ``"mean"`` (mean of the patch tokens, no [CLS]).

    Attributes: ``patch_embed``; ``cls_token`` (``(1, 1, d)``, or None with mean pooling); ``pos_emb``
    (``(1, N + 1, d)`` with [CLS], ``(1, N, d)`` with mean pooling); ``blocks`` (``ModuleList`` of pre-norm
    ``EncoderBlock``); ``norm`` (``nn.LayerNorm(d)``); ``head`` (``nn.Linear(d, K)``). [CLS] and positions
    are initialised ``N(0, 0.02)``; float32.
    Raises ValueError for an unknown ``pool``, ``image_size % patch_size != 0`` and invalid sizes.
    Source: Dosovitskiy et al. 2021, section 3.1.
    """

    def __init__(self, image_size: int, patch_size: int, in_channels: int, n_classes: int,
                 d_model: int = 64, n_heads: int = 4, n_layers: int = 2, d_ff: int | None = None,
                 dropout: float = 0.0, pool: Literal["cls", "mean"] = "cls") -> None:
        raise NotImplementedError("ViT.__init__: not implemented yet")

    def forward_features(self, images: Tensor) -> Tensor:
        """Token states after the final norm: ``(B, C, H_in, W_in) -> (B, N + 1, d)`` ([CLS] first) or ``(B, N, d)``.

        Raises ValueError for images of the wrong size or channel count (see :class:`PatchEmbedding`).
        """
        raise NotImplementedError("ViT.forward_features: not implemented yet")

    def forward(self, images: Tensor) -> Tensor:
        """Class logits ``(B, K)`` from the [CLS] state or the mean patch state.

        Raises ValueError for images of the wrong size or channel count.
        """
        raise NotImplementedError("ViT.forward: not implemented yet")
