"""The progress bar of a batch: redrawn in place on a terminal, one line per finished job otherwise
(a CI log), written to stderr so the outputs on stdout stay clean. A label quotes a verdict, so it is
cleaned of control characters first: no submission moves the cursor, clears or retitles the terminal."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from pytest_mlcanon.grade.text import clean

WIDTH = 28


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = enabled and total > 0
        self.tty = self.enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started = time.monotonic()
        self._lock = threading.Lock()
        if self.tty:
            self._draw("")

    def advance(self, label: str) -> None:
        """One job finished; ``label`` says which and how it went."""
        label = clean(label, limit=300)
        with self._lock:
            self.done += 1
            if not self.enabled:
                return
            if self.tty:
                self._draw(label)
            else:
                self.stream.write(f"[{self.done}/{self.total}] {label}\n")
                self.stream.flush()

    def _draw(self, label: str) -> None:
        filled = int(WIDTH * self.done / self.total)
        elapsed = time.monotonic() - self.started
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        bar = "#" * filled + "." * (WIDTH - filled)
        self.stream.write(f"\rgrading [{bar}] {self.done}/{self.total}  {elapsed:4.0f}s  eta {eta:4.0f}s  "
                          f"{label[:40]:<40}")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
