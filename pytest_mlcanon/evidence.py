"""The evidence of a canon run, as typed data: what happened to each item and to each of its tests.

A fact travels from a test to a finding in three steps (``docs/design.md``, "Evidence flow"): the
run's record job folds pytest's reports and the shape recorder's rows into one :class:`ItemEvidence`
per item; :func:`pytest_mlcanon.rubric.score` reads that evidence beside the learner's files and
makes every finding; a renderer shows the result. In grading, the evidence crosses a process
boundary between the first two steps: the child gathers it, the parent decodes it, applies its
trust policy and scores it.

Every type has its JSON codec beside it (``to_json`` and ``from_json``, as pytest's ``reports.py``
keeps ``_to_json`` and ``_from_json``). Decoding is strict: a value of the wrong type, a name
outside the vocabulary or a size past its bound raises :class:`EvidenceError`, the one decode error
(the grader counts it as a corrupted channel). Encoding clips free text and lists to those same
bounds, so honest evidence always decodes.

Places in the learner's files are *module files* (``posttrain/dpo.py``, relative to the learner's
folder), never absolute paths: the child's copy and the parent's copy of a submission live in
different folders, and the scorer shows a module file as its own ``ItemSources`` displays it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

#: Free text (a failure message, a shape-check detail) is clipped to this many characters.
MAX_TEXT = 500
#: A path or a test id.
MAX_NAME = 300
#: Outcomes, names of left-out tests, shape rows: at most this many per item.
MAX_ROWS = 5000
MAX_LINE = 10_000_000

#: Test outcomes from best to worst; a test's outcome over its phases is the worst one.
TEST_OUTCOMES = ("passed", "skipped", "failed", "error")
FAILING = frozenset({"failed", "error"})


class EvidenceError(ValueError):
    """Evidence that does not decode: the wrong type, an unknown name, or past a size bound."""


class Status(enum.Enum):
    """What became of one item in one run: the single vocabulary of the learner's run and the grader.

    Compare members (``status is Status.SCORED``), never their text; ``str(status)`` is the word a
    report shows and the JSON form.
    """

    PENDING = "pending"  # selected, its tests not yet run (never seen after a run)
    SCORED = "scored"
    PARTIAL = "partial"  # narrowed (-k, -m, --deselect, --lf, -x) or interrupted: not an attempt
    NOT_ATTEMPTED = "not attempted"  # the learner's file of the item is missing
    NOT_IMPLEMENTED = "not implemented yet"  # the learner's files are untouched stubs
    ERROR = "error"  # the learner's module or the item's tests could not be imported
    NO_TESTS = "no tests"  # the canon has no reference tests for the item yet
    TIMEOUT = "timeout"  # grading: the job ran over a time limit and was killed
    CRASHED = "crashed"  # grading: the job's process ended before the tests finished
    KILLED = "killed"  # grading: the job passed its memory or output limit
    HARNESS_ERROR = "harness error"  # grading: the grader itself failed on this job
    INTERRUPTED = "not graded (interrupted)"  # grading: the batch was stopped before this job finished

    def __str__(self) -> str:
        return self.value

    @property
    def ran(self) -> bool:
        """Some of the item's tests ran."""
        return self in _RAN

    @property
    def scored(self) -> bool:
        """The rubric scores the item: its run finished, or (grading) it was stopped and the tests
        that never reported count as failed."""
        return self in _SCORED

    @property
    def stopped(self) -> bool:
        """Grading: the job was stopped before its tests finished."""
        return self in _STOPPED

    @property
    def fails_run(self) -> bool:
        """The item alone fails a learner's run. A partial run does not (the tests it ran decide
        the exit status), but it has no score, so it fails ``--canon-min-score``."""
        return self not in (Status.SCORED, Status.PARTIAL, Status.PENDING)

    def to_json(self) -> str:
        return self.value

    @classmethod
    def from_json(cls, data: object) -> Status:
        try:
            return cls(data)
        except ValueError:
            raise EvidenceError(f"an unknown item status {str(data)[:40]!r}") from None


_STOPPED = frozenset({Status.TIMEOUT, Status.CRASHED, Status.KILLED})
_SCORED = frozenset({Status.SCORED, *_STOPPED})
_RAN = frozenset({*_SCORED, Status.PARTIAL})


# -- strict decoding ------------------------------------------------------------------------------------

_REQUIRED = object()


class _Fields:
    """The fields of one JSON object, each read with its type and bound checked."""

    def __init__(self, data: object, what: str) -> None:
        if not isinstance(data, dict):
            raise EvidenceError(f"{what}: expected an object, got {type(data).__name__}")
        self.data: dict[str, Any] = data
        self.what = what

    @classmethod
    def row(cls, data: object, names: tuple[str, ...], what: str) -> _Fields:
        """The fields of a compact row (``[file, line, ...]``), named ``names``."""
        if not (isinstance(data, list) and len(data) == len(names)):
            raise EvidenceError(f"{what} must be [{', '.join(names)}]")
        return cls(dict(zip(names, data)), what)

    def _get(self, key: str, default: Any) -> Any:
        if key in self.data:
            return self.data[key]
        if default is _REQUIRED:
            raise EvidenceError(f"{self.what}: {key} is missing")
        return default

    def _bad(self, key: str, expected: str) -> EvidenceError:
        return EvidenceError(f"{self.what}: {key} must be {expected}")

    def text(self, key: str, limit: int = MAX_TEXT, default: Any = _REQUIRED) -> str:
        value = self._get(key, default)
        if not isinstance(value, str) or len(value) > limit:
            raise self._bad(key, f"a string of at most {limit} characters")
        return value

    def integer(self, key: str, low: int = 0, high: int = MAX_LINE, default: Any = _REQUIRED) -> int:
        value = self._get(key, default)
        if type(value) is not int or not low <= value <= high:
            raise self._bad(key, f"an integer from {low} to {high}")
        return value

    def number(self, key: str, default: float = 0.0) -> float:
        value = self._get(key, default)
        if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
            raise self._bad(key, "a finite number >= 0")
        return float(value)

    def flag(self, key: str, default: bool = False) -> bool:
        value = self._get(key, default)
        if type(value) is not bool:
            raise self._bad(key, "true or false")
        return value

    def rows(self, key: str, limit: int = MAX_ROWS) -> list[Any]:
        value = self._get(key, [])
        if not isinstance(value, list) or len(value) > limit:
            raise self._bad(key, f"a list of at most {limit} entries")
        return value

    def names(self, key: str) -> tuple[str, ...]:
        rows = self.rows(key)
        if not all(isinstance(r, str) and len(r) <= MAX_NAME for r in rows):
            raise self._bad(key, f"a list of strings of at most {MAX_NAME} characters")
        return tuple(rows)

    def optional(self, key: str) -> Any:
        return self.data.get(key)


_T = TypeVar("_T")


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters (the encoders' side of the decoders' bounds)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _clipped(rows: Iterable[_T]) -> list[_T]:
    return list(rows)[:MAX_ROWS]


# -- one test ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Location:
    """A file and line. ``learner``: ``path`` is a module file of the learner's folder
    (``posttrain/dpo.py``), shown as the scorer's sources show it; otherwise it is shown as is."""

    path: str
    line: int
    learner: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"path": clip(self.path, MAX_NAME), "line": min(max(self.line, 0), MAX_LINE), "learner": self.learner}

    @classmethod
    def from_json(cls, data: object) -> Location:
        f = _Fields(data, "a location")
        return cls(f.text("path", MAX_NAME), f.integer("line"), f.flag("learner"))


@dataclass(frozen=True)
class NonFinite:
    """The first annotated line of the learner's code whose value held NaN or inf during a test."""

    file: str  # module file, "posttrain/dpo.py"
    line: int
    comment: str  # the line's shape comment

    def to_json(self) -> list[Any]:
        return [clip(self.file, MAX_NAME), self.line, clip(self.comment)]

    @classmethod
    def from_json(cls, data: object) -> NonFinite:
        f = _Fields.row(data, ("file", "line", "comment"), "a non-finite line")
        return cls(f.text("file", MAX_NAME), f.integer("line"), f.text("comment"))


@dataclass(frozen=True)
class ValueOrigin:
    """Where the wrong value of a failed value check came from: the learner's line that bound or
    returned it (the shape instrumenter saw it there), and the call that line ran in, summarised
    (``attention(q: (2, 4, 8) float32, mask: (2, 4, 4) bool, 1 all-masked row)``). Feedback only."""

    file: str  # module file, "transformer/attention.py"
    line: int
    call: str

    def to_json(self) -> list[Any]:
        return [clip(self.file, MAX_NAME), self.line, clip(self.call)]

    @classmethod
    def from_json(cls, data: object) -> ValueOrigin:
        f = _Fields.row(data, ("file", "line", "call"), "a value origin")
        return cls(f.text("file", MAX_NAME), f.integer("line"), f.text("call"))


@dataclass(frozen=True)
class Outcome:
    """The final outcome of one reference test (the worst over its setup, call and teardown)."""

    nodeid: str
    outcome: str  # one of TEST_OUTCOMES
    probe: bool = False  # a numerics probe: counts toward Numerics, not Correctness
    edge: bool = False
    contract: bool = False  # an input-validation check: advice unless contract = "required"
    message: str = ""
    duration: float = 0.0
    where: Location | None = None  # where it failed: in the learner's code when it got there
    nonfinite: NonFinite | None = None
    origin: ValueOrigin | None = None  # a failed value check: the learner's line that made the value
    recheck: bool = False  # not a test: the parent's re-check of a probe's call (evidence, never counted as a test)
    raised: str = ""  # the class of the exception that failed the test, when it was not the test's own assertion
    raised_at: str = ""  # where that exception was raised: one of RAISED_AT
    reported: bool = True  # False: grading only, the run ended before this test reported (an error that never ran)

    @property
    def failed(self) -> bool:
        return self.outcome in FAILING

    @property
    def ran(self) -> bool:
        return self.outcome != "skipped" and self.reported

    @property
    def name(self) -> str:
        """The test's name without its file: ``test_x[a]``."""
        return self.nodeid.partition("::")[2] or self.nodeid

    def to_json(self) -> dict[str, Any]:
        return {"nodeid": clip(self.nodeid, MAX_NAME), "outcome": self.outcome, "probe": self.probe,
                "edge": self.edge, "contract": self.contract, "message": clip(self.message),
                "duration": round(max(self.duration, 0.0), 6),
                "where": self.where.to_json() if self.where else None,
                "nonfinite": self.nonfinite.to_json() if self.nonfinite else None,
                "origin": self.origin.to_json() if self.origin else None,
                "raised": clip(self.raised, MAX_NAME), "raised_at": self.raised_at, "reported": self.reported}

    @classmethod
    def from_json(cls, data: object) -> Outcome:
        f = _Fields(data, "a test outcome")
        outcome = f.text("outcome", 10)
        if outcome not in TEST_OUTCOMES:
            raise EvidenceError(f"a test outcome: {outcome!r} is not one of {', '.join(TEST_OUTCOMES)}")
        where, nonfinite, origin = f.optional("where"), f.optional("nonfinite"), f.optional("origin")
        return cls(f.text("nodeid", MAX_NAME), outcome, f.flag("probe"), f.flag("edge"), f.flag("contract"),
                   f.text("message", default=""), f.number("duration"),
                   Location.from_json(where) if where is not None else None,
                   NonFinite.from_json(nonfinite) if nonfinite is not None else None,
                   ValueOrigin.from_json(origin) if origin is not None else None,
                   raised=f.text("raised", MAX_NAME, default=""), raised_at=_raised_at(f.text("raised_at", 10, default="")),
                   reported=f.flag("reported", True))


#: Where the exception that failed a test was raised: a line of the learner's files, the test's own code,
#: or a library (torch, numpy) the learner's code or the test called.
RAISED_AT = ("learner", "test", "library")


def _raised_at(value: str) -> str:
    if value and value not in RAISED_AT:
        raise EvidenceError(f"a test outcome: raised_at {value!r} is not one of {', '.join(RAISED_AT)}")
    return value


def worse(previous: Outcome | None, outcome: Outcome) -> bool:
    """True when ``outcome`` (a later phase of the same test) is worse than ``previous``."""
    return previous is None or TEST_OUTCOMES.index(outcome.outcome) > TEST_OUTCOMES.index(previous.outcome)


# -- run-time shapes ----------------------------------------------------------------------------------------

class ShapeStatus(enum.Enum):
    """What the values bound on one annotated line said about its shape comment."""

    CONFIRMED = "confirmed"
    CONTRADICTED = "contradicted"
    #: the value had another rank than the comment: a call form the comment does not describe (a
    #: docstring's ``(B,) or ()``). Wrong only if no call confirms the comment (``ShapeTrace.merge``).
    OTHER_FORM = "another call form"


@dataclass(frozen=True)
class ShapeCheck:
    """One annotated line, checked while the tests ran (``detail`` says how it was contradicted)."""

    file: str
    line: int
    status: ShapeStatus
    detail: str = ""

    def to_json(self) -> list[Any]:
        return [clip(self.file, MAX_NAME), self.line, self.status.value, clip(self.detail)]

    @classmethod
    def from_json(cls, data: object) -> ShapeCheck:
        f = _Fields.row(data, ("file", "line", "status", "detail"), "a shape check")
        try:
            status = ShapeStatus(f.data["status"])
        except ValueError:
            raise EvidenceError(f"a shape check: unknown status {str(f.data['status'])[:40]!r}") from None
        return cls(f.text("file", MAX_NAME), f.integer("line"), status, f.text("detail"))


@dataclass(frozen=True)
class Transpose:
    """A ``.T`` that reversed every axis of a value of ``ndim`` > 2 while the tests ran (API001)."""

    file: str
    line: int
    ndim: int

    def to_json(self) -> list[Any]:
        return [clip(self.file, MAX_NAME), self.line, self.ndim]

    @classmethod
    def from_json(cls, data: object) -> Transpose:
        f = _Fields.row(data, ("file", "line", "ndim"), "a transpose")
        return cls(f.text("file", MAX_NAME), f.integer("line"), f.integer("ndim", 3, 64))


_PRECEDENCE = {ShapeStatus.OTHER_FORM: 0, ShapeStatus.CONFIRMED: 1, ShapeStatus.CONTRADICTED: 2}


def stronger(a: ShapeStatus, b: ShapeStatus) -> ShapeStatus:
    """The status that stands when one line saw both (``ShapeTrace.merge``'s rule)."""
    return a if _PRECEDENCE[a] >= _PRECEDENCE[b] else b


@dataclass(frozen=True)
class ShapeTrace:
    """What the instrumented learner files recorded while an item's tests ran: each checked comment,
    the functions entered (module file, first line; 0 for the module body), and full transposes.
    Traces of several tests merge: a contradiction wins over a confirmation, which wins over a value of
    another rank (``OTHER_FORM``: a comment describes one documented call form); the largest ndim wins."""

    checks: tuple[ShapeCheck, ...] = ()
    entered: tuple[tuple[str, int], ...] = ()
    transposes: tuple[Transpose, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.checks or self.entered or self.transposes)

    def merge(self, other: ShapeTrace) -> ShapeTrace:
        checks = {(c.file, c.line): c for c in self.checks}
        for check in other.checks:
            key = (check.file, check.line)
            if key not in checks or stronger(check.status, checks[key].status) is not checks[key].status:
                checks[key] = check
        transposes = {(t.file, t.line): t for t in self.transposes}
        for t in other.transposes:
            known = transposes.get((t.file, t.line))
            if known is None or t.ndim > known.ndim:
                transposes[(t.file, t.line)] = t
        return ShapeTrace(tuple(checks[k] for k in sorted(checks)),
                          tuple(sorted({*self.entered, *other.entered})),
                          tuple(transposes[k] for k in sorted(transposes)))

    def to_json(self) -> dict[str, Any]:
        return {"checks": [c.to_json() for c in _clipped(self.checks)],
                "entered": [[clip(f, MAX_NAME), line] for f, line in _clipped(self.entered)],
                "transposes": [t.to_json() for t in _clipped(self.transposes)]}

    @classmethod
    def from_json(cls, data: object) -> ShapeTrace:
        f = _Fields(data, "a shape trace")
        entered = []
        for row in f.rows("entered"):
            g = _Fields.row(row, ("file", "line"), "an entered function")
            entered.append((g.text("file", MAX_NAME), g.integer("line")))
        return cls(tuple(ShapeCheck.from_json(r) for r in f.rows("checks")), tuple(entered),
                   tuple(Transpose.from_json(r) for r in f.rows("transposes")))


# -- a partial run --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LeftOut:
    """What a partial run left out of an item: tests deselected (and by which options), tests
    selected that never reported (stopped early or interrupted), and whether it was interrupted."""

    deselected: tuple[str, ...] = ()  # test names
    by: tuple[str, ...] = ()  # the narrowing options, as given: "-k stable_softmax", "--lf"
    not_run: tuple[str, ...] = ()
    interrupted: bool = False
    collected: int = 0  # the item's tests collected before any narrowing

    def __bool__(self) -> bool:
        return bool(self.deselected or self.by or self.not_run or self.interrupted)

    def describe(self) -> str:
        """``39 of 39 tests left out by -k stable_softmax (test_a, test_b and 37 more)`` and the like."""
        parts = []
        total = self.collected or len(self.deselected) + len(self.not_run)
        if self.deselected:
            by = f" by {', '.join(self.by)}" if self.by else ""
            parts.append(f"{len(self.deselected)} of {total} tests left out{by} ({_some(self.deselected)})")
        elif self.by:  # --lf drops tests without naming them
            parts.append(f"narrowed by {', '.join(self.by)}")
        if self.interrupted:
            parts.append("interrupted" + (f" with {len(self.not_run)} tests not run ({_some(self.not_run)})"
                                          if self.not_run else ""))
        elif self.not_run:
            parts.append(f"stopped early (-x, --maxfail, --sw): {len(self.not_run)} tests not run "
                         f"({_some(self.not_run)})")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"deselected": [clip(n, MAX_NAME) for n in _clipped(self.deselected)],
                "by": [clip(b, MAX_NAME) for b in self.by[:20]],
                "not_run": [clip(n, MAX_NAME) for n in _clipped(self.not_run)],
                "interrupted": self.interrupted, "collected": min(self.collected, MAX_LINE)}

    @classmethod
    def from_json(cls, data: object) -> LeftOut:
        f = _Fields(data, "a partial run")
        return cls(f.names("deselected"), f.names("by")[:20], f.names("not_run"), f.flag("interrupted"),
                   f.integer("collected", default=0))


def _some(names: tuple[str, ...], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


# -- the drill timer -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Timing:
    """Elapsed and allowed minutes of one attempt at one item (``--timed``); ``strict``: running
    over counts against API fluency (``--timed=strict``)."""

    elapsed_min: float
    allowed_min: float
    target_min: int
    attempt: str
    started_from: str
    attempt_number: int = 1
    strict: bool = False

    @property
    def over(self) -> bool:
        return self.elapsed_min > self.allowed_min

    def as_dict(self) -> dict[str, Any]:
        """The report's form (``timing`` of an item)."""
        return {"elapsed_min": round(self.elapsed_min, 2), "allowed_min": self.allowed_min,
                "target_min": self.target_min, "attempt": self.attempt, "started_from": self.started_from,
                "attempt_number": self.attempt_number, "over_time": self.over}

    def to_json(self) -> dict[str, Any]:
        return {**self.as_dict(), "elapsed_min": self.elapsed_min, "strict": self.strict}

    @classmethod
    def from_json(cls, data: object) -> Timing:
        f = _Fields(data, "a timing")
        return cls(f.number("elapsed_min"), f.number("allowed_min"), f.integer("target_min"),
                   f.text("attempt", MAX_NAME), f.text("started_from", MAX_NAME), f.integer("attempt_number", 1),
                   f.flag("strict"))


# -- the grader's re-check -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RecheckFailure:
    """The grader's seeded re-check voids the tests' credit: it ``failed`` (the learner's outputs on
    fresh inputs differ from the reference's) or was ``not run`` (the calls never answered)."""

    outcome: str  # "failed" or "not run"
    problems: tuple[str, ...]  # the first differences, or what never answered

    def describe(self, first_only: bool = False) -> str:
        shown = self.problems[:1] if first_only else self.problems
        return f"seeded re-check {self.outcome}: {'; '.join(shown)}" if shown else f"seeded re-check {self.outcome}"

    def to_json(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "problems": [clip(p) for p in self.problems[:20]]}

    @classmethod
    def from_json(cls, data: object) -> RecheckFailure:
        f = _Fields(data, "a re-check failure")
        outcome = f.text("outcome", 10)
        if outcome not in ("failed", "not run"):
            raise EvidenceError(f"a re-check failure: {outcome!r} is not 'failed' or 'not run'")
        rows = f.rows("problems", 20)
        if not all(isinstance(r, str) and len(r) <= MAX_TEXT for r in rows):
            raise EvidenceError("a re-check failure: problems must be short strings")
        return cls(outcome, tuple(rows))


# -- one item ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ItemEvidence:
    """Everything one run established about one item, before any judgement.

    ``files`` and every place in the learner's code are module files (``posttrain/dpo.py``).
    ``coverage`` maps a module file to its executed lines (None: not measured). ``recheck`` is the
    grader's own: set when its seeded re-check voids the tests' credit.
    """

    slug: str
    status: Status
    detail: str = ""  # why it was not scored: the import error, what a partial run left out...
    files: tuple[str, ...] = ()
    fallback: tuple[str, ...] = ()  # modules of the item the reference stood in for
    outcomes: tuple[Outcome, ...] = ()
    shapes: ShapeTrace = field(default_factory=ShapeTrace)
    left_out: LeftOut | None = None
    coverage: Mapping[str, tuple[int, ...]] | None = None
    timing: Timing | None = None
    recheck: RecheckFailure | None = None
    built_on: tuple[str, ...] = ()  # the learner's own modules of the items this item builds on

    def to_json(self) -> dict[str, Any]:
        return {
            "slug": clip(self.slug, MAX_NAME), "status": self.status.to_json(), "detail": clip(self.detail),
            "files": [clip(f, MAX_NAME) for f in _clipped(self.files)],
            "fallback": [clip(f, MAX_NAME) for f in _clipped(self.fallback)],
            "outcomes": [o.to_json() for o in _clipped(self.outcomes)],
            "shapes": self.shapes.to_json(),
            "left_out": self.left_out.to_json() if self.left_out is not None else None,
            "coverage": ({clip(k, MAX_NAME): list(v)[:MAX_ROWS] for k, v in list(self.coverage.items())[:MAX_ROWS]}
                         if self.coverage is not None else None),
            "timing": self.timing.to_json() if self.timing is not None else None,
            "recheck": self.recheck.to_json() if self.recheck is not None else None,
            "built_on": [clip(f, MAX_NAME) for f in _clipped(self.built_on)],
        }

    @classmethod
    def from_json(cls, data: object) -> ItemEvidence:
        f = _Fields(data, "item evidence")
        left_out, coverage, timing, recheck = (f.optional(k) for k in ("left_out", "coverage", "timing", "recheck"))
        return cls(
            f.text("slug", MAX_NAME), Status.from_json(f.optional("status")), f.text("detail", default=""),
            f.names("files"), f.names("fallback"), tuple(Outcome.from_json(o) for o in f.rows("outcomes")),
            ShapeTrace.from_json(f.optional("shapes") or {}),
            LeftOut.from_json(left_out) if left_out is not None else None,
            _coverage(coverage) if coverage is not None else None,
            Timing.from_json(timing) if timing is not None else None,
            RecheckFailure.from_json(recheck) if recheck is not None else None,
            f.names("built_on"),
        )


def _coverage(data: object) -> dict[str, tuple[int, ...]]:
    if not isinstance(data, dict) or len(data) > MAX_ROWS:
        raise EvidenceError(f"coverage must map at most {MAX_ROWS} files to their executed lines")
    out = {}
    for path, lines in data.items():
        if (not isinstance(path, str) or len(path) > MAX_NAME or not isinstance(lines, list) or len(lines) > MAX_ROWS
                or not all(type(n) is int and 0 <= n <= MAX_LINE for n in lines)):
            raise EvidenceError("coverage: each file maps to a list of line numbers")
        out[path] = tuple(lines)
    return out

