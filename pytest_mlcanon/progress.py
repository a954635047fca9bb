"""Drill progress: the item clocks and every attempt, in ``.mlcanon/progress.json``.

The file (schema 1)::

    {"version": 1, "practice": "practice",
     "items": {"posttrain/dpo": {
         "practice": "practice",
         "clock": {"attempt": 2, "start": "2025-06-03T09:12:40+02:00", "source": "drill", "hints": 1},
         "attempts": [{"attempt": 1, "start": ..., "end": ..., "elapsed_min": 12.4, "allowed_min": 30.0,
                       "target_min": 15, "passed": true, "score": 4, "axes_failed": ["explanation"],
                       "over_time": false, "checks": 3, "hints": 0, "misses": ["..."]}]}}}

An *attempt* is one go at an item from a blank stub: it starts when ``mlcanon drill`` starts the
clock (or, for a plain ``pytest --timed``, when the learner's file was created) and ends at the
first check whose reference tests all pass. Every check of the attempt until then updates its one
record (end, elapsed time, over time or not, score, failed axes, misses); the passing check is the
last: the record stands for the run that passed, so a later check (a variant tried, a docstring
polished) is practice and records nothing, and the next ``mlcanon drill`` starts a new attempt. ``mlcanon reset``
stops the clock, and the next ``mlcanon drill`` starts attempt ``n + 1``. ``practice`` is the learner
directory the item (and, at the top level, the last item) was drilled in: ``check``, ``reset`` and
the next ``drill`` use it when no ``--practice``/``--impl`` is given.

The practice chapters keep their exercises beside the items in the same shape (a clock and attempt
records): ``"shapes"`` by problem name (``mlcanon shapes``) and ``"mocks"`` by session number, one
record per mock interview with the rubric of each drill (``mlcanon mock``).

Spaced repetition reads the records: a failed attempt is due again the next day, a passing one
after 2, 4, 7, 14, 30 and then 60 days as the run of consecutive passes grows (an over-time pass
counts as a pass but comes back the next day). Reading a module is not an attempt, so nothing is
scheduled until the item has been checked once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pytest_mlcanon import misslog
from pytest_mlcanon.evidence import Outcome
from pytest_mlcanon.state import StateError, dump_json, load_json, locked, state_dir, write_json

SCHEMA_VERSION = 1
PROGRESS_FILE = "progress.json"
LEGACY_TIMER_FILE = "timer.json"
REVIEW_DAYS = (2, 4, 7, 14, 30, 60)
RETRY_DAYS = 1
DAY_S = 86_400.0
# Practice-chapter exercises kept beside the items, each entry shaped like an item's (clock, attempts):
# the shape drills by name, the mock sessions by number.
CHAPTERS = ("shapes", "mocks")


def empty() -> dict[str, Any]:
    """A progress document with no item in it."""
    return {"version": SCHEMA_VERSION, "items": {}}


def validate(data: Any) -> str:
    """Why ``data`` is not a usable progress document (``""`` when it is)."""
    if not isinstance(data, dict):
        return "the top level is not an object"
    version = data.get("version")
    if not isinstance(version, int):
        return "it has no integer 'version'"
    if version > SCHEMA_VERSION:
        raise StateError(f"{PROGRESS_FILE} was written by a newer pytest-mlcanon (schema {version}, this one reads "
                         f"{SCHEMA_VERSION}): upgrade pytest-mlcanon")
    items = data.get("items")
    if not isinstance(items, dict):
        return "'items' is not an object"
    for chapter in CHAPTERS:
        exercises = data.get(chapter, {})
        if not isinstance(exercises, dict):
            return f"{chapter!r} is not an object"
        reason = _validate_entries(exercises)
        if reason:
            return f"in {chapter!r}, {reason}"
    return _validate_entries(items)


def _validate_entries(items: dict[str, Any]) -> str:
    for slug, entry in items.items():
        if not isinstance(entry, dict):
            return f"the entry of {slug!r} is not an object"
        clock = entry.get("clock")
        if clock is not None and (not isinstance(clock, dict) or not isinstance(clock.get("attempt"), int)
                                  or _timestamp(clock.get("start")) is None):
            return f"the clock of {slug!r} is malformed"
        attempts = entry.get("attempts", [])
        if not isinstance(attempts, list) or not all(
                isinstance(a, dict) and isinstance(a.get("attempt"), int) for a in attempts):
            return f"the attempts of {slug!r} are malformed"
    return ""


# -- the locked session ------------------------------------------------------------------------------

@dataclass
class Session:
    """The progress document of one learner repo, read under the state lock."""

    root: Path
    data: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    loaded: str = ""

    @property
    def directory(self) -> Path:
        return state_dir(self.root)

    @property
    def path(self) -> Path:
        return self.directory / PROGRESS_FILE

    def entry(self, slug: str) -> dict[str, Any]:
        """The item's entry, created empty on first use."""
        items: dict[str, dict[str, Any]] = self.data["items"]
        entry = items.setdefault(slug, {})
        entry.setdefault("clock", None)
        entry.setdefault("attempts", [])
        return entry

    def peek(self, slug: str) -> dict[str, Any]:
        """The item's entry without creating it (an empty one when the item has none)."""
        entry = self.data["items"].get(slug)
        return entry if entry is not None else {"clock": None, "attempts": []}

    def exercise(self, chapter: str, key: str) -> dict[str, Any]:
        """The entry of a practice-chapter exercise (``chapter`` in :data:`CHAPTERS`), created empty on
        first use: a clock and attempt records, as an item's."""
        entry = self.data.setdefault(chapter, {}).setdefault(key, {})
        entry.setdefault("clock", None)
        entry.setdefault("attempts", [])
        return entry

    def peek_exercise(self, chapter: str, key: str) -> dict[str, Any]:
        """The exercise's entry without creating it."""
        entry = self.data.get(chapter, {}).get(key)
        return entry if entry is not None else {"clock": None, "attempts": []}


@contextmanager
def session(root: Path) -> Iterator[Session]:
    """Lock ``.mlcanon/``, read ``progress.json``, and write it back atomically if the block changed it.

    An exception inside the block leaves the file as it was (nothing half-recorded).
    """
    directory = state_dir(root)
    with locked(directory):
        path = directory / PROGRESS_FILE
        fresh = not path.exists()
        data, warning = load_json(path, empty, validate)
        current = Session(root, data, [warning] if warning else [], dump_json(data))
        if fresh:
            _migrate_legacy_timer(current)
        yield current
        if dump_json(current.data) != current.loaded:
            write_json(path, current.data)


def snapshot(root: Path) -> Session:
    """The progress as it is now, for reading; creates nothing when the repo has no ``.mlcanon/``."""
    if not state_dir(root).is_dir():
        return Session(root, empty(), [], dump_json(empty()))
    with session(root) as current:
        return current


def _migrate_legacy_timer(current: Session) -> None:
    """Fold a ``.mlcanon/timer.json`` of pytest-mlcanon 0.1 into the progress document, once."""
    legacy = current.directory / LEGACY_TIMER_FILE
    if not legacy.is_file():
        return

    def check(data: Any) -> str:
        ok = isinstance(data, dict) and all(isinstance(v, dict) for v in data.values())
        return "" if ok else "it is not an object of item entries"

    data, warning = load_json(legacy, dict, check)
    if warning:
        current.warnings.append(warning)
        return
    stamp = legacy.stat().st_mtime
    for slug, old in data.items():
        start = _timestamp(old.get("start"))
        passes = old.get("passes", 0) if isinstance(old.get("passes"), int) else 0
        entry = current.entry(str(slug))
        for number in range(1, passes + 1):
            best = old.get("best_min") if number == passes else None
            entry["attempts"].append({"attempt": number, "start": None, "end": iso(stamp), "passed": True,
                                      "elapsed_min": best, "score": None, "axes_failed": [], "over_time": False,
                                      "checks": 1, "misses": [], "migrated": True})
        if start is not None:
            source = "drill" if old.get("source") == "reset" else "file"
            entry["clock"] = {"attempt": passes + 1, "start": iso(start), "source": source}
    legacy.replace(legacy.with_name(LEGACY_TIMER_FILE + ".migrated"))
    current.warnings.append(f"moved the clocks of {legacy} into {PROGRESS_FILE} (kept the old file as "
                            f"{LEGACY_TIMER_FILE}.migrated)")


# -- the learner directory ------------------------------------------------------------------------------

def remember_practice(current: Session, slug: str, practice: str) -> None:
    """Note the learner directory ``mlcanon drill`` wrote the item's stub in (relative to the repo when
    inside it): ``check`` and ``reset`` without ``--practice`` look there, as the next drill does."""
    current.entry(slug)["practice"] = practice
    current.data["practice"] = practice


def remembered_practice(current: Session, slugs: Sequence[str]) -> str | None:
    """The learner directory the items were last drilled in (when they agree), else the last drill's."""
    drilled = {p for s in slugs if isinstance(p := current.peek(s).get("practice"), str) and p}
    if len(drilled) == 1:
        return drilled.pop()
    last = current.data.get("practice")
    return last if isinstance(last, str) and last else None


# -- clocks ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Clock:
    """A running attempt: its number, when it started (epoch seconds) and what started it."""

    attempt: int
    start: float
    source: str  # "drill" (mlcanon drill), "file" (first timed run: the file's creation) or "legacy"
    hints: int = 0

    @property
    def started_from(self) -> str:
        return "the file's creation" if self.source == "file" else "mlcanon drill"


def clock(entry: dict[str, Any]) -> Clock | None:
    """The item's running clock, or None when it was never started or was reset."""
    raw = entry.get("clock")
    if not raw:
        return None
    start = _timestamp(raw.get("start"))
    if start is None:
        return None
    return Clock(int(raw["attempt"]), start, str(raw.get("source", "drill")), int(raw.get("hints", 0) or 0))


def start_clock(entry: dict[str, Any], now: float, source: str = "drill") -> Clock:
    """Start a new attempt at ``now``.

    The attempt number is one more than the last recorded attempt: a drill that was never checked
    is not an attempt, so drilling again reuses its number.
    """
    entry["clock"] = {"attempt": next_attempt(entry), "start": iso(now), "source": source}
    started = clock(entry)
    assert started is not None
    return started


def next_attempt(entry: dict[str, Any]) -> int:
    """The number the next started attempt gets: one more than the last recorded attempt."""
    return max((int(a["attempt"]) for a in entry.get("attempts", [])), default=0) + 1


def attempt_passed(entry: dict[str, Any], attempt: int) -> bool:
    """True when the record of ``attempt`` says it passed (the attempt is over; its clock idles)."""
    return passed_record(entry, attempt) is not None


def drilling(entry: dict[str, Any]) -> Clock | None:
    """The clock of the attempt under way: running and not passed yet (a passed attempt's clock idles
    until the next drill starts a new one); None when the item is not being drilled."""
    running = clock(entry)
    return running if running is not None and not attempt_passed(entry, running.attempt) else None


def stop_clock(entry: dict[str, Any]) -> Clock | None:
    """Stop the item's clock (``mlcanon reset``); returns the clock that was running."""
    running = clock(entry)
    entry["clock"] = None
    return running


def ensure_clock(entry: dict[str, Any], files: Sequence[Path], now: float) -> Clock:
    """The running clock, started from the files' creation time when the item has none yet."""
    running = clock(entry)
    if running is not None:
        return running
    return start_clock(entry, min(creation_time(files, now), now), source="file")


def note_hint(entry: dict[str, Any], level: int) -> bool:
    """Remember the highest hint level asked for during the running attempt; False when none runs."""
    raw = entry.get("clock")
    if not raw:
        return False
    raw["hints"] = max(int(raw.get("hints", 0) or 0), level)
    return True


def creation_time(files: Sequence[Path], default: float) -> float:
    """When the earliest of ``files`` was created, as far as the file system tells (birth time, else mtime)."""
    stamps = []
    for path in files:
        try:
            st = path.stat()
        except OSError:
            continue
        stamps.append(getattr(st, "st_birthtime", None) or st.st_mtime)
    return min(stamps) if stamps else default


# -- attempts -------------------------------------------------------------------------------------------

def passes_before(entry: dict[str, Any], attempt: int) -> int:
    """How many attempts before ``attempt`` passed (the first-attempt allowance ends with the first)."""
    return sum(1 for a in entry.get("attempts", []) if a.get("passed") and int(a["attempt"]) < attempt)


@dataclass(frozen=True)
class Check:
    """The outcome of one timed check of an item, as the plugin saw it."""

    passed: bool
    score: int | None
    axes_failed: tuple[str, ...]
    elapsed_min: float
    allowed_min: float
    target_min: int
    over_time: bool
    misses: tuple[str, ...] = ()


def check_passed(correctness_passed: bool, outcomes: Iterable[Outcome]) -> bool:
    """Whether a check passes the attempt: Correctness holds and no reference test failed.

    Numerics probes count toward the Numerics axis rather than Correctness, but a failing probe
    still fails the pytest run, so it fails the check too: the record agrees with the exit status.
    """
    return correctness_passed and not any(o.failed for o in outcomes)


def passed_record(entry: dict[str, Any], attempt: int) -> dict[str, Any] | None:
    """The record of ``attempt`` when it passed (the attempt is over), else None."""
    records = entry.get("attempts", [])
    if not isinstance(records, list):
        return None
    return next((r for r in records if isinstance(r, dict) and r.get("attempt") == attempt and r.get("passed")),
                None)


def record_check(entry: dict[str, Any], running: Clock, check: Check, now: float) -> dict[str, Any]:
    """Fold one check into the record of the running attempt (created on its first check).

    An attempt that passed is over: its record stands for the run that passed it (its time, score,
    failed axes and misses), so a later check of it, passing or failing (a variant tried after the
    pass, a docstring polished), is practice and changes nothing; the record is returned as it is.
    """
    attempts: list[dict[str, Any]] = entry.setdefault("attempts", [])
    done = passed_record(entry, running.attempt)
    if done is not None:
        return done
    record = attempts[-1] if attempts and attempts[-1].get("attempt") == running.attempt else None
    if record is None:
        record = {"attempt": running.attempt, "start": iso(running.start), "end": None, "elapsed_min": None,
                  "allowed_min": check.allowed_min, "target_min": check.target_min, "passed": False,
                  "score": None, "axes_failed": [], "over_time": False, "checks": 0, "hints": 0, "misses": []}
        attempts.append(record)
    record["checks"] = int(record.get("checks", 0)) + 1
    record["hints"] = max(int(record.get("hints", 0) or 0), running.hints)
    record.update(end=iso(now), elapsed_min=round(check.elapsed_min, 2), allowed_min=check.allowed_min,
                  over_time=check.over_time, passed=check.passed, score=check.score,
                  axes_failed=list(check.axes_failed))
    record["misses"] = merge_misses(record.get("misses", []), check.misses)
    return record


def merge_misses(earlier: Iterable[str], later: Iterable[str]) -> list[str]:
    """The misses of an attempt after one more check: one per miss as the miss log ranks them (its text
    without the evidence in parentheses), the later check's evidence replacing the earlier in place, so
    "over time (20 min of 20 allowed)" then "over time (21 min ...)" is one miss, not two."""
    merged: dict[str, str] = {}
    for miss in [*earlier, *later]:
        merged[misslog.key(miss)] = miss
    return list(merged.values())


# -- summaries ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ItemProgress:
    """What ``mlcanon list`` and ``mlcanon plan`` need to know about one item."""

    attempts: int = 0
    passes: int = 0
    best_min: float | None = None
    last_score: int | None = None
    last_passed: bool | None = None
    last_end: float | None = None
    due: float | None = None
    streak: int = 0
    running: Clock | None = None
    passed_at: tuple[float, ...] = ()  # when each passing attempt ended, oldest first (-inf when unknown)

    @property
    def started(self) -> bool:
        return self.attempts > 0


def summarize(entry: dict[str, Any]) -> ItemProgress:
    """Attempts, passes, best time, last score and the next review date of one item's entry."""
    records = [a for a in entry.get("attempts", []) if isinstance(a, dict)]
    if not records:
        return ItemProgress(running=clock(entry))
    passed = [a for a in records if a.get("passed")]
    times = [float(a["elapsed_min"]) for a in passed if isinstance(a.get("elapsed_min"), (int, float))]
    last = records[-1]
    streak = 0
    for record in reversed(records):
        if not record.get("passed"):
            break
        streak += 1
    last_end = _timestamp(last.get("end"))
    if last_end is None:
        due = None
    elif not last.get("passed") or last.get("over_time"):
        due = last_end + RETRY_DAYS * DAY_S
    else:
        due = last_end + REVIEW_DAYS[min(streak, len(REVIEW_DAYS)) - 1] * DAY_S
    score = last.get("score")
    return ItemProgress(
        attempts=len(records), passes=len(passed), best_min=min(times) if times else None,
        last_score=int(score) if isinstance(score, int) else None, last_passed=bool(last.get("passed")),
        last_end=last_end, due=due, streak=streak, running=clock(entry),
        passed_at=tuple(sorted(_end_or_never(a) for a in passed)),
    )


def _end_or_never(record: dict[str, Any]) -> float:
    end = _timestamp(record.get("end"))
    return float("-inf") if end is None else end


def format_due(due: float | None, now: float) -> str:
    """``new`` (never checked), ``now`` (due or overdue), else the date it comes back."""
    if due is None:
        return "new"
    if due <= now:
        return "now"
    return datetime.fromtimestamp(due).strftime("%Y-%m-%d")


def format_minutes(minutes: float | None) -> str:
    return "-" if minutes is None else f"{minutes:.1f}"


# -- time stamps ----------------------------------------------------------------------------------------

def iso(epoch: float) -> str:
    """Local ISO-8601 time with its UTC offset, to the second (what the state files store)."""
    return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds")


def timestamp(value: Any) -> float | None:
    """Epoch seconds of a time as the state files store it (ISO-8601 or a number); None when it is not one."""
    return _timestamp(value)


def _timestamp(value: Any) -> float | None:
    """Epoch seconds from an ISO-8601 string or a number (hand edits may use either)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def now() -> float:
    """The current time; one place to read it, so tests can pin it."""
    return time.time()
