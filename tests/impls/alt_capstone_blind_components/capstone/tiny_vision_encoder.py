# Blind alternative (capstone round, tester A, written from the stubs alone), with its variants optimizer varA
# (per-parameter state, torch-style in-place clip without the 1e-6, addcdiv; no steps_taken/exp_avg contract)
# and tiny_lm varB (SDPA, arithmetic bias, Gumbel sampling): must pass every test of capstone/agent.
"""Canon #60, part 2: a tiny ViT, patchify, embed, add positions, and run pre-norm encoder blocks.

Plan. ``patchify`` cuts the ``(B, C, H, W)`` image into ``N_v = (H / p)^2`` non-overlapping ``p x p``
patches in row-major order and flattens each as ``(C, p, p)``; a linear layer embeds each patch to
``d_v``, a learned position table ``(1, N_v, d_v)`` is added (attention is permutation-invariant, so
without it the model could not tell where a shape sits), then ``n_layers`` pre-norm blocks
``x = x + MHA(LN(x)); x = x + MLP(LN(x))`` and a final LayerNorm give ``(B, N_v, d_v)`` tokens.

Subtle point: patchify is a reshape ``(B, C, g, p, g, p)`` followed by a permute to
``(B, g, g, C, p, p)``; the permute makes the tensor non-contiguous, so the final flatten must be a
``reshape`` (a copy), never a ``.view``. Getting the axis order wrong still "works" shape-wise but mixes
pixels of different patches, which only a value test against a hand-made image catches.

Shapes: images ``(B, C, H, W)``, patches ``(B, N_v, C*p*p)``, tokens ``(B, N_v, d_v)``, attention scores
``(B, H_a, N_v, N_v)`` with ``H_a`` heads of width ``d_h = d_v / H_a``.

Trade-off: a ``Linear`` on flattened patches instead of a strided ``Conv2d``: identical maths (a conv
with kernel = stride = p), but the explicit patchify is testable on its own and reads as the ViT paper
writes it. No CLS token: the projector reads all patch tokens through cross-attention, so a pooled
summary is not needed. Attention is bidirectional (no mask): every patch may see every other.

Tests I would write: patchify of ``arange`` images equals a double loop over patches; output shape
``(B, 16, 32)`` for the default config; the final LayerNorm makes each token zero-mean; a bad image shape
or ``patch_size`` not dividing ``image_size`` raises ``ValueError``; permuting the batch permutes the output.
"""
# What the rubric reads: in the docstring above, your plan (what the module computes and its subtle
# point, the shapes, a trade-off: why this way rather than another, and what you would test); a
# docstring on every public function; a shape comment at the end of every line that creates,
# reshapes, contracts or reduces a tensor: `scores = q @ k.transpose(-2, -1)  # (B, H, T_q, T_k)`.

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class TinyVisionEncoder(nn.Module):
    """Tiny ViT: ``(B, C, H, W)`` images -> ``(B, N_v, d_v)`` visual tokens.

    Args:
        image_size: side ``H = W`` of the square input.
        patch_size: side ``p`` of a patch; must divide ``image_size``.
        in_channels: ``C``.
        d_v: token width; must be divisible by ``n_heads``.
        n_heads: attention heads.
        n_layers: encoder blocks, ``>= 1``.

    Attributes:
        n_tokens: ``N_v = (image_size // patch_size) ** 2``.

    Raises:
        ValueError: a non-positive size, ``patch_size`` not dividing ``image_size``, or ``d_v`` not
            divisible by ``n_heads``.
    """

    def __init__(self, image_size: int, patch_size: int, in_channels: int, d_v: int, n_heads: int,
                 n_layers: int) -> None:
        super().__init__()
        for name, value in (("image_size", image_size), ("patch_size", patch_size),
                            ("in_channels", in_channels), ("d_v", d_v), ("n_heads", n_heads),
                            ("n_layers", n_layers)):
            if value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        if image_size % patch_size != 0:
            raise ValueError(f"patch_size {patch_size} must divide image_size {image_size}")
        if d_v % n_heads != 0:
            raise ValueError(f"d_v {d_v} must be divisible by n_heads {n_heads}")
        self.image_size = image_size
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.grid = image_size // patch_size
        self.n_tokens = self.grid ** 2
        self.patch_embed = nn.Linear(in_channels * patch_size * patch_size, d_v)
        self.pos_embed = nn.Parameter(torch.randn(1, self.n_tokens, d_v) * 0.02)  # (1, N_v, d_v)
        self.blocks = nn.ModuleList(_EncoderBlock(d_v, n_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_v)

    def patchify(self, images: Tensor) -> Tensor:
        """``(B, C, H, W) -> (B, N_v, C*p*p)``, patches in row-major order, each flattened ``(C, p, p)``.

        Raises:
            ValueError: ``images`` is not ``(B, in_channels, image_size, image_size)``.
        """
        expected = (self.in_channels, self.image_size, self.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(f"images must be (B, {expected[0]}, {expected[1]}, {expected[2]}), "
                             f"got {tuple(images.shape)}")
        B, C, _, _ = images.shape
        g, p = self.grid, self.patch_size
        x = images.reshape(B, C, g, p, g, p)  # (B, C, g, p, g, p)
        x = x.permute(0, 2, 4, 1, 3, 5)  # (B, g, g, C, p, p)
        return x.reshape(B, g * g, C * p * p)  # (B, N_v, C*p*p)

    def forward(self, images: Tensor) -> Tensor:
        """``(B, C, H, W)`` float images -> ``(B, N_v, d_v)`` visual tokens (final LayerNorm applied)."""
        patches = self.patchify(images)  # (B, N_v, C*p*p)
        x = self.patch_embed(patches) + self.pos_embed  # (B, N_v, d_v)
        for block in self.blocks:
            x = block(x)  # (B, N_v, d_v)
        return self.norm(x)  # (B, N_v, d_v)


class _SelfAttention(nn.Module):
    """Bidirectional multi-head self-attention: ``(B, N, d) -> (B, N, d)``."""

    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_h = d // n_heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        """Softmax(Q K^T / sqrt(d_h)) V over all tokens, heads merged back to ``d``."""
        B, N, d = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.n_heads, self.d_h)  # (B, N, 3, H, d_h)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (B, H, N, d_h) each
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_h)  # (B, H, N, N)
        weights = torch.softmax(scores, dim=-1)
        ctx = weights @ v  # (B, H, N, d_h)
        ctx = ctx.transpose(1, 2).reshape(B, N, d)  # (B, N, d)
        return self.out(ctx)  # (B, N, d)


class _EncoderBlock(nn.Module):
    """Pre-norm transformer block: ``x + attn(LN(x))`` then ``x + MLP(LN(x))`` (4x GELU MLP)."""

    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = _SelfAttention(d, n_heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: Tensor) -> Tensor:
        """``(B, N, d) -> (B, N, d)``."""
        x = x + self.attn(self.ln1(x))  # (B, N, d)
        return x + self.mlp(self.ln2(x))  # (B, N, d)
