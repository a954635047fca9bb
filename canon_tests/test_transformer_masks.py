"""Reference tests for canon #27, causal and padding masks (docs/contract.md #27, C10)."""

from __future__ import annotations

import math

import pytest
import torch

from canon_refs.transformer import attention, masks
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged, randn

pytestmark = pytest.mark.canon("transformer/masks")


def _b(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.bool)


# ----------------------------------------------------------------------------- causal_mask


def test_causal_mask_square_is_lower_triangular():
    m = masks.causal_mask(3)
    assert m.dtype == torch.bool and m.shape == (3, 3)
    assert torch.equal(m, _b([[1, 0, 0], [1, 1, 0], [1, 1, 1]]))
    assert torch.equal(masks.causal_mask(6), torch.ones(6, 6, dtype=torch.bool).tril())


def test_causal_mask_with_more_keys_is_bottom_right_aligned():
    assert torch.equal(masks.causal_mask(1, 4), torch.ones(1, 4, dtype=torch.bool))
    assert torch.equal(masks.causal_mask(2, 4), _b([[1, 1, 1, 0], [1, 1, 1, 1]]))
    # query i of T_q sits at absolute position T_k - T_q + i: the last T_q rows of the square mask
    assert torch.equal(masks.causal_mask(3, 7), masks.causal_mask(7)[4:])


def test_causal_mask_device_argument():
    assert masks.causal_mask(2, 3, device="cpu").device.type == "cpu"


@pytest.mark.edge_case
def test_causal_mask_single_position():
    assert torch.equal(masks.causal_mask(1), _b([[1]]))


@pytest.mark.contract
@pytest.mark.parametrize("args", [(0,), (-1, 3), (3, 2)])
def test_causal_mask_invalid_sizes(args):
    with pytest.raises(ValueError):
        masks.causal_mask(*args)


# ----------------------------------------------------------------------------- padding_mask


def test_padding_mask_right_and_left():
    lengths = torch.tensor([2, 3])
    right = masks.padding_mask(lengths, 4)
    assert right.dtype == torch.bool
    assert torch.equal(right, _b([[1, 1, 0, 0], [1, 1, 1, 0]]))
    assert torch.equal(masks.padding_mask(lengths, 4, side="left"), _b([[0, 0, 1, 1], [0, 1, 1, 1]]))


def test_padding_mask_default_length_is_max_and_lists_are_accepted():
    assert torch.equal(masks.padding_mask(torch.tensor([2, 3])), _b([[1, 1, 0], [1, 1, 1]]))
    assert torch.equal(masks.padding_mask([2, 3], 4), _b([[1, 1, 0, 0], [1, 1, 1, 0]]))


@pytest.mark.edge_case
def test_padding_mask_zero_and_full_lengths():
    assert torch.equal(masks.padding_mask(torch.tensor([0, 3]), 3), _b([[0, 0, 0], [1, 1, 1]]))
    assert torch.equal(masks.padding_mask(torch.tensor([0, 3]), 3, side="left"), _b([[0, 0, 0], [1, 1, 1]]))


@pytest.mark.contract
@pytest.mark.parametrize(
    "kwargs",
    [
        {"lengths": torch.tensor([2, -1]), "T": 3},
        {"lengths": torch.tensor([2, 5]), "T": 3},
        {"lengths": torch.tensor([1.0, 2.0]), "T": 3},
        {"lengths": torch.tensor([2, 1]), "T": 3, "side": "middle"},
    ],
)
def test_padding_mask_invalid(kwargs):
    with pytest.raises(ValueError):
        masks.padding_mask(**kwargs)


# ----------------------------------------------------------------------------- key padding, combine


def test_key_padding_to_attention_shape_and_int_input():
    valid = torch.tensor([[1, 1, 0], [1, 0, 0]])
    out = masks.key_padding_to_attention(valid)
    assert out.dtype == torch.bool and out.shape == (2, 1, 1, 3)
    assert torch.equal(out[:, 0, 0], valid.bool())
    assert torch.equal(masks.key_padding_to_attention(valid.bool()), out)


@pytest.mark.contract
def test_key_padding_to_attention_rejects_wrong_rank():
    with pytest.raises(ValueError):
        masks.key_padding_to_attention(torch.ones(2, 1, 3, dtype=torch.bool))


def test_combine_masks_broadcasts_and_ands():
    B, T = 2, 4
    causal = masks.causal_mask(T)
    keys = masks.key_padding_to_attention(masks.padding_mask(torch.tensor([4, 2]), T))
    out = masks.combine_masks(causal, None, keys)
    assert out.dtype == torch.bool and out.shape == (B, 1, T, T)
    assert torch.equal(out, causal[None, None] & keys)
    assert torch.equal(out[1, 0], _b([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]]))


def test_combine_masks_none_handling():
    assert masks.combine_masks() is None
    assert masks.combine_masks(None, None) is None
    single = masks.causal_mask(3)
    assert torch.equal(masks.combine_masks(None, single), single)


@pytest.mark.contract
def test_combine_masks_rejects_non_broadcasting():
    with pytest.raises(ValueError):
        masks.combine_masks(masks.causal_mask(3), masks.causal_mask(4))


# ----------------------------------------------------------------------------- bias


def test_mask_to_bias_values():
    mask = _b([[1, 0], [0, 0]])
    bias = masks.mask_to_bias(mask)
    assert bias.dtype == torch.float32 and bias.shape == (2, 2)
    fmin = torch.finfo(torch.float32).min
    assert torch.equal(bias, torch.tensor([[0.0, fmin], [fmin, fmin]]))
    assert not torch.isinf(bias).any()


@pytest.mark.numerics_probe
def test_mask_to_bias_float16_is_minus_65504_and_softmax_stays_finite():
    mask = _b([[1, 1, 0], [0, 0, 0]])
    bias = masks.mask_to_bias(mask, torch.float16)
    assert bias.dtype == torch.float16
    assert torch.all(bias[~mask] == -65504.0)
    assert not torch.isinf(bias).any()
    probs = torch.softmax(bias.float(), dim=-1)
    assert torch.isfinite(probs).all()
    assert_close(probs[0], torch.tensor([0.5, 0.5, 0.0]), what="softmax(mask_to_bias([1, 1, 0], float16))")
    out = attention.scaled_dot_product_attention(
        randn(2, 4).half(), randn(3, 4, seed=1).half(), randn(3, 2, seed=2).half(), bias)
    assert torch.isfinite(out).all()


@pytest.mark.numerics_probe
def test_mask_to_bias_fully_masked_float32_row_softmax_finite():
    bias = masks.mask_to_bias(torch.zeros(1, 5, dtype=torch.bool), torch.float32)
    probs = torch.softmax(bias, dim=-1)
    assert torch.isfinite(probs).all()
    assert_close(probs, torch.full((1, 5), 0.2), what="softmax(mask_to_bias(all False))")


@pytest.mark.contract
@pytest.mark.parametrize("args", [(torch.ones(2, 2),), (_b([[1]]), torch.int64)])
def test_mask_to_bias_invalid(args):
    with pytest.raises(ValueError):
        masks.mask_to_bias(*args)


# ----------------------------------------------------------------------------- causal padding, positions


def test_causal_padding_mask_equals_explicit_loop():
    attention_mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    out = masks.causal_padding_mask(attention_mask)
    assert out.dtype == torch.bool and out.shape == (3, 1, 5, 5)
    B, T = attention_mask.shape
    want = torch.zeros(B, 1, T, T, dtype=torch.bool)
    for b in range(B):
        for i in range(T):
            for j in range(T):
                want[b, 0, i, j] = bool(j <= i and attention_mask[b, j] == 1)
    assert torch.equal(out, want)
    assert torch.equal(masks.causal_padding_mask(attention_mask.bool()), want)


@pytest.mark.edge_case
def test_causal_padding_mask_empty_sequence():
    out = masks.causal_padding_mask(torch.ones(2, 0, dtype=torch.long))
    assert out.shape == (2, 1, 0, 0) and out.dtype == torch.bool


def test_positions_from_mask():
    pos = masks.positions_from_mask(torch.tensor([[0, 0, 1, 1]]))
    assert pos.dtype == torch.long
    assert torch.equal(pos, torch.tensor([[0, 0, 0, 1]]))
    assert torch.equal(masks.positions_from_mask(_b([[1, 1, 1, 0], [0, 1, 1, 1]])),
                       torch.tensor([[0, 1, 2, 2], [0, 0, 1, 2]]))


@pytest.mark.contract
@pytest.mark.parametrize("fn", ["causal_padding_mask", "positions_from_mask"])
def test_attention_mask_must_be_2d(fn):
    with pytest.raises(ValueError):
        getattr(masks, fn)(torch.ones(4, dtype=torch.long))


def test_inputs_are_not_modified():
    lengths = torch.tensor([2, 3])
    call_leaves_inputs_unchanged(masks.padding_mask, lengths, 4, side="left")
    valid = torch.tensor([[1, 1, 0], [1, 0, 0]])
    call_leaves_inputs_unchanged(masks.key_padding_to_attention, valid)
    call_leaves_inputs_unchanged(masks.combine_masks, masks.causal_mask(3), masks.key_padding_to_attention(valid))
    call_leaves_inputs_unchanged(masks.mask_to_bias, valid.bool())
    attention_mask = torch.tensor([[0, 1, 1], [1, 1, 0]])
    call_leaves_inputs_unchanged(masks.causal_padding_mask, attention_mask)
    call_leaves_inputs_unchanged(masks.positions_from_mask, attention_mask)


# ----------------------------------------------------------------------------- with #25


def test_future_tokens_do_not_change_past_outputs_under_causal_mask():
    B, T, d = 2, 6, 4
    q, k, v = (randn(B, T, d, seed=s, dtype=torch.float64) for s in range(3))
    out = attention.scaled_dot_product_attention(q, k, v, masks.causal_mask(T))
    t = 2
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    for x in (q2, k2, v2):
        x[:, t + 1:] = randn(B, T - t - 1, d, seed=9, dtype=torch.float64) * 10
    out2 = attention.scaled_dot_product_attention(q2, k2, v2, masks.causal_mask(T))
    want = torch.stack([torch.softmax(q[:, i, None] @ k[:, : i + 1].mT / math.sqrt(d), -1) @ v[:, : i + 1]
                        for i in range(t + 1)], dim=1)[:, :, 0]  # each query over its own prefix only
    assert_close(out2[:, : t + 1], want, cond=10.0, what="causal attention rows before the changed tokens")
    assert_close(out[:, : t + 1], want, cond=10.0, what="causal attention rows before the changed tokens")
    assert not torch.allclose(out2[:, t + 1:], out[:, t + 1:])


def test_padded_keys_do_not_change_outputs():
    B, H, T, d = 2, 2, 5, 4
    q, k, v = (randn(B, H, T, d, seed=s, dtype=torch.float64) for s in range(3))
    valid = masks.padding_mask(torch.tensor([5, 3]), T)
    mask = masks.key_padding_to_attention(valid)
    out = attention.scaled_dot_product_attention(q, k, v, mask)
    k2, v2 = k.clone(), v.clone()
    k2[1, :, 3:] = 100.0
    v2[1, :, 3:] = -100.0
    out2 = attention.scaled_dot_product_attention(q, k2, v2, mask)
    want = torch.softmax(q[1] @ k[1, :, :3].mT / math.sqrt(d), -1) @ v[1, :, :3]
    assert_close(out[1], want, cond=10.0, what="attention under the key-padding mask (row 1)")
    assert_close(out2[1], want, cond=10.0, what="attention under the key-padding mask, padded keys changed")
