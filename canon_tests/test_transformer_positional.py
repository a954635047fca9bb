"""Reference tests for canon #34, RoPE and the sinusoidal table (docs/contract.md #34)."""

from __future__ import annotations

import math

import pytest
import torch

from canon_refs.transformer import multihead, positional
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    randn,
)

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
    # cos 0 = 1 and sin 0 = 0 exactly, so position 0 is an exact identity in every implementation
    x = randn(B, H, 1, D_H, seed=1)
    assert torch.equal(_rope()(x), x), "RoPE at position 0 must return x unchanged"
    x = randn(B, H, T, D_H, seed=1)
    assert torch.equal(_rope()(x, torch.zeros(T, dtype=torch.long)), x), "RoPE at position 0 must return x unchanged"


def test_unit_vector_at_position_one():
    want = torch.tensor([0.5403023058681398, 0.8414709848078965], dtype=torch.float64)
    x = torch.tensor([1.0, 0.0], dtype=torch.float64).reshape(1, 1, 1, 2)
    cos, sin = positional.rope_frequencies(2, 2, dtype=torch.float64)
    out = positional.apply_rope(x, cos[1:2], sin[1:2])
    assert_close(out.reshape(2), want, what="apply_rope([1, 0], position 1)")
    out = _rope(head_dim=2)(x.float(), torch.tensor([1]))
    assert_close(out.reshape(2), want, what="RotaryEmbedding(2)([1, 0], position 1)")


def test_rotate_half_layout():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert torch.equal(positional.rotate_half(x), torch.tensor([-3.0, -4.0, 1.0, 2.0])), "rotate_half([1, 2, 3, 4])"


def test_rope_frequencies_shapes_and_values():
    cos, sin = positional.rope_frequencies(D_H, 10, base=100.0, dtype=torch.float64)
    assert cos.shape == (10, D_H // 2) and sin.shape == (10, D_H // 2) and cos.dtype == torch.float64
    p, i = 7, 3
    angle = p * 100.0 ** (-2 * i / D_H)
    assert_close(cos[p, i], torch.tensor(math.cos(angle), dtype=torch.float64), what="rope_frequencies cos[7, 3]")
    assert_close(sin[p, i], torch.tensor(math.sin(angle), dtype=torch.float64), what="rope_frequencies sin[7, 3]")
    assert positional.rope_frequencies(D_H, 10)[0].dtype == torch.float32


@pytest.mark.numerics_probe
def test_rope_frequencies_are_computed_in_float64_then_cast():
    # The stub states float64 angles cast to dtype: then cos/sin are float32 roundings of the exact
    # values (16 ulps at 1 allows 1.9e-6), while float32 angles p·θ at p = 4095 are off by ~1e-4 rad.
    cos, sin = positional.rope_frequencies(64, 4096, dtype=torch.float32)
    theta = 10000.0 ** (-2.0 * torch.arange(32, dtype=torch.float64) / 64)
    angle = torch.arange(4096, dtype=torch.float64)[:, None] * theta
    assert_close(cos, angle.cos(), magnitude=1.0, what="rope_frequencies(64, 4096) cos")
    assert_close(sin, angle.sin(), magnitude=1.0, what="rope_frequencies(64, 4096) sin")


# ----------------------------------------------------------------------------- properties


def test_norms_are_preserved():
    x = randn(B, H, T, D_H, seed=2)
    out = _rope()(x, torch.arange(10, 10 + T))
    assert_close(out.norm(dim=-1), x.norm(dim=-1), cond=float(D_H), what="norms after RoPE")


def test_scores_depend_only_on_relative_position():
    rope = _rope(max_positions=32)
    q = randn(1, 1, 1, D_H, seed=3)
    k = randn(1, 1, 1, D_H, seed=4)

    def score(m: int, n: int) -> torch.Tensor:
        return (rope(q, torch.tensor([m])) * rope(k, torch.tensor([n]))).sum()

    size = float(q.norm() * k.norm())  # a float32 dot product of this size, summed over d_h terms
    assert_close(score(3, 1), score(10, 8), magnitude=size, cond=float(D_H), what="score(3, 1) vs score(10, 8)")
    assert_close(score(0, 5), score(20, 25), magnitude=size, cond=float(D_H), what="score(0, 5) vs score(20, 25)")
    assert abs(score(3, 1) - score(3, 2)) > 1e-3                     # and it does depend on m - n


def test_equals_complex_multiplication_with_half_split_pairing():
    x = randn(B, H, T, D_H, seed=5)
    positions = torch.tensor([0, 1, 2, 7, 30, 63])
    out = _rope()(x, positions)
    assert_close(out, _complex_rope(x, positions), what="RoPE vs the complex-multiplication reference")


def test_per_row_positions_equal_slicing_a_longer_sequence():
    long = randn(B, H, 12, D_H, seed=6)
    rope = _rope()
    full = rope(long)                                                   # default positions arange(12)
    offsets = [2, 5]
    positions = torch.stack([torch.arange(o, o + T) for o in offsets])  # (B, T)
    short = torch.stack([long[b, :, o:o + T] for b, o in enumerate(offsets)])
    out = rope(short, positions)
    for b, o in enumerate(offsets):
        assert_close(out[b], _complex_rope(long, torch.arange(12))[b, :, o:o + T], what=f"row {b} at positions {o}..")
    assert_close(out, _complex_rope(short, positions), what="RoPE with (B, T) positions")
    assert_close(full, _complex_rope(long, torch.arange(12)), what="RoPE with default positions")


def test_apply_rope_accepts_shared_and_per_row_tables():
    x = randn(B, H, T, D_H, seed=7, dtype=torch.float64)
    cos, sin = positional.rope_frequencies(D_H, T, dtype=torch.float64)
    shared = positional.apply_rope(x, cos, sin)
    per_row = positional.apply_rope(x, cos.expand(B, T, D_H // 2), sin.expand(B, T, D_H // 2))
    assert shared.shape == (B, H, T, D_H) and shared.dtype == torch.float64
    want = _complex_rope(x, torch.arange(T))
    assert_close(shared, want, what="apply_rope with (T, d_h // 2) tables")
    assert_close(per_row, want, what="apply_rope with (B, T, d_h // 2) tables")


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
    assert_close(shifted, out, cond=float(H * D_H), what="RoPE attention with every position shifted by 20")
    assert not torch.allclose(m(x, is_causal=True, positions=torch.arange(T).flip(0)), out, atol=1e-3)


@pytest.mark.edge_case
def test_single_position_and_default_positions():
    x = randn(1, 1, 1, D_H, seed=10)
    assert_close(_rope()(x, torch.tensor([5])), _complex_rope(x, torch.tensor([5])), what="RoPE at position 5")
    y = randn(B, H, T, D_H, seed=11)
    assert_close(_rope()(y), _complex_rope(y, torch.arange(T)), what="RoPE with default positions")


# ----------------------------------------------------------------------------- sinusoidal


def test_sinusoidal_table():
    pe = positional.sinusoidal_positions(50, 16)
    assert pe.shape == (50, 16) and pe.dtype == torch.float32
    assert_close(pe[0], torch.tensor([0.0, 1.0] * 8), what="sinusoidal_positions row 0")
    assert (pe.abs() <= 1.0).all()
    p, i = 13, 5
    denom = 10000.0 ** (2 * i / 16)
    assert_close(pe[p, 2 * i : 2 * i + 2], torch.tensor([math.sin(p / denom), math.cos(p / denom)], dtype=torch.float64),
                 what="sinusoidal_positions[13, 10:12]")


# ----------------------------------------------------------------------------- inputs


def test_inputs_are_not_modified():
    x = randn(B, H, T, D_H, seed=12)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5], [3, 4, 5, 6, 7, 8]])
    call_leaves_inputs_unchanged(_rope(), x, positions)
    cos, sin = positional.rope_frequencies(D_H, T)
    call_leaves_inputs_unchanged(positional.apply_rope, x, cos, sin)
    call_leaves_inputs_unchanged(positional.rotate_half, x)


# ----------------------------------------------------------------------------- errors


@pytest.mark.contract
@pytest.mark.parametrize(
    "call",
    [
        lambda: positional.RotaryEmbedding(7),
        lambda: positional.rope_frequencies(5, 10),
        lambda: positional.sinusoidal_positions(4, 7),
        lambda: _rope(max_positions=8)(randn(1, 1, 2, D_H), torch.tensor([6, 8])),
        lambda: _rope()(randn(1, 1, 2, D_H), torch.tensor([-1, 0])),
        lambda: _rope()(randn(1, 1, 2, D_H), torch.tensor([0, 1, 2])),
        lambda: _rope()(randn(1, 1, 2, D_H + 2)),
        lambda: positional.rotate_half(randn(2, 3)),
    ],
    ids=["rope_odd", "freq_odd", "sinusoid_odd", "pos_too_large", "pos_negative", "pos_shape", "x_width",
         "rotate_odd"],
)
def test_invalid_inputs(call):
    with pytest.raises(ValueError):
        call()
