"""The drill timer behind ``--timed``, kept in ``.mlcanon/timer.json`` of the learner's repo.

An item's clock starts when its learner file was created, as far as the file system can tell
(its birth time where the OS records one, else its modification time when mlcanon first sees it),
or at the last ``mlcanon reset``/``mlcanon drill`` of the item, whichever is later. A first
attempt may take ``first_attempt_factor`` (default 2) times the item's from-memory minutes; after a
passing attempt has been recorded, the plain target applies.

The state file is written atomically; a corrupt one is backed up beside itself and reported, never
silently dropped.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_mlcanon.catalog import Item
from pytest_mlcanon.reports.model import atomic_write
from pytest_mlcanon.rubric.model import Finding

STATE_DIR = ".mlcanon"
STATE_FILE = "timer.json"


@dataclass(frozen=True)
class Timing:
    """Elapsed and allowed minutes for one item."""

    elapsed_min: float
    allowed_min: float
    target_min: int
    attempt: str
    started_from: str

    @property
    def over(self) -> bool:
        return self.elapsed_min > self.allowed_min

    def as_dict(self) -> dict[str, Any]:
        return {"elapsed_min": round(self.elapsed_min, 2), "allowed_min": self.allowed_min,
                "target_min": self.target_min, "attempt": self.attempt, "started_from": self.started_from}


class TimerState:
    """The timer file of one repo: per item slug, ``start`` (epoch s), ``source``, ``passes``, ``best_s``."""

    def __init__(self, root: Path) -> None:
        self.path = root / STATE_DIR / STATE_FILE
        self.warning = ""
        self.data: dict[str, dict[str, Any]] = self._read()

    def _read(self) -> dict[str, dict[str, Any]]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("top level is not an object")
            return data
        except (OSError, ValueError) as exc:
            backup = self.path.with_name(f"{STATE_FILE}.corrupt-{int(time.time())}")
            os.replace(self.path, backup)
            self.warning = f"{self.path} was unreadable ({exc}); moved to {backup.name} and started afresh"
            return {}

    def save(self) -> None:
        atomic_write(self.path, json.dumps(self.data, indent=2, sort_keys=True) + "\n")

    def reset(self, item: Item, now: float | None = None) -> None:
        """Restart an item's clock (``mlcanon reset``/``drill``)."""
        entry = self.data.setdefault(item.slug, {})
        entry.update(start=now if now is not None else time.time(), source="reset")
        self.save()

    def timing(self, item: Item, files: list[Path], factor: float, now: float | None = None) -> Timing:
        """Elapsed time against the allowance; records the start on first sight."""
        now = now if now is not None else time.time()
        entry = self.data.setdefault(item.slug, {})
        if "start" not in entry:
            entry.update(start=_creation_time(files), source="file")
        passes = int(entry.get("passes", 0))
        first = passes == 0
        allowed = item.minutes * (factor if first else 1.0)
        return Timing(
            elapsed_min=max(0.0, now - float(entry["start"])) / 60.0,
            allowed_min=allowed,
            target_min=item.minutes,
            attempt="first attempt" if first else f"attempt after {passes} pass(es)",
            started_from="the last reset" if entry.get("source") == "reset" else "the file's creation",
        )

    def record_pass(self, item: Item, elapsed_min: float) -> None:
        entry = self.data.setdefault(item.slug, {})
        entry["passes"] = int(entry.get("passes", 0)) + 1
        best = entry.get("best_min")
        entry["best_min"] = round(elapsed_min if best is None else min(float(best), elapsed_min), 2)


def _creation_time(files: list[Path]) -> float:
    stamps = []
    for path in files:
        st = path.stat()
        stamps.append(getattr(st, "st_birthtime", None) or st.st_mtime)
    return min(stamps) if stamps else time.time()


def stall_finding(item: Item, timing: Timing, display: str) -> Finding:
    """API006: the drill ran past its allowance."""
    return Finding("API006", display, 0,
                   f"{timing.elapsed_min:.1f} min against {timing.allowed_min:.0f} allowed ({timing.attempt}, "
                   f"target {item.minutes} min, timed from {timing.started_from})",
                   "drill it again from memory: `mlcanon reset " + item.slug + "` restarts the clock")
