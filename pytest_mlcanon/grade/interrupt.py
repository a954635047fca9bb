"""Ctrl-C (SIGINT) and SIGTERM (a cancelled CI job, ``kill``) during ``mlcanon grade``.

The first signal stops the batch: ``Interrupted`` is raised on the main thread, wherever it waits;
the batch kills its running jobs as it does on a timeout, keeps what finished and marks the rest
``not graded (interrupted)``. Every later signal is ignored, so the finished work is written whole.
While the batch cleans up (``held``), a first signal is noted and not raised: the cleanup of the
sandbox users and the job folders always runs to its end. The command then exits ``128 + signal``
(130 for SIGINT, 143 for SIGTERM) with one line.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The batch was told to stop (not an ``Exception``: no per-student fence may catch it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Trap:
    """What the signal handlers saw: ``signum`` is the first signal (0: none)."""

    def __init__(self) -> None:
        self.signum = 0
        self.armed = True

    @property
    def exit_code(self) -> int:
        return 128 + self.signum if self.signum else 0

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum:
            return  # the batch is already stopping: a second Ctrl-C does not cut the outputs short
        self.signum = signum
        if self.armed:
            raise Interrupted(signum)


_current: Trap | None = None


@contextlib.contextmanager
def trapped() -> Iterator[Trap]:
    """Catch SIGINT and SIGTERM for the block (on the main thread; elsewhere signals are left alone)."""
    global _current
    trap = Trap()
    if threading.current_thread() is not threading.main_thread():
        yield trap
        return
    previous = {signum: signal.signal(signum, trap.handle) for signum in SIGNALS}
    _current = trap
    try:
        yield trap
    finally:
        _current = None
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Within the block a first signal is noted, not raised (the batch's cleanup, writing the outputs)."""
    trap = _current
    if trap is None:
        yield
        return
    armed, trap.armed = trap.armed, False
    try:
        yield
    finally:
        trap.armed = armed
