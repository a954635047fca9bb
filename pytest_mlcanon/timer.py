"""The drill timer behind ``--timed``: elapsed time against the target, "over time", and the record.

``--timed`` (or ``--timed=report``) shows, per item, the minutes since the attempt's clock started
against its allowance: the from-memory target, times ``first_attempt_factor`` (default 2) until the
item has passed once. A check past the allowance marks the attempt *over time*. ``--timed=strict``
also counts that stall against API fluency (``API006``), as the seed's rubric reads ("no stalling").

The clock is the one ``mlcanon drill`` starts, kept in ``.mlcanon/progress.json`` of the learner's
repo (``state.find_root`` of the directory pytest runs from; see :mod:`pytest_mlcanon.progress`). An item that was never drilled is timed
from its file's creation (birth time where the OS records one, else modification time), the first
time a timed run sees it. After scoring, every scored item's check is recorded in the progress
file, and a check with any miss adds or updates that attempt's line in ``.mlcanon/misslog.md``. A check
of an attempt that passed already is practice: untimed (no time, over time or API006) and recorded
nowhere; it says so in one line, with the ``mlcanon drill`` that starts the next attempt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_mlcanon import catalog, misslog, progress
from pytest_mlcanon.evidence import Status, Timing
from pytest_mlcanon.rubric.model import AXES, ItemScore, Outcome
from pytest_mlcanon.state import StateError, find_root


def timing_for(item: catalog.Item, running: progress.Clock, passes: int, factor: float, now: float,
               strict: bool = False) -> Timing:
    """The timing of the running attempt: the allowance is ``factor`` × target until the first pass."""
    first = passes == 0
    return Timing(
        elapsed_min=max(0.0, now - running.start) / 60.0,
        allowed_min=item.minutes * (factor if first else 1.0),
        target_min=item.minutes,
        attempt="first attempt" if first else f"attempt {running.attempt}, {passes} passed before",
        started_from=running.started_from,
        attempt_number=running.attempt,
        strict=strict,
    )


class TimedRun:
    """What ``--timed`` adds to one canon run; ``run.CanonRun`` calls :meth:`assess` and :meth:`record`."""

    def __init__(self, where: Path, mode: str, factor: float, now: float | None = None) -> None:
        self.root = find_root(where)  # the learner repo's one .mlcanon/, from any folder in it
        self.mode = mode
        self.factor = factor
        self.now = progress.now() if now is None else now
        self.messages: list[str] = []
        self._timings: dict[str, Timing] = {}
        self._practice: dict[str, str] = {}  # items whose running attempt had passed: the line saying so

    @property
    def strict(self) -> bool:
        return self.mode == "strict"

    def assess(self, item: catalog.Item, files: Sequence[Path]) -> Timing | None:
        """The item's timing, evidence for the report and (under ``--timed=strict``, when over time)
        for the API006 finding the rubric makes; None when the state cannot be read, or when the
        running attempt has passed already: this check is practice, untimed and not recorded."""
        try:
            with progress.session(self.root) as current:
                self._warn(current.warnings)
                entry = current.entry(item.slug)
                running = progress.ensure_clock(entry, files, self.now)
                done = progress.passed_record(entry, running.attempt)
                if done is not None:
                    self._practice[item.slug] = _practice(item.number, item.slug, done, entry)
                    return None
                timing = timing_for(item, running, progress.passes_before(entry, running.attempt),
                                    self.factor, self.now, self.strict)
        except StateError as exc:
            self._warn([f"timer off for {item.slug}: {exc}"])
            return None
        self._timings[item.slug] = timing
        return timing

    def record(self, scores: Sequence[ItemScore], outcomes: Mapping[str, Sequence[Outcome]]) -> list[str]:
        """Record each timed item's check and its misses; returns the lines for the terminal summary."""
        lines = [f"#{s.number} {s.slug}: a partial run is not an attempt; nothing recorded (check the whole item "
                 "to record it)" for s in scores if s.status is Status.PARTIAL]
        lines += [self._practice[s.slug] for s in scores if s.status is Status.SCORED and s.slug in self._practice]
        timed = [s for s in scores
                 if (s.status is Status.SCORED and s.slug in self._timings) or s.status is Status.ERROR]
        if timed:
            try:
                with progress.session(self.root) as current:
                    self._warn(current.warnings)
                    for score in timed:
                        line = (self._record_one(current, score, outcomes.get(score.slug, ()))
                                if score.status is Status.SCORED else self._record_error(current, score))
                        if line:
                            lines.append(line)
            except StateError as exc:
                lines = [f"mlcanon: attempts not recorded: {exc}"]
        return [*self.messages, *lines]

    def _record_error(self, current: progress.Session, score: ItemScore) -> str:
        """A file that does not import is a failed check of a drilled attempt (undrilled items are left alone)."""
        entry = current.peek(score.slug)
        running = progress.clock(entry)
        if running is None:
            return ""
        done = progress.passed_record(entry, running.attempt)
        if done is not None:
            return _practice(score.number, score.slug, done, entry)
        item = catalog.get(score.slug)
        timing = timing_for(item, running, progress.passes_before(entry, running.attempt), self.factor, self.now)
        misses = misslog.misses_for(score, (), timing.over, timing.elapsed_min, timing.allowed_min)
        check = progress.Check(passed=False, score=None, axes_failed=AXES, elapsed_min=timing.elapsed_min,
                               allowed_min=timing.allowed_min, target_min=timing.target_min,
                               over_time=timing.over, misses=tuple(misses))
        record = progress.record_check(current.entry(score.slug), running, check, self.now)
        misslog.upsert(current, score.number, score.slug, running.attempt, None, list(record["misses"]), self.now)
        return (f"#{score.number} {score.slug} attempt {running.attempt}: could not run ({score.error}) at "
                f"{timing.elapsed_min:.1f} min; logged in .mlcanon/{misslog.MISSLOG_FILE}")

    def _record_one(self, current: progress.Session, score: ItemScore, outcomes: Sequence[Outcome]) -> str:
        timing = self._timings[score.slug]
        entry = current.entry(score.slug)
        running = progress.clock(entry)
        if running is None or running.attempt != timing.attempt_number:
            return f"#{score.number} {score.slug}: the clock was reset during the run; this check is not recorded"
        passed = progress.check_passed(score.axes["correctness"].passed, outcomes)
        misses = misslog.misses_for(score, outcomes, timing.over, timing.elapsed_min, timing.allowed_min)
        check = progress.Check(
            passed=passed, score=score.score, axes_failed=tuple(a for a in AXES if not score.axes[a].passed),
            elapsed_min=timing.elapsed_min, allowed_min=timing.allowed_min, target_min=timing.target_min,
            over_time=timing.over, misses=tuple(misses),
        )
        done = progress.passed_record(entry, running.attempt)
        if done is not None:  # another check passed the attempt while this one ran
            return _practice(score.number, score.slug, done, entry)
        record = progress.record_check(entry, running, check, self.now)
        if misses:
            misslog.upsert(current, score.number, score.slug, running.attempt, score.score, list(record["misses"]),
                           self.now)
        return _describe(score, record, timing, progress.summarize(entry), self.strict, bool(misses), self.now)

    def _warn(self, warnings: Sequence[str]) -> None:
        for warning in warnings:
            if warning not in self.messages:
                self.messages.append(f"mlcanon: {warning}")


def _practice(number: int, slug: str, record: dict[str, Any], entry: dict[str, Any]) -> str:
    """The one line of a check of an attempt that passed already: practice, recorded nowhere."""
    elapsed, score = record.get("elapsed_min"), record.get("score")
    at = f" at {elapsed:.1f} min" if isinstance(elapsed, (int, float)) else ""
    scored = f" ({score}/5)" if isinstance(score, int) else ""
    return (f"#{number} {slug} attempt {record['attempt']}: already passed{at}{scored}; this check is practice, not "
            f"recorded (`mlcanon drill {slug}` starts attempt {progress.next_attempt(entry)} from a fresh stub)")


def _describe(score: ItemScore, record: dict[str, Any], timing: Timing, summary: progress.ItemProgress,
              strict: bool, logged: bool, now: float) -> str:
    """One line for the terminal: attempt, pass or not, time against the allowance, what was recorded."""
    head = f"#{score.number} {score.slug} attempt {record['attempt']}"
    allowance = f"{timing.allowed_min:.0f} allowed, target {timing.target_min} min"
    over = ""
    if record.get("over_time"):
        over = ", OVER TIME" + (" (counts against API fluency: API006)" if strict else
                                " (--timed=strict would count it against API fluency)")
    if record.get("passed"):
        best = progress.format_minutes(summary.best_min)
        text = (f"{head}: passed in {timing.elapsed_min:.1f} min ({allowance}){over}; best {best} min; "
                f"next review {progress.format_due(summary.due, now)}; `mlcanon reset {score.slug}` wipes it")
    else:
        text = f"{head}: not passing yet at {timing.elapsed_min:.1f} min ({allowance}){over}"
    if logged:
        text += f"; misses logged in .mlcanon/{misslog.MISSLOG_FILE}"
    return text

