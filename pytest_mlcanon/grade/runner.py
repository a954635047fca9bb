"""The parent's side of running jobs: the zygote's client, and the watch over one running child.

``Zygote`` starts the warm process, asks it to compile the tests and to fork, and collects exit
statuses on a dispatcher thread. ``run_job`` watches one child: it reads the result frames as they come, and kills
the child (SIGKILL, which no ``except`` catches) when it exceeds the job's wall-clock budget, when one
test (or re-check call) uses more than the per-test timeout of CPU time (summed over the job's
processes) or makes no progress for ``STALL_FACTOR`` times that in wall-clock time (a sleep, a blocked
read), or when its private memory passes the cap; then ``uids.sweep`` kills everything the job left
behind. A dead or hung child never stalls the batch. The per-test limit is CPU time so that a busy
machine, or a classmate's job beside it, never turns an honest test into a timeout.
"""

from __future__ import annotations

import os
import pickle
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mlcanon.grade import sandbox
from pytest_mlcanon.grade.channel import FrameReader, Protocol
from pytest_mlcanon.grade.child import JobRequest

READY_TIMEOUT_S = 300.0
REPLY_TIMEOUT_S = 60.0
DRAIN_S = 0.5
MEMORY_POLL_S = 0.2
#: How often the parent reads a running child's frames and checks its limits. It does not wait on the
#: pipe itself: a reader blocked there is woken by every frame, and on a busy machine each wake-up
#: preempts the child (measured: ~0.1 s per DPO job). The child's exit wakes the parent at once.
WATCH_S = 0.05
MAX_READS = 32
#: A test that has used no more than its CPU timeout yet has run this many times as long on the
#: clock is stalled (sleeping, blocked): a job waiting for a busy machine's cores still gets through.
STALL_FACTOR = 3.0
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


class ZygoteError(RuntimeError):
    """The zygote could not start, or died."""


@dataclass(frozen=True)
class Limits:
    """What the parent enforces on each job (the CPU, address-space and output limits are the child's)."""

    wall_s: float = 120.0
    test_timeout_s: float = 20.0
    memory_mb: int = 4096


@dataclass(frozen=True)
class ExitInfo:
    status: int
    cpu_s: float
    maxrss_mb: float

    @property
    def signal(self) -> int:
        return os.WTERMSIG(self.status) if os.WIFSIGNALED(self.status) else 0

    @property
    def code(self) -> int:
        return os.WEXITSTATUS(self.status) if os.WIFEXITED(self.status) else -1

    def describe(self) -> str:
        if self.signal:
            return f"killed by {signal.Signals(self.signal).name}"
        return f"exit status {self.code}"


@dataclass
class JobRun:
    """Everything observed about one job, for ``assess``."""

    frames: list[dict[str, Any]] = field(default_factory=list)
    exit: ExitInfo | None = None
    wall_s: float = 0.0
    killed: str = ""  # "", "wall", "test", "stalled", "memory", "channel" or "interrupted" (the batch was stopped)
    killed_in: str = ""  # the test (or phase) running when it was killed
    killed_cpu_s: float = 0.0  # the CPU time that test had used when it was killed
    channel_error: str = ""
    peak_mb: float = 0.0  # the largest private memory seen (beyond what it shares with the zygote)
    leftovers: int = 0  # processes still alive after the child exited


class Zygote:
    """Client of the zygote process (``zygote.py``)."""

    def __init__(self, root: Path, wait: bool = True, private: Path | None = None) -> None:
        """``root``: its working folder (on its ``sys.path``, so the jobs must be able to traverse it);
        ``private``: where its log and scratch go (default ``root``)."""
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = sandbox.environment(os.environ)  # no token of the grader's: a forked job can read this one
        private = private or root
        temp = private / "zygote-tmp"  # what torch writes goes with the batch
        temp.mkdir(mode=0o700, exist_ok=True)
        env.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TMPDIR=str(temp),
                   HOME=str(temp))
        self.log = private / "zygote.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pytest_mlcanon.grade.zygote", str(child_sock.fileno())],
                pass_fds=(child_sock.fileno(),), cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        child_sock.close()
        self.sock = parent_sock
        self._lock = threading.Lock()
        self._replies: queue.Queue[tuple[dict[str, Any], list[int]] | None] = queue.Queue()
        self._exits: dict[int, ExitInfo] = {}
        self._exits_lock = threading.Lock()
        self._exited = threading.Condition(self._exits_lock)
        self.live: set[int] = set()  # children forked and not yet reaped
        self.dead = False
        self._thread = threading.Thread(target=self._dispatch, name="mlcanon-zygote", daemon=True)
        self._thread.start()
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Wait until the zygote has imported torch and pytest."""
        ready = self._reply(READY_TIMEOUT_S)
        if ready.get("op") != "ready":
            raise ZygoteError(f"the zygote did not start: {self.log_tail()}")

    def _dispatch(self) -> None:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 4)
            except OSError:
                data, fds = b"", []
            if not data:
                with self._exits_lock:
                    self.dead = True
                    self._exited.notify_all()
                self._replies.put(None)
                return
            message = pickle.loads(data)  # noqa: S301 - the zygote runs trusted code only
            if message.get("op") == "exited":
                with self._exits_lock:
                    self._exits[message["pid"]] = ExitInfo(message["status"], message["cpu"],
                                                           message["maxrss_kb"] / 1024.0)
                    self.live.discard(message["pid"])
                    self._exited.notify_all()
            else:
                self._replies.put((message, fds))

    def _reply(self, timeout: float) -> dict[str, Any]:
        try:
            reply = self._replies.get(timeout=timeout)
        except queue.Empty:
            raise ZygoteError(f"the zygote did not answer within {timeout:.0f} s: {self.log_tail()}") from None
        if reply is None:
            raise ZygoteError(f"the zygote died: {self.log_tail()}")
        message, fds = reply
        message["fds"] = fds
        return message

    def _request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self.dead:
            raise ZygoteError(f"the zygote died: {self.log_tail()}")
        with self._lock:
            self.sock.send(pickle.dumps(message))
            return self._reply(timeout)

    def warm(self, files: list[str], dispatch: bool, references: Sequence[str] = (), timeout: float = READY_TIMEOUT_S
             ) -> None:
        """Have the zygote compile the test ``files`` the jobs will run and the ``references`` every job
        may read (never importing either) and, with ``dispatch``, warm the forbidden-kernel detector up."""
        message = {"op": "warm", "files": files, "references": list(references), "dispatch": dispatch}
        if self._request(message, timeout).get("op") != "warmed":
            raise ZygoteError(f"the zygote could not compile the tests: {self.log_tail()}")

    def fork(self, request: JobRequest, path: Path) -> tuple[int, int]:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(request, handle)
        reply = self._request({"op": "fork", "job": request.job_id, "request": str(path)}, REPLY_TIMEOUT_S)
        with self._exits_lock:
            if reply["pid"] not in self._exits:
                self.live.add(reply["pid"])
        return int(reply["pid"]), reply["fds"][0]

    def exit_of(self, pid: int, wait: float = 0.0) -> ExitInfo | None:
        """The exit of child ``pid``, waiting up to ``wait`` seconds for it (None if still running)."""
        with self._exited:
            if wait > 0:
                self._exited.wait_for(lambda: pid in self._exits or self.dead, wait)
            return self._exits.pop(pid, None)

    def log_tail(self) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")[-1500:].strip() or "(no output)"
        except OSError:
            return "(no log)"

    def close(self, now: bool = False) -> None:
        """Stop the zygote; a child still running (the batch was interrupted) is killed first.
        ``now``: kill it at once (it may be busy importing or calibrating)."""
        with self._exits_lock:
            for pid in self.live:
                _kill(pid)
        if now:
            self.process.kill()
        elif not self.dead:
            try:
                self.sock.send(pickle.dumps({"op": "stop"}))
            except OSError:
                pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.sock.close()


def run_job(zygote: Zygote, request: JobRequest, request_path: Path, limits: Limits,
            sweep: Callable[[int], int], on_forked: Callable[[], None] | None = None,
            stop: threading.Event | None = None) -> JobRun:
    """Fork the job's child and watch it to the end; ``sweep(pid)`` kills what it leaves behind;
    ``on_forked()`` runs once the child exists. The child is killed at once when it breaks a limit
    or the channel's protocol (a malformed, duplicate or out-of-order frame), or when ``stop`` is set
    (the batch was interrupted: ``killed`` is then ``"interrupted"``), and swept whatever happens,
    also when the watch itself fails."""
    run = JobRun()
    started = time.monotonic()
    pid, fd = zygote.fork(request, request_path)
    os.set_blocking(fd, False)
    if on_forked is not None:
        on_forked()
    reader = FrameReader(fd)
    protocol = Protocol()
    current, test_started, next_poll, exited_at = "starting", started, started, 0.0
    test_cpu0 = cpu_s = 0.0

    def read_frames() -> None:
        nonlocal current, test_started, test_cpu0
        for _ in range(MAX_READS):  # bounded, so a flood of bytes cannot keep the watch from its limits
            if reader.eof or protocol.error:
                return
            before = reader.total
            for frame in reader.read():
                if not protocol.feed(frame):
                    return
                run.frames.append(frame)
                if frame["kind"] in ("start", "phase", "collected"):
                    current = str(frame.get("test") or frame.get("name") or frame["kind"])[:300]
                    test_started, test_cpu0 = time.monotonic(), _tree_cpu_s(pid)
            if reader.total == before:
                return

    try:
        while True:
            if run.exit is None:
                run.exit = zygote.exit_of(pid, wait=WATCH_S)
                if run.exit is not None:
                    exited_at = time.monotonic()
                    run.leftovers = sweep(pid)
            elif not reader.eof:
                select.select([fd], [], [], 0.02)  # the child is gone: only EOF or its last frames can come
            if not run.killed:
                read_frames()
            now = time.monotonic()
            if run.exit is None and zygote.dead:
                break
            if run.exit is not None and (reader.eof or run.killed or now - exited_at > DRAIN_S):
                break
            if run.exit is None and not run.killed:
                if now >= next_poll:
                    run.peak_mb = max(run.peak_mb, _private_mb(pid))
                    cpu_s = _tree_cpu_s(pid)
                    next_poll = now + MEMORY_POLL_S
                reason = ("interrupted" if stop is not None and stop.is_set()
                          else "channel" if reader.error or protocol.error else "wall" if now - started > limits.wall_s
                          else "test" if cpu_s - test_cpu0 > limits.test_timeout_s
                          else "stalled" if now - test_started > STALL_FACTOR * limits.test_timeout_s
                          else "memory" if run.peak_mb > limits.memory_mb else "")
                if reason:
                    run.killed, run.killed_in, run.killed_cpu_s = reason, current, max(cpu_s - test_cpu0, 0.0)
                    _kill(pid)
                    sweep(pid)
    except BaseException:
        _kill(pid)
        sweep(pid)
        raise
    finally:
        os.close(fd)
    run.channel_error = reader.error or protocol.error
    run.wall_s = time.monotonic() - started
    return run


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _private_mb(pid: int) -> float:
    """The memory the job holds on its own, in MB: the private pages of the child and of every process
    under it (in a PID namespace the job runs two levels down), not those still shared with the zygote
    (a fresh child's resident set is mostly the zygote's torch)."""
    return sum(_own_private_mb(p) for p in _tree(pid))


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (``/proc/PID/task/TID/children``)."""
    found: list[int] = []
    queue_ = [pid]
    while queue_ and len(found) < 256:
        current = queue_.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children", encoding="ascii") as handle:
                    queue_ += [int(child) for child in handle.read().split()]
            except (OSError, ValueError):
                continue
    return found


def _tree_cpu_s(pid: int) -> float:
    """The CPU time (user + system) of ``pid`` and its descendants, with the children each has reaped."""
    total = 0
    for member in _tree(pid):
        try:
            with open(f"/proc/{member}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rpartition(")")[2].split()
            total += sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
        except (OSError, ValueError):
            continue
    return total / _TICKS_PER_S


def _own_private_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as handle:
            kb = sum(int(line.split()[1]) for line in handle if line.startswith(("Private_Clean", "Private_Dirty")))
        return kb / 1024.0
    except (OSError, ValueError, IndexError):
        return _resident_mb(pid)


def _resident_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    except (OSError, ValueError, IndexError):
        return 0.0
