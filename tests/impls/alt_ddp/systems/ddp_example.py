"""Alternative DDP by hand (canon #57), written differently from the reference.

* ``shard_indices`` cuts ``arange(n)`` with ``chunk`` instead of computing the block bounds.
* ``all_reduce_mean`` pre-divides each rank's tensor by ``world`` and adds them in rank order (the
  ``gradient_predivide_factor`` form of DDP) instead of stacking and summing.
* ``SimulatedDDP`` flattens each replica's gradients into one vector (a single "bucket"), all-reduces
  the buckets, and scatters them back with ``vector_to_parameters``-style views.
* ``in_sync`` compares flattened parameter vectors.

Shapes: ``world`` ranks, ``B`` batch, ``P`` total parameter count.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector


def shard_indices(n, world, rank):
    """Contiguous block of ``arange(n)`` for ``rank``: ``(n/world,)`` long."""
    if world < 1:
        raise ValueError("world must be >= 1")
    if rank < 0 or rank >= world:
        raise ValueError("rank out of range")
    if n < 0 or n % world:
        raise ValueError("n must be divisible by world")
    everything = torch.arange(n)                                       # (n,)
    return everything.view(world, n // world)[rank].clone()            # (n//world,)


def all_reduce_mean(per_rank):
    """Pre-divided sum: every rank gets sum_r (t_r / world)."""
    if not per_rank:
        raise ValueError("per_rank is empty")
    shape = per_rank[0].shape
    if any(t.shape != shape for t in per_rank):
        raise ValueError("per_rank tensors must share one shape")
    world = len(per_rank)
    total = torch.zeros_like(per_rank[0])                              # (...,)
    for t in per_rank:
        total = total + t / world
    return [total.clone() for _ in range(world)]                       # list[world]


class SimulatedDDP:
    """world replicas, one flat gradient bucket per replica."""

    def __init__(self, model, world, lr, optimizer="sgd"):
        if world < 1:
            raise ValueError("world must be >= 1")
        if not lr > 0 or not math.isfinite(lr):
            raise ValueError("lr must be positive")
        opt_cls = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}.get(optimizer)
        if opt_cls is None:
            raise ValueError("optimizer must be sgd or adamw")
        self.world = world
        self.replicas = [copy.deepcopy(model) for _ in range(world)]
        self.optimizers = [opt_cls(m.parameters(), lr=lr) for m in self.replicas]

    def train_step(self, x, y, loss_fn):
        """Shard, backward per replica, all-reduce one flat bucket, step."""
        B = x.shape[0]
        if y.shape[0] != B or B % self.world or B == 0:
            raise ValueError("x and y must share a batch size divisible by world")
        total = 0.0
        buckets = []
        for r, (m, opt) in enumerate(zip(self.replicas, self.optimizers)):
            opt.zero_grad()
            rows = shard_indices(B, self.world, r)                      # (B//world,)
            loss = loss_fn(m(x[rows]), y[rows])
            loss.backward()
            total += loss.item()
            buckets.append(parameters_to_vector(p.grad for p in m.parameters()))
        reduced = all_reduce_mean(buckets)                              # list[world]
        for m, flat in zip(self.replicas, reduced):
            offset = 0
            for p in m.parameters():
                k = p.numel()
                p.grad = flat[offset:offset + k].view_as(p).clone()
                offset += k
        for opt in self.optimizers:
            opt.step()
        return total / self.world

    def in_sync(self):
        """All flattened parameter vectors (and buffers) equal."""
        first = parameters_to_vector(self.replicas[0].parameters())    # (P,)
        return all(torch.equal(first, parameters_to_vector(m.parameters())) for m in self.replicas[1:])


def allreduce_gradients(model: nn.Module) -> None:
    """Average grads across torch.distributed ranks with one all_reduce per parameter."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("no process group")
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            p.grad /= world
            dist.all_reduce(p.grad)
