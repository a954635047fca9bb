"""The rubric's data model: findings, axis results, test outcomes and the per-item score."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

AXES = ("correctness", "shapes", "numerics", "api", "explanation")
AXIS_TITLES = {
    "correctness": "Correctness",
    "shapes": "Shapes",
    "numerics": "Numerics",
    "api": "API fluency",
    "explanation": "Explanation",
}


@dataclass(frozen=True)
class Finding:
    """One piece of evidence, in the manner of ruff: ``path:line: CODE message`` plus a fix hint."""

    code: str
    path: str
    line: int
    message: str
    hint: str = ""

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
    """A yes/no answer for one axis with the findings behind it (``notes`` are informational)."""

    passed: bool
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """The final outcome of one reference test: passed, failed, error or skipped."""

    nodeid: str
    outcome: str
    probe: bool = False
    edge: bool = False
    contract: bool = False  # an input-validation check: advice unless contract = "required"
    message: str = ""
    duration: float = 0.0
    where: tuple[str, int] | None = None  # the failure's file:line: in the learner's code if it got there
    nonfinite: tuple[str, int, str] | None = None  # first annotated learner line whose value held NaN/inf


def verdict_for(score: int) -> str:
    """The seed's wording: 4-5 strong, 3 hire with reservations, 2 or fewer no."""
    if score >= 4:
        return "strong"
    if score == 3:
        return "hire with reservations"
    return "no"


@dataclass
class ItemScore:
    """The rubric's result for one item.

    ``status`` is ``scored`` when the item ran; ``not attempted`` when the learner file is missing;
    ``error`` when the learner file could not be imported; ``no tests`` when the canon has no tests
    for the item yet. Only ``scored`` items have a score; every other status fails the run.
    """

    number: int
    slug: str
    title: str
    status: str
    files: list[str] = field(default_factory=list)
    fallback: list[str] = field(default_factory=list)  # modules of the item taken from the reference
    axes: dict[str, AxisResult] = field(default_factory=dict)
    error: str = ""
    tests: dict[str, int] = field(default_factory=dict)
    timing: dict[str, Any] = field(default_factory=dict)
    coverage: dict[str, dict[str, Any]] = field(default_factory=dict)  # learner file -> line coverage

    @property
    def score(self) -> int:
        return sum(1 for axis in AXES if axis in self.axes and self.axes[axis].passed)

    @property
    def verdict(self) -> str:
        return verdict_for(self.score) if self.status == "scored" else self.status

    @property
    def findings(self) -> list[Finding]:
        return [f for axis in AXES if axis in self.axes for f in self.axes[axis].findings]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["score"] = self.score if self.status == "scored" else None
        data["verdict"] = self.verdict
        return data
