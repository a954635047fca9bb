"""Canon #57 (part 2): tensor-parallel linear layers (Megatron-LM style), with the ranks simulated in one process.

A linear layer ``y = x W^T + b`` with ``W`` of shape ``(out, in)`` can be split across ``world`` ranks in two
ways. **Column parallel** splits the output features: rank ``r`` holds rows ``[r*out/world, (r+1)*out/world)``
of ``W`` (and of ``b``) and computes its slice of ``y`` from the full ``x``; concatenating the slices (an
all-gather) gives ``y``. **Row parallel** splits the input features: rank ``r`` holds columns
``[r*in/world, (r+1)*in/world)`` of ``W`` and multiplies its slice of ``x``; each rank gets a *partial* product
of full width ``out``, and their sum (an all-reduce) is ``y``. The list of per-rank tensors stands for
the ranks; a Python ``sum`` over it stands for the all-reduce.

The subtle point an interviewer probes is the **bias of the row-parallel layer**: it must be added
once, after the all-reduce. Adding it on every rank before the sum adds it ``world`` times. The second
point is why the Megatron MLP pairs a column layer (without gather) with a row layer: GELU is
element-wise, so each rank applies it to its own ``d_ff/world`` hidden slice and feeds it straight
into its row shard, and the whole MLP costs **one** all-reduce per forward instead of an all-gather
plus a split.

Shape letters: ``world`` ranks, ``...`` leading batch/time dims, ``in``/``out`` feature widths
(``in//world``, ``out//world`` per rank).

Trade-off: splitting weights instead of replicating them divides the parameter memory per rank by
``world`` (an 8.03e9-parameter model at 16 training bytes per parameter needs 119.66 GiB replicated,
seed 001, and 29.9 GiB per rank at ``world = 4``), at the price of an all-reduce of the ``(..., out)``
activation in every MLP forward and backward, which is why tensor parallelism stays inside a node
with fast links rather than across nodes.

What to test: the column layer gathered equals ``linear(x)`` and shard ``r`` equals the matching rows of
``W``; the row layer equals ``linear(x)`` with the bias added once; ``ParallelMLP`` equals
``fc2(gelu(fc1(x)))``, counts one all-reduce per forward, and its shard gradients equal the matching
slices of the dense gradients.
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
        _check_sizes(in_features, out_features, world, "out_features")
        self.in_features, self.out_features, self.world = in_features, out_features, world
        self.gather_output = gather_output
        dense = _dense_init(in_features, out_features, bias)
        self._load(dense.weight.detach(), None if dense.bias is None else dense.bias.detach())

    def _load(self, weight: Tensor, bias: Tensor | None) -> None:
        """Split a dense ``(out, in)`` weight (and ``(out,)`` bias) into ``world`` row blocks, copied."""
        w_chunks = list(weight.chunk(self.world, dim=0))               # list[world]
        self.weight_shards = nn.ParameterList(nn.Parameter(w.clone()) for w in w_chunks)
        if bias is None:
            self.bias_shards = None
        else:
            b_chunks = list(bias.chunk(self.world, dim=0))             # list[world]
            self.bias_shards = nn.ParameterList(nn.Parameter(b.clone()) for b in b_chunks)

    @classmethod
    def from_linear(cls, linear: nn.Linear, world: int, gather_output: bool = True) -> ColumnParallelLinear:
        """Shard an existing ``nn.Linear`` (its tensors are copied; ``linear`` is not modified)."""
        layer = cls(linear.in_features, linear.out_features, world, bias=linear.bias is not None,
                    gather_output=gather_output)
        with torch.no_grad():
            layer._load(linear.weight.detach(), None if linear.bias is None else linear.bias.detach())
        return layer

    def forward(self, x: Tensor) -> Tensor | list[Tensor]:
        """``x (..., in)`` -> ``(..., out)`` when gathering, else ``list[world]`` of ``(..., out/world)``.

        Raises ValueError when the last dim of ``x`` is not ``in_features``. ``x`` is not modified.
        """
        _check_input(x, self.in_features)
        outputs = []
        for r, weight in enumerate(self.weight_shards):
            y = x @ weight.mT                        # (..., out//world)
            if self.bias_shards is not None:
                y = y + self.bias_shards[r]          # (..., out//world)
            outputs.append(y)
        if not self.gather_output:
            return outputs
        return torch.cat(outputs, dim=-1)            # (..., out)


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
        _check_sizes(in_features, out_features, world, "in_features")
        self.in_features, self.out_features, self.world = in_features, out_features, world
        self.input_is_parallel = input_is_parallel
        dense = _dense_init(in_features, out_features, bias)
        self._load(dense.weight.detach(), None if dense.bias is None else dense.bias.detach())

    def _load(self, weight: Tensor, bias: Tensor | None) -> None:
        """Split a dense ``(out, in)`` weight into ``world`` column blocks; keep the bias whole. Copies."""
        w_chunks = list(weight.chunk(self.world, dim=1))               # list[world]
        self.weight_shards = nn.ParameterList(nn.Parameter(w.clone()) for w in w_chunks)
        self.bias = None if bias is None else nn.Parameter(bias.clone())

    @classmethod
    def from_linear(cls, linear: nn.Linear, world: int, input_is_parallel: bool = True) -> RowParallelLinear:
        """Shard an existing ``nn.Linear`` (its tensors are copied; ``linear`` is not modified)."""
        layer = cls(linear.in_features, linear.out_features, world, bias=linear.bias is not None,
                    input_is_parallel=input_is_parallel)
        with torch.no_grad():
            layer._load(linear.weight.detach(), None if linear.bias is None else linear.bias.detach())
        return layer

    def forward(self, x: Tensor | list[Tensor]) -> Tensor:
        """Sum over ranks of ``x_r @ W_r^T`` (the all-reduce), plus the bias once: ``-> (..., out)``.

        Args:
            x: ``list[world]`` of ``(..., in/world)`` when ``input_is_parallel``, else a ``(..., in)`` tensor.

        Raises:
            ValueError: a tensor where shards are expected or the reverse, a wrong number of shards, a
                shard or input of the wrong width, or shards whose leading shapes differ. ``x`` is not modified.
        """
        width = self.in_features // self.world
        if self.input_is_parallel:
            _check_shard_list(x, self.world)
            shards = list(x)
        else:
            _check_input(x, self.in_features)
            shards = list(x.split(width, dim=-1))                      # list[world]
        _check_shards(shards, width)
        partials = [s @ w.mT for s, w in zip(shards, self.weight_shards)]  # list[world]
        y = torch.stack(partials, dim=0).sum(dim=0)  # (..., out)
        if self.bias is not None:
            y = y + self.bias                        # (..., out)
        return y


class ParallelMLP(nn.Module):
    """The Megatron MLP ``fc2(gelu(fc1(x)))``: column-parallel ``fc1`` (no gather), GELU, row-parallel ``fc2``.

    The GELU is the exact (erf) one, ``F.gelu``'s default (the tanh approximation differs by about 1e-4).

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
        _check_chain(fc1, fc2)
        self.fc1 = ColumnParallelLinear.from_linear(fc1, world, gather_output=False)
        self.fc2 = RowParallelLinear.from_linear(fc2, world, input_is_parallel=True)
        self.n_all_reduce = 0

    def forward(self, x: Tensor) -> Tensor:
        """``x (..., d)`` -> ``(..., d)``; each rank's hidden slice ``(..., d_ff/world)`` stays on its rank."""
        hidden = self.fc1(x)                                           # list[world]
        activated = [F.gelu(h) for h in hidden]                        # list[world]
        self.n_all_reduce += 1
        return self.fc2(activated)                   # (..., d)


def _check_input(x: Tensor, in_features: int) -> None:
    if not isinstance(x, Tensor) or x.ndim == 0 or x.shape[-1] != in_features:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must be a tensor ending in in_features={in_features}, got {shape}")


def _check_shard_list(x: object, world: int) -> None:
    if not isinstance(x, (list, tuple)) or len(x) != world:
        count = len(x) if isinstance(x, (list, tuple)) else type(x).__name__
        raise ValueError(f"x must be a list of world={world} input shards, got {count}")


def _check_shards(shards: list[Tensor], width: int) -> None:
    for r, shard in enumerate(shards):
        if not isinstance(shard, Tensor) or shard.ndim == 0 or shard.shape[-1] != width:
            raise ValueError(f"x[{r}] must end in in_features/world={width}")
        if shard.shape[:-1] != shards[0].shape[:-1]:
            raise ValueError(f"x[{r}] has leading shape {tuple(shard.shape[:-1])}, x[0] has "
                             f"{tuple(shards[0].shape[:-1])}")


def _check_chain(fc1: nn.Linear, fc2: nn.Linear) -> None:
    if fc2.in_features != fc1.out_features:
        raise ValueError(f"fc2.in_features={fc2.in_features} must equal fc1.out_features={fc1.out_features}")


def _check_sizes(in_features: int, out_features: int, world: int, split: str) -> None:
    """``world >= 1``, positive widths, and the split width divisible by ``world``."""
    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise ValueError(f"world must be an int >= 1, got {world!r}")
    for name, value in (("in_features", in_features), ("out_features", out_features)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    size = out_features if split == "out_features" else in_features
    if size % world != 0:
        raise ValueError(f"{split}={size} must be divisible by world={world}")


def _dense_init(in_features: int, out_features: int, bias: bool) -> nn.Linear:
    """An ``nn.Linear`` initialised as torch does; its tensors are split into shards."""
    return nn.Linear(in_features, out_features, bias=bias)
