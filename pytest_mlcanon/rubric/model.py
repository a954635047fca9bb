"""The rubric's data model: findings, axis results, the verdict and the per-item score.

The evidence the rubric reads (test outcomes, shape traces, statuses) is typed in
``pytest_mlcanon.evidence``; ``Outcome`` is re-exported here for the axis modules.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_mlcanon.evidence import LeftOut, Outcome, Status

__all__ = ["AXES", "AXIS_TITLES", "AxisResult", "Finding", "ItemScore", "Outcome", "Verdict", "judge", "judge_failed",
           "verdict_for"]

AXES = ("correctness", "shapes", "numerics", "api", "explanation")
AXIS_TITLES = {
    "correctness": "Correctness",
    "shapes": "Shapes",
    "numerics": "Numerics",
    "api": "API fluency",
    "explanation": "Explanation",
}
#: How a verdict names an axis that held an item back.
AXIS_WORDS = {axis: title if axis == "api" else title.lower() for axis, title in AXIS_TITLES.items()}


@dataclass(frozen=True)
class Finding:
    """One piece of evidence, in the manner of ruff: ``path:line: CODE message`` plus a fix hint.
    Made only by the rule registry (``rubric.rules.finding``); ``subject`` is the name it is about
    (a missing API name, a forbidden call), for the miss log."""

    code: str
    path: str
    line: int
    message: str
    hint: str = ""
    subject: str = ""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path

    def render(self) -> str:
        """``path:line: CODE message (fix: hint)``; a finding with no place (a run-time event) starts at CODE."""
        hint = f" (fix: {self.hint})" if self.hint else ""
        where = f"{self.where}: " if self.where else ""
        return f"{where}{self.code} {self.message}{hint}"


@dataclass(frozen=True)
class AxisResult:
    """A yes/no answer for one axis with the findings behind it (``notes`` are informational;
    ``why``: what failed it, in a few words, where the verdict should say so: ``8 of 39 tests``)."""

    passed: bool
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()
    why: str = ""


def verdict_for(score: float) -> str:
    """The seed's wording for a score (or a mean score per item): 4-5 strong, 3 hire with
    reservations, 2 or fewer no. A verdict also needs Correctness: see :func:`judge`."""
    if score >= 4:
        return "strong"
    if score >= 3:
        return "hire with reservations"
    return "no"


@dataclass(frozen=True)
class Verdict:
    """The verdict word and what held the item back: ``no: correctness failed (8 of 39 tests failed)``."""

    word: str
    reasons: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.word}: {'; '.join(self.reasons)}" if self.reasons else self.word

    def with_score(self, score: int) -> str:
        """The gradebook's form: ``no 4/5: correctness failed (8 of 39 tests failed)``."""
        head = f"{self.word} {score}/5"
        return f"{head}: {'; '.join(self.reasons)}" if self.reasons else head


def judge(axes: Mapping[str, AxisResult]) -> Verdict:
    """The seed's word for the score, except that code failing Correctness is never better than
    ``no``, and every axis that said no is named (Correctness with its ``why``)."""
    correctness = axes.get("correctness")
    failed = [a for a in AXES if (a in axes and not axes[a].passed) or (a == "correctness" and correctness is None)]
    return judge_failed(sum(1 for a in AXES if a in axes and axes[a].passed), failed,
                        correctness.why if correctness is not None else "")


def judge_failed(score: int, failed: Collection[str], why: str = "") -> Verdict:
    """The verdict of a score whose axes ``failed`` said no (``why``: what failed Correctness, in a
    few words), for a caller that kept only those names, as a recorded attempt does."""
    reasons = []
    if "correctness" in failed:
        reasons.append(f"correctness failed ({why})" if why else "correctness failed")
    others = [AXIS_WORDS[a] for a in AXES[1:] if a in failed]
    if others:
        listed = others[0] if len(others) == 1 else ", ".join(others[:-1]) + " and " + others[-1]
        reasons.append(f"{listed} failed")
    return Verdict("no" if "correctness" in failed else verdict_for(score), tuple(reasons))


@dataclass
class ItemScore:
    """The rubric's result for one item.

    Only an item whose ``status`` is scored (``Status.scored``) has axes, a score and a verdict
    word; any other status is its own verdict (``partial: not scored``, ``not attempted``...) and
    ``error`` says why.
    """

    number: int
    slug: str
    title: str
    status: Status
    files: list[str] = field(default_factory=list)
    fallback: list[str] = field(default_factory=list)  # modules of the item taken from the reference
    built_on: list[str] = field(default_factory=list)  # the learner's modules of the items it builds on
    axes: dict[str, AxisResult] = field(default_factory=dict)
    error: str = ""
    tests: dict[str, int] = field(default_factory=dict)
    timing: dict[str, Any] = field(default_factory=dict)
    coverage: dict[str, dict[str, Any]] = field(default_factory=dict)  # learner file -> line coverage
    left_out: LeftOut | None = None  # a partial run: what it left out (``error`` describes it)

    @property
    def score(self) -> int:
        return sum(1 for axis in AXES if axis in self.axes and self.axes[axis].passed)

    @property
    def scored(self) -> bool:
        return self.status.scored and bool(self.axes)

    @property
    def verdict(self) -> str:
        if self.scored:
            return str(judge(self.axes))
        return "partial: not scored" if self.status is Status.PARTIAL else str(self.status)

    @property
    def findings(self) -> list[Finding]:
        return [f for axis in AXES if axis in self.axes for f in self.axes[axis].findings]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = str(self.status)
        data["left_out"] = self.left_out.to_json() if self.left_out is not None else None
        data["score"] = self.score if self.scored else None
        data["verdict"] = self.verdict
        return data
