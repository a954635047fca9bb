"""What the dashboard shows, read from the learner's drill state: typed rows, no HTML.

:func:`gather` reads ``.mlcanon/progress.json`` (the items' clocks and attempts, and the mock
sessions once the practice chapters record them under ``"mocks"``), ``.mlcanon/misslog.md``, and
the week's plan, for the repo at ``root``. Nothing is written: a repo without ``.mlcanon/`` gives a
dashboard of sixty new items.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_mlcanon import catalog, drill, misslog, plan, progress

SOON_DAYS = 7
TOP_MISSES = 10
MOCKS_KEY = "mocks"


class State(enum.Enum):
    """Where an item stands, for its colour in the grid (the first that applies, in this order)."""

    UNAVAILABLE = "unavailable"  # this version of the canon has no reference or tests for it
    DRILLING = "drilling"        # its clock runs and the attempt has not passed yet
    NEW = "new"                  # never checked
    FAILED = "failed"            # the last attempt ended without a pass (it is due the next day)
    DUE = "due"                  # passed, and its review is due now
    SOON = "soon"                # passed, review due within SOON_DAYS
    PASSED = "passed"            # passed, review later

    @property
    def title(self) -> str:
        return _TITLES[self]


_TITLES = {
    State.UNAVAILABLE: "not in this canon yet", State.DRILLING: "drilling now", State.NEW: "new",
    State.FAILED: "last attempt failed", State.DUE: "review due", State.SOON: f"due within {SOON_DAYS} days",
    State.PASSED: "passed, review later",  # the header's "passed" counts every item with a pass
}


@dataclass(frozen=True)
class AttemptPoint:
    """One recorded attempt with a time: when it ended, how long it took, and how it went."""

    attempt: int
    end: float
    elapsed_min: float
    allowed_min: float | None
    passed: bool
    over_time: bool
    score: int | None
    checks: int


@dataclass(frozen=True)
class ItemView:
    item: catalog.Item
    state: State
    summary: progress.ItemProgress
    points: tuple[AttemptPoint, ...]
    checks: int


@dataclass(frozen=True)
class MockRun:
    """One recorded run of a mock session (the practice chapters' ``mlcanon mock N``)."""

    session: str
    attempt: int
    start: float | None
    end: float | None
    elapsed_min: float | None
    score: str
    passed: bool | None
    verdict: str = ""


@dataclass(frozen=True)
class Dashboard:
    root: Path
    now: float
    items: tuple[ItemView, ...]
    misses: tuple[misslog.Recurring, ...]
    miss_lines: int
    week: plan.Plan
    mocks: tuple[MockRun, ...]
    warnings: tuple[str, ...]

    def count(self, *states: State) -> int:
        return sum(1 for view in self.items if view.state in states)

    @property
    def attempted(self) -> int:
        return sum(1 for view in self.items if view.summary.started)

    @property
    def passed(self) -> int:
        return sum(1 for view in self.items if view.summary.passes)

    @property
    def checks(self) -> int:
        return sum(view.checks for view in self.items)

    @property
    def drilled_min(self) -> float:
        return sum(p.elapsed_min for view in self.items for p in view.points)


def gather(root: Path, now: float) -> Dashboard:
    """The dashboard of the learner repo at ``root`` as of ``now`` (raises StateError like ``mlcanon list``)."""
    current = progress.snapshot(root)
    entries = {item.slug: current.peek(item.slug) for item in catalog.all_items()}
    views = tuple(_item_view(item, entries[item.slug], now) for item in catalog.all_items())
    summaries = {view.item.number: view.summary for view in views}
    week = plan.weekly(summaries, now, drill.drillable)
    entries_log, warnings = _misslog(root)
    ranked = misslog.rank(entries_log)
    return Dashboard(root, now, views, tuple(ranked[:TOP_MISSES]), len(entries_log), week,
                     mock_runs(current.data.get(MOCKS_KEY)), tuple(current.warnings) + warnings)


def state_of(item: catalog.Item, summary: progress.ItemProgress, now: float, *, drilling: bool) -> State:
    """The item's state; ``drilling`` says its clock runs on an attempt that has not passed yet."""
    if not drill.drillable(item):
        return State.UNAVAILABLE
    if drilling:
        return State.DRILLING
    if not summary.started:
        return State.NEW
    if not summary.last_passed:
        return State.FAILED
    if summary.due is not None and summary.due <= now:
        return State.DUE
    if summary.due is not None and summary.due <= now + SOON_DAYS * progress.DAY_S:
        return State.SOON
    return State.PASSED


def _item_view(item: catalog.Item, entry: Mapping[str, Any], now: float) -> ItemView:
    summary = progress.summarize(dict(entry))
    records = [r for r in entry.get("attempts", []) if isinstance(r, dict)]
    points = tuple(p for r in records if (p := _point(r)) is not None)
    checks = sum(_int(r.get("checks")) or 0 for r in records)
    running = summary.running
    polishing = (running is not None and bool(records) and records[-1].get("attempt") == running.attempt
                 and records[-1].get("passed") is True)
    drilling = running is not None and not polishing
    return ItemView(item, state_of(item, summary, now, drilling=drilling), summary, points, checks)


def _point(record: Mapping[str, Any]) -> AttemptPoint | None:
    end = progress.timestamp(record.get("end"))
    elapsed = _number(record.get("elapsed_min"))
    if end is None or elapsed is None:
        return None
    return AttemptPoint(_int(record.get("attempt")) or 0, end, elapsed, _number(record.get("allowed_min")),
                        record.get("passed") is True, record.get("over_time") is True, _int(record.get("score")),
                        _int(record.get("checks")) or 0)


def mock_runs(raw: Any) -> tuple[MockRun, ...]:
    """The mock sessions' attempt records (``progress.json``'s ``"mocks"``: session -> clock and attempts,
    as an item's entry), oldest first; anything else there is ignored rather than guessed at."""
    if not isinstance(raw, dict):
        return ()
    runs = []
    for session, entry in raw.items():
        attempts = entry.get("attempts") if isinstance(entry, dict) else None
        for record in attempts if isinstance(attempts, list) else []:
            if not isinstance(record, dict):
                continue
            passed = record.get("passed")
            verdict = record.get("verdict")
            runs.append(MockRun(str(session), _int(record.get("attempt")) or 0, progress.timestamp(record.get("start")),
                                progress.timestamp(record.get("end")), _number(record.get("elapsed_min")),
                                _score_text(record.get("score"), record.get("max_score")),
                                passed if isinstance(passed, bool) else None,
                                verdict if isinstance(verdict, str) else ""))
    return tuple(sorted(runs, key=lambda r: (r.end or r.start or 0.0, r.session, r.attempt)))


def _score_text(score: Any, most: Any) -> str:
    """``points/max_score`` (``mlcanon mock`` records five points a drill), else what was recorded."""
    if isinstance(score, bool) or score is None:
        return ""
    if isinstance(score, int):
        ceiling = _int(most)
        return f"{score}/{ceiling if ceiling else 5}"
    return str(score)


def _misslog(root: Path) -> tuple[list[misslog.Entry], tuple[str, ...]]:
    path = misslog.path_of(root)
    try:
        return misslog.parse(path.read_text(encoding="utf-8")), ()
    except FileNotFoundError:
        return [], ()
    except (OSError, UnicodeDecodeError) as exc:
        return [], (f"cannot read {path}: {exc}",)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
