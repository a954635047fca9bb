"""The parent's work on untrusted source (the integrity scan, the rubric) in limited worker processes.

Parsing and scoring a student's file runs our own code, but on input the student chose: an expression
nested 100,000 deep, a docstring built to make a pattern backtrack, a file that makes a rule
quadratic. In the grading parent any of those could raise where nothing catches it, hang it in C code
that holds the GIL (deaf to Ctrl-C and SIGTERM), or exhaust its memory. So the parent hands that work
to a ``WorkerPool``: each call runs in a worker process with an address-space limit and a deadline;
a worker that overruns is killed and replaced, and the call raises ``WorkerError``, which costs only
that student's item (an ``error`` verdict). The parent waits on a pipe with a timeout, so it stays
responsive to signals meanwhile.

Requests are pickled by the parent (trusted). Answers are unpickled with a whitelist: plain data and
the rubric's ``Finding`` and ``AxisResult``, nothing that could run code in the parent.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pytest_mlcanon.grade.sandbox import environment

CALL_TIMEOUT_S = 30.0
MEMORY_MB = 2048
MAX_ANSWER = 64 << 20
RECURSION_LIMIT = 20_000
STACK_BYTES = 512 << 20
_HEADER = struct.Struct(">Q")
#: What an answer may contain besides plain data: (module, name).
ANSWER_TYPES = frozenset({
    ("pytest_mlcanon.rubric.model", "Finding"), ("pytest_mlcanon.rubric.model", "AxisResult"),
    ("pytest_mlcanon.rubric.model", "ItemScore"), ("pytest_mlcanon.evidence", "Status"),
    ("pytest_mlcanon.evidence", "LeftOut"),
})


class WorkerError(RuntimeError):
    """The call did not give an answer: it raised, ran over its deadline, or its worker died."""


class WorkerDied(WorkerError):
    """The worker process ended without answering (``call`` tries once more with a fresh one)."""


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ANSWER_TYPES:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a worker's answer may not hold {module}.{name}")


def _frame(data: bytes) -> bytes:
    return _HEADER.pack(len(data)) + data


class _Worker:
    """One worker process; not thread-safe (the pool gives it to one caller at a time)."""

    def __init__(self, memory_mb: int) -> None:
        env = environment(os.environ)  # it needs no secret of the grader's
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pytest_mlcanon.grade.worker", str(memory_mb)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd="/", start_new_session=True)

    def call(self, function: Callable[..., Any], args: tuple[Any, ...], timeout: float) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(_frame(pickle.dumps((function, args))))
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerDied(f"the worker died ({self.describe()})") from exc
        deadline = time.monotonic() + timeout
        header = self._read(_HEADER.size, deadline)
        (size,) = _HEADER.unpack(header)
        if size > MAX_ANSWER:
            raise WorkerError(f"an answer of {size} bytes")
        try:
            status, value = _Unpickler(io.BytesIO(self._read(size, deadline))).load()
        except (pickle.UnpicklingError, ValueError, EOFError) as exc:
            raise WorkerError(f"an answer that was refused: {exc}") from exc
        if status != "ok":
            raise WorkerError(str(value))
        return value

    def _read(self, size: int, deadline: float) -> bytes:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        chunks: list[bytes] = []
        while size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerError("ran over its time limit")
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))  # wakes up for signals in between
            if not ready:
                continue
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=1)
                raise WorkerDied(f"the worker died ({self.describe()})")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def alive(self) -> bool:
        return self.process.poll() is None

    def describe(self) -> str:
        code = self.process.poll()
        if code is None:
            return "still running"
        return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"

    def cpu_s(self) -> float:
        """The CPU seconds this worker has used so far (0 once it is gone)."""
        try:
            with open(f"/proc/{self.process.pid}/stat", encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class WorkerPool:
    """Up to ``size`` workers, started on first use; ``call`` runs ``function(*args)`` in one of them.

    ``function`` must be importable by name (a module-level function), its arguments picklable."""

    def __init__(self, size: int, timeout_s: float = CALL_TIMEOUT_S, memory_mb: int = MEMORY_MB) -> None:
        self.size = max(1, size)
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        self.spent_s = 0.0  # CPU seconds of the workers gone so far (for the benchmarks)
        # Workers die with the thread that started them (PR_SET_PDEATHSIG): one thread, as long-lived as
        # the pool, starts them all, whichever thread asks.
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlcanon-worker-spawner")

    def call(self, function: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        """``function(*args)`` in a worker; raises ``WorkerError`` (one line) when it gives no answer. A
        worker that died (not one that overran) is replaced and the call made once more."""
        try:
            return self._call(function, args, timeout)
        except WorkerDied:
            return self._call(function, args, timeout)

    def _call(self, function: Callable[..., Any], args: tuple[Any, ...], timeout: float | None) -> Any:
        with self._worker() as worker:
            try:
                return worker.call(function, args, self.timeout_s if timeout is None else timeout)
            except WorkerError:
                self._discard(worker)
                raise
            except BaseException:  # interrupted (Ctrl-C, SIGTERM) or an answer that was not allowed
                self._discard(worker)
                raise

    @contextlib.contextmanager
    def _worker(self) -> Iterator[_Worker]:
        worker = self._take()
        try:
            yield worker
        finally:
            if worker.alive() and not self._closed:
                self._idle.put(worker)

    def _take(self) -> _Worker:
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                with self._lock:
                    if self._closed:
                        raise WorkerError("the worker pool is closed") from None
                    if len(self._all) < self.size:
                        worker = self._spawner.submit(_Worker, self.memory_mb).result()
                        self._all.append(worker)
                        return worker
                worker = self._idle.get()
            if worker.alive():
                return worker
            self._discard(worker)

    def _discard(self, worker: _Worker) -> None:
        self.spent_s += worker.cpu_s()
        worker.kill()
        with self._lock:
            if worker in self._all:
                self._all.remove(worker)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._all = self._all, []
        for worker in workers:
            self.spent_s += worker.cpu_s()
            worker.kill()
        self._spawner.shutdown(wait=False)


# -- the worker's side ---------------------------------------------------------------------------------


def _serve(memory_mb: int) -> None:
    import resource

    limit = memory_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _die_with_parent()
    requests = sys.stdin.buffer
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # whatever the work prints goes nowhere, not into the answers
    # Deep but valid code (what CPython itself compiles) must not fail here for lack of stack: the work
    # runs on a thread with a large stack and a higher recursion limit; deeper still is a RecursionError.
    sys.setrecursionlimit(RECURSION_LIMIT)
    threading.stack_size(STACK_BYTES)
    thread = threading.Thread(target=_loop, args=(requests, answers), name="mlcanon-worker")
    thread.start()
    thread.join()


def _loop(requests: io.BufferedReader, answers: io.BufferedWriter) -> None:
    while True:
        header = requests.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        function, args = pickle.loads(requests.read(_HEADER.unpack(header)[0]))  # noqa: S301 - from the parent
        try:
            answer: tuple[str, Any] = ("ok", function(*args))
            data = pickle.dumps(answer)
        except BaseException as exc:  # noqa: BLE001 - every failure is the caller's one-line answer
            data = pickle.dumps(("error", _one_line(exc)))
        answers.write(_frame(data))
        answers.flush()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _die_with_parent() -> None:
    """Ask the kernel to kill this worker when the parent dies (a worker stuck in a pattern that
    backtracks would otherwise spin on after a killed grader)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:
        os._exit(0)


if __name__ == "__main__":
    _serve(int(sys.argv[1]) if len(sys.argv) > 1 else MEMORY_MB)
