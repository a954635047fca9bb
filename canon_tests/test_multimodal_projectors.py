"""Reference tests for #42, VLM projectors and the visual-token splice (docs/contract.md #42)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from canon_refs.multimodal import projectors
from canon_refs.transformer import multihead
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    randn,
)

pytestmark = pytest.mark.canon("multimodal/projectors")

D_V, D, N_Q = 12, 16, 4
#: float32 cross-attention of width 16 plus norms and projections: 16 ulps times a condition of 4d.
COND = 4.0 * D


def _n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _resampler(seed: int = 0) -> projectors.ResamplerProjector:
    torch.manual_seed(seed)
    return projectors.ResamplerProjector(D_V, D, N_Q, n_heads=4)


# --- per-token projectors ------------------------------------------------------------------------------


def test_linear_projector_shape_and_parameters():
    proj = projectors.LinearProjector(D_V, D)
    v = randn(2, 9, D_V, seed=1)
    out = proj(v)
    assert out.shape == (2, 9, D) and out.dtype == torch.float32
    assert _n_params(proj) == D_V * D + D


def test_linear_projector_is_affine_and_per_token():
    proj = projectors.LinearProjector(D_V, D)
    a, b = randn(1, 5, D_V, seed=2), randn(1, 5, D_V, seed=3)
    zero = torch.zeros(1, 5, D_V)
    assert_close(proj(a + b) - proj(b), proj(a) - proj(zero), magnitude=float(proj(a + b).detach().abs().max()), cond=float(D_V),
                 what="LinearProjector(a + b) - LinearProjector(b)")
    changed = a.clone()
    changed[0, 3] += 1.0
    diff = (proj(changed) - proj(a)).abs().sum(dim=-1)[0]
    assert diff[3] > 0 and torch.all(diff[[0, 1, 2, 4]] == 0)  # untouched tokens: the same computation, exactly


def test_mlp_projector_is_fc2_gelu_fc1_with_llava_parameter_count():
    proj = projectors.MLPProjector(D_V, D)
    v = randn(3, 7, D_V, seed=4)
    out = proj(v)
    assert out.shape == (3, 7, D)
    assert_close(out, proj.fc2(F.gelu(proj.fc1(v))), cond=float(D), what="MLPProjector vs fc2(gelu(fc1(v)))")
    assert proj.fc1.in_features == D_V and proj.fc1.out_features == D  # hidden defaults to d_model
    h = D
    assert _n_params(proj) == D_V * h + h + h * D + D
    wide = projectors.MLPProjector(D_V, D, d_hidden=40)
    assert wide.fc1.out_features == 40 and wide(v).shape == (3, 7, D)
    assert _n_params(wide) == D_V * 40 + 40 + 40 * D + D


def test_mlp_projector_is_not_affine():
    proj = projectors.MLPProjector(D_V, D)
    a, b = randn(1, 4, D_V, seed=5) * 3, randn(1, 4, D_V, seed=6) * 3
    zero = torch.zeros(1, 4, D_V)
    gap = (proj(a + b) - proj(b)) - (proj(a) - proj(zero))
    assert gap.abs().max() > 1e-3, "the GELU between fc1 and fc2 is missing"


@pytest.mark.contract
def test_projector_errors():
    with pytest.raises(ValueError):
        projectors.LinearProjector(D_V, D)(randn(2, 3, D_V + 1, seed=7))
    with pytest.raises(ValueError):
        projectors.MLPProjector(D_V, D)(randn(2, 3, D, seed=8))
    with pytest.raises(ValueError):
        _resampler()(randn(2, 3, D, seed=9))
    with pytest.raises(ValueError):
        projectors.ResamplerProjector(D_V, D, 0)
    with pytest.raises(ValueError):
        _resampler()(randn(2, 5, D_V, seed=10), torch.ones(2, 4, dtype=torch.bool))


# --- resampler -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_tokens", [16, 49])
def test_resampler_output_has_n_queries_tokens(n_tokens):
    res = _resampler()
    assert isinstance(res.queries, nn.Parameter) and res.queries.shape == (N_Q, D)
    assert isinstance(res.cross_attn, multihead.CrossAttention)
    assert isinstance(res.norm, nn.LayerNorm)
    out = res(randn(2, n_tokens, D_V, seed=11))
    assert out.shape == (2, N_Q, D) and out.dtype == torch.float32
    assert torch.isfinite(out).all()


def test_resampler_output_depends_on_the_image():
    res = _resampler()
    v = randn(2, 16, D_V, seed=12)
    assert (res(v) - res(v + randn(2, 16, D_V, seed=13))).abs().max() > 1e-3


def test_resampler_ignores_the_order_of_visual_tokens():
    res = _resampler()
    v = randn(3, 16, D_V, seed=14)
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(0))
    assert_close(res(v[:, perm]), res(v), cond=COND, what="ResamplerProjector on permuted visual tokens")
    mask = torch.ones(3, 16, dtype=torch.bool)
    mask[0, 10:] = False
    assert_close(res(v[:, perm], mask[:, perm]), res(v, mask), cond=COND,
                 what="ResamplerProjector on permuted visual tokens and mask")


def test_resampler_ignores_masked_visual_tokens():
    res = _resampler()
    v = randn(2, 16, D_V, seed=15)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[0, 9:] = 0
    mask[1, ::3] = 0
    out = res(v, mask)
    noisy = torch.where(mask[..., None].bool(), v, randn(2, 16, D_V, seed=16) * 100)
    assert_close(res(noisy, mask), out, cond=COND, what="ResamplerProjector with masked tokens changed")
    # the masked row equals running on its real tokens alone
    assert_close(res(v[:1, :9])[0], out[0], cond=COND, what="ResamplerProjector masked row vs its real tokens alone")
    assert_close(res(v, mask.bool()), out, cond=COND, what="ResamplerProjector with a bool mask")


def test_queries_receive_a_gradient():
    res = _resampler()
    v = randn(2, 16, D_V, seed=17)
    R = randn(2, N_Q, D, seed=18)
    (res(v) * R).sum().backward()
    assert res.queries.grad is not None and res.queries.grad.abs().max() > 0
    assert res.cross_attn.k_proj.weight.grad.abs().max() > 0
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in res.parameters())


@pytest.mark.numerics_probe
def test_fully_masked_image_gives_finite_output_and_gradients():
    res = _resampler()
    v = randn(2, 8, D_V, seed=19, requires_grad=True)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1] = False
    out = res(v, mask)
    assert torch.isfinite(out).all()
    (out * randn(2, N_Q, D, seed=20)).sum().backward()
    assert torch.isfinite(v.grad).all()
    assert torch.all(v.grad[1] == 0), "masked visual tokens must receive no gradient"


@pytest.mark.numerics_probe
def test_low_precision_probe():
    res = _resampler()
    mlp = projectors.MLPProjector(D_V, D)

    def run(v):
        return copy.deepcopy(res).to(v.dtype)(v), copy.deepcopy(mlp).to(v.dtype)(v)

    assert_low_precision_matches(run, randn(2, 16, D_V, seed=21))


@pytest.mark.edge_case
def test_batch_of_one_and_a_single_visual_token():
    res = _resampler()
    out = res(randn(1, 1, D_V, seed=22))
    assert out.shape == (1, N_Q, D) and torch.isfinite(out).all()
    assert projectors.MLPProjector(D_V, D)(randn(1, 1, D_V, seed=23)).shape == (1, 1, D)


# --- splice and text logits -----------------------------------------------------------------------------


def test_splice_positions_mask_and_inputs():
    B, T = 2, 5
    visual = randn(B, N_Q, D, seed=24)
    text = randn(B, T, D, seed=25)
    text_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    inputs, mask, position_ids = projectors.splice_visual_tokens(visual, text, text_mask)
    assert inputs.shape == (B, N_Q + T, D)
    assert torch.equal(inputs[:, :N_Q], visual) and torch.equal(inputs[:, N_Q:], text)
    assert mask.shape == (B, N_Q + T) and mask.dtype == torch.long
    assert mask.tolist() == [[1] * N_Q + [1, 1, 1, 0, 0], [1] * N_Q + [1] * 5]
    assert position_ids.shape == (B, N_Q + T)
    assert position_ids.tolist() == [list(range(N_Q + T))] * B
    _, bool_mask, _ = projectors.splice_visual_tokens(visual, text, text_mask.bool())
    assert torch.equal(bool_mask, mask)


def test_splice_default_mask_is_all_ones():
    _, mask, position_ids = projectors.splice_visual_tokens(randn(3, 2, D, seed=26), randn(3, 4, D, seed=27))
    assert mask.tolist() == [[1] * 6] * 3
    assert position_ids.tolist() == [list(range(6))] * 3


@pytest.mark.contract
def test_splice_errors():
    visual = randn(2, N_Q, D, seed=28)
    with pytest.raises(ValueError):
        projectors.splice_visual_tokens(visual, randn(3, 5, D, seed=29))
    with pytest.raises(ValueError):
        projectors.splice_visual_tokens(visual, randn(2, 5, D + 1, seed=30))
    with pytest.raises(ValueError):
        projectors.splice_visual_tokens(visual, randn(2, 5, D, seed=31), torch.ones(2, 4, dtype=torch.long))


@pytest.mark.parametrize(("n_visual", "T"), [(4, 5), (1, 3), (8, 1)])
def test_text_logits_off_by_one_on_a_stub_lm(n_visual, T):
    B, V = 2, 3
    S = n_visual + T
    logits = torch.zeros(B, S, V)
    logits[..., 0] = torch.arange(S, dtype=torch.float32)  # the stub LM's logit at position i is i
    out = projectors.text_logits(logits, n_visual, T)
    assert out.shape == (B, T, V)
    for t in range(T):
        assert torch.all(out[:, t, 0] == n_visual + t - 1), f"text token {t} is scored from the wrong position"


def test_text_logits_after_a_splice():
    B, T, V = 2, 6, 5
    visual, text = randn(B, N_Q, D, seed=32), randn(B, T, D, seed=33)
    inputs, _, position_ids = projectors.splice_visual_tokens(visual, text)
    lm_logits = randn(B, inputs.shape[1], V, seed=34)
    out = projectors.text_logits(lm_logits, N_Q, T)
    assert torch.equal(out, lm_logits[:, N_Q - 1:N_Q - 1 + T])
    assert int(position_ids[0, N_Q - 1]) == N_Q - 1  # the last visual position scores text token 0


@pytest.mark.edge_case
def test_text_logits_fills_the_sequence():
    logits = randn(2, 7, 3, seed=35)
    assert torch.equal(projectors.text_logits(logits, 4, 4), logits[:, 3:7])  # the last text token: position 6


@pytest.mark.contract
def test_text_logits_errors():
    logits = randn(2, 7, 3, seed=35)
    with pytest.raises(ValueError):
        projectors.text_logits(logits, 0, 3)
    with pytest.raises(ValueError):
        projectors.text_logits(logits, 4, 5)


def test_inputs_are_not_modified():
    v = randn(2, 16, D_V, seed=36)
    mask = torch.ones(2, 16, dtype=torch.bool)
    mask[0, 9:] = False
    call_leaves_inputs_unchanged(_resampler(), v, mask)
    call_leaves_inputs_unchanged(projectors.MLPProjector(D_V, D), v)
    call_leaves_inputs_unchanged(projectors.splice_visual_tokens, randn(2, N_Q, D, seed=37), randn(2, 5, D, seed=38),
                                 torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]))
    call_leaves_inputs_unchanged(projectors.text_logits, randn(2, 7, 3, seed=39), 4, 3)
