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
from pytest_mlcanon.testing import TOL, assert_low_precision_matches, copy_linear, randn

pytestmark = pytest.mark.canon("systems/ddp")

D_IN, D_OUT = 6, 8


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
    out = col(x)
    assert isinstance(out, torch.Tensor) and out.shape == (3, 5, D_OUT)
    torch.testing.assert_close(out, lin(x), atol=1e-6, rtol=0.0)
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
        torch.testing.assert_close(out, dense[:, 2 * r:2 * r + 2], atol=1e-6, rtol=0.0)


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
    torch.testing.assert_close(out, lin(x), atol=1e-6, rtol=0.0)
    cols = 6 // world
    assert len(row.weight_shards) == world
    for r, shard in enumerate(row.weight_shards):
        assert shard.shape == (D_OUT, cols)
        assert torch.equal(shard.detach(), lin.weight.detach()[:, r * cols:(r + 1) * cols])
    # with the bias zeroed the layer is the plain sum of partial products: the bias enters exactly once
    with torch.no_grad():
        row.bias.zero_()
    torch.testing.assert_close(out - row(x), lin.bias.detach().expand_as(out), atol=1e-6, rtol=0.0)


def test_row_parallel_takes_input_shards():
    lin = _linear()
    x = randn(5, D_IN, seed=5)
    row = tp.RowParallelLinear.from_linear(lin, 3)  # input_is_parallel=True by default
    out = row(list(x.split(2, dim=-1)))
    torch.testing.assert_close(out, lin(x), atol=1e-6, rtol=0.0)
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
    torch.testing.assert_close(out, fc2(F.gelu(fc1(x))), **TOL.COMPOSITE.kw())
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
    tol = TOL.COMPOSITE.kw()
    for r in range(world):
        torch.testing.assert_close(mlp.fc1.weight_shards[r].grad, fc1.weight.grad[r * h:(r + 1) * h], **tol)
        torch.testing.assert_close(mlp.fc1.bias_shards[r].grad, fc1.bias.grad[r * h:(r + 1) * h], **tol)
        torch.testing.assert_close(mlp.fc2.weight_shards[r].grad, fc2.weight.grad[:, r * h:(r + 1) * h], **tol)
    torch.testing.assert_close(mlp.fc2.bias.grad, fc2.bias.grad, **tol)
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
    torch.testing.assert_close(mlp(x), fc2(F.gelu(fc1(x))), **TOL.COMPOSITE.kw())
    torch.testing.assert_close(mlp(x[None]), fc2(F.gelu(fc1(x[None]))), **TOL.COMPOSITE.kw())


# --- errors ----------------------------------------------------------------------------------------------


@pytest.mark.edge_case
def test_indivisible_widths_and_bad_world():
    with pytest.raises(ValueError, match="out_features"):
        tp.ColumnParallelLinear(6, 7, world=2)
    with pytest.raises(ValueError, match="in_features"):
        tp.RowParallelLinear(7, 6, world=2)
    with pytest.raises(ValueError, match="world"):
        tp.ColumnParallelLinear(6, 8, world=0)
    with pytest.raises(ValueError, match="out_features"):
        tp.ColumnParallelLinear.from_linear(nn.Linear(4, 6), 4)
    with pytest.raises(ValueError, match="out_features"):
        tp.ParallelMLP(nn.Linear(8, 6), nn.Linear(6, 8), 4)


@pytest.mark.edge_case
def test_wrong_inputs():
    lin = _linear()
    row = tp.RowParallelLinear.from_linear(lin, 3)
    x = randn(2, D_IN, seed=16)
    with pytest.raises(ValueError, match="x"):
        row(list(x.split(3, dim=-1)))  # 2 shards for world 3
    with pytest.raises(ValueError, match="x"):
        row([x[:, :2], x[:, 2:4], x[:, 4:5]])  # a shard of the wrong width
    col = tp.ColumnParallelLinear.from_linear(lin, 2)
    with pytest.raises(ValueError, match="x"):
        col(randn(2, D_IN + 1, seed=17))
    with pytest.raises(ValueError, match="x"):
        tp.RowParallelLinear.from_linear(lin, 2, input_is_parallel=False)(randn(2, D_IN - 1, seed=18))
