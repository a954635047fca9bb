"""Reference tests for #39, the tiny Vision Transformer (docs/contract.md #39). The blocks are the EncoderBlock of #29."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from canon_refs.multimodal import vit
from canon_refs.transformer import blocks
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    randn,
)

#: float32 ViT compositions (d = 16, FFN width 64): 16 ulps times a condition of 64.
COND = 64.0

pytestmark = pytest.mark.canon("multimodal/vit")

TRAIN_SEED = 0
TRAIN_STEPS = 300
MIN_TEST_ACCURACY = 0.9  # the reference reaches 0.969-1.000 on seeds 0-4 (>= 0.9 after 100-150 steps); 2.5-2.9 s CPU


def _tiny_vit(pool: str = "cls", seed: int = 0, **kw) -> vit.ViT:
    torch.manual_seed(seed)
    return vit.ViT(16, 4, 3, 5, d_model=16, n_heads=2, n_layers=2, pool=pool, **kw)


def quadrant_images(n: int, gen: torch.Generator, noise: float = 0.2, side: int = 4):
    """``n`` 1-channel 16x16 images of noise with a bright ``side x side`` square (+1) placed at a random
    offset inside one of the four 8x8 quadrants; the label is the quadrant (0 top-left, 1 top-right,
    2 bottom-left, 3 bottom-right). The square often straddles patch borders."""
    labels = torch.randint(0, 4, (n,), generator=gen)
    images = noise * torch.randn(n, 1, 16, 16, generator=gen)
    offset = torch.randint(0, 8 - side + 1, (n, 2), generator=gen)
    top = (labels // 2) * 8 + offset[:, 0]
    left = (labels % 2) * 8 + offset[:, 1]
    r = torch.arange(16)
    in_rows = (r[None, :] >= top[:, None]) & (r[None, :] < top[:, None] + side)
    in_cols = (r[None, :] >= left[:, None]) & (r[None, :] < left[:, None] + side)
    square = (in_rows[:, :, None] & in_cols[:, None, :]).float()
    return images + square[:, None], labels


# --- patchify and the patch embedding ------------------------------------------------------------------


def test_patchify_quoted_example():
    images = torch.arange(16.0).reshape(1, 1, 4, 4)
    patches = vit.patchify(images, 2)
    assert patches.shape == (1, 4, 4)
    assert patches.tolist() == [[[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]]]


def test_patchify_channel_order_is_c_i_j():
    images = randn(2, 3, 6, 4, seed=1)
    patches = vit.patchify(images, 2)
    assert patches.shape == (2, 6, 12)  # N = (6/2)(4/2) = 6 patches of 3*2*2 values
    # patch (row 1, col 0) is index 1*2 + 0 = 2; inside it, channel-major then rows then columns
    assert torch.equal(patches[:, 2], images[:, :, 2:4, 0:2].reshape(2, -1))
    assert torch.equal(patches[:, 5], images[:, :, 4:6, 2:4].reshape(2, -1))


def test_patch_embedding_equals_patchify_times_conv_weight():
    torch.manual_seed(0)
    embed = vit.PatchEmbedding(16, 4, 3, 8)
    assert isinstance(embed.proj, nn.Conv2d)
    assert embed.proj.kernel_size == (4, 4) and embed.proj.stride == (4, 4)
    assert embed.n_patches == 16
    images = randn(2, 3, 16, 16, seed=2)
    out = embed(images)
    assert out.shape == (2, 16, 8)
    W = embed.proj.weight.reshape(8, -1)
    manual = vit.patchify(images, 4) @ W.T + embed.proj.bias
    assert_close(out, manual, cond=48.0, what="PatchEmbedding vs patchify @ conv weight")


# --- the model --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_vit_shapes_and_parameters(pool):
    model = _tiny_vit(pool)
    images = randn(3, 3, 16, 16, seed=3)
    n_tokens = 17 if pool == "cls" else 16
    assert model.forward_features(images).shape == (3, n_tokens, 16)
    assert model(images).shape == (3, 5)
    assert model.pos_emb.shape == (1, n_tokens, 16)
    if pool == "cls":
        assert isinstance(model.cls_token, nn.Parameter) and model.cls_token.shape == (1, 1, 16)
    else:
        assert model.cls_token is None
    assert len(model.blocks) == 2
    assert all(isinstance(b, blocks.EncoderBlock) for b in model.blocks)
    assert all(b.norm_first for b in model.blocks)
    assert isinstance(model.norm, nn.LayerNorm)
    assert isinstance(model.head, nn.Linear) and model.head.out_features == 5


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_forward_features_is_the_composition(pool):
    model = _tiny_vit(pool)
    with torch.no_grad():  # make every part visible: non-zero positions, randomised final norm
        model.pos_emb.normal_()
        model.norm.weight.normal_()
        model.norm.bias.normal_()
    images = randn(2, 3, 16, 16, seed=4)
    x = model.patch_embed(images)
    if pool == "cls":
        x = torch.cat([model.cls_token.expand(2, -1, -1), x], dim=1)
    x = x + model.pos_emb
    for block in model.blocks:
        x = block(x)
    features = model.norm(x)
    assert_close(model.forward_features(images), features, cond=COND, what=f"ViT({pool}).forward_features")
    pooled = features[:, 0] if pool == "cls" else features.mean(dim=1)
    assert_close(model(images), model.head(pooled), cond=COND, what=f"ViT({pool}) logits")


def test_mean_pooling_without_positions_ignores_patch_order():
    model = _tiny_vit("mean")
    with torch.no_grad():
        model.pos_emb.zero_()
    images = randn(2, 3, 16, 16, seed=5)
    # shuffle the 4x4 grid of 4x4 patches in image space
    grid = images.reshape(2, 3, 4, 4, 4, 4).permute(0, 2, 4, 1, 3, 5).reshape(2, 16, 3, 4, 4)
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(0))
    shuffled = grid[:, perm].reshape(2, 4, 4, 3, 4, 4).permute(0, 3, 1, 4, 2, 5).reshape(2, 3, 16, 16)
    assert not torch.equal(shuffled, images)
    assert_close(model(shuffled), model(images), cond=COND, what="mean-pooled ViT on shuffled patches, no positions")
    # with learned positions the order matters
    with torch.no_grad():
        model.pos_emb.normal_()
    assert (model(shuffled) - model(images)).abs().max() > 1e-4


def test_gradients_reach_cls_and_positions():
    model = _tiny_vit("cls")
    loss = F.cross_entropy(model(randn(4, 3, 16, 16, seed=6)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    assert model.cls_token.grad.abs().max() > 0
    assert model.pos_emb.grad.abs().max() > 0
    assert model.patch_embed.proj.weight.grad.abs().max() > 0


@pytest.mark.edge_case
def test_batch_of_one():
    model = _tiny_vit()
    images = randn(3, 3, 16, 16, seed=7)
    assert_close(model(images[1:2]), model(images)[1:2], cond=COND, what="ViT on a batch of one")


def test_inputs_are_not_modified():
    call_leaves_inputs_unchanged(_tiny_vit(), randn(2, 3, 16, 16, seed=12))
    call_leaves_inputs_unchanged(vit.patchify, randn(2, 3, 8, 8, seed=13), 4)


@pytest.mark.numerics_probe
def test_low_precision_probe():
    model = _tiny_vit()

    def run(images):
        return copy.deepcopy(model).to(images.dtype)(images)

    assert_low_precision_matches(run, randn(2, 3, 16, 16, seed=8))


@pytest.mark.contract
def test_errors():
    with pytest.raises(ValueError):
        vit.ViT(16, 5, 3, 4)
    with pytest.raises(ValueError):
        vit.PatchEmbedding(16, 3, 3, 8)
    with pytest.raises(ValueError):
        vit.ViT(16, 4, 3, 4, pool="max")
    with pytest.raises(ValueError):
        vit.patchify(randn(1, 1, 6, 6, seed=9), 4)
    model = _tiny_vit()
    with pytest.raises(ValueError):
        model(randn(1, 3, 20, 20, seed=10))
    with pytest.raises(ValueError):
        model(randn(1, 1, 16, 16, seed=11))


# --- training -----------------------------------------------------------------------------------------


def test_learns_which_quadrant_holds_the_bright_square():
    torch.manual_seed(TRAIN_SEED)
    model = vit.ViT(16, 4, 1, 4, d_model=32, n_heads=4, n_layers=1)
    x, y = quadrant_images(1024, torch.Generator().manual_seed(100 + TRAIN_SEED))
    x_test, y_test = quadrant_images(256, torch.Generator().manual_seed(999))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batches = torch.Generator().manual_seed(TRAIN_SEED)
    losses = []
    for _ in range(TRAIN_STEPS):
        idx = torch.randint(0, 1024, (64,), generator=batches)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-20:]) / 20 < 0.5 * losses[0]
    with torch.no_grad():
        accuracy = float((model(x_test).argmax(dim=-1) == y_test).float().mean())
    assert accuracy >= MIN_TEST_ACCURACY, f"test accuracy {accuracy:.3f} < {MIN_TEST_ACCURACY}"
