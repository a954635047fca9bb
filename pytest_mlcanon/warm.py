"""A warm process that checks a learner's files in a forked child: ``mlcanon watch`` and ``%%canon``.

A check in a fresh process pays for importing torch and pytest and for torch's lazy imports before
the first test runs (about 3.5 s on a quiet machine). The warm process pays once: :func:`warm_up`
imports them, runs the items' reference tests once against the references (which collects the
tests, rewrites their assertions and warms every lazy import they reach), forgets the canon's test
modules and freezes its heap. Each :func:`check` then forks a child that runs exactly what ``mlcanon
check`` runs, ``pytest --canon-item=ITEM --impl=PRACTICE --timed``, so the report, the recorded
attempt and the miss log are those of ``mlcanon check``.

A check need not pay for the fork and pytest's start-up either: :func:`standby` forks the next check's
child ahead of time, while the learner types. It builds pytest's configuration (the arguments, the ini
files, the plugins, the initial conftests) and waits before configuring the plugins, the first step that
reads the learner's practice files; :func:`check` then only tells it to go. On a machine with a second
core the child runs its tests in two processes (:mod:`.split`), balanced by the warm-up's timings.

Only the child runs learner code. It leads its own process group, reads no terminal input, and is
watched: a learner file that crashes the interpreter, calls ``os._exit`` or hangs ends the child
only. A hang is stopped at the timeout (SIGTERM to the group, then SIGKILL after a grace period), as
is a check stopped with Ctrl-C; a check made stale by a newer save is killed at once (SIGKILL), so it
prints nothing more. A check whose pytest run did not
finish wrote no report and recorded nothing: a partial run is not an attempt.

This is no sandbox: it runs the learner's own code on the learner's own machine, as ``mlcanon check``
does. The grader's zygote (``grade.zygote``) is the sandboxed relative of this module.
"""

from __future__ import annotations

import contextlib
import enum
import gc
import io
import json
import math
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_mlcanon import catalog, codecache
from pytest_mlcanon.evidence import EvidenceError, Status

GRACE_S = 1.0
MIN_TIMEOUT_S = 10.0
TIMEOUT_FACTOR = 10.0  # the default timeout: this many times the warm-up's reference run, at least MIN_TIMEOUT_S
POLL_S = 0.01
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}  # what stops this process: held while it forks
EXIT_HARNESS = 70  # the child failed before pytest could report (EX_SOFTWARE)
TEST_PACKAGE = "canon_tests"
# A warm process imported the plugin's packages before pytest could mark them for assertion rewriting;
# nothing in them is a test, so its warning about that is noise.
WARM_ARGS = ("-W", "ignore::pytest.PytestAssertRewriteWarning")


class Ending(enum.Enum):
    """How a forked check ended."""

    FINISHED = "finished"        # pytest ran to the end and wrote its report: the check counts
    EXITED = "exited"            # the process ended before pytest finished (os._exit in the learner's code)
    CRASHED = "crashed"          # a signal ended the process (a segfault, an abort, the OOM killer)
    TIMED_OUT = "timed out"      # still running at the timeout: stopped
    CANCELLED = "cancelled"      # stopped by the caller: a newer save, or Ctrl-C

    @property
    def whole(self) -> bool:
        return self is Ending.FINISHED


@dataclass(frozen=True)
class ItemVerdict:
    """One item's line of the JSON report a finished check wrote."""

    number: int
    slug: str
    status: Status
    score: int | None
    verdict: str
    axes_failed: tuple[str, ...] = ()  # the rubric's axes that said no (a scored item's)

    @property
    def text(self) -> str:
        return f"{self.verdict} {self.score}/5" if self.score is not None else self.verdict


@dataclass(frozen=True)
class CheckRun:
    """The outcome of one forked check."""

    ending: Ending
    code: int | None              # pytest's exit status, the process's exit status, or the signal's number
    seconds: float                # from the fork to the child's end
    cpu_s: float = 0.0            # the child's CPU time (user and system), the figure a busy machine keeps
    verdicts: tuple[ItemVerdict, ...] = ()
    timeout_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.ending.whole and self.code == 0

    def describe(self, labels: str) -> str:
        """One line for the learner: each item's verdict after a whole check, else ``labels``, what
        ended the check, and that nothing was recorded."""
        if self.ending.whole:
            if not self.verdicts:
                return f"{labels}: pytest stopped before the rubric (exit status {self.code}); see its output"
            return "; ".join(f"#{v.number} {v.slug}: {v.text}" for v in self.verdicts)
        if self.ending is Ending.EXITED:
            why = f"the process exited (status {self.code}) before the check finished: os._exit or exit in your code?"
        elif self.ending is Ending.CRASHED:
            why = f"the process was killed by {_signal_name(self.code)}: a crash in your code or in native code?"
        elif self.ending is Ending.TIMED_OUT:
            why = f"still running after {self.timeout_s:g} s, so it was stopped: an endless loop or a wait?"
        else:
            why = "stopped before it finished"
        return f"{labels}: {self.ending.value}: {why} Nothing recorded (a partial run is not an attempt)"


def _signal_name(number: int | None) -> str:
    try:
        return signal.Signals(number or 0).name
    except ValueError:
        return f"signal {number}"


def check_args(items: Sequence[catalog.Item], practice: Path, strict: bool, root: Path, *,
               timed: bool = True) -> list[str]:
    """The pytest arguments of ``mlcanon check``: the items, the learner's directory, timed, and pytest's
    cache in the learner's repo root (``state.find_root``), so a check run from a subfolder leaves no
    ``.pytest_cache`` there and ``--lf`` reads one cache from any folder. (The rootdir stays pytest's
    own choice: node ids are shown relative to it.) Without ``timed`` the same check records nothing
    (a sped-up ``mlcanon mock``)."""
    selector = ",".join(item.slug for item in items)
    timer = ["--timed=strict" if strict else "--timed"] if timed else []
    return [f"--canon-item={selector}", f"--impl={practice}", *timer, "-o", f"cache_dir={root / '.pytest_cache'}"]


# -- the warm process -------------------------------------------------------------------------------------

def import_heavy() -> None:
    """Import torch (on one thread: the tests are small, and a fork never inherits a busy pool), the
    modules torch imports on first use, numpy and pytest."""
    import importlib

    import numpy  # noqa: F401
    import torch

    torch.set_num_threads(1)
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)
    from pytest_mlcanon.grade.zygote import LAZY_TORCH_MODULES

    for name in LAZY_TORCH_MODULES:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    import pytest  # noqa: F401

    import pytest_mlcanon.plugin  # noqa: F401
    import pytest_mlcanon.reports.markdown  # noqa: F401 - the report files a check writes
    import pytest_mlcanon.run  # noqa: F401


@dataclass(frozen=True)
class Warmed:
    """What :func:`warm_up` did: the reference run's pytest status, its seconds, its output, and
    whether the learner's pytest configuration (their ini file) sets a ``log_`` option."""

    status: int
    seconds: float
    log: str
    log_options: bool = False

    @property
    def timeout_s(self) -> float:
        """The default timeout of a check of these items, in whole seconds (the verdict of a check
        stopped at it names it)."""
        return float(max(MIN_TIMEOUT_S, math.ceil(TIMEOUT_FACTOR * self.seconds)))

    def lean_args(self, extra: Sequence[str] = ()) -> tuple[str, ...]:
        """pytest arguments a check may add to save time without changing what the learner sees:
        ``-p no:logging`` (around each phase of each test its log capture walks the ~200 loggers torch
        registers: ~4% of a DPO check) unless the learner's ini or arguments configure logging. A record logged at
        WARNING or above then shows under "Captured stderr" instead of "Captured log"."""
        # --log-level, -o log_cli=true (--override-ini=log_...), -p logging
        asked = any(arg.startswith("--log") or "log_" in arg or arg in ("logging", "-plogging") for arg in extra)
        return () if self.log_options or asked else ("-p", "no:logging")


class _WarmUpRun:
    """A plugin of the warm-up's run: notes the ini file pytest read (the learner's, if any), and before
    pytest ends, rewrites the references the items' checks fall back on into the rewrite cache.

    The warm-up imports those references as the learner's files (``--impl=canon_refs``), plainly; a check
    whose learner has not written them imports them through pytest's rewriting hook (the plugin's package
    is marked for rewriting), which without a ``.pyc`` on disk rewrites each again in every child: about
    0.07 s of a DPO check for the GPT's ten modules."""

    inipath: Path | None = None

    def __init__(self, items: Sequence[catalog.Item] = ()) -> None:
        self.items = tuple(items)

    def pytest_configure(self, config: Any) -> None:
        self.inipath = config.inipath

    def pytest_unconfigure(self, config: Any) -> None:
        if config.getoption("assertmode", "plain") == "rewrite":
            codecache.rewrite_ahead(fallback_files(self.items), config)


def fallback_files(items: Sequence[catalog.Item]) -> list[Path]:
    """The reference files a check of ``items`` may fall back on: the items' own modules and those of
    the items they build on."""
    from pytest_mlcanon.redirect import reference_dir

    modules = dict.fromkeys(m for item in items for m in (*item.modules, *catalog.modules_built_on(item)))
    return [reference_dir() / f"{module}.py" for module in modules]


def warm_up(items: Sequence[catalog.Item], root: Path) -> Warmed:
    """Import the heavy modules, run the items' reference tests once against the references (quietly,
    untimed, nothing recorded), forget the canon's test modules and freeze the heap."""
    # split imports pytest: not at this module's top, which a notebook kernel imports
    import pytest

    from pytest_mlcanon import split

    import_heavy()
    codecache.remember_rewrites()
    codecache.remember_compiled()
    selector = ",".join(item.slug for item in items)
    sink = io.StringIO()
    start = time.perf_counter()
    os.chdir(root)  # a warm process works in its learner repo, as each check does
    path = list(sys.path)
    seen, durations = _WarmUpRun(items), split.Durations()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        status = pytest.main([f"--canon-item={selector}", "--impl=canon_refs", "-q", "--color=no",
                              "-p", "no:cacheprovider"], plugins=[seen, durations])
    split.remember(durations.seconds)
    # pytest put the canon's root on sys.path to import its conftest; left there, each check would
    # find the package's own metadata and mark all of it for assertion rewriting, which a fresh
    # `mlcanon check` does not (and which would recompile those modules in every child)
    sys.path[:] = path
    seconds = time.perf_counter() - start
    forget_tests()
    gc.collect()
    gc.freeze()  # what exists now is shared by every child: the collector never walks (and copies) it again
    return Warmed(int(status), seconds, sink.getvalue(), _sets_log_options(seen.inipath))


def _sets_log_options(inipath: Path | None) -> bool:
    """Whether the ini file names a ``log_`` option (``log_cli``, ``log_level``, ...): then checks keep
    pytest's logging plugin, which owns those options."""
    if inipath is None:
        return False
    try:
        return "log_" in inipath.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True


def forget_tests() -> None:
    """Drop the canon's test modules: each check imports them afresh, bound to the learner's files (the
    redirect already forgets the canon modules when a run ends)."""
    for name in [n for n in sys.modules if n.startswith(TEST_PACKAGE + ".")]:
        del sys.modules[name]


# -- one forked check -------------------------------------------------------------------------------------

REPORTS_DIR = "reports"


def report_path(items: Sequence[catalog.Item]) -> Path:
    """Where a warm check writes its JSON report, relative to the repo (as the report line names it):
    ``.mlcanon/reports/posttrain-dpo.json``, the last check of those items, for an editor to read."""
    from pytest_mlcanon.state import STATE_DIR

    name = "+".join(item.slug.replace("/", "-") for item in items)
    return Path(STATE_DIR) / REPORTS_DIR / f"{name}.json"


class Standby:
    """A check's child forked ahead of the check (:func:`standby`), waiting for :func:`check` to start it."""

    def __init__(self, pid: int, go: int, argv: Sequence[str], root: Path, output: Path | None) -> None:
        self.pid = pid
        self.go: int | None = go  # the write end of the child's pipe; None once the child was started or discarded
        self.argv = tuple(argv)
        self.root = root
        self.output = output

    def start(self) -> bool:
        """Tell the child to run its check; False (and the child is discarded) when it is not waiting."""
        if self.go is None:
            return False
        if _waiting(self.pid):
            try:
                os.write(self.go, b"g")
            except OSError:
                pass
            else:
                os.close(self.go)
                self.go = None
                return True
        self.discard()
        return False

    def discard(self) -> None:
        """End the child, if it still waits (it has run nothing of the learner's), and reap it."""
        if self.go is None:
            return  # started (its check reaps it) or already discarded
        os.close(self.go)
        self.go = None
        _stop(self.pid)


def standby(args: Sequence[str], root: Path, report: Path, *, output: Path | None = None,
            extra: Sequence[str] = ()) -> Standby:
    """Fork the child of the next :func:`check` with the same arguments now: it builds pytest's
    configuration, then waits to be told to go (or, when this process goes away or :meth:`Standby.discard`
    is called, ends without running anything). Its output file, if any, is opened now."""
    argv = _argv(args, report, extra)
    read, write = os.pipe()
    pid = _fork(argv, root, output, gate=(read, write))
    os.close(read)
    return Standby(pid, write, tuple(argv), root, output)


def _argv(args: Sequence[str], report: Path, extra: Sequence[str]) -> list[str]:
    return [*args, f"--canon-report=json:{report}", *WARM_ARGS, *extra]


def _fork(argv: list[str], root: Path, output: Path | None, gate: tuple[int, int] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()  # or the child would print this process's buffered text again
    # A signal that lands during the fork would be raised in an at-fork callback (logging's), where Python
    # ignores it: Ctrl-C or a kill would be lost. Held until the fork is done, it is raised after it.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        pid = os.fork()
        if pid == 0:
            _child(argv, root, output, gate, held)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)  # as the child does: no window in which a stop misses its group
    return pid


def check(args: Sequence[str], root: Path, report: Path, timeout_s: float, *, output: Path | None = None,
          cancelled: Callable[[], bool] | None = None, extra: Sequence[str] = (),
          ready: Standby | None = None) -> CheckRun:
    """Run ``pytest args`` in ``root`` in a forked child, with a JSON report written to ``report``
    (relative to ``root``); wait for it, at most ``timeout_s``.

    The child is ``ready`` when that was forked (:func:`standby`) with the same arguments and is still
    waiting; otherwise (and ``ready`` is then discarded) it is forked now. It writes to this process's
    stdout and stderr, or to ``output`` when given. ``cancelled`` is asked every few milliseconds; when
    it says so the check is stopped. Ctrl-C (KeyboardInterrupt) stops the child too, and is raised again
    once it is gone. A check whose child ended without writing the report did not finish, whatever its
    exit status.
    """
    written = root / report
    written.unlink(missing_ok=True)
    argv = _argv(args, report, extra)
    start = time.perf_counter()
    pid = _started(ready, argv, root, output)
    if pid is None:
        start = time.perf_counter()
        pid = _fork(argv, root, output)
    ending, code, cpu = _wait(pid, timeout_s, cancelled)
    seconds = time.perf_counter() - start
    if ending is Ending.FINISHED and not written.is_file():
        ending = Ending.EXITED  # an exit status without the report: the process left mid-run
    verdicts = read_verdicts(written) if ending is Ending.FINISHED else ()
    return CheckRun(ending, code, seconds, cpu, verdicts, timeout_s)


def _started(ready: Standby | None, argv: list[str], root: Path, output: Path | None) -> int | None:
    """Start ``ready`` and return its pid, when it is the child this check needs and still waits; else
    discard it and return None."""
    if ready is None:
        return None
    if (ready.argv, ready.root, ready.output) == (tuple(argv), root, output) and ready.start():
        return ready.pid
    ready.discard()
    return None


def _waiting(pid: int) -> bool:
    """Whether the child ``pid`` has not ended (it is not reaped here)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


def _gate(fd: int) -> object:
    """The plugin of a child forked ahead of its check: it holds pytest after its configuration is built
    and before the plugins are configured (the first step that imports the learner's files), until the
    parent writes a byte. At end of file (the parent discarded the child, or is gone) the child ends."""
    import pytest

    class Gate:
        @pytest.hookimpl(tryfirst=True)
        def pytest_cmdline_main(self, config: pytest.Config) -> None:
            try:
                go = os.read(fd, 1)
            except OSError:
                go = b""
            if not go:
                os._exit(0)
            os.close(fd)

    return Gate()


def _child(argv: list[str], root: Path, output: Path | None, gate: tuple[int, int] | None,
           mask: Iterable[int]) -> None:
    """The forked child: its own process group, no terminal input, then pytest (held by a gate's pipe
    until the parent says go, when ``gate`` is given); never returns."""
    code = EXIT_HARNESS
    try:
        os.setpgid(0, 0)
        from pytest_mlcanon import split

        plugins: list[object] = [split.Split()]
        if gate is not None:
            os.close(gate[1])  # the parent's end: only the parent may hold it, or end of file never comes
            plugins.append(_gate(gate[0]))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # the parent's, as it was before the fork
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        if output is not None:
            fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
        os.chdir(root)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a crash keeps what was said
        import pytest

        code = int(pytest.main(argv, plugins=plugins))
    except BaseException:  # noqa: BLE001 - whatever happened, say so and end this process only
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _wait(pid: int, timeout_s: float,
          cancelled: Callable[[], bool] | None) -> tuple[Ending, int | None, float]:
    """Wait for the child: (how it ended, its exit status or signal, its CPU seconds). Stops it at the
    timeout, when ``cancelled()`` says so, or on KeyboardInterrupt (re-raised)."""
    deadline = time.monotonic() + timeout_s
    waiter = _pidfd(pid)
    try:
        while True:
            ended = _reap(pid)
            if ended is not None:
                status, cpu = ended
                if os.WIFSIGNALED(status):
                    return Ending.CRASHED, os.WTERMSIG(status), cpu
                return Ending.FINISHED, os.waitstatus_to_exitcode(status), cpu
            if time.monotonic() > deadline:
                return Ending.TIMED_OUT, None, _stop(pid)
            if cancelled is not None and cancelled():
                return Ending.CANCELLED, None, _stop(pid, gently=False)
            if waiter is not None:
                select.select([waiter], [], [], POLL_S)
            else:
                time.sleep(POLL_S)
    except BaseException:
        _stop(pid)
        raise
    finally:
        if waiter is not None:
            os.close(waiter)


def _reap(pid: int) -> tuple[int, float] | None:
    """The child's wait status and CPU seconds once it has ended, else None. Before reaping it, whatever
    the check left running in its process group is killed (the ended leader keeps the group's id from
    being reused)."""
    if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        return None
    _kill_group(pid)
    _, status, usage = os.wait4(pid, 0)
    return status, usage.ru_utime + usage.ru_stime


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` ends (Linux 5.3+), so the wait wakes at once."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
        return fd
    except OSError:
        return None


def _stop(pid: int, gently: bool = True) -> float:
    """End the child's process group: SIGTERM, then SIGKILL after the grace period (``gently``), else
    SIGKILL at once; reap the child and return its CPU seconds. A check a newer save made stale is
    killed at once: it records nothing either way, and SIGTERM would have it print pytest's interrupted
    run (tracebacks through the plugin) above the next check's report."""
    with contextlib.suppress(ChildProcessError):
        if gently:
            _kill_group(pid, signal.SIGTERM)
            deadline = time.monotonic() + GRACE_S
            while time.monotonic() < deadline:
                ended = _reap(pid)
                if ended is not None:
                    return ended[1]
                time.sleep(POLL_S)
        _kill_group(pid)
        usage = os.wait4(pid, 0)[2]
        return usage.ru_utime + usage.ru_stime
    return 0.0


def _kill_group(pgid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def read_verdicts(report: Path) -> tuple[ItemVerdict, ...]:
    """The items' verdicts from the JSON report (``--canon-report=json:PATH``); () when unreadable."""
    from pytest_mlcanon.rubric.model import AXES

    try:
        data: Any = json.loads(report.read_text(encoding="utf-8"))
        return tuple(ItemVerdict(int(i["number"]), str(i["slug"]), Status.from_json(i["status"]),
                                 i["score"] if isinstance(i.get("score"), int) else None, str(i["verdict"]),
                                 tuple(a for a in AXES if a in i["axes"] and not i["axes"][a]["passed"]))
                     for i in data["items"])
    except (OSError, ValueError, KeyError, TypeError, EvidenceError):
        return ()


# -- a warm server for a front end that must not run checks in its own process (``%%canon``) -----------------

@dataclass(frozen=True)
class Request:
    """One check asked of :func:`serve`: the items (slugs), the learner repo, the practice directory."""

    items: tuple[str, ...]
    root: str
    practice: str
    timeout_s: float | None = None

    def to_json(self) -> str:
        return json.dumps({"items": list(self.items), "root": self.root, "practice": self.practice,
                           "timeout_s": self.timeout_s})

    @classmethod
    def from_json(cls, text: str) -> Request:
        data = json.loads(text)
        timeout = data["timeout_s"]
        if not (isinstance(data["items"], list) and isinstance(data["root"], str)
                and isinstance(data["practice"], str) and (timeout is None or isinstance(timeout, (int, float)))):
            raise ValueError(f"not a check request: {text[:200]!r}")
        return cls(tuple(str(s) for s in data["items"]), data["root"], data["practice"],
                   None if timeout is None else float(timeout))


@dataclass(frozen=True)
class Reply:
    """What :func:`serve` answers: the check's outcome, where its output and report are, and the warm-up's
    reference run when this request paid for one (``warmed_s``)."""

    run: CheckRun
    output: str
    report: str
    warmed_s: float | None = None

    def to_json(self) -> str:
        run = self.run
        return json.dumps({"ending": run.ending.value, "code": run.code, "seconds": run.seconds, "cpu_s": run.cpu_s,
                           "timeout_s": run.timeout_s, "output": self.output, "report": self.report,
                           "warmed_s": self.warmed_s})

    @classmethod
    def from_json(cls, text: str) -> Reply:
        data = json.loads(text)
        ending = Ending(data["ending"])
        report = str(data["report"])
        verdicts = read_verdicts(Path(report)) if ending.whole else ()
        run = CheckRun(ending, data["code"], float(data["seconds"]), float(data["cpu_s"]), verdicts,
                       float(data["timeout_s"]))
        return cls(run, str(data["output"]), report, data["warmed_s"])


def serve(requests: Iterable[str], reply: Callable[[str], None]) -> None:
    """Answer each request line with a reply line: warm up for the request's items once (per set of
    items), then fork the check. The checks' output goes to a file beside the report, never to this
    process's streams, which carry the protocol."""
    warmed: dict[tuple[str, ...], Warmed] = {}
    for line in requests:
        if not line.strip():
            continue
        request = Request.from_json(line)
        items = [catalog.get(slug) for slug in request.items]
        root = Path(request.root)
        paid = None
        if request.items not in warmed:
            with contextlib.redirect_stdout(sys.stderr):
                warmed[request.items] = warm_up(items, root)
            paid = warmed[request.items].seconds
        timeout = request.timeout_s or warmed[request.items].timeout_s
        report = report_path(items)
        output = (root / report).with_suffix(".txt")
        output.parent.mkdir(parents=True, exist_ok=True)
        run = check(check_args(items, Path(request.practice), strict=False, root=root), root, report, timeout, output=output,
                    extra=("--color=no", *warmed[request.items].lean_args()))
        reply(Reply(run, str(output), str(root / report), paid).to_json())


def main() -> None:
    """``python -m pytest_mlcanon.warm``: :func:`serve` over stdin and stdout, one JSON object a line."""
    out = sys.stdout

    def reply(text: str) -> None:
        out.write(text + "\n")
        out.flush()

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # a running check is stopped, its process group with it (see check)

    signal.signal(signal.SIGTERM, stop)
    sys.stdout = sys.stderr  # whatever else prints must not corrupt the protocol
    try:
        serve(sys.stdin, reply)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
