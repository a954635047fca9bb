"""Reference tests for canon #34, RoPE and the sinusoidal table (canon-spec #34)."""

from __future__ import annotations

import math

import pytest
import torch

from canon_refs.transformer import multihead, positional
from pytest_mlcanon.testing import TOL, assert_low_precision_matches, randn

pytestmark = pytest.mark.canon("transformer/positional")

B, H, T, D_H = 2, 3, 6, 8


def _complex_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Independent reference: pair (x[i], x[i + d_h/2]) as a complex number, multiply by e^{i·p·θ_i}."""
    d_h = x.shape[-1]
    theta = base ** (-2.0 * torch.arange(d_h // 2, dtype=torch.float64) / d_h)
    angle = positions.double()[..., None] * theta                       # (T, d_h/2) or (B, T, d_h/2)
    if angle.dim() == 3:
        angle = angle[:, None]
    z = torch.complex(x[..., : d_h // 2].double(), x[..., d_h // 2:].double())
    rotated = z * torch.polar(torch.ones_like(angle), angle)
    return torch.cat([rotated.real, rotated.imag], dim=-1)


def _rope(head_dim: int = D_H, max_positions: int = 64) -> positional.RotaryEmbedding:
    return positional.RotaryEmbedding(head_dim, max_positions=max_positions)


# ----------------------------------------------------------------------------- closed form


def test_position_zero_is_identity():
    x = randn(B, H, 1, D_H, seed=1)
    torch.testing.assert_close(_rope()(x), x, atol=0.0, rtol=0.0)
    x = randn(B, H, T, D_H, seed=1)
    torch.testing.assert_close(_rope()(x, torch.zeros(T, dtype=torch.long)), x, atol=0.0, rtol=0.0)


def test_unit_vector_at_position_one():
    want = torch.tensor([0.5403023058681398, 0.8414709848078965], dtype=torch.float64)
    x = torch.tensor([1.0, 0.0], dtype=torch.float64).reshape(1, 1, 1, 2)
    cos, sin = positional.rope_frequencies(2, 2, dtype=torch.float64)
    out = positional.apply_rope(x, cos[1:2], sin[1:2])
    torch.testing.assert_close(out.reshape(2), want, **TOL.EXACT64.kw())
    out = _rope(head_dim=2)(x.float(), torch.tensor([1]))
    torch.testing.assert_close(out.reshape(2), want.float(), atol=1e-7, rtol=0.0)


def test_rotate_half_layout():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    torch.testing.assert_close(positional.rotate_half(x), torch.tensor([-3.0, -4.0, 1.0, 2.0]), atol=0.0, rtol=0.0)


def test_rope_frequencies_shapes_and_values():
    cos, sin = positional.rope_frequencies(D_H, 10, base=100.0, dtype=torch.float64)
    assert cos.shape == (10, D_H // 2) and sin.shape == (10, D_H // 2) and cos.dtype == torch.float64
    p, i = 7, 3
    angle = p * 100.0 ** (-2 * i / D_H)
    assert abs(cos[p, i].item() - math.cos(angle)) < 1e-12 and abs(sin[p, i].item() - math.sin(angle)) < 1e-12
    assert positional.rope_frequencies(D_H, 10)[0].dtype == torch.float32


@pytest.mark.numerics_probe
def test_rope_frequencies_are_computed_in_float64_then_cast():
    # float32 angles p·θ at p = 4095 are off by up to ~1e-4 rad; float64 ones cast to float32 are not
    cos, sin = positional.rope_frequencies(64, 4096, dtype=torch.float32)
    theta = 10000.0 ** (-2.0 * torch.arange(32, dtype=torch.float64) / 64)
    angle = torch.arange(4096, dtype=torch.float64)[:, None] * theta
    torch.testing.assert_close(cos.double(), angle.cos(), atol=1e-7, rtol=0.0)
    torch.testing.assert_close(sin.double(), angle.sin(), atol=1e-7, rtol=0.0)


# ----------------------------------------------------------------------------- properties


def test_norms_are_preserved():
    x = randn(B, H, T, D_H, seed=2)
    out = _rope()(x, torch.arange(10, 10 + T))
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), atol=1e-6, rtol=1e-6)


def test_scores_depend_only_on_relative_position():
    rope = _rope(max_positions=32)
    q = randn(1, 1, 1, D_H, seed=3)
    k = randn(1, 1, 1, D_H, seed=4)

    def score(m: int, n: int) -> float:
        return (rope(q, torch.tensor([m])) * rope(k, torch.tensor([n]))).sum().item()

    assert abs(score(3, 1) - score(10, 8)) < 1e-5
    assert abs(score(0, 5) - score(20, 25)) < 1e-5
    assert abs(score(3, 1) - score(3, 2)) > 1e-3                     # and it does depend on m - n


def test_equals_complex_multiplication_with_half_split_pairing():
    x = randn(B, H, T, D_H, seed=5)
    positions = torch.tensor([0, 1, 2, 7, 30, 63])
    out = _rope()(x, positions)
    torch.testing.assert_close(out.double(), _complex_rope(x, positions), atol=1e-6, rtol=0.0)


def test_per_row_positions_equal_slicing_a_longer_sequence():
    long = randn(B, H, 12, D_H, seed=6)
    rope = _rope()
    full = rope(long)                                                   # default positions arange(12)
    offsets = [2, 5]
    positions = torch.stack([torch.arange(o, o + T) for o in offsets])  # (B, T)
    short = torch.stack([long[b, :, o:o + T] for b, o in enumerate(offsets)])
    out = rope(short, positions)
    for b, o in enumerate(offsets):
        torch.testing.assert_close(out[b], full[b, :, o:o + T], atol=1e-6, rtol=0.0)
    torch.testing.assert_close(out.double(), _complex_rope(short, positions), atol=1e-6, rtol=0.0)


def test_apply_rope_accepts_shared_and_per_row_tables():
    x = randn(B, H, T, D_H, seed=7, dtype=torch.float64)
    cos, sin = positional.rope_frequencies(D_H, T, dtype=torch.float64)
    shared = positional.apply_rope(x, cos, sin)
    per_row = positional.apply_rope(x, cos.expand(B, T, D_H // 2), sin.expand(B, T, D_H // 2))
    assert shared.shape == (B, H, T, D_H) and shared.dtype == torch.float64
    torch.testing.assert_close(per_row, shared, atol=0.0, rtol=0.0)
    torch.testing.assert_close(shared, _complex_rope(x, torch.arange(T)), **TOL.EXACT64.kw())


@pytest.mark.numerics_probe
def test_fp16_in_fp16_out():
    x = randn(B, H, T, D_H, seed=8)
    positions = torch.tensor([0, 100, 500, 1000, 1500, 2000])
    rope = _rope(max_positions=2048)
    out = rope(x.half(), positions)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert_low_precision_matches(lambda t: rope(t, positions), x)


def test_relative_property_through_attention():
    # with RoPE in MHA, shifting every position by the same amount leaves the output unchanged
    torch.manual_seed(0)
    m = multihead.MultiHeadAttention(H * D_H, H, rope=_rope())
    x = randn(B, T, H * D_H, seed=9)
    out = m(x, is_causal=True)
    shifted = m(x, is_causal=True, positions=torch.arange(20, 20 + T))
    torch.testing.assert_close(shifted, out, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(m(x, is_causal=True, positions=torch.arange(T).flip(0)), out, atol=1e-3)


@pytest.mark.edge_case
def test_single_position_and_default_positions():
    x = randn(1, 1, 1, D_H, seed=10)
    torch.testing.assert_close(_rope()(x, torch.tensor([5])).double(), _complex_rope(x, torch.tensor([5])),
                               atol=1e-6, rtol=0.0)
    y = randn(B, H, T, D_H, seed=11)
    torch.testing.assert_close(_rope()(y), _rope()(y, torch.arange(T)), atol=0.0, rtol=0.0)


# ----------------------------------------------------------------------------- sinusoidal


def test_sinusoidal_table():
    pe = positional.sinusoidal_positions(50, 16)
    assert pe.shape == (50, 16) and pe.dtype == torch.float32
    torch.testing.assert_close(pe[0], torch.tensor([0.0, 1.0] * 8), atol=0.0, rtol=0.0)
    assert (pe.abs() <= 1.0).all()
    p, i = 13, 5
    denom = 10000.0 ** (2 * i / 16)
    assert abs(pe[p, 2 * i].item() - math.sin(p / denom)) < 1e-6
    assert abs(pe[p, 2 * i + 1].item() - math.cos(p / denom)) < 1e-6


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: positional.RotaryEmbedding(7), "head_dim"),
        (lambda: positional.rope_frequencies(5, 10), "head_dim"),
        (lambda: positional.sinusoidal_positions(4, 7), "d"),
        (lambda: _rope(max_positions=8)(randn(1, 1, 2, D_H), torch.tensor([6, 8])), "positions"),
        (lambda: _rope()(randn(1, 1, 2, D_H), torch.tensor([-1, 0])), "positions"),
        (lambda: _rope()(randn(1, 1, 2, D_H), torch.tensor([0, 1, 2])), "positions"),
        (lambda: _rope()(randn(1, 1, 2, D_H + 2)), "x"),
        (lambda: positional.rotate_half(randn(2, 3)), "x"),
    ],
    ids=["rope_odd", "freq_odd", "sinusoid_odd", "pos_too_large", "pos_negative", "pos_shape", "x_width",
         "rotate_odd"],
)
def test_invalid_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()
