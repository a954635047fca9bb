"""Alternative tensor-parallel layers (canon #57), written differently from the reference.

* Shards are made with ``torch.tensor_split`` and products with ``torch.einsum`` instead of ``@``.
* The row-parallel all-reduce is a running sum in rank order instead of ``stack().sum()``.
* The column gather writes each rank's slice into a preallocated output instead of ``cat``.

Shapes: ``world`` ranks, ``...`` leading dims, ``in``/``out`` widths.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _validate(in_f, out_f, world, which):
    if world < 1:
        raise ValueError("world must be >= 1")
    if which == "out" and out_f % world:
        raise ValueError("out_features must be divisible by world")
    if which == "in" and in_f % world:
        raise ValueError("in_features must be divisible by world")


class ColumnParallelLinear(nn.Module):
    """Output features split over ranks."""

    def __init__(self, in_features, out_features, world, bias=True, gather_output=True):
        super().__init__()
        _validate(in_features, out_features, world, "out")
        self.in_features, self.out_features, self.world = in_features, out_features, world
        self.gather_output = gather_output
        ref = nn.Linear(in_features, out_features, bias=bias)
        self._set(ref.weight.data, None if ref.bias is None else ref.bias.data)

    def _set(self, w, b):
        self.weight_shards = nn.ParameterList([nn.Parameter(s.clone()) for s in torch.tensor_split(w, self.world, 0)])
        self.bias_shards = None if b is None else nn.ParameterList(
            [nn.Parameter(s.clone()) for s in torch.tensor_split(b, self.world, 0)])

    @classmethod
    def from_linear(cls, linear, world, gather_output=True):
        """Copy-shard ``linear``."""
        m = cls(linear.in_features, linear.out_features, world, linear.bias is not None, gather_output)
        m._set(linear.weight.data, None if linear.bias is None else linear.bias.data)
        return m

    def forward(self, x):
        """(..., in) -> (..., out) or list of (..., out/world)."""
        if x.shape[-1] != self.in_features:
            raise ValueError("x has the wrong width")
        parts = []
        for r in range(self.world):
            part = torch.einsum("...i,oi->...o", x, self.weight_shards[r])  # (..., out//world)
            if self.bias_shards is not None:
                part = part + self.bias_shards[r]
            parts.append(part)
        if not self.gather_output:
            return parts
        width = self.out_features // self.world
        out = x.new_zeros(*x.shape[:-1], self.out_features)            # (..., out)
        for r, part in enumerate(parts):
            out[..., r * width:(r + 1) * width] = part
        return out


class RowParallelLinear(nn.Module):
    """Input features split over ranks; partial sums reduced in rank order."""

    def __init__(self, in_features, out_features, world, bias=True, input_is_parallel=True):
        super().__init__()
        _validate(in_features, out_features, world, "in")
        self.in_features, self.out_features, self.world = in_features, out_features, world
        self.input_is_parallel = input_is_parallel
        ref = nn.Linear(in_features, out_features, bias=bias)
        self._set(ref.weight.data, None if ref.bias is None else ref.bias.data)

    def _set(self, w, b):
        self.weight_shards = nn.ParameterList([nn.Parameter(s.clone()) for s in torch.tensor_split(w, self.world, 1)])
        self.bias = None if b is None else nn.Parameter(b.clone())

    @classmethod
    def from_linear(cls, linear, world, input_is_parallel=True):
        """Copy-shard ``linear``."""
        m = cls(linear.in_features, linear.out_features, world, linear.bias is not None, input_is_parallel)
        m._set(linear.weight.data, None if linear.bias is None else linear.bias.data)
        return m

    def forward(self, x):
        """Sum of partial products plus bias once."""
        width = self.in_features // self.world
        if self.input_is_parallel:
            if not isinstance(x, (list, tuple)) or len(x) != self.world:
                raise ValueError("x must hold one shard per rank")
            pieces = list(x)
        else:
            if x.shape[-1] != self.in_features:
                raise ValueError("x has the wrong width")
            pieces = list(torch.tensor_split(x, self.world, dim=-1))   # list[world]
        if any(p.shape[-1] != width for p in pieces):
            raise ValueError("x shards have the wrong width")
        total = None
        for piece, w in zip(pieces, self.weight_shards):
            partial = torch.einsum("...i,oi->...o", piece, w)          # (..., out)
            total = partial if total is None else total + partial
        return total if self.bias is None else total + self.bias


class ParallelMLP(nn.Module):
    """column (no gather) -> GELU per shard -> row."""

    def __init__(self, fc1, fc2, world):
        super().__init__()
        if fc1.out_features != fc2.in_features:
            raise ValueError("fc1.out_features must equal fc2.in_features")
        self.fc1 = ColumnParallelLinear.from_linear(fc1, world, gather_output=False)
        self.fc2 = RowParallelLinear.from_linear(fc2, world, input_is_parallel=True)
        self.n_all_reduce = 0

    def forward(self, x):
        """(..., d) -> (..., d) with one all-reduce."""
        out = self.fc2([F.gelu(h) for h in self.fc1(x)])               # (..., d)
        self.n_all_reduce = self.n_all_reduce + 1
        return out
