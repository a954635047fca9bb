"""The zygote: the warm parent of every grading child.

Started once per batch (``python -m pytest_mlcanon.grade.zygote FD``) by the grading parent, it
imports torch, numpy, pytest and the modules torch imports on first use once, compiles (with their
assertions rewritten) the test files of the batch's items without importing them, and serves: for
each job it forks a child that confines itself and runs the job (``child.main``), hands the parent
the read end of the child's result pipe, and reports the child's exit status and resource usage when
it is reaped.

It never imports a reference module of the canon (``canon_refs.<area>.<module>``), a test module or
anything that holds an answer: every child inherits its memory, so nothing in it may help a job. It
compiles (never runs) the reference modules every job of the batch may read anyway (all but the
batch's items' own, which a job's sandbox hides: ``batch.readable_references``), so a job that
imports one (the GPT the DPO tests train) does not compile it again.
The answers live in the verifier (``verifier``), a process of their own. ``_fork`` refuses to fork
from a zygote that has imported a canon module.

It talks only to the grading parent, on a socket the children close before they confine
themselves. It stays single-threaded, so forking is safe, and it pins torch to one thread before
anything computes.
"""

from __future__ import annotations

import fcntl
import gc
import os
import pickle
import selectors
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from pytest_mlcanon import codecache

MAX_MESSAGE = 1 << 16
PIPE_BYTES = 1 << 20


def main(argv: list[str]) -> None:
    sock = socket.socket(fileno=int(argv[0]))
    _preload()
    gc.freeze()
    _send(sock, {"op": "ready", "pid": os.getpid()})
    _serve(sock)


def _preload() -> None:
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    import numpy  # noqa: F401 - imported once here, shared by every child
    import torch

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    _import_quietly(list(LAZY_TORCH_MODULES))
    import numpy.testing  # noqa: F401
    import pytest  # noqa: F401

    _import_quietly([*_pytest_plugins(), *LAZY_MODULES])
    from pytest_mlcanon import catalog

    catalog.get(catalog.all_items()[0].slug)  # its data, read and checked once (no answer in it)
    import pytest_mlcanon.grade.child  # noqa: F401
    import pytest_mlcanon.grade.replay  # noqa: F401
    import pytest_mlcanon.grade.stream  # noqa: F401
    import pytest_mlcanon.plugin  # noqa: F401
    import pytest_mlcanon.run  # noqa: F401
    import pytest_mlcanon.testing  # noqa: F401
    from pytest_mlcanon.grade import sandbox

    sandbox.warm()  # the C library and Python's folders, once, not in every child
    codecache.remember_rewrites()
    _exercise()


def _exercise() -> None:
    """Run, once, the torch and numpy paths the items' tests take first in any process (a forward and
    backward pass, an optimizer step, the usual losses and comparisons), on the zygote's own toy
    model: each child then inherits them initialised. The references stay out: the zygote runs only
    this trusted code."""
    import copy

    import numpy as np
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(8, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 8))
    frozen = copy.deepcopy(model).eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    ids = torch.randint(0, 8, (2, 5), generator=generator)
    mask = ids > 0
    for _ in range(2):
        logits = model(ids)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            ref = torch.log_softmax(frozen(ids), dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        margin = torch.where(mask, logp - ref, torch.zeros_like(logp)).sum(dim=1)
        loss = F.softplus(-margin).mean() + F.cross_entropy(logits.reshape(-1, 8), ids.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    torch.randperm(4, generator=generator)
    torch.testing.assert_close(torch.sigmoid(margin.detach()), torch.sigmoid(margin.detach()))
    np.testing.assert_allclose(np.linalg.norm(np.ones((2, 2)), axis=1), np.sqrt(2.0) * np.ones(2))


#: Modules torch imports on first use, each costing a fresh process up to ~0.7 s: the first optimizer
#: step (``torch._dynamo``), ``torch.broadcast_shapes`` (``torch._refs``), ``torch.testing.assert_close``
#: (``torch.distributed.tensor``). The reference run would import those its tests need; importing them
#: here too means no child pays for one that only a learner's code reaches.
LAZY_TORCH_MODULES = ("torch._dynamo", "torch._refs", "torch._prims", "torch.distributed.tensor", "torch.testing",
                      "torch._subclasses.schema_check_mode", "torch.optim", "torch.utils.data")


#: What a job's ``pytest.main`` imports on its first configure (pytest's default plugins and the
#: modules they import: ``pdb`` for ``--pdb``...) and the re-check on its first model: ~0.02 s a job.
LAZY_MODULES = ("pdb", "encodings.unicode_escape", "torch.utils.serialization")


def _pytest_plugins() -> list[str]:
    """pytest's default plugins a job's ``pytest.main`` loads."""
    from _pytest.config import default_plugins

    from pytest_mlcanon.grade.child import UNUSED_PLUGINS

    return [f"_pytest.{p}" for p in default_plugins if p not in UNUSED_PLUGINS] + ["_pytest._argcomplete"]


def _import_quietly(names: list[str]) -> None:
    """Import each module that exists; one missing from this torch, pytest or Python build is left for
    the child to import if it uses it."""
    import importlib

    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001, S112 - an optional module: the child imports what it uses
            continue


def _rewrite(files: list[str]) -> None:
    """Compile ``files`` (the items' test files and conftest) as pytest would, without importing them:
    their code lands in the cache every child inherits. ``config`` None: no assertion-pass hook, as
    in the jobs' ini."""
    from _pytest.assertion import rewrite

    for name in files:
        try:
            rewrite._rewrite_test(Path(name), None)  # type: ignore[arg-type]
        except (OSError, SyntaxError, ValueError):
            continue
    from pytest_mlcanon.rubric import shape_instrument

    helpers = sorted({str(path) for name in files for path in Path(name).parent.glob("_*.py")})
    shape_instrument.read_ahead([*files, *helpers])  # a job reads no test file with learner code on the stack


def _send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = pickle.dumps(message)
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def _serve(sock: socket.socket) -> None:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj == wake_r:
                _drain(wake_r)
                continue
            data = sock.recv(MAX_MESSAGE)
            if not data:
                return
            message = pickle.loads(data)  # noqa: S301 - only the grading parent holds this socket
            if message["op"] == "fork":
                _fork(sock, message)
            elif message["op"] == "warm":
                _rewrite(list(message["files"]))
                codecache.precompile(list(message.get("references", [])))
                if message.get("dispatch"):
                    from pytest_mlcanon.grade import forbidden

                    forbidden.warm_up()
                gc.collect()
                gc.freeze()  # what exists now is shared by every child: never traverse (and copy) it again
                _send(sock, {"op": "warmed"})
            elif message["op"] == "stop":
                return
        _reap(sock)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"op": "exited", "pid": pid, "status": status, "cpu": usage.ru_utime + usage.ru_stime,
                     "maxrss_kb": usage.ru_maxrss})


def canon_modules() -> list[str]:
    """The canon's reference and test modules this process has imported (its own packages aside)."""
    return [name for name in sys.modules
            if name.split(".", 1)[0] in ("canon_tests", "mlbook") or (name.startswith("canon_refs.")
                                                                        and name.count(".") >= 2)]


def _fork(sock: socket.socket, message: dict[str, Any]) -> None:
    from pytest_mlcanon.grade import child

    leaked = canon_modules()
    if leaked:  # a job must never inherit an answer: refuse rather than fork
        raise RuntimeError(f"the zygote imported canon modules ({', '.join(leaked[:3])}); it cannot fork jobs")
    path = Path(message["request"])
    request = pickle.loads(path.read_bytes())  # noqa: S301 - written by the grading parent, 0600
    path.unlink()
    read_end, write_end = os.pipe()
    try:  # room for a whole job's frames: the parent reads them every ``runner.WATCH_S``, not as they come
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass
    pid = os.fork()
    if pid == 0:
        code = child.EXIT_HARNESS
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(read_end)
            sock.close()
            code = child.main(request, write_end)
        finally:
            os._exit(code)
    os.close(write_end)
    _send(sock, {"op": "forked", "job": message["job"], "pid": pid}, [read_end])
    os.close(read_end)


if __name__ == "__main__":
    main(sys.argv[1:])
