"""Canon #57 (part 1): data-parallel training by hand, with the ranks simulated ...

Plan: each rank holds an identical replica and a contiguous, equal shard of the batch; after the
local backward the gradients are averaged (all-reduce mean), which equals the full-batch gradient
because equal shards make the mean of shard means the global mean. Identical gradients + identical
optimizers keep the replicas in sync without ever broadcasting weights again.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor, nn

__all__ = ["SimulatedDDP", "all_reduce_mean", "allreduce_gradients", "shard_indices"]


def shard_indices(n: int, world: int, rank: int) -> Tensor:
    """The contiguous block of sample indices owned by ``rank``: ``[rank*n/world, (rank+1)*n/world)``.

    Args:
        n: number of samples, divisible by ``world``.
        world: number of ranks, ``>= 1``.
        rank: this rank, in ``[0, world)``.

    Returns:
        ``(n/world,)`` ``torch.long`` indices.

    Raises:
        ValueError: ``world < 1``; ``rank`` outside ``[0, world)``; ``n`` negative or not divisible by
            ``world`` (unequal shards would break the mean-of-means identity).
    """
    per = n // world
    return torch.arange(rank * per, (rank + 1) * per, dtype=torch.long)


def all_reduce_mean(per_rank: list[Tensor]) -> list[Tensor]:
    """Simulated all-reduce (mean): every rank receives ``sum(per_rank) / world`` as a new tensor.

    Args:
        per_rank: ``world`` tensors of one shape ``(...)`` and dtype, one per rank. Not modified.

    Returns:
        ``list[world]`` of independent ``(...)`` tensors, bitwise equal to each other, in the input dtype.
        float16/bfloat16 are summed in float32 (upcast): two fp16 gradients of 6e4 sum to 1.2e5, past
        the fp16 maximum 65504, so a plain fp16 sum returns inf where the mean is a finite 6e4.

    Raises:
        ValueError: ``per_rank`` empty, not tensors, or of mismatched shapes or dtypes.
    """
    dtype = per_rank[0].dtype
    acc_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    total = per_rank[0].to(acc_dtype).clone()
    for t in per_rank[1:]:
        total += t.to(acc_dtype)
    mean = (total / len(per_rank)).to(dtype)
    return [mean.clone() for _ in per_rank]


class SimulatedDDP:
    """``world`` replicas of one model trained data-parallel in a single process.

    Args:
        model: the module to replicate; it is deep-copied ``world`` times and never modified itself.
        world: number of simulated ranks, ``>= 1``.
        lr: learning rate, finite and ``> 0``.
        optimizer: ``"sgd"`` (``torch.optim.SGD(lr)``, no momentum) or ``"adamw"``
            (``torch.optim.AdamW(lr)`` with torch's defaults), one instance per replica.

    Attributes: ``replicas`` (``list[world]`` of modules), ``optimizers`` (``list[world]``), ``world``.
    Raises ValueError for ``world < 1``, a bad ``lr`` or an unknown ``optimizer``.
    Source: Li et al. 2020, "PyTorch Distributed: Experiences on Accelerating Data Parallel Training".
    """

    def __init__(self, model: nn.Module, world: int, lr: float, optimizer: Literal["sgd", "adamw"] = "sgd") -> None:
        self.world = world
        self.replicas = [copy.deepcopy(model) for _ in range(world)]
        if optimizer == "sgd":
            self.optimizers = [torch.optim.SGD(m.parameters(), lr=lr) for m in self.replicas]
        else:
            self.optimizers = [torch.optim.AdamW(m.parameters(), lr=lr) for m in self.replicas]

    def train_step(self, x: Tensor, y: Tensor, loss_fn: Callable[[Tensor, Tensor], Tensor]) -> float:
        """One data-parallel step on the global batch ``x (B, ...)``, ``y (B, ...)``.

        Rank ``r`` takes rows ``shard_indices(B, world, r)``, computes ``loss_fn(replica_r(x_r), y_r)``
        (a mean over its shard) and back-propagates; every parameter's gradient is then replaced by
        :func:`all_reduce_mean` of the ``world`` local gradients, and every replica steps.

        Returns:
            The mean of the ``world`` shard losses, a Python float (the full-batch mean loss).

        Raises:
            ValueError: ``x`` and ``y`` with different batch sizes, or ``B`` not divisible by ``world``;
                raised before any replica is touched.
        """
        B = x.shape[0]
        losses = []
        for r, (model, opt) in enumerate(zip(self.replicas, self.optimizers)):
            idx = shard_indices(B, self.world, r)
            opt.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            losses.append(loss.item())
        params = [list(m.parameters()) for m in self.replicas]
        for group in zip(*params):                       # the same parameter on every rank
            if group[0].grad is None:
                continue
            for p, g in zip(group, all_reduce_mean([p.grad for p in group])):
                p.grad = g
        for opt in self.optimizers:
            opt.step()
        return sum(losses) / self.world

    def in_sync(self) -> bool:
        """True when every replica's parameters and buffers are bitwise equal to replica 0's."""
        ref = self.replicas[0].state_dict()
        return all(all(torch.equal(ref[k], v) for k, v in m.state_dict().items()) for m in self.replicas[1:])


def allreduce_gradients(model: nn.Module) -> None:
    """Average every parameter gradient across the ranks of the default ``torch.distributed`` group.

    Call it after ``loss.backward()`` and before ``optimizer.step()`` on each rank; gradients are
    summed with ``all_reduce(SUM)`` and divided by the world size in place. Parameters without a gradient
    are skipped (every rank must skip the same ones).

    Raises:
        RuntimeError: ``torch.distributed`` unavailable or the process group not initialised.
    """
    import torch.distributed as dist
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is None:
            continue
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        p.grad /= world
