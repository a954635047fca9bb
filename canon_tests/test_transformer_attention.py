"""Reference tests for canon #25, scaled dot-product attention (docs/contract.md #25, C9, C10)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from canon_refs.transformer import attention
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    randn,
)

pytestmark = pytest.mark.canon("transformer/attention")

B, H, T_Q, T_K, D_K, D_V = 2, 3, 5, 7, 8, 6


def _qkv(dtype: torch.dtype = torch.float32, requires_grad: bool = False, seed: int = 0):
    q = randn(B, H, T_Q, D_K, seed=seed, dtype=dtype, requires_grad=requires_grad)
    k = randn(B, H, T_K, D_K, seed=seed + 1, dtype=dtype, requires_grad=requires_grad)
    v = randn(B, H, T_K, D_V, seed=seed + 2, dtype=dtype, requires_grad=requires_grad)
    return q, k, v


def _random_allow_mask(seed: int = 3) -> torch.Tensor:
    """A random (B, H, T_q, T_k) allow-mask in which every query keeps at least one key."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(B, H, T_Q, T_K, generator=gen) > 0.5
    mask[..., torch.arange(T_Q), torch.arange(T_Q) % T_K] = True
    return mask


def _causal(T_q: int, T_k: int) -> torch.Tensor:
    """Bottom-right aligned causal allow-mask, built here so #25's tests do not depend on #27."""
    return torch.ones(T_q, T_k, dtype=torch.bool).tril(diagonal=T_k - T_q)


def _trusted(q, k, v, mask=None, scale=None) -> torch.Tensor:
    """torch's own attention (every row of ``mask`` keeps a key), the value every check compares with."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def _score_size(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> float:
    """The largest |score|: a softmax of scores of size L is off by about eps * L (its condition)."""
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return max(1.0, float((q.detach().double() @ k.detach().double().transpose(-2, -1)).abs().max()) * s)


# ----------------------------------------------------------------------------- closed form


def test_two_key_closed_form_float64():
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    out, weights = attention.scaled_dot_product_attention(q, k, v, return_weights=True)
    assert out.dtype == torch.float64 and weights.dtype == torch.float64
    assert_close(weights, torch.tensor([[0.6697615493266569, 0.33023845067334306]], dtype=torch.float64),
                 what="scaled_dot_product_attention(two keys) weights")
    assert_close(out, torch.tensor([[1.660476901346686, 2.6604769013466862]], dtype=torch.float64),
                 what="scaled_dot_product_attention(two keys) out")


def test_default_scale_is_inverse_sqrt_dk_and_explicit_scale_is_used():
    q, k, v = _qkv(torch.float64)
    default = attention.scaled_dot_product_attention(q, k, v)
    assert_close(default, _trusted(q, k, v), cond=_score_size(q, k), what="scaled_dot_product_attention (scale=None)")
    out = attention.scaled_dot_product_attention(q, k, v, scale=0.3)
    want = torch.softmax(q @ k.transpose(-2, -1) * 0.3, dim=-1) @ v
    assert_close(out, want, cond=_score_size(q, k, 0.3), what="scaled_dot_product_attention(scale=0.3)")


# ----------------------------------------------------------------------------- vs torch


@pytest.mark.parametrize("kind", ["none", "bool", "float_bias", "causal"])
def test_matches_torch_sdpa(kind):
    q, k, v = _qkv()
    if kind == "none":
        mask = None
    elif kind == "bool":
        mask = _random_allow_mask()
    elif kind == "float_bias":
        mask = randn(B, H, T_Q, T_K, seed=5)
    else:
        mask = _causal(T_Q, T_K)
    out = attention.scaled_dot_product_attention(q, k, v, mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.shape == (B, H, T_Q, D_V)
    cond = _score_size(q, k) + (float(mask.abs().max()) if kind == "float_bias" else 0.0)
    assert_close(out, want, cond=cond, what=f"scaled_dot_product_attention(mask={kind}) vs torch")


def test_weights_rows_sum_to_one_and_masked_weights_exactly_zero():
    q, k, v = _qkv()
    mask = _random_allow_mask()
    out, weights = attention.scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    assert weights.shape == (B, H, T_Q, T_K)
    assert torch.all(weights[~mask] == 0.0)
    assert torch.all(weights[mask] > 0.0)
    cond = _score_size(q, k)
    assert_close(weights.sum(-1), torch.ones(B, H, T_Q), cond=cond, what="attention weights.sum(-1)")
    assert_close(out, _trusted(q, k, v, mask), cond=cond, what="scaled_dot_product_attention(bool mask)")
    assert_close(weights, _trusted(q, k, torch.eye(T_K).expand(B, H, T_K, T_K), mask), cond=cond,
                 what="scaled_dot_product_attention(bool mask) weights")


def test_mask_broadcasts_from_lower_rank():
    q, k, v = _qkv(torch.float64)
    causal = _causal(T_Q, T_K)
    keys = torch.tensor([[True] * T_K, [True] * 4 + [False] * (T_K - 4)])[:, None, None, :]
    cond = _score_size(q, k)
    out_2d = attention.scaled_dot_product_attention(q, k, v, causal)
    assert_close(out_2d, _trusted(q, k, v, causal.expand(B, H, T_Q, T_K)), cond=cond,
                 what="scaled_dot_product_attention((T_q, T_k) causal mask)")
    out_keys = attention.scaled_dot_product_attention(q, k, v, keys)
    assert_close(out_keys[1], _trusted(q[1], k[1, :, :4], v[1, :, :4]), cond=cond,
                 what="scaled_dot_product_attention((B, 1, 1, T_k) key mask)[1]")


def test_t_q_differs_from_t_k():
    q = randn(4, 3, dtype=torch.float64)
    k = randn(9, 3, seed=1, dtype=torch.float64)
    v = randn(9, 2, seed=2, dtype=torch.float64)
    out = attention.scaled_dot_product_attention(q, k, v)
    assert out.shape == (4, 2)
    assert_close(out, torch.softmax(q @ k.T / math.sqrt(3), dim=-1) @ v, cond=_score_size(q, k),
                 what="scaled_dot_product_attention(T_q=4, T_k=9)")


# ----------------------------------------------------------------------------- properties


def test_permuting_keys_and_values_together_leaves_output_unchanged():
    q, k, v = _qkv()
    mask = _random_allow_mask()
    perm = torch.randperm(T_K, generator=torch.Generator().manual_seed(1))
    out = attention.scaled_dot_product_attention(q, k, v, mask)
    out_perm = attention.scaled_dot_product_attention(q, k[..., perm, :], v[..., perm, :], mask[..., perm])
    assert_close(out_perm, out, cond=_score_size(q, k), what="attention with keys and values permuted")


def test_permuting_queries_permutes_output():
    q, k, v = _qkv()
    perm = torch.randperm(T_Q, generator=torch.Generator().manual_seed(2))
    out = attention.scaled_dot_product_attention(q, k, v)
    out_perm = attention.scaled_dot_product_attention(q[..., perm, :], k, v)
    assert_close(out_perm, out[..., perm, :], cond=_score_size(q, k), what="attention with queries permuted")


def test_gradcheck_float64():
    q, k, v = _qkv(torch.float64, requires_grad=True)
    q, k, v = (t[:1, :2, :3, :4].detach().requires_grad_() for t in (q, k, v))
    assert torch.autograd.gradcheck(lambda a, b, c: attention.scaled_dot_product_attention(a, b, c), (q, k, v))
    mask = _random_allow_mask()[:1, :2, :3, :3]
    assert torch.autograd.gradcheck(
        lambda a, b, c: attention.scaled_dot_product_attention(a, b, c, mask), (q, k[..., :3, :], v[..., :3, :]))


def test_output_dtype_follows_input():
    q, k, v = _qkv(torch.float64)
    assert attention.scaled_dot_product_attention(q, k, v).dtype == torch.float64


# ----------------------------------------------------------------------------- dropout


def test_dropout_zeroes_or_rescales_weights_reproducibly():
    q, k, v = _qkv(torch.float64)
    p = 0.5
    plain = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D_K), dim=-1)
    out1, dropped = attention.scaled_dot_product_attention(
        q, k, v, dropout_p=p, return_weights=True, generator=torch.Generator().manual_seed(7))
    out2 = attention.scaled_dot_product_attention(q, k, v, dropout_p=p, generator=torch.Generator().manual_seed(7))
    assert torch.equal(out1, out2), "the same generator seed must give the same dropout"
    kept = dropped != 0
    # 210 Bernoulli(0.5) draws: the kept share has std 0.035, so (0.2, 0.8) is > 8 standard errors wide
    assert 0.2 < kept.double().mean().item() < 0.8
    cond = _score_size(q, k)
    assert_close(dropped[kept], plain[kept] / (1 - p), cond=cond, what="dropped-out weights (survivors / (1 - p))")
    assert_close(out1, dropped @ v, cond=cond, what="attention output with dropout (weights @ v)")



def test_dropout_keeps_each_weight_with_probability_one_minus_p():
    # At p = 0.5 keeping with probability p or 1 - p look alike; at p = 0.2 the kept share of 210 weights is
    # 0.8 with std 0.028, so (0.65, 0.95) is > 5 standard errors wide (keeping with probability p gives 0.2)
    q, k, v = _qkv(torch.float64)
    _, dropped = attention.scaled_dot_product_attention(
        q, k, v, dropout_p=0.2, return_weights=True, generator=torch.Generator().manual_seed(3))
    assert 0.65 < (dropped != 0).double().mean().item() < 0.95

# ----------------------------------------------------------------------------- numerics


@pytest.mark.numerics_probe
def test_fully_masked_row_gives_zeros_and_finite_gradients():
    q, k, v = _qkv(requires_grad=True)
    mask = _random_allow_mask()
    mask[0, 1, 2] = False                                   # query 2 of (batch 0, head 1) sees nothing
    out, weights = attention.scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    assert torch.isfinite(out).all()
    assert torch.all(out[0, 1, 2] == 0.0)
    assert torch.all(weights[0, 1, 2] == 0.0)
    (out * randn(*out.shape, seed=9)).sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.all(q.grad[0, 1, 2] == 0.0)
    # every other row is torch's attention under the mask without the empty row
    want = _trusted(q.detach(), k.detach(), v.detach(), _random_allow_mask())
    keep = torch.ones(B, H, T_Q, dtype=torch.bool)
    keep[0, 1, 2] = False
    assert_close(out[keep], want[keep], cond=_score_size(q, k), what="attention rows beside a fully masked row")


@pytest.mark.numerics_probe
def test_fully_masked_row_with_finite_bias_stays_finite():
    q, k, v = _qkv()
    bias = torch.zeros(T_Q, T_K).masked_fill(~_causal(T_Q, T_K), torch.finfo(torch.float32).min)
    bias[1] = torch.finfo(torch.float32).min
    out = attention.scaled_dot_product_attention(q, k, v, bias)
    assert torch.isfinite(out).all()


@pytest.mark.numerics_probe
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_extreme_scores_give_one_hot_weights(dtype):
    q = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=dtype, requires_grad=True)
    k = torch.tensor([[1e4, 0.0], [-1e4, 0.0], [1e4, 0.0]], dtype=dtype, requires_grad=True)
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=dtype, requires_grad=True)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    out, weights = attention.scaled_dot_product_attention(q, k, v, mask, scale=1.0, return_weights=True)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    # scores of size 1e4: a stable softmax is off by about eps * 1e4 (2e-4 in float32 for exp(x - lse))
    assert_close(weights, torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.0, 0.5]], dtype=dtype), magnitude=1e4,
                 what="attention weights for scores of +-1e4")
    assert_close(out, torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=dtype), magnitude=6e4,
                 what="attention output for scores of +-1e4")
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


@pytest.mark.numerics_probe
def test_fp16_probe():
    q, k, v = _qkv()
    mask = _random_allow_mask()
    mask[1, 0, 3] = False
    assert_low_precision_matches(lambda a, b, c, m: attention.scaled_dot_product_attention(a, b, c, m), q, k, v, mask)
    out = attention.scaled_dot_product_attention(q.half(), k.half(), v.half(), mask)
    assert out.dtype == torch.float16
    assert torch.all(out[1, 0, 3] == 0.0)


@pytest.mark.numerics_probe
def test_float16_bias_on_negative_scores_does_not_overflow():
    # scores near -20 plus the float16 bias -65504 round to -inf in float16 arithmetic
    q = torch.full((1, 3, 4), 1.0, dtype=torch.float16)
    k = torch.full((1, 5, 4), -10.0, dtype=torch.float16)
    v = randn(1, 5, 2, seed=4).half()
    bias = torch.zeros(3, 5, dtype=torch.float16)
    bias[0] = torch.finfo(torch.float16).min
    out = attention.scaled_dot_product_attention(q, k, v, bias)
    assert torch.isfinite(out).all()


# ----------------------------------------------------------------------------- softmax


def test_stable_softmax_matches_torch():
    x = randn(4, 7, seed=11) * 5
    size = float(x.abs().max())
    assert_close(attention.stable_softmax(x), torch.softmax(x.double(), dim=-1), cond=size, what="stable_softmax(x)")
    assert_close(attention.stable_softmax(x, dim=0), torch.softmax(x.double(), dim=0), cond=size,
                 what="stable_softmax(x, dim=0)")


@pytest.mark.numerics_probe
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_stable_softmax_extreme_logits(dtype):
    x = torch.tensor([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4], [1e4, 1e4, -1e4]])
    p = attention.stable_softmax(x.to(dtype))
    assert torch.isfinite(p).all() and (p >= 0).all() and (p <= 1).all()
    # logits of size 1e4: the softmax is off by about eps * 1e4 (float16 is computed in float32, as stated)
    work = torch.float32 if dtype == torch.float16 else dtype
    ulps = 16.0 if dtype != torch.float16 else 64.0  # plus the float16 rounding of each probability (2^-11)
    assert_close(p.sum(-1), torch.ones(3, dtype=torch.float64), dtype=work, magnitude=1e4, ulps=ulps,
                 what="stable_softmax(+-1e4).sum(-1)")
    assert_close(p, torch.tensor([[1.0, 0.0, 0.0], [1 / 3] * 3, [0.5, 0.5, 0.0]], dtype=torch.float64),
                 dtype=work, magnitude=1e4, ulps=ulps, what="stable_softmax(+-1e4)")


# ----------------------------------------------------------------------------- edge cases


@pytest.mark.edge_case
def test_unbatched_2d_inputs_equal_batched():
    q, k, v = _qkv(torch.float64)
    out = attention.scaled_dot_product_attention(q[0, 0], k[0, 0], v[0, 0])
    assert out.shape == (T_Q, D_V)
    assert_close(out, _trusted(q, k, v)[0, 0], cond=_score_size(q, k), what="scaled_dot_product_attention(2-D inputs)")


@pytest.mark.edge_case
def test_batch_of_one_and_single_query():
    q, k, v = _qkv(torch.float64)
    out = attention.scaled_dot_product_attention(q[:1, :, :1], k[:1], v[:1])
    assert out.shape == (1, H, 1, D_V)
    assert_close(out, _trusted(q, k, v)[:1, :, :1], cond=_score_size(q, k), what="attention(batch of one, one query)")


@pytest.mark.edge_case
def test_single_key_gets_all_the_weight():
    q, k, v = _qkv(torch.float64)
    out, weights = attention.scaled_dot_product_attention(q, k[..., :1, :], v[..., :1, :], return_weights=True)
    assert_close(weights, torch.ones(B, H, T_Q, 1, dtype=torch.float64), what="attention weights over a single key")
    assert_close(out, v[..., :1, :].expand(B, H, T_Q, D_V), what="attention over a single key")


# ----------------------------------------------------------------------------- inputs


def test_inputs_are_not_modified():
    q, k, v = _qkv()
    mask = _random_allow_mask()
    call_leaves_inputs_unchanged(attention.scaled_dot_product_attention, q, k, v, mask)
    call_leaves_inputs_unchanged(attention.scaled_dot_product_attention, q, k, v, randn(T_Q, T_K, seed=6),
                                 dropout_p=0.3, generator=torch.Generator().manual_seed(0))
    call_leaves_inputs_unchanged(attention.stable_softmax, randn(3, 4, seed=7))


# ----------------------------------------------------------------------------- errors


_BAD_CALLS = {
    # case: call on (q, k, v) of shapes (B, H, T_q|T_k, d)
    "q_rank_1": lambda q, k, v: attention.scaled_dot_product_attention(q[0, 0, 0], k, v),
    "k_rank_1": lambda q, k, v: attention.scaled_dot_product_attention(q, k[0, 0, 0], v),
    "v_rank_1": lambda q, k, v: attention.scaled_dot_product_attention(q, k, v[0, 0, 0]),
    "d_k_mismatch": lambda q, k, v: attention.scaled_dot_product_attention(q, k[..., :3], v),
    "T_k_mismatch": lambda q, k, v: attention.scaled_dot_product_attention(q, k, v[..., :3, :]),
    "leading_dims": lambda q, k, v: attention.scaled_dot_product_attention(q, k[:, :2], v[:, :2]),
    "mask_T_k": lambda q, k, v: attention.scaled_dot_product_attention(q, k, v, torch.ones(T_Q, T_Q, dtype=torch.bool)),
    "mask_extra_dims": lambda q, k, v: attention.scaled_dot_product_attention(q[0], k[0], v[0], _random_allow_mask()),
    "dropout_p_one": lambda q, k, v: attention.scaled_dot_product_attention(q, k, v, dropout_p=1.0),
    "dropout_p_negative": lambda q, k, v: attention.scaled_dot_product_attention(q, k, v, dropout_p=-0.1),
    "scale_zero": lambda q, k, v: attention.scaled_dot_product_attention(q, k, v, scale=0.0),
    "scale_negative": lambda q, k, v: attention.scaled_dot_product_attention(q, k, v, scale=-1.0),
}


@pytest.mark.contract
@pytest.mark.parametrize("case", list(_BAD_CALLS))
def test_invalid_inputs_raise_value_error(case):
    with pytest.raises(ValueError):
        _BAD_CALLS[case](*_qkv())
