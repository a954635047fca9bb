"""Reference tests for #57 (part 1), DDP by hand: sharding, the simulated all-reduce, ``SimulatedDDP`` against
single-process full-batch training, and (when two processes can be forked) real gloo ranks running
``allreduce_gradients``."""

from __future__ import annotations

import copy
import multiprocessing
import os
import traceback
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from canon_refs.systems import ddp_example
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged, randn

pytestmark = pytest.mark.canon("systems/ddp")

BATCH = 16
STEPS = 5
LR = 0.1


def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def _data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    return randn(BATCH, 4, seed=seed), randn(BATCH, 3, seed=seed + 100)


def _single_process(model: nn.Module, x, y, steps: int, optimizer: str = "sgd", lr: float = LR):
    """Plain full-batch training: the target every world size must reproduce."""
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr) if optimizer == "sgd" else torch.optim.AdamW(
        model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return model, losses


def _assert_params_close(a: nn.Module, b: nn.Module, what: str) -> None:
    """Parameters of size <= 1 after STEPS updates: sharded and full-batch gradients sum the same terms
    in another order, so each step may differ by a few float32 ulps, and STEPS steps accumulate them."""
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert_close(pa.detach(), pb.detach(), magnitude=1.0, cond=STEPS, what=f"{what}: parameter {name}")


def _assert_losses_close(got: list[float], want: list[float], what: str) -> None:
    assert_close(torch.tensor(got, dtype=torch.float64), torch.tensor(want, dtype=torch.float64), dtype="float32",
                 magnitude=max(want), cond=STEPS, what=what)


# --- collectives and sharding ----------------------------------------------------------------------------


def test_all_reduce_mean_of_two_ranks():
    a = randn(3, 4, seed=1)
    b = randn(3, 4, seed=2)
    a_before, b_before = a.clone(), b.clone()
    out = call_leaves_inputs_unchanged(ddp_example.all_reduce_mean, [a, b])
    assert isinstance(out, list) and len(out) == 2
    for t in out:
        assert t.shape == (3, 4) and t.dtype == torch.float32
        assert_close(t, (a_before.double() + b_before.double()) / 2, what="all_reduce_mean of two ranks")
    assert torch.equal(out[0], out[1]), "every rank must receive bitwise the same mean"
    out[0].add_(1.0)  # new tensors: one rank's copy is not another's, nor an input
    assert not torch.equal(out[0], out[1])
    assert torch.equal(a, a_before) and torch.equal(b, b_before)


def test_all_reduce_mean_of_four_ranks():
    per_rank = [torch.full((2,), float(r), dtype=torch.float64) for r in range(4)]
    out = ddp_example.all_reduce_mean(per_rank)
    assert len(out) == 4
    for t in out:
        assert t.dtype == torch.float64
        assert_close(t, torch.full((2,), 1.5, dtype=torch.float64), what="all_reduce_mean of four ranks")


@pytest.mark.numerics_probe
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_all_reduce_mean_of_large_half_precision_gradients_stays_finite(dtype):
    # 6e4 + 6e4 overflows fp16 (max 65504): the mean must not go through an fp16 sum
    per_rank = [torch.full((3,), 6e4, dtype=dtype), torch.full((3,), 6e4, dtype=dtype),
                torch.full((3,), 5e4, dtype=dtype), torch.full((3,), 5e4, dtype=dtype)]
    out = ddp_example.all_reduce_mean(per_rank)
    expected = torch.stack([t.float() for t in per_rank]).mean(dim=0)
    for t in out:
        assert t.dtype == dtype
        assert torch.isfinite(t).all(), f"{dtype} all-reduce overflowed"
        torch.testing.assert_close(t.float(), expected, atol=0.0, rtol=1e-2)  # C8's low-precision tolerance


@pytest.mark.contract
def test_all_reduce_mean_errors():
    with pytest.raises(ValueError):
        ddp_example.all_reduce_mean([])
    with pytest.raises(ValueError):
        ddp_example.all_reduce_mean([torch.zeros(3), torch.zeros(4)])


def test_shard_indices_are_contiguous_blocks():
    idx = ddp_example.shard_indices(8, 4, 1)
    assert idx.dtype == torch.long
    assert idx.tolist() == [2, 3]
    assert ddp_example.shard_indices(8, 4, 0).tolist() == [0, 1]
    assert ddp_example.shard_indices(8, 4, 3).tolist() == [6, 7]
    assert ddp_example.shard_indices(12, 3, 2).tolist() == [8, 9, 10, 11]
    blocks = [ddp_example.shard_indices(16, 4, r) for r in range(4)]
    assert torch.equal(torch.cat(blocks), torch.arange(16))
    assert ddp_example.shard_indices(5, 1, 0).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.contract
def test_shard_indices_errors():
    with pytest.raises(ValueError):
        ddp_example.shard_indices(10, 4, 0)
    with pytest.raises(ValueError):
        ddp_example.shard_indices(8, 4, 4)
    with pytest.raises(ValueError):
        ddp_example.shard_indices(8, 4, -1)
    with pytest.raises(ValueError):
        ddp_example.shard_indices(8, 0, 0)


# --- SimulatedDDP ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [2, 4])
def test_simulated_ddp_matches_full_batch_sgd(world):
    model = _mlp()
    x, y = _data()
    ddp = ddp_example.SimulatedDDP(model, world=world, lr=LR)
    assert len(ddp.replicas) == world and len(ddp.optimizers) == world
    assert all(isinstance(o, torch.optim.Optimizer) for o in ddp.optimizers)
    target, target_losses = _single_process(model, x, y, STEPS)
    losses = []
    for _ in range(STEPS):
        losses.append(ddp.train_step(x, y, F.mse_loss))
        assert ddp.in_sync(), "replicas drifted apart"
        for replica in ddp.replicas[1:]:
            for p0, p in zip(ddp.replicas[0].parameters(), replica.parameters()):
                assert torch.equal(p0, p)
    assert all(isinstance(v, float) for v in losses)
    _assert_losses_close(losses, target_losses, f"SimulatedDDP(world={world}) losses vs full-batch SGD")
    for replica in ddp.replicas:
        _assert_params_close(replica, target, f"SimulatedDDP(world={world}) vs full-batch SGD")
    assert losses[-1] < losses[0]


def test_simulated_ddp_leaves_the_model_untouched_and_replicas_independent():
    model = _mlp()
    before = copy.deepcopy(model.state_dict())
    ddp = ddp_example.SimulatedDDP(model, world=2, lr=LR)
    assert all(r is not model for r in ddp.replicas)
    assert ddp.replicas[0] is not ddp.replicas[1]
    call_leaves_inputs_unchanged(ddp.train_step, *_data(), F.mse_loss)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key])
    with torch.no_grad():
        next(ddp.replicas[1].parameters()).add_(1e-3)
    assert not ddp.in_sync()


def test_world_one_is_plain_training():
    model = _mlp(seed=3)
    x, y = _data(seed=3)
    ddp = ddp_example.SimulatedDDP(model, world=1, lr=LR)
    target, target_losses = _single_process(model, x, y, STEPS)
    losses = [ddp.train_step(x, y, F.mse_loss) for _ in range(STEPS)]
    assert ddp.in_sync()
    _assert_losses_close(losses, target_losses, "SimulatedDDP(world=1) losses vs plain training")
    _assert_params_close(ddp.replicas[0], target, "SimulatedDDP(world=1) vs plain training")


def test_simulated_ddp_with_adamw_matches_full_batch():
    model = _mlp(seed=5)
    x, y = _data(seed=5)
    ddp = ddp_example.SimulatedDDP(model, world=4, lr=0.01, optimizer="adamw")
    assert all(isinstance(o, torch.optim.AdamW) for o in ddp.optimizers)
    target, _ = _single_process(model, x, y, STEPS, optimizer="adamw", lr=0.01)
    for _ in range(STEPS):
        ddp.train_step(x, y, F.mse_loss)
    assert ddp.in_sync()
    _assert_params_close(ddp.replicas[0], target, "SimulatedDDP(world=4, adamw) vs full-batch AdamW")


@pytest.mark.contract
def test_train_step_rejects_uneven_batches_before_touching_replicas():
    ddp = ddp_example.SimulatedDDP(_mlp(), world=4, lr=LR)
    before = copy.deepcopy(ddp.replicas[0].state_dict())
    x, y = _data()
    with pytest.raises(ValueError):
        ddp.train_step(x[:10], y[:10], F.mse_loss)
    with pytest.raises(ValueError):
        ddp.train_step(x, y[:8], F.mse_loss)
    for replica in ddp.replicas:
        for key, value in replica.state_dict().items():
            assert torch.equal(value, before[key])
        assert all(p.grad is None for p in replica.parameters())


@pytest.mark.contract
def test_constructor_errors():
    with pytest.raises(ValueError):
        ddp_example.SimulatedDDP(_mlp(), world=0, lr=LR)
    with pytest.raises(ValueError):
        ddp_example.SimulatedDDP(_mlp(), world=2, lr=0.0)
    with pytest.raises(ValueError):
        ddp_example.SimulatedDDP(_mlp(), world=2, lr=LR, optimizer="adam")


@pytest.mark.contract
def test_allreduce_gradients_needs_a_process_group():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    with pytest.raises(RuntimeError):
        ddp_example.allreduce_gradients(_mlp())


# --- real gloo ranks (optional) ---------------------------------------------------------------------------


class _InitFailed(Exception):
    """The process group could not be created (no gloo, no loopback): the environment, not the code."""


def _gloo_rank(rank: int, world: int, tmp: Path, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    """Body of one forked rank: train with allreduce_gradients, save the parameters, exit without pytest."""
    code = 1
    try:
        import torch.distributed as dist

        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        try:
            dist.init_process_group("gloo", init_method=f"file://{tmp / 'store'}", rank=rank, world_size=world,
                                    timeout=timedelta(seconds=30))
        except Exception as err:
            raise _InitFailed(str(err)) from err
        replica = copy.deepcopy(model)
        opt = torch.optim.SGD(replica.parameters(), lr=LR)
        for _ in range(STEPS):
            idx = ddp_example.shard_indices(BATCH, world, rank)
            opt.zero_grad()
            F.mse_loss(replica(x[idx]), y[idx]).backward()
            ddp_example.allreduce_gradients(replica)
            opt.step()
        torch.save({k: v.clone() for k, v in replica.state_dict().items()}, tmp / f"rank{rank}.pt")
        dist.destroy_process_group()
        code = 0
    except _InitFailed as err:
        (tmp / f"rank{rank}.initfail").write_text(str(err))
        code = 2
    except BaseException:
        (tmp / f"rank{rank}.err").write_text(traceback.format_exc())
    finally:
        os._exit(code)


def test_gloo_ranks_match_simulated_ddp(tmp_path):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("cannot fork processes on this platform")
    world = 2
    model = _mlp(seed=7)
    x, y = _data(seed=7)
    # The simulation runs first, in the parent: creating the first optimizer imports torch._dynamo
    # (about 5 s), which the forked ranks then inherit instead of importing it twice more.
    ddp = ddp_example.SimulatedDDP(model, world=world, lr=LR)
    for _ in range(STEPS):
        ddp.train_step(x, y, F.mse_loss)
    expected = ddp.replicas[0].state_dict()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_gloo_rank, args=(r, world, tmp_path, model, x, y)) for r in range(world)]
    try:
        for p in procs:
            p.start()
    except OSError as err:
        pytest.skip(f"cannot spawn processes: {err}")
    for p in procs:
        p.join(timeout=60)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
        p.join()
    if list(tmp_path.glob("*.initfail")):
        pytest.skip("gloo process group could not be created: " + next(tmp_path.glob("*.initfail")).read_text())
    errors = [f.read_text() for f in sorted(tmp_path.glob("*.err"))]
    assert not errors, "a gloo rank failed:\n" + "\n".join(errors)
    if alive:
        pytest.skip("gloo ranks did not finish within 60 s (overloaded machine?)")
    assert [p.exitcode for p in procs] == [0] * world

    for r in range(world):
        state = torch.load(tmp_path / f"rank{r}.pt")
        for key, value in expected.items():
            assert_close(state[key], value, magnitude=1.0, cond=STEPS, what=f"gloo rank {r}: {key}")
