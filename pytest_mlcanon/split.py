"""A warm check's tests in two processes: the second core answers half of a save's check.

A watched check (``mlcanon watch``, ``%%canon``) runs in a child forked from a warm process; its test
loop is most of the time from a save to the verdict. When the machine has a second core and the
check is long enough to gain from it, :class:`Split` forks a helper once the tests are collected: the
helper runs about half of them (balanced by the durations the warm-up's reference run measured) and
sends each phase's report back on a pipe, in pytest's own serialised form, as pytest-xdist's workers
do; this process runs the rest and logs the helper's reports as they arrive. Everything downstream
(the terminal, the canon's record and score jobs, the cache of failures) sees one run's reports.

A test's facts travel on its report (``run.record``): outcome, duration, shape trace, first non-finite
value, where a failure happened. Line coverage (``--canon-coverage``) comes back at the end.

Tests the helper did not report (it crashed, was killed, or wrote something unreadable) are run here
afterwards, so the check has exactly the outcomes a serial run has. A check that must stop early or
talk to the terminal runs serially: ``-x``/``--maxfail``, ``--sw``, ``--pdb``, ``--trace``, ``-s``,
``--collect-only``, pytest-cov, xdist. This is the learner's own code on the learner's own machine; the
grader never splits a job.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

#: Below this many tests, or this many seconds of them, a second process costs more than it saves.
MIN_TESTS = 8
MIN_SECONDS = 0.15
#: What a test costs beyond its phases' durations (pytest's own work per test), and what logging one of
#: the helper's tests costs this process: the partition weighs both.
OVERHEAD_S = 0.003
RELAY_S = 0.002
UNKNOWN_S = 0.01  # a test the warm-up did not time
READ_BYTES = 1 << 16

_durations: dict[str, float] = {}


def remember(durations: Mapping[str, float]) -> None:
    """Keep the warm-up's per-test seconds (every phase), for the checks forked from this process."""
    _durations.clear()
    _durations.update(durations)


class Durations:
    """A plugin of the warm-up's run: each test's seconds over its phases."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + float(report.duration)


def partition(nodeids: Sequence[str], seconds: Mapping[str, float]) -> tuple[list[int], list[int]]:
    """Indices of the tests this process runs and of those the helper runs, each in collection order:
    longest first, each to the lighter side (this side also pays to log the helper's tests)."""
    cost = [seconds.get(nodeid, UNKNOWN_S) + OVERHEAD_S for nodeid in nodeids]
    here: list[int] = []
    there: list[int] = []
    load_here = load_there = 0.0
    for index in sorted(range(len(nodeids)), key=lambda i: -cost[i]):
        if load_here + cost[index] <= load_there + cost[index] + RELAY_S:
            here.append(index)
            load_here += cost[index]
        else:
            there.append(index)
            load_there += cost[index]
            load_here += RELAY_S
    return sorted(here), sorted(there)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _serial_only(config: pytest.Config) -> str | None:
    """Why this run must stay in one process, or None."""
    option = config.option
    reasons = {
        "--collect-only": option.collectonly,
        "-x/--maxfail": option.maxfail,
        "--sw": getattr(option, "stepwise", False) or getattr(option, "stepwise_skip", False),
        "--pdb": option.usepdb or getattr(option, "trace", False),
        "-s": getattr(option, "capture", "fd") not in ("fd", "sys"),
        "pytest-cov": getattr(option, "cov_source", None) and not getattr(option, "no_cov", False),
        "xdist": getattr(option, "numprocesses", None) or hasattr(config, "workerinput"),
    }
    return next((name for name, on in reasons.items() if on), None)


class Split:
    """Registered in a warm check's child (``warm._child``)."""

    def __init__(self, cores: int | None = None) -> None:
        self.cores = _cores() if cores is None else cores

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        items = list(session.items)
        if (self.cores < 2 or len(items) < MIN_TESTS or session.testsfailed or _serial_only(session.config)
                or sum(_durations.get(i.nodeid, UNKNOWN_S) for i in items) < MIN_SECONDS):
            return None  # pytest's own loop
        here, there = partition([item.nodeid for item in items], _durations)
        mine, theirs = [items[i] for i in here], [items[i] for i in there]
        try:
            helper = _Helper.fork(session, theirs)
        except OSError:  # no process to spare (a limit on processes or memory): one process, as ever
            return None
        try:
            _run(mine, after_each=lambda: helper.relay(block=False))
            _prepare_scores(session.config)  # while the helper runs its last tests
            helper.relay(block=True)
        finally:
            helper.stop()
        _run([item for item in theirs if item.nodeid not in helper.finished])
        return True


def _run(items: list[pytest.Item], after_each: Callable[[], None] | None = None) -> None:
    """Run ``items`` in order as pytest's own loop does (each told the next, for fixture teardown)."""
    for index, item in enumerate(items):
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=items[index + 1] if index + 1 < len(items)
                                                 else None)
        if after_each is not None:
            after_each()


# -- the helper ---------------------------------------------------------------------------------------------

@dataclass
class _Helper:
    """This side of the helper: its pid, the pipe it writes to, and what it has reported."""

    session: pytest.Session
    pid: int
    fd: int | None
    buffer: bytes = b""
    finished: set[str] = field(default_factory=set)  # node ids whose teardown report arrived
    started: set[str] = field(default_factory=set)
    expected: frozenset[str] = frozenset()  # the node ids the helper runs: a report of another is unreadable

    @classmethod
    def fork(cls, session: pytest.Session, items: list[pytest.Item]) -> _Helper:
        read, write = os.pipe()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        try:
            pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            raise
        if pid == 0:
            os.close(read)
            _helper_main(session, items, write)
        os.close(write)
        return cls(session, pid, read, expected=frozenset(item.nodeid for item in items))

    def relay(self, block: bool) -> None:
        """Log the reports that arrived (until the helper closes the pipe, when ``block``)."""
        while self.fd is not None:
            ready, _, _ = select.select([self.fd], [], [], None if block else 0)
            if not ready:
                return
            chunk = os.read(self.fd, READ_BYTES)
            if not chunk:
                os.close(self.fd)
                self.fd = None
                return
            *lines, self.buffer = (self.buffer + chunk).split(b"\n")
            for line in lines:
                if not self._log(line):
                    self.stop()
                    return

    def _log(self, line: bytes) -> bool:
        """Log one frame; False when it cannot be read (the helper's remaining tests then run here)."""
        config = self.session.config
        try:
            frame = json.loads(line)
            kind, body = frame["kind"], frame["body"]
            if kind == "report":
                report = config.hook.pytest_report_from_serializable(config=config, data=body)
                if (not isinstance(report, pytest.TestReport) or report.nodeid not in self.expected
                        or report.nodeid in self.finished):
                    return False
            elif kind == "warning":
                _warned(config, body)
                return True
            elif kind == "coverage":
                _merge_coverage(config, body)
                return True
            else:
                return False
        except (ValueError, KeyError, TypeError, AttributeError):
            return False
        hook = config.hook
        if report.nodeid not in self.started:
            self.started.add(report.nodeid)
            hook.pytest_runtest_logstart(nodeid=report.nodeid, location=report.location)
        hook.pytest_runtest_logreport(report=report)
        if report.when == "teardown":
            self.finished.add(report.nodeid)
            hook.pytest_runtest_logfinish(nodeid=report.nodeid, location=report.location)
        return True

    def stop(self) -> None:
        """End the helper if it still runs, and reap it."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.pid > 0:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(self.pid, os.WNOHANG)[0] == 0:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
            self.pid = 0


class _Sender:
    """The helper's plugin: each phase's report, and each warning, on the pipe to this process's parent."""

    def __init__(self, config: pytest.Config, fd: int) -> None:
        self.config = config
        self.pipe = os.fdopen(fd, "wb")
        self.live = False  # registering replays the warnings recorded before the fork: the parent has those

    def send(self, kind: str, body: Any) -> None:
        self.pipe.write(json.dumps({"kind": kind, "body": body}).encode() + b"\n")
        self.pipe.flush()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.send("report", self.config.hook.pytest_report_to_serializable(config=self.config, report=report))

    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage, when: str, nodeid: str,
                                location: tuple[str, int, str] | None) -> None:
        if not self.live:
            return
        category = warning_message.category
        self.send("warning", {"message": str(warning_message.message), "module": category.__module__,
                              "category": category.__qualname__, "filename": warning_message.filename,
                              "lineno": warning_message.lineno, "when": when, "nodeid": nodeid,
                              "location": location})


def _helper_main(session: pytest.Session, items: list[pytest.Item], fd: int) -> None:
    """The forked helper: runs ``items`` with its own capture files and no terminal, reports each phase
    on ``fd``, and ends without finishing the session (the parent finishes it); never returns."""
    code = 0
    try:
        config = session.config
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        _own_capture(config)
        sender = _Sender(config, fd)
        config.pluginmanager.register(sender, "mlcanon-split-sender")
        sender.live = True
        _run(items)
        lines = _coverage_lines(config)
        if lines is not None:
            sender.send("coverage", lines)
        sender.pipe.close()
    except BaseException:  # noqa: BLE001 - whatever happened, the parent runs what was not reported
        code = 1
    finally:
        os._exit(code)


def _own_capture(config: pytest.Config) -> None:
    """Capture files of the helper's own: the ones it inherited are the parent's too (one file offset
    for both), and reading them here would take the parent's captured output."""
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is None or getattr(capman, "_global_capturing", None) is None:
        return
    capman._global_capturing = None  # dropped, never read: the parent reads its own
    capman.start_global_capturing()
    capman.suspend_global_capture()


def _run_plugin(config: pytest.Config) -> Any:
    from pytest_mlcanon.plugin import RUN_PLUGIN_NAME

    return config.pluginmanager.get_plugin(RUN_PLUGIN_NAME)


def _prepare_scores(config: pytest.Config) -> None:
    """The static part of the items' scores, computed now: they are read back when the run is scored,
    and an error here is the scoring's to report, with its item."""
    prepare = getattr(_run_plugin(config), "prepare_scores", None)
    if prepare is not None:
        with contextlib.suppress(Exception):
            prepare()


def _coverage_lines(config: pytest.Config) -> dict[str, list[int]] | None:
    run = _run_plugin(config)
    measurement = getattr(run, "measurement", None)
    return measurement.stop() if measurement is not None else None


def _merge_coverage(config: pytest.Config, lines: dict[str, list[int]]) -> None:
    measurement = getattr(_run_plugin(config), "measurement", None)
    if measurement is not None:
        measurement.merge({str(path): [int(n) for n in numbers] for path, numbers in lines.items()})


def _warned(config: pytest.Config, body: Mapping[str, Any]) -> None:
    """Record a helper's warning here, as pytest's warnings plugin would have (the summary lists it)."""
    category = _warning_class(str(body["module"]), str(body["category"]))
    message = warnings.WarningMessage(category(str(body["message"])), category, str(body["filename"]),
                                      int(body["lineno"]))
    location = tuple(body["location"]) if body.get("location") else None
    config.hook.pytest_warning_recorded.call_historic(kwargs={
        "warning_message": message, "when": str(body["when"]), "nodeid": str(body["nodeid"]),
        "location": location})


def _warning_class(module: str, qualname: str) -> type[Warning]:
    """The warning's class if its module is already imported here (nothing is imported), else UserWarning."""
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found if isinstance(found, type) and issubclass(found, Warning) else UserWarning

