"""Reference tests for canon #35, grouped-query attention (docs/contract.md #35; masks follow C10).

The independent reference below projects with the module's own weights, repeats keys and values with
``torch.repeat_interleave`` and runs the softmax attention written out in float64, so it shares nothing
with ``gqa.repeat_kv``. Multi-head attention (#26), the KV cache (#33) and RoPE (#34) are used as the
real items.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from canon_refs.llm import gqa
from canon_refs.transformer import kv_cache, masks, multihead, positional
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    copy_linear,
    randn,
)

pytestmark = pytest.mark.canon("llm/gqa")

B, T, D, H = 2, 6, 16, 4
#: float32 attention of width d = 16 (projections, softmax, out projection) against a float64 or torch
#: reference: 16 ulps times a condition of d.
COND = float(D)


def _gqa(n_kv_heads: int, d: int = D, n_heads: int = H, seed: int = 0, **kwargs) -> gqa.GroupedQueryAttention:
    torch.manual_seed(seed)
    return gqa.GroupedQueryAttention(d, n_heads, n_kv_heads, **kwargs)


def _reference(m: gqa.GroupedQueryAttention, x: torch.Tensor, allow: torch.Tensor | None = None) -> torch.Tensor:
    """Explicit GQA in float64: heads split by reshape, keys/values repeated with repeat_interleave."""
    x = x.double()
    W = {name: getattr(m, name).weight.double() for name in ("q_proj", "k_proj", "v_proj", "out_proj")}
    b = {name: getattr(m, name).bias for name in W}
    b = {name: None if v is None else v.double() for name, v in b.items()}
    Bx, Tx, _ = x.shape
    d_h = m.head_dim
    q = F.linear(x, W["q_proj"], b["q_proj"]).reshape(Bx, Tx, m.n_heads, d_h).transpose(1, 2)
    k = F.linear(x, W["k_proj"], b["k_proj"]).reshape(Bx, Tx, m.n_kv_heads, d_h).transpose(1, 2)
    v = F.linear(x, W["v_proj"], b["v_proj"]).reshape(Bx, Tx, m.n_kv_heads, d_h).transpose(1, 2)
    rep = m.n_heads // m.n_kv_heads
    k = torch.repeat_interleave(k, rep, dim=1)
    v = torch.repeat_interleave(v, rep, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    if allow is not None:
        scores = scores.masked_fill(~allow, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return F.linear(out.transpose(1, 2).reshape(Bx, Tx, -1), W["out_proj"], b["out_proj"])


def _decode_in_steps(m, x, cache, prefill: int) -> torch.Tensor:
    outs = [m(x[:, :prefill], is_causal=True, kv_cache=cache)]
    for t in range(prefill, x.shape[1]):
        outs.append(m(x[:, t:t + 1], is_causal=True, kv_cache=cache))
    return torch.cat(outs, dim=1)


# ----------------------------------------------------------------------------- repeat_kv


def test_repeat_kv_equals_repeat_interleave():
    x = randn(2, 3, 5, 4, seed=1)
    for n_rep in (1, 2, 4):
        got = gqa.repeat_kv(x, n_rep)
        assert got.shape == (2, 3 * n_rep, 5, 4)
        assert torch.equal(got, torch.repeat_interleave(x, n_rep, dim=1))
    got = gqa.repeat_kv(x, 2)
    # query head h reads key/value head h // n_rep: [k0, k0, k1, k1, k2, k2], not tiled [k0, k1, k2, k0, ...]
    for h in range(6):
        assert torch.equal(got[:, h], x[:, h // 2])


def test_repeat_kv_one_is_identity():
    x = randn(1, 2, 3, 4, seed=2)
    out = gqa.repeat_kv(x, 1)
    assert out is x or torch.equal(out, x)


# ----------------------------------------------------------------------------- module


def test_projection_shapes_and_attributes():
    m = _gqa(2, d=32, n_heads=8)
    assert (m.n_heads, m.n_kv_heads, m.head_dim) == (8, 2, 4)
    assert m.q_proj.weight.shape == (32, 32)
    assert m.k_proj.weight.shape == (2 * 4, 32) and m.v_proj.weight.shape == (2 * 4, 32)
    assert m.out_proj.weight.shape == (32, 32)
    assert m.q_proj.bias is None and m.k_proj.bias is None  # bias=False by default
    assert _gqa(2, bias=True).k_proj.bias.shape == (2 * (D // H),)


@pytest.mark.parametrize("causal", [False, True])
def test_full_kv_heads_equals_multihead_attention(causal):
    g = _gqa(H, seed=1)
    torch.manual_seed(2)
    m = multihead.MultiHeadAttention(D, H, bias=False)
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        copy_linear(getattr(m, name), getattr(g, name).weight)
    x = randn(B, T, D, seed=3)
    allow = torch.rand(B, 1, T, T, generator=torch.Generator().manual_seed(4)) > 0.3
    allow[..., 0] = True
    assert_close(g(x, is_causal=causal), m(x, is_causal=causal), cond=COND, what="GQA(n_kv_heads=H) vs MHA")
    assert_close(g(x, allow, is_causal=causal), m(x, mask=allow, is_causal=causal), cond=COND,
                 what="GQA(n_kv_heads=H, mask) vs MHA")


@pytest.mark.parametrize("n_kv_heads", [1, 2])
def test_matches_explicit_repeat_interleave_reference(n_kv_heads):
    m = _gqa(n_kv_heads, seed=5, bias=True)
    x = randn(B, T, D, seed=6)
    assert_close(m(x), _reference(m, x), cond=COND, what=f"GQA(n_kv_heads={n_kv_heads}) vs repeat_interleave reference")
    causal = masks.causal_mask(T)
    assert_close(m(x, is_causal=True), _reference(m, x, causal), cond=COND,
                 what=f"causal GQA(n_kv_heads={n_kv_heads}) vs repeat_interleave reference")


@pytest.mark.parametrize("n_kv_heads", [1, 2])
def test_matches_torch_sdpa_enable_gqa(n_kv_heads):
    m = _gqa(n_kv_heads, seed=7)
    x = randn(B, T, D, seed=8)
    d_h = m.head_dim
    q = m.q_proj(x).reshape(B, T, H, d_h).transpose(1, 2)
    k = m.k_proj(x).reshape(B, T, n_kv_heads, d_h).transpose(1, 2)
    v = m.v_proj(x).reshape(B, T, n_kv_heads, d_h).transpose(1, 2)
    try:
        heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    except TypeError:
        pytest.skip("this torch has no enable_gqa")
    expected = m.out_proj(heads.transpose(1, 2).reshape(B, T, D))
    assert_close(m(x, is_causal=True), expected, cond=COND, what="GQA vs F.scaled_dot_product_attention(enable_gqa)")


def test_causality_future_tokens_do_not_change_past_outputs():
    m = _gqa(2, seed=9)
    x = randn(B, T, D, seed=10)
    out = m(x, is_causal=True)
    for t in range(T - 1):
        y = x.clone()
        y[:, t + 1:] = randn(B, T - t - 1, D, seed=11 + t)
        assert_close(m(y, is_causal=True)[:, :t + 1], out[:, :t + 1], cond=COND, what=f"GQA outputs before token {t + 1}")


def test_mask_forms_agree_and_padded_keys_do_not_matter():
    m = _gqa(2, seed=12)
    x = randn(B, T, D, seed=13)
    valid = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    allow = masks.key_padding_to_attention(valid)                       # (B, 1, 1, T)
    want = _reference(m, x, allow)
    assert_close(m(x, allow.expand(B, 1, T, T)), want, cond=COND, what="GQA((B, 1, T_q, T_k) mask)")
    assert_close(m(x, allow.expand(B, 1, T, T)[:, 0]), want, cond=COND, what="GQA((B, T_q, T_k) mask)")
    assert_close(m(x, masks.mask_to_bias(allow.expand(B, 1, T, T))), want, cond=COND, what="GQA(float bias)")
    y = x.clone()
    y[0, 4:] = randn(2, D, seed=14)
    assert_close(m(y, allow.expand(B, 1, T, T))[0, :4], want[0, :4], cond=COND, what="GQA with padded tokens changed")
    # a float bias and is_causal combine: the causal mask is filled in, never added on top of the bias
    bias = masks.mask_to_bias(allow.expand(B, 1, T, T))
    both = m(x, bias, is_causal=True)
    assert torch.isfinite(both).all()
    assert_close(both, _reference(m, x, allow & masks.causal_mask(T)), cond=COND, what="GQA(float bias, is_causal)")


def test_return_weights_shape_and_rows():
    m = _gqa(1, seed=15)
    out, weights = m(randn(B, T, D, seed=16), is_causal=True, return_weights=True)
    assert out.shape == (B, T, D) and weights.shape == (B, H, T, T)
    assert_close(weights.sum(-1), torch.ones(B, H, T), cond=COND, what="GQA weights.sum(-1)")
    assert torch.equal(weights.triu(1), torch.zeros_like(weights))


def test_gradcheck_float64():
    m = _gqa(2, d=8, n_heads=4, seed=17, bias=True).double()
    x = randn(2, 3, 8, seed=18, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda inp: m(inp, is_causal=True), (x,))


def test_dropout_only_in_training():
    m = _gqa(2, seed=19, dropout=0.5)
    x = randn(B, T, D, seed=20)
    m.eval()
    assert_close(m(x), _reference(m, x), cond=COND, what="GQA(dropout=0.5) in eval mode")
    m.train()
    assert not torch.allclose(m(x).double(), _reference(m, x), atol=1e-3)


# ----------------------------------------------------------------------------- cache and RoPE


def test_cache_holds_kv_heads_and_saves_memory():
    m = _gqa(2, d=32, n_heads=8, seed=21).eval()
    cache = kv_cache.KVCache(B, m.n_kv_heads, m.head_dim, 8)
    mha_cache = kv_cache.KVCache(B, m.n_heads, m.head_dim, 8)
    assert mha_cache.memory_bytes() == cache.memory_bytes() * (m.n_heads // m.n_kv_heads)
    x = randn(B, 5, 32, seed=22)
    with torch.no_grad():
        m(x, is_causal=True, kv_cache=cache)
        expected_k = m.k_proj(x).reshape(B, 5, 2, 4).transpose(1, 2)
    assert cache.length == 5
    assert_close(cache.k[:, :, :5], expected_k, cond=COND, what="cached keys (H_kv heads, not repeated)")


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
def test_cached_decoding_equals_full_causal_forward(n_kv_heads):
    m = _gqa(n_kv_heads, seed=23).eval()
    x = randn(B, 9, D, seed=24)
    with torch.no_grad():
        full = m(x, is_causal=True)
        cache = kv_cache.KVCache(B, n_kv_heads, D // H, 9)
        steps = _decode_in_steps(m, x, cache, prefill=5)
    assert cache.length == 9
    assert_close(steps, full, cond=COND, what=f"cached GQA(n_kv_heads={n_kv_heads}) decoding vs full forward")


def test_cached_decoding_with_rotary_embedding():
    rope = positional.RotaryEmbedding(D // H, max_positions=32)
    m = _gqa(2, seed=25, rope=rope).eval()
    x = randn(B, 9, D, seed=26)
    with torch.no_grad():
        full = m(x, is_causal=True)
        steps = _decode_in_steps(m, x, kv_cache.KVCache(B, 2, D // H, 12), prefill=5)
        explicit = m(x, is_causal=True, positions=torch.arange(9))
    assert_close(steps, full, cond=COND, what="cached GQA decoding with RoPE vs full forward")
    assert_close(explicit, full, cond=COND, what="GQA with positions=arange(T) vs default positions")
    assert (full - _gqa(2, seed=25).eval()(x, is_causal=True)).abs().max() > 1e-3  # RoPE changes the output


def test_rope_positions_per_row():
    rope = positional.RotaryEmbedding(D // H, max_positions=32)
    m = _gqa(2, seed=27, rope=rope)
    x = randn(1, 4, D, seed=28)
    shifted = m(x, is_causal=True, positions=torch.arange(3, 7)[None])
    # relative positions only: shifting every position by 3 leaves causal attention outputs unchanged
    assert_close(shifted, m(x, is_causal=True), cond=COND, what="GQA with RoPE positions shifted by 3")


# ----------------------------------------------------------------------------- numerics and edges


@pytest.mark.numerics_probe
def test_fp16_probe():
    m = _gqa(2, seed=29)

    def run(inp: torch.Tensor) -> torch.Tensor:
        return m.to(inp.dtype)(inp, is_causal=True)

    assert_low_precision_matches(run, randn(B, T, D, seed=30))


@pytest.mark.numerics_probe
def test_fully_masked_query_and_huge_scores_stay_finite():
    m = _gqa(1, seed=31)
    x = randn(B, T, D, seed=32, requires_grad=True)
    allow = torch.ones(B, 1, T, T, dtype=torch.bool)
    allow[0, 0, 2] = False                                              # query 2 of row 0 sees nothing
    out = m(x, allow)
    assert torch.isfinite(out).all()
    out_proj_in = {}
    handle = m.out_proj.register_forward_hook(lambda mod, inp, res: out_proj_in.setdefault("x", inp[0]))
    m(x.detach(), allow)
    handle.remove()
    assert torch.equal(out_proj_in["x"][0, 2], torch.zeros(D))           # exact zeros before out_proj
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    big = m(1e4 * torch.sign(x.detach()), is_causal=True)
    assert torch.isfinite(big).all()


@pytest.mark.edge_case
def test_batch_of_one_and_single_token():
    m = _gqa(2, seed=33)
    x = randn(1, 1, D, seed=34)
    out = m(x, is_causal=True)
    assert out.shape == (1, 1, D)
    # one token attends only to itself: the output is out_proj(v) of that token, repeated per group
    v = m.v_proj(x).reshape(1, 1, 2, D // H)
    expected = m.out_proj(torch.repeat_interleave(v, 2, dim=2).reshape(1, 1, D))
    assert_close(out, expected, cond=COND, what="GQA on one token")


@pytest.mark.edge_case
def test_multi_query_attention_single_kv_head():
    m = _gqa(1, d=32, n_heads=8, seed=35)
    assert m.k_proj.weight.shape == (4, 32)
    x = randn(B, T, 32, seed=36)
    assert_close(m(x), _reference(m, x), cond=COND, what="multi-query attention vs reference")


def test_inputs_are_not_modified():
    m = _gqa(2, seed=40)
    x = randn(B, T, D, seed=41)
    allow = masks.key_padding_to_attention(torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool))
    call_leaves_inputs_unchanged(m, x, allow, is_causal=True)
    call_leaves_inputs_unchanged(gqa.repeat_kv, randn(2, 3, 5, 4, seed=42), 2)


@pytest.mark.contract
@pytest.mark.parametrize("args", [(16, 4, 3), (16, 3, 1), (16, 4, 0), (18, 4, 2)],
                         ids=["kv_not_dividing", "heads_not_dividing_d", "kv_zero", "d_not_divisible"])
def test_invalid_constructor(args):
    with pytest.raises(ValueError):
        gqa.GroupedQueryAttention(*args)


@pytest.mark.contract
def test_invalid_inputs_leave_cache_untouched():
    with pytest.raises(ValueError):
        gqa.repeat_kv(randn(1, 2, 3, 4), 0)
    with pytest.raises(ValueError):
        gqa.repeat_kv(randn(2, 3, 4), 2)
    m = _gqa(2, seed=37)
    with pytest.raises(ValueError):
        m(randn(B, T, D + 1))
    with pytest.raises(ValueError):
        m(randn(T, D))
    cache = kv_cache.KVCache(B, 2, D // H, 8)
    m(randn(B, 3, D, seed=38), is_causal=True, kv_cache=cache)
    k_before = cache.k[:, :, :3].clone()
    with pytest.raises(ValueError):
        m(randn(B, 1, D, seed=39), torch.ones(1, 3, dtype=torch.bool), kv_cache=cache)   # T_k is 4
    with pytest.raises(ValueError):
        m(randn(B, 1, D, seed=39), torch.ones(B, 1, 4, dtype=torch.long), kv_cache=cache)
    assert cache.length == 3 and torch.equal(cache.k[:, :, :3], k_before)
    mha_cache = kv_cache.KVCache(B, H, D // H, 8)                      # a cache with H heads does not fit
    with pytest.raises(ValueError):
        m(randn(B, 1, D, seed=43), is_causal=True, kv_cache=mha_cache)
