"""Canon #57 (part 2): tensor-parallel linear layers (Megatron-LM style), with the ranks ...

Plan: Megatron's split of Y = X W^T. Column-parallel splits W's output rows, so each rank computes
its own output slice with no communication (an all-gather only if the full output is needed).
Row-parallel splits W's input columns, so each rank computes a partial sum and one all-reduce adds
them. Column then row lets an elementwise GELU run on local slices: one all-reduce per MLP.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["ColumnParallelLinear", "ParallelMLP", "RowParallelLinear"]


class ColumnParallelLinear(nn.Module):
    """``Linear(in, out)`` with the output features split across ``world`` ranks.

    Args:
        in_features, out_features: widths; ``out_features % world == 0``.
        world: number of simulated ranks, ``>= 1``.
        bias: whether each shard has a bias slice ``(out/world,)``.
        gather_output: concatenate the shards' outputs (an all-gather) into ``(..., out)``; otherwise
            return the ``world`` slices ``(..., out/world)``, as the first layer of ``ParallelMLP`` does.

    Attributes: ``weight_shards`` (``ParameterList`` of ``world`` tensors ``(out/world, in)``, shard ``r`` =
    rows ``[r*out/world, (r+1)*out/world)`` of the dense weight); ``bias_shards`` (``(out/world,)`` each) or
    None. Parameters are float32 and initialised like ``nn.Linear``.
    Raises ValueError for ``world < 1``, a non-positive width or ``out_features % world != 0``.
    Source: Shoeybi et al. 2019 (Megatron-LM), section 3.
    """

    def __init__(self, in_features: int, out_features: int, world: int, bias: bool = True,
                 gather_output: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features, self.world = in_features, out_features, world
        self.gather_output = gather_output
        dense = nn.Linear(in_features, out_features, bias=bias)      # nn.Linear's init, then shard
        self.weight_shards = nn.ParameterList(
            [nn.Parameter(w.clone()) for w in dense.weight.detach().chunk(world, dim=0)])
        self.bias_shards = (nn.ParameterList([nn.Parameter(b.clone()) for b in dense.bias.detach().chunk(world)])
                            if bias else None)

    @classmethod
    def from_linear(cls, linear: nn.Linear, world: int, gather_output: bool = True) -> ColumnParallelLinear:
        """Shard an existing ``nn.Linear`` (its tensors are copied; ``linear`` is not modified)."""
        layer = cls(linear.in_features, linear.out_features, world, bias=linear.bias is not None,
                    gather_output=gather_output)
        with torch.no_grad():
            for shard, w in zip(layer.weight_shards, linear.weight.detach().chunk(world, dim=0)):
                shard.copy_(w)
            if linear.bias is not None:
                for shard, b in zip(layer.bias_shards, linear.bias.detach().chunk(world)):
                    shard.copy_(b)
        return layer

    def forward(self, x: Tensor) -> Tensor | list[Tensor]:
        """``x (..., in)`` -> ``(..., out)`` when gathering, else ``list[world]`` of ``(..., out/world)``.

        Raises ValueError when the last dim of ``x`` is not ``in_features``.
        """
        outs = [F.linear(x, w, None if self.bias_shards is None else self.bias_shards[r])
                for r, w in enumerate(self.weight_shards)]            # world x (..., out/world)
        return torch.cat(outs, dim=-1) if self.gather_output else outs


class RowParallelLinear(nn.Module):
    """``Linear(in, out)`` with the input features split across ``world`` ranks; outputs are summed.

    Args:
        in_features, out_features: widths; ``in_features % world == 0``.
        world: number of simulated ranks, ``>= 1``.
        bias: one ``(out,)`` bias, added once after the all-reduce.
        input_is_parallel: ``forward`` takes ``list[world]`` input slices ``(..., in/world)`` (the output of
            a non-gathering column layer); otherwise it takes the full ``(..., in)`` and splits it.

    Attributes: ``weight_shards`` (``ParameterList`` of ``(out, in/world)``, shard ``r`` = columns
    ``[r*in/world, (r+1)*in/world)`` of the dense weight); ``bias`` ``(out,)`` or None. Float32, ``nn.Linear`` init.
    Raises ValueError for ``world < 1``, a non-positive width or ``in_features % world != 0``.
    Source: Shoeybi et al. 2019 (Megatron-LM), section 3.
    """

    def __init__(self, in_features: int, out_features: int, world: int, bias: bool = True,
                 input_is_parallel: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features, self.world = in_features, out_features, world
        self.input_is_parallel = input_is_parallel
        dense = nn.Linear(in_features, out_features, bias=bias)
        self.weight_shards = nn.ParameterList(
            [nn.Parameter(w.clone()) for w in dense.weight.detach().chunk(world, dim=1)])
        self.bias = nn.Parameter(dense.bias.detach().clone()) if bias else None

    @classmethod
    def from_linear(cls, linear: nn.Linear, world: int, input_is_parallel: bool = True) -> RowParallelLinear:
        """Shard an existing ``nn.Linear`` (its tensors are copied; ``linear`` is not modified)."""
        layer = cls(linear.in_features, linear.out_features, world, bias=linear.bias is not None,
                    input_is_parallel=input_is_parallel)
        with torch.no_grad():
            for shard, w in zip(layer.weight_shards, linear.weight.detach().chunk(world, dim=1)):
                shard.copy_(w)
            if linear.bias is not None:
                layer.bias.copy_(linear.bias)
        return layer

    def forward(self, x: Tensor | list[Tensor]) -> Tensor:
        """Sum over ranks of ``x_r @ W_r^T`` (the all-reduce), plus the bias once: ``-> (..., out)``.

        Args:
            x: ``list[world]`` of ``(..., in/world)`` when ``input_is_parallel``, else a ``(..., in)`` tensor.

        Raises:
            ValueError: a tensor where shards are expected or the reverse, a wrong number of shards, a
                shard or input of the wrong width, or shards whose leading shapes differ.
        """
        xs = x if self.input_is_parallel else list(x.chunk(self.world, dim=-1))
        out = sum(F.linear(x_r, w) for x_r, w in zip(xs, self.weight_shards))   # the all-reduce (sum)
        return out + self.bias if self.bias is not None else out


class ParallelMLP(nn.Module):
    """The Megatron MLP ``fc2(gelu(fc1(x)))``: column-parallel ``fc1`` (no gather), GELU, row-parallel ``fc2``.

    Args:
        fc1: dense ``Linear(d, d_ff)``; ``d_ff % world == 0``. Copied, not modified.
        fc2: dense ``Linear(d_ff, d)``. Copied, not modified.
        world: number of simulated ranks.

    Attributes: ``fc1`` (``ColumnParallelLinear``, ``gather_output=False``), ``fc2``
    (``RowParallelLinear``, ``input_is_parallel=True``), ``n_all_reduce`` (collectives issued so far:
    one per forward, the sum inside ``fc2``; the hidden activation is never gathered).
    Raises ValueError when ``fc2.in_features != fc1.out_features`` or a width is not divisible by ``world``.
    Source: Shoeybi et al. 2019 (Megatron-LM), figure 3a.
    """

    def __init__(self, fc1: nn.Linear, fc2: nn.Linear, world: int) -> None:
        super().__init__()
        self.fc1 = ColumnParallelLinear.from_linear(fc1, world, gather_output=False)
        self.fc2 = RowParallelLinear.from_linear(fc2, world, input_is_parallel=True)
        self.n_all_reduce = 0

    def forward(self, x: Tensor) -> Tensor:
        """``x (..., d)`` -> ``(..., d)``; each rank's hidden slice ``(..., d_ff/world)`` stays on its rank."""
        hidden = [F.gelu(h) for h in self.fc1(x)]      # each (..., d_ff/world), stays on its rank
        self.n_all_reduce += 1
        return self.fc2(hidden)
