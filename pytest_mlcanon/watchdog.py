"""Learner code that hangs or floods gets a verdict, not a frozen terminal: the per-test watchdog.

Each phase of a canon test (setup, call, teardown) runs under a limit of CPU time (``test_timeout``,
60 s by default, 0 turns it off; CPU time, so a loaded machine does not trip it). At the limit,
``SIGVTALRM`` raises :class:`CanonTimeout` in the main thread, inside whatever learner line is
spinning; pytest records it as the test's failure:

    timeout: chunk_text did not return within 60 s of CPU time (practice/retrieval/rag.py:41)

Code that waits without computing is stopped the same way at :data:`WALL_FACTOR` times the limit of
wall-clock time.

naming the learner's function the test called (the outermost frame in the learner's folder) and the
line it was on (the innermost). A test that writes more than :data:`FLOOD_BYTES` to its captured
stdout or stderr is stopped the same way (``flood: ...``): one thread beside the run's tests watches the
size of pytest's capture files. Either way the item's remaining tests are not run (each fails at
once, naming the test that stopped the item), so one infinite loop costs one limit, not one per
test, and the run is an ordinary failing run: never a pass, never partial. Captured output longer
than :data:`SECTION_CHARS` is cut to its head and tail in the report.

:class:`CanonTimeout` derives from ``BaseException`` so ``except Exception`` in the learner's loop
cannot swallow it; while the phase keeps running, the alarm repeats every second. Should the code
be stuck where no signal reaches it (inside native code, or swallowing every exception), the thread
ends the process :data:`GRACE_S` after the limit, with the verdict and every thread's stack on
stderr. Without ``SIGVTALRM`` (Windows) or off the main thread, that last resort is the only guard.
While a debugger traces the test (``--trace``, ``breakpoint()``), the limit waits.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from pytest_mlcanon.layout import inside, shown

FLOOD_BYTES = 16 * 1024 * 1024
SECTION_CHARS = 8_000
GRACE_S = 10.0
#: Code that waits without computing (a sleep, a lock) is stopped at this multiple of the limit in
#: wall-clock time; the limit itself is CPU time, so a loaded machine never trips it.
WALL_FACTOR = 5.0
REPEAT_S = 1.0
_POLL_S = 0.1
EXIT_STUCK = 3  # the process was ended by the watchdog (pytest's own codes are 0-5; 3 is internal error)


class CanonTimeout(BaseException):
    """A canon test phase ran past its limit or flooded its output; the message is the verdict."""


@dataclass(frozen=True)
class Stop:
    """Why the watchdog stopped a test: ``timeout`` or ``flood``, and the one-line verdict."""

    kind: str
    verdict: str

    @property
    def short(self) -> str:
        """The verdict without its advice, for the tests the stop left unrun."""
        return self.verdict.partition("; ")[0]


class Watchdog:
    """Registered as ``mlcanon-watchdog`` by the plugin in a learner's run (not in a grading job,
    whose parent enforces its own limits from outside the process)."""

    def __init__(self, config: pytest.Config, limit_s: float, learner_dir: Path, item_key: str) -> None:
        self.config = config
        self.limit_s = limit_s
        self.learner_dir = learner_dir.resolve()
        self.item_key = item_key  # the user property naming the canon item a test belongs to
        self.stopped: dict[str, str] = {}  # item slug -> the verdict of the test that stopped it
        self._phase: _Phase | None = None
        self._watcher: _Watcher | None = None  # one thread for the whole run, started by the first phase

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Stop the watcher thread: a process that forks checks after a run (``mlcanon watch``'s warm-up)
        must hold no thread of ours."""
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None

    def watcher(self) -> _Watcher:
        if self._watcher is None:
            self._watcher = _Watcher()
        return self._watcher

    # -- the phases -------------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        return (yield from self._guard(item, "setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        return (yield from self._guard(item, "call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        return (yield from self._guard(item, "teardown"))

    def _guard(self, item: pytest.Item, when: str) -> Generator[None, None, None]:
        slug = str(dict(item.user_properties).get(self.item_key, ""))
        if when == "call" and slug in self.stopped:
            pytest.fail(f"not run: {self.stopped[slug]}", pytrace=False)
        phase = _Phase(self, item)
        self._phase = phase
        phase.arm()
        try:
            return (yield)
        except CanonTimeout:
            if slug and phase.stop is not None:
                self.stopped.setdefault(slug, f"{item.name} stopped this item ({phase.stop.short})")
            raise
        finally:
            phase.disarm()
            self._phase = None

    # -- the report --------------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[
            None, pytest.TestReport, pytest.TestReport]:
        report = yield
        report.sections = [(title, cut(text)) for title, text in report.sections]
        return report

    # -- what the learner sees -------------------------------------------------------------------------
    def verdict(self, kind: str, frame: FrameType | None, item: pytest.Item) -> str:
        """``timeout: chunk_text did not return within 60 s (practice/retrieval/rag.py:41)``."""
        mine = [f for f in _stack(frame) if inside(f.f_code.co_filename, self.learner_dir)]
        if mine:
            outer, inner = mine[-1], mine[0]
            who, where = outer.f_code.co_name, f"{shown(inner.f_code.co_filename)}:{inner.f_lineno}"
            what = "printed more than" if kind == "flood" else "did not return"
        else:
            path, line, _ = item.location
            who, where = item.name, f"{shown(self.config.rootpath / path)}:{(line or 0) + 1}"
            what = "printed more than" if kind == "flood" else "did not finish"
        if kind == "timeout":
            return (f"timeout: {who} {what} within {self.limit_s:g} s of CPU time ({where}); if it is only "
                    "slow, raise test_timeout (--canon-test-timeout)")
        if kind == "wall":
            return f"timeout: {who} {what} within {self.limit_s * WALL_FACTOR:g} s ({where})"
        return f"flood: {who} {what} {FLOOD_BYTES // (1024 * 1024)} MiB of output ({where})"


class _Phase:
    """One test phase under the watchdog: the alarm, and the flood watch and last resort that the run's
    watcher thread applies to it."""

    def __init__(self, dog: Watchdog, item: pytest.Item) -> None:
        self.dog = dog
        self.item = item
        self.stop: Stop | None = None
        self.done = threading.Event()
        self.signals = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        self.previous: Any = None
        self.debugging = False
        self.watcher: _Watcher | None = None
        self.start_sizes = (0, 0)
        self.wall = self.deadline = 0.0

    def arm(self) -> None:
        if self.dog.limit_s <= 0:
            return
        if self.signals:
            self.previous = signal.signal(signal.SIGVTALRM, self._on_alarm)
            signal.setitimer(signal.ITIMER_VIRTUAL, self.dog.limit_s, REPEAT_S)
        self.start_sizes = _capture_sizes()
        self.wall = time.monotonic() + self.dog.limit_s * WALL_FACTOR
        self.deadline = self.wall + (GRACE_S if self.signals else 0.0)
        self.watcher = self.dog.watcher()
        self.watcher.watch(self)

    def disarm(self) -> None:
        self.done.set()  # first: an alarm the watcher raises from now on is ignored
        if self.signals and self.previous is not None:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
            signal.signal(signal.SIGVTALRM, self.previous)
        if self.watcher is not None:
            self.watcher.release(self)

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        __tracebackhide__ = True  # the traceback ends at the learner's line, not in here
        self.debugging = _debugging()
        if self.done.is_set() or self.debugging:  # a learner at a pdb prompt is thinking, not stuck
            return
        kind = self.stop.kind if self.stop is not None else "timeout"
        self.stop = Stop(kind, self.dog.verdict(kind, frame, self.item))
        raise CanonTimeout(self.stop.verdict)

    def tick(self) -> None:
        """One look by the watcher: stop a flood, and end the process when the phase outlives its limit
        by GRACE_S."""
        flooded = any(now - then > FLOOD_BYTES for now, then in zip(_capture_sizes(), self.start_sizes))
        if self.stop is None and (flooded or time.monotonic() > self.wall):
            self.stop = Stop("flood" if flooded else "wall", "")
            if self.signals:
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGVTALRM)
                self.deadline = min(self.deadline, time.monotonic() + GRACE_S)
        if self.debugging:
            self.wall = self.deadline = time.monotonic() + self.dog.limit_s * WALL_FACTOR + GRACE_S
        elif time.monotonic() > self.deadline:
            self._end_process()

    def _end_process(self) -> None:
        capman = self.dog.config.pluginmanager.getplugin("capturemanager")
        if capman is not None:
            try:
                capman.suspend_global_capture(in_=False)
            except Exception:  # the process is ending either way; the message is what matters
                pass
        kind = self.stop.kind if self.stop is not None else "timeout"
        frame = sys._current_frames().get(threading.main_thread().ident or 0)
        verdict = self.dog.verdict(kind, frame, self.item)
        sys.stderr.write(f"\nmlcanon: {self.item.nodeid}: {verdict}; it could not be interrupted, so the run "
                         "ends here (the stacks follow)\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(all_threads=True)
        os._exit(EXIT_STUCK)


class _Watcher:
    """The thread beside the tests of one run: every :data:`_POLL_S` it looks at the phase being run,
    if any. One thread for the run, not one per phase: a run has three phases per test, and starting
    and joining a thread for each costs more than most of the canon's tests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held while the thread looks at a phase: a phase ends between looks
        self._wake = threading.Condition(self._lock)
        self._phase: _Phase | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="mlcanon-watchdog", daemon=True)
        self._thread.start()

    def watch(self, phase: _Phase) -> None:
        with self._lock:
            self._phase = phase

    def release(self, phase: _Phase) -> None:
        with self._lock:
            if self._phase is phase:
                self._phase = None

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._phase = None
            self._wake.notify()
        self._thread.join()

    def _run(self) -> None:
        with self._wake:
            while not self._closed:
                self._wake.wait(_POLL_S)
                phase = self._phase
                if phase is not None and not phase.done.is_set():
                    phase.tick()


def _debugging() -> bool:
    """True while a debugger traces this thread (pdb, ``breakpoint()``, an IDE's)."""
    trace = sys.gettrace()
    if trace is None:
        return False
    owner = getattr(trace, "__self__", None)
    modules = [c.__module__ for c in type(owner).__mro__] if owner is not None else [getattr(trace, "__module__", "")]
    return any(str(m).split(".")[0] in _DEBUGGERS for m in modules)


_DEBUGGERS = frozenset({"bdb", "pdb", "pydevd", "_pydevd_bundle", "debugpy", "IPython"})


def cut(text: str, limit: int = SECTION_CHARS) -> str:
    """``text`` when short, else its head and tail around a note of what was left out."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut by mlcanon ...]\n{text[-half:]}"


def _capture_sizes() -> tuple[int, int]:
    """Bytes written so far to the files behind stdout and stderr (pytest's capture files)."""
    sizes = []
    for fd in (1, 2):
        try:
            sizes.append(os.fstat(fd).st_size)
        except OSError:
            sizes.append(0)
    return sizes[0], sizes[1]


def _stack(frame: FrameType | None) -> list[FrameType]:
    """The frames from ``frame`` (innermost) outwards."""
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames
