"""The zygote: the warm parent of every grading child.

Started once per batch (``python -m pytest_mlcanon.grade.zygote FD LOG``) by the grading parent, it
imports torch, numpy and pytest once, then runs the selected items' reference tests once against the
references (the calibration: it records the expected test ids and the seeded re-check cases, and it
warms every lazy import and the assertion-rewrite cache the jobs will need), forgets the canon
modules, and serves: for each job it forks a child that confines itself and runs the job
(``child.main``), hands the parent the read end of the child's result pipe, and reports the
child's exit status and resource usage when it is reaped.

It runs only trusted code (the references and their tests) and talks only to the grading parent, on
a socket the children close before they confine themselves. It stays single-threaded, so forking is
safe, and it pins torch to one thread before anything computes.
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
    _import_lazy_torch_modules()
    import numpy.testing  # noqa: F401
    import pytest  # noqa: F401

    import pytest_mlcanon.grade.child  # noqa: F401
    import pytest_mlcanon.grade.recheck  # noqa: F401
    import pytest_mlcanon.grade.stream  # noqa: F401
    import pytest_mlcanon.plugin  # noqa: F401
    import pytest_mlcanon.run  # noqa: F401
    from pytest_mlcanon.grade import sandbox

    sandbox.warm()  # the C library and Python's folders, once, not in every child
    _cache_assertion_rewrites()


#: Modules torch imports on first use, each costing a fresh process up to ~0.7 s: the first optimizer
#: step (``torch._dynamo``), ``torch.broadcast_shapes`` (``torch._refs``), ``torch.testing.assert_close``
#: (``torch.distributed.tensor``). The reference run would import those its tests need; importing them
#: here too means no child pays for one that only a learner's code reaches.
LAZY_TORCH_MODULES = ("torch._dynamo", "torch._refs", "torch._prims", "torch.distributed.tensor", "torch.testing",
                      "torch._subclasses.schema_check_mode", "torch.optim", "torch.utils.data")


def _import_lazy_torch_modules() -> None:
    import importlib

    for name in LAZY_TORCH_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001, S112 - an optional part of this torch build; the child imports it if used
            continue


def _cache_assertion_rewrites() -> None:
    """Keep pytest's assertion-rewritten test modules in memory, keyed by file, size and mtime, so
    each child reuses the code the calibration compiled (with ``PYTHONDONTWRITEBYTECODE`` set, or a
    read-only package, pytest would rewrite every test file again in every child)."""
    from _pytest.assertion import rewrite

    original = getattr(rewrite, "_rewrite_test", None)
    if original is None:
        return
    cache: dict[tuple[str, int, int], Any] = {}

    def cached(fn: Any, config: Any) -> Any:
        st = os.stat(fn)
        key = (str(fn), st.st_mtime_ns, st.st_size)
        if key not in cache:
            cache[key] = original(fn, config)
        return cache[key]

    rewrite._rewrite_test = cached


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
            elif message["op"] == "calibrate":
                _send(sock, {"op": "calibrated", **_calibrate(message)})
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


def _fork(sock: socket.socket, message: dict[str, Any]) -> None:
    from pytest_mlcanon.grade import child

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


def _calibrate(message: dict[str, Any]) -> dict[str, Any]:
    """The reference run: expected test ids, reference failures and re-check cases per item."""
    import contextlib
    import io

    import pytest

    from pytest_mlcanon import catalog
    from pytest_mlcanon.grade import child, recheck
    from pytest_mlcanon.redirect import REF_PACKAGE

    items = catalog.select(message["items"])
    recorder = recheck.Recorder(items, frozenset(message["skip"]))
    os.chdir(message["dir"])
    argv = child.pytest_argv(message["ini"], message["tests_dir"], message["items"], REF_PACKAGE,
                             tuple(message["options"]))
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        status = pytest.main(argv, plugins=[recorder])
    cases = recorder.cases(int(message["seed"])) if message["recheck"] else {}
    _forget_canon_modules()
    gc.collect()
    gc.freeze()  # what exists now is shared by every child: never traverse (and copy) it again
    result = {"nodeids": recorder.nodeids, "probes": recorder.probes,
              "contract": recorder.contract, "failed": recorder.failed, "cases": cases, "status": int(status),
              "log": sink.getvalue()[-4000:]}
    out = Path(message["out"])
    out.write_bytes(pickle.dumps(result))
    return {"out": str(out)}


def _forget_canon_modules() -> None:
    """Drop the test modules and the canon modules, so each child imports its learner's files afresh."""
    for name in list(sys.modules):
        head = name.split(".", 1)[0]
        if head in ("canon_tests", "mlbook") or (head == "canon_refs" and name.count(".") >= 2):
            del sys.modules[name]


if __name__ == "__main__":
    main(sys.argv[1:])
