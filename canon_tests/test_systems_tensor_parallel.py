"""Reference tests for #57 (part 2), tensor-parallel linear layers: column and row splits against a dense
``nn.Linear``, and the Megatron MLP (one all-reduce per forward, shard gradients = dense slices).

Beyond the spec's names, the tests read ``ColumnParallelLinear.bias_shards``, ``RowParallelLinear.bias`` and
``ParallelMLP.fc1`` / ``ParallelMLP.fc2`` (the column and row layers, named after the constructor arguments)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from canon_refs.systems import tensor_parallel_toy as tp
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    copy_linear,
    randn,
)

pytestmark = pytest.mark.canon("systems/ddp")

D_IN, D_OUT = 6, 8


def _scale(lin: nn.Linear, x: torch.Tensor) -> float:
    """The size of the terms of ``lin(x)``: ``max (|x| @ |W|^T + |b|)``; a sharded matmul sums them in
    another order, so the outputs agree to a few ulps of that."""
    with torch.no_grad():
        terms = x.abs() @ lin.weight.abs().T
        if lin.bias is not None:
            terms = terms + lin.bias.abs()
    return float(terms.max())


def _mlp_scale(fc1: nn.Linear, fc2: nn.Linear, x: torch.Tensor) -> float:
    """The size of the terms of ``fc2(gelu(fc1(x)))`` (|gelu(h)| <= |h|)."""
    with torch.no_grad():
        hidden = x.abs() @ fc1.weight.abs().T + fc1.bias.abs()
        return float((hidden @ fc2.weight.abs().T + fc2.bias.abs()).max())


def _linear(d_in: int = D_IN, d_out: int = D_OUT, bias: bool = True, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    lin = nn.Linear(d_in, d_out, bias=bias)
    if bias:
        copy_linear(lin, lin.weight, randn(d_out, seed=seed + 50))  # a clearly non-zero bias
    return lin


# --- column parallel -------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 4])
def test_column_parallel_gather_equals_linear(world):
    lin = _linear()
    x = randn(3, 5, D_IN, seed=1)
    col = tp.ColumnParallelLinear.from_linear(lin, world)
    out = call_leaves_inputs_unchanged(col, x)
    assert isinstance(out, torch.Tensor) and out.shape == (3, 5, D_OUT)
    assert_close(out, lin(x), magnitude=_scale(lin, x), what=f"ColumnParallelLinear(world={world}) vs Linear")
    assert len(col.weight_shards) == world
    rows = D_OUT // world
    for r, shard in enumerate(col.weight_shards):
        assert shard.shape == (rows, D_IN)
        assert torch.equal(shard.detach(), lin.weight.detach()[r * rows:(r + 1) * rows])
        assert torch.equal(col.bias_shards[r].detach(), lin.bias.detach()[r * rows:(r + 1) * rows])


def test_column_parallel_without_gather_returns_the_slices():
    lin = _linear()
    x = randn(4, D_IN, seed=2)
    outs = tp.ColumnParallelLinear.from_linear(lin, 4, gather_output=False)(x)
    assert isinstance(outs, list) and len(outs) == 4
    dense = lin(x)
    for r, out in enumerate(outs):
        assert out.shape == (4, 2)
        assert_close(out, dense[:, 2 * r:2 * r + 2], magnitude=_scale(lin, x), what=f"column shard {r}")


def test_from_linear_copies_and_constructor_shapes():
    lin = _linear()
    before = lin.weight.detach().clone()
    col = tp.ColumnParallelLinear.from_linear(lin, 2)
    with torch.no_grad():
        col.weight_shards[0].add_(1.0)
    assert torch.equal(lin.weight.detach(), before), "from_linear must copy, not view, the dense weight"
    fresh = tp.ColumnParallelLinear(D_IN, D_OUT, world=4, bias=False)
    assert [tuple(w.shape) for w in fresh.weight_shards] == [(2, D_IN)] * 4
    assert fresh(randn(3, D_IN, seed=3)).shape == (3, D_OUT)
    assert all(w.dtype == torch.float32 for w in fresh.weight_shards)
    n_params = sum(p.numel() for p in tp.ColumnParallelLinear(D_IN, D_OUT, world=2).parameters())
    assert n_params == D_IN * D_OUT + D_OUT


# --- row parallel ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3])
def test_row_parallel_equals_linear_with_bias_once(world):
    lin = _linear(d_in=6)
    x = randn(2, 7, 6, seed=4)
    row = tp.RowParallelLinear.from_linear(lin, world, input_is_parallel=False)
    out = row(x)
    assert out.shape == (2, 7, D_OUT)
    assert_close(out, lin(x), magnitude=_scale(lin, x), what=f"RowParallelLinear(world={world}) vs Linear")
    cols = 6 // world
    assert len(row.weight_shards) == world
    for r, shard in enumerate(row.weight_shards):
        assert shard.shape == (D_OUT, cols)
        assert torch.equal(shard.detach(), lin.weight.detach()[:, r * cols:(r + 1) * cols])
    # with the bias zeroed the layer is the plain sum of partial products: the bias enters exactly once
    with torch.no_grad():
        row.bias.zero_()
    assert_close(out - row(x), lin.bias.detach().expand_as(out), magnitude=_scale(lin, x),
                 what="the bias enters the row-parallel output once")


def test_row_parallel_takes_input_shards():
    lin = _linear()
    x = randn(5, D_IN, seed=5)
    row = tp.RowParallelLinear.from_linear(lin, 3)  # input_is_parallel=True by default
    out = call_leaves_inputs_unchanged(row, list(x.split(2, dim=-1)))
    assert_close(out, lin(x), magnitude=_scale(lin, x), what="RowParallelLinear(input shards) vs Linear")
    assert row.bias.shape == (D_OUT,)


# --- the Megatron MLP -------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 4])
def test_parallel_mlp_equals_dense_and_counts_one_all_reduce(world):
    fc1, fc2 = _linear(8, 16, seed=6), _linear(16, 8, seed=7)
    x = randn(3, 4, 8, seed=8)
    mlp = tp.ParallelMLP(fc1, fc2, world)
    assert mlp.n_all_reduce == 0
    out = mlp(x)
    assert out.shape == (3, 4, 8)
    assert_close(out, fc2(F.gelu(fc1(x))), magnitude=_mlp_scale(fc1, fc2, x), what=f"ParallelMLP(world={world})")
    assert mlp.n_all_reduce == 1
    mlp(x)
    mlp(x[:1])
    assert mlp.n_all_reduce == 3, "the Megatron MLP issues exactly one all-reduce per forward"


def test_parallel_mlp_shard_gradients_are_dense_slices():
    world = 4
    fc1, fc2 = _linear(8, 16, seed=9), _linear(16, 8, seed=10)
    x = randn(6, 8, seed=11)
    target = randn(6, 8, seed=12)
    mlp = tp.ParallelMLP(fc1, fc2, world)
    F.mse_loss(mlp(x), target).backward()
    F.mse_loss(fc2(F.gelu(fc1(x))), target).backward()
    h = 16 // world
    # a gradient entry sums over the batch (6) and the hidden width (16) terms of about the size of the
    # largest dense gradient: compare at that size, condition 16
    scale = float(max(g.abs().max() for g in (fc1.weight.grad, fc1.bias.grad, fc2.weight.grad, fc2.bias.grad)))

    def close(got, want, what):
        assert_close(got, want, magnitude=scale, cond=16, what=what)

    for r in range(world):
        close(mlp.fc1.weight_shards[r].grad, fc1.weight.grad[r * h:(r + 1) * h], f"fc1 weight shard {r} gradient")
        close(mlp.fc1.bias_shards[r].grad, fc1.bias.grad[r * h:(r + 1) * h], f"fc1 bias shard {r} gradient")
        close(mlp.fc2.weight_shards[r].grad, fc2.weight.grad[:, r * h:(r + 1) * h], f"fc2 weight shard {r} gradient")
    close(mlp.fc2.bias.grad, fc2.bias.grad, "fc2 bias gradient")
    assert sum(p.numel() for p in mlp.parameters()) == sum(p.numel() for p in (*fc1.parameters(), *fc2.parameters()))


@pytest.mark.numerics_probe
def test_low_precision_probe():
    fc1, fc2 = _linear(8, 16, seed=19), _linear(16, 8, seed=20)
    mlp = tp.ParallelMLP(fc1, fc2, 2)

    def forward(x):
        return copy.deepcopy(mlp).to(x.dtype)(x)

    assert_low_precision_matches(forward, randn(4, 8, seed=21))


@pytest.mark.edge_case
def test_batch_of_one_and_unbatched_input():
    fc1, fc2 = _linear(8, 16, seed=13), _linear(16, 8, seed=14)
    mlp = tp.ParallelMLP(fc1, fc2, 2)
    x = randn(8, seed=15)
    scale = _mlp_scale(fc1, fc2, x)
    assert_close(mlp(x), fc2(F.gelu(fc1(x))), magnitude=scale, what="ParallelMLP(unbatched input)")
    assert_close(mlp(x[None]), fc2(F.gelu(fc1(x[None]))), magnitude=scale, what="ParallelMLP(batch of one)")


# --- errors ----------------------------------------------------------------------------------------------


@pytest.mark.contract
def test_indivisible_widths_and_bad_world():
    with pytest.raises(ValueError):
        tp.ColumnParallelLinear(6, 7, world=2)
    with pytest.raises(ValueError):
        tp.RowParallelLinear(7, 6, world=2)
    with pytest.raises(ValueError):
        tp.ColumnParallelLinear(6, 8, world=0)
    with pytest.raises(ValueError):
        tp.ColumnParallelLinear.from_linear(nn.Linear(4, 6), 4)
    with pytest.raises(ValueError):
        tp.ParallelMLP(nn.Linear(8, 6), nn.Linear(6, 8), 4)


@pytest.mark.contract
def test_wrong_inputs():
    lin = _linear()
    row = tp.RowParallelLinear.from_linear(lin, 3)
    x = randn(2, D_IN, seed=16)
    with pytest.raises(ValueError):
        row(list(x.split(3, dim=-1)))  # 2 shards for world 3
    with pytest.raises(ValueError):
        row([x[:, :2], x[:, 2:4], x[:, 4:5]])  # a shard of the wrong width
    col = tp.ColumnParallelLinear.from_linear(lin, 2)
    with pytest.raises(ValueError):
        col(randn(2, D_IN + 1, seed=17))
    with pytest.raises(ValueError):
        tp.RowParallelLinear.from_linear(lin, 2, input_is_parallel=False)(randn(2, D_IN - 1, seed=18))
