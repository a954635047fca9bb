"""A 60-minute mock interview (``mlcanon mock 1|2|3``).

The session's drills run in order on one clock. Each drill: the task and the two-minute set-up
prompts; at minute 2 "write it now"; two thirds of the way through, what to do when you stall; two
minutes before the end, a warning; at the end (or when the learner says done) the item's check;
then the five-minute walkthrough prompts, with the interviewer's follow-up question in its last
minute. Time banked by finishing early is kept, never lent: a drill never runs past its tier.
The end prints the rubric per drill and a summary, which the command records in progress.

The runner is separate from the terminal: it takes a :class:`Clock` (minutes since the start, and
a wait that returns early with whatever the learner typed), a ``say`` function and two callbacks,
so tests drive it with a scripted clock and the command with the real one, sped up by ``--speed``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Protocol

from pytest_mlcanon.chapters import explain
from pytest_mlcanon.chapters.drills import AXIS_TITLES, SESSION_MINUTES, Drill, Mock
from pytest_mlcanon.evidence import Status
from pytest_mlcanon.rubric.model import judge_failed, verdict_for

if TYPE_CHECKING:
    from pytest_mlcanon.warm import ItemVerdict

KEYS = "Enter = done (check now) or next, h = a hint, q = end the session"
WRITE_AT = explain.SETUP_MINUTES
WARN_BEFORE_END = 2


class Clock(Protocol):
    def minutes(self) -> float:
        """Session minutes elapsed."""

    def wait(self, until: float) -> str | None:
        """Wait until session minute ``until``; return a line the learner typed first, else None."""

    def paused(self) -> AbstractContextManager[None]:
        """Stop the clock for the duration of the block (the tool's own time: a check)."""


class SessionClock:
    """Wall-clock minutes times ``speed``; input lines arrive through ``inbox`` (None: input closed)."""

    def __init__(self, speed: float, inbox: queue.Queue[str | None]) -> None:
        self.speed = speed
        self.inbox = inbox
        self.start = time.monotonic()
        self.closed = False

    def minutes(self) -> float:
        return (time.monotonic() - self.start) * self.speed / 60.0

    def wait(self, until: float) -> str | None:
        while True:
            left = (until - self.minutes()) * 60.0 / self.speed
            if left <= 0:
                return None
            if self.closed:
                time.sleep(left)
                continue
            try:
                line = self.inbox.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                self.closed = True
                continue
            return line.strip().lower()

    @contextmanager
    def paused(self) -> Iterator[None]:
        stopped = time.monotonic()
        try:
            yield
        finally:
            self.start += time.monotonic() - stopped


def read_lines(stream: IO[str], inbox: queue.Queue[str | None]) -> threading.Thread:
    """Feed ``stream``'s lines into ``inbox`` from a daemon thread, then None at end of input."""

    def pump() -> None:
        try:
            for line in stream:
                inbox.put(line)
        except (OSError, ValueError):
            pass
        inbox.put(None)

    thread = threading.Thread(target=pump, name="mlcanon-mock-input", daemon=True)
    thread.start()
    return thread


@dataclass(frozen=True)
class Checked:
    """What the item's check said: whether the file was attempted at all, and the rubric's record."""

    attempted: bool
    passed: bool = False
    score: int | None = None
    axes_failed: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()  # what to show the learner
    status: Status | None = None  # the item's status in the check's report; None: the check wrote none

    @classmethod
    def from_report(cls, verdict: ItemVerdict | None, exit_status: int, lines: tuple[str, ...]) -> Checked:
        """The check of one item from its report line and pytest's exit status: attempted when the file
        was scored or failed to import; passed, as a recorded attempt passes, when Correctness held and
        no test failed (the exit status says so: a failing numerics probe fails the run too)."""
        if verdict is None:
            return cls(False, lines=lines)
        status = verdict.status
        scored = status is Status.SCORED
        return cls(scored or status is Status.ERROR,
                   scored and "correctness" not in verdict.axes_failed and exit_status == 0,
                   verdict.score if scored else None, verdict.axes_failed if scored else (), lines, status)

    @property
    def unattempted(self) -> str:
        """What the summary says of a drill not attempted: the check's own words (``not implemented
        yet`` for the untouched stub, as ``mlcanon check`` says), or that the check did not finish."""
        return str(self.status) if self.status is not None else "no report: the check did not finish"

    @property
    def verdict(self) -> str:
        """``strong``, or what held it back: ``no: correctness failed`` (failing code is never strong)."""
        return str(judge_failed(self.score, self.axes_failed)) if self.score is not None else "no score"


@dataclass(frozen=True)
class Outcome:
    drill: Drill
    reached: bool
    used_min: float = 0.0
    checked: Checked = field(default_factory=lambda: Checked(False))
    hints: int = 0
    finished_early: bool = False

    def record(self) -> dict[str, Any]:
        return {"drill": self.drill.name, "item": self.drill.item.slug, "allowed_min": self.drill.minutes,
                "used_min": round(self.used_min, 2), "reached": self.reached, "attempted": self.checked.attempted,
                "status": str(self.checked.status) if self.checked.status is not None else None,
                "passed": self.checked.passed, "score": self.checked.score,
                "axes_failed": list(self.checked.axes_failed), "hints": self.hints}


@dataclass(frozen=True)
class Session:
    mock: Mock
    speed: float
    minutes: float
    outcomes: tuple[Outcome, ...]
    ended_early: bool

    @property
    def passed(self) -> int:
        return sum(1 for o in self.outcomes if o.checked.passed)

    @property
    def points(self) -> int:
        return sum(o.checked.score or 0 for o in self.outcomes)

    @property
    def verdict(self) -> str:
        """The seed's word for the mean score per drill (a drill not reached or not attempted scores 0);
        never ``strong`` while a drill's code failed Correctness, and such drills are named."""
        word = verdict_for(self.points / len(self.outcomes))
        wrong = [str(n) for n, o in enumerate(self.outcomes, start=1)
                 if o.checked.attempted and "correctness" in o.checked.axes_failed]
        if not wrong:
            return word
        word = "hire with reservations" if word == "strong" else word
        return f"{word}: correctness failed in drill {', '.join(wrong)}"

    def record(self) -> dict[str, Any]:
        return {"passed": self.passed == len(self.outcomes), "drills_passed": self.passed, "score": self.points,
                "max_score": 5 * len(self.outcomes), "verdict": self.verdict, "elapsed_min": round(self.minutes, 2),
                "speed": self.speed, "ended_early": self.ended_early,
                "drills": [o.record() for o in self.outcomes]}


class Runner:
    """One session: ``begin(drill)`` writes the drill's stub (at real speed, also starts its clock) and
    returns what to edit, ``check(drill)`` runs the item's check, ``on_hint(drill, level)`` notes a hint."""

    def __init__(self, mock: Mock, clock: Clock, say: Callable[[str], None], begin: Callable[[Drill], str],
                 check: Callable[[Drill], Checked], on_hint: Callable[[Drill, int], None] | None = None) -> None:
        self.mock, self.clock, self.say = mock, clock, say
        self.begin, self.check, self.on_hint = begin, check, on_hint
        self.quit = False
        self.dry = False

    def run(self, speed: float = 1.0) -> Session:
        self.dry = speed != 1  # a sped-up dry run records nothing: no `mlcanon check` in another terminal
        self.say(f"Mock {self.mock.number}: {self.mock.title}. {len(self.mock.drills)} drills on one "
                 f"{SESSION_MINUTES}-minute clock, each followed by a {explain.WALKTHROUGH_MINUTES}-minute walkthrough.")
        self.say(f"Keys: {KEYS}.")
        outcomes = []
        for index, drill in enumerate(self.mock.drills, start=1):
            if self.quit or self.clock.minutes() >= SESSION_MINUTES:
                outcomes.append(Outcome(drill, reached=False))
                continue
            outcomes.append(self._drill(index, drill))
        return Session(self.mock, speed, self.clock.minutes(), tuple(outcomes), self.quit)

    # -- one drill --------------------------------------------------------------------------------------
    def _drill(self, index: int, drill: Drill) -> Outcome:
        start = self.clock.minutes()
        self._stamp(f"Drill {index} of {len(self.mock.drills)}: {drill.name} ({drill.item.label}), "
                    f"{drill.minutes} minutes")
        self.say(f"  Task: {drill.task}")
        self.say(f"  {self.begin(drill)}")
        self.say(f"  Set-up, {explain.SETUP_MINUTES} minutes, aloud:")
        for prompt in (*drill.setup, *explain.script().setup):
            self.say(f"    - {prompt}")
        end = start + drill.minutes
        stall = " ".join(explain.script().stall[:2])
        elsewhere = "" if self.dry else f"`mlcanon check {drill.item.slug}` in another terminal whenever you like; "
        marks = [(start + WRITE_AT, f"Write it now. {elsewhere}Enter here when you are done."),
                 (start + drill.minutes * 2 / 3, f"Stuck? {stall} (h: a hint)"),
                 (end - WARN_BEFORE_END, f"{WARN_BEFORE_END} minutes left: make it run, then check.")]
        state: dict[str, int] = {"hints": 0}
        how = self._phase(marks, end, drill, state)
        used = self.clock.minutes() - start
        self._stamp("Time." if how == "time" else f"Done after {used:.1f} of {drill.minutes} minutes.")
        with self.clock.paused():
            checked = self.check(drill)
        for line in checked.lines:
            self.say(f"  {line}")
        outcome = Outcome(drill, True, used, checked, state["hints"], how == "done")
        if how == "quit":
            self.quit = True
            return outcome
        self._walkthrough(drill)
        return outcome

    def _walkthrough(self, drill: Drill) -> None:
        start = self.clock.minutes()
        self._stamp(f"Walkthrough, {explain.WALKTHROUGH_MINUTES} minutes, aloud:")
        for prompt in (*drill.walkthrough, *explain.script().walkthrough):
            self.say(f"    - {prompt}")
        end = start + explain.WALKTHROUGH_MINUTES
        follow_up = f'The interviewer asks: "{explain.follow_up(drill.item)}"'
        if self._phase([(end - 1, follow_up)], end, None, {}) == "quit":
            self.quit = True

    def _phase(self, marks: list[tuple[float, str]], end: float, drill: Drill | None, state: dict[str, int]) -> str:
        """Say each mark's message at its minute until ``end``: "time", or "done"/"quit" when typed first."""
        for minute, message in [*marks, (end, "")]:
            while True:
                typed = self.clock.wait(min(minute, end))
                if typed is None:
                    break
                if typed == "":
                    return "done"
                if typed in ("q", "quit"):
                    return "quit"
                if typed in ("h", "hint") and drill is not None:
                    self._hint(drill, state)
                else:
                    self.say(f"  ({KEYS})")
            if minute >= end:
                return "time"
            if message:
                self._stamp(message)
        return "time"

    def _hint(self, drill: Drill, state: dict[str, int]) -> None:
        level = min(state.get("hints", 0) + 1, 3)
        state["hints"] = level
        self._stamp(f"Hint {level} of 3: {drill.hints[level - 1]}")
        if self.on_hint is not None:
            self.on_hint(drill, level)

    def _stamp(self, text: str) -> None:
        minutes = self.clock.minutes()
        self.say(f"[{int(minutes):02d}:{int(minutes % 1 * 60):02d}] {text}")


def summary(session: Session) -> list[str]:
    """The rubric per drill, then the session: what ``mlcanon mock`` prints at the end."""
    lines = [f"Mock {session.mock.number} summary ({session.minutes:.0f} of {SESSION_MINUTES} minutes"
             f"{', ended early' if session.ended_early else ''}):"]
    for number, outcome in enumerate(session.outcomes, start=1):
        drill = outcome.drill
        head = f"  {number}. {drill.name} ({drill.item.label}), {drill.minutes} min: "
        if not outcome.reached:
            lines.append(head + "not reached")
            continue
        checked = outcome.checked
        if not checked.attempted:
            lines.append(head + f"{checked.unattempted} ({outcome.used_min:.1f} min)")
            continue
        result = "passed" if checked.passed else "not passing"
        score = f"{checked.score}/5 {checked.verdict}" if checked.score is not None else "no score"
        hints = f", {outcome.hints} hint(s)" if outcome.hints else ""
        lines.append(head + f"{result} in {outcome.used_min:.1f} min, {score}{hints}")
        for axis, criterion in drill.rubric:
            mark = "no " if axis in checked.axes_failed else "yes"
            lines.append(f"       {AXIS_TITLES[axis]:<12} {mark}  {criterion}")
    lines.append(f"  Session: {session.passed} of {len(session.outcomes)} drills passed, {session.points} of "
                 f"{5 * len(session.outcomes)} rubric points: {session.verdict} (the seed: 4-5 per drill strong, "
                 "3 a hire with reservations, 2 or fewer a no; strong needs every drill's code correct).")
    return lines
