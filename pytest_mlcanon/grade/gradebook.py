"""The gradebook: one row per student, one cell per item, and everything the renderers show.

It is the single model every output is rendered from (CSV, Markdown, JSON, feedback, Gradescope,
HTML, GitHub summary), and the JSON form is lossless, so ``mlcanon grade --merge`` rebuilds every
output of a class from the shards' ``gradebook.json`` files.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from pytest_mlcanon.evidence import Status
from pytest_mlcanon.grade.text import clean
from pytest_mlcanon.rubric.model import AXES, Finding

FORMAT_VERSION = 1


@dataclass
class GradedTest:
    """One reference test of one item for one student."""

    name: str
    outcome: str  # passed, failed, error, skipped, timeout, crashed, not run
    message: str = ""
    probe: bool = False
    weight: float = 1.0
    points: float = 0.0
    max_points: float = 0.0
    contract: bool = False  # an input-validation check: no points unless the rubric's contract = "required"
    #: the test calls a public name of the item that no re-check case verified: its points rest on the
    #: child's word, so they are paid by the teacher's ``[recheck] unverified`` policy
    unverified: bool = False


@dataclass
class Recheck:
    """The parent's seeded re-check of one item: whether its correctness was verified, and how."""

    status: str = "not re-checked"  # passed, failed, not run, unverified, not re-checked (the item never ran)
    detail: str = ""
    cases: int = 0
    problems: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)  # public names no case verified
    policy: str = ""  # for an unverified item, or a partly verified one's unverified tests: what they earn
    withheld: float = 0.0  # correctness points the tests claim, held for the teacher's review
    held: list[str] = field(default_factory=list)  # public names of the calls of held tests no case verified
    numerics: list[str] = field(default_factory=list)  # differences on the probes' cases: Numerics evidence

    @property
    def verified(self) -> bool:
        """The correctness points rest on the parent's own comparison (fully or in part)."""
        return self.status == "passed"

    def label(self) -> str:
        """The re-check column of every table: ``passed``, ``passed (partly)``, ``unverified (review)``..."""
        if self.status == "unverified":
            return f"unverified ({self.policy})" if self.policy else "unverified"
        if self.status == "passed" and self.held:  # a test's points rest on the child's word
            return "passed (partly)"
        return self.status


@dataclass
class ItemResult:
    """One item of one student: status, one-line verdict, axes, tests, integrity, points, time."""

    slug: str
    number: int
    title: str
    status: Status  # scored (status.scored: also timeout, crashed, killed: scored, but see ``unfinished``)
    verdict: str = ""
    axes: dict[str, bool] = field(default_factory=dict)
    score: int | None = None
    tests: list[GradedTest] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    integrity: list[Finding] = field(default_factory=list)
    recheck: Recheck = field(default_factory=Recheck)
    points: float = 0.0
    max_points: float = 0.0
    axis_points: dict[str, float] = field(default_factory=dict)
    axis_max: dict[str, float] = field(default_factory=dict)
    time_s: float = 0.0
    cpu_s: float = 0.0
    peak_mb: float = 0.0
    files: list[str] = field(default_factory=list)
    sandbox: list[str] = field(default_factory=list)
    #: The verdict without its integrity flag: what a student reads while the flags are hidden from them.
    outcome: str = ""
    #: Expected tests that never reported (the run did not finish): no correctness points then.
    unfinished: int = 0

    @property
    def flagged(self) -> bool:
        return bool(self.integrity)

    @property
    def codes(self) -> list[str]:
        """The distinct integrity codes, in order of first appearance."""
        return list(dict.fromkeys(f.code for f in self.integrity))

    def held_tests(self) -> list[GradedTest]:
        """The passing tests that carry points the teacher's ``[recheck] unverified`` policy decides: the
        item is unverified, or the test makes a call no case verified."""
        return [t for t in self.tests if t.outcome == "passed" and t.max_points
                and (t.unverified or self.recheck.status == "unverified")]

    def tests_count(self, outcome: str) -> int:
        return sum(1 for t in self.tests if t.outcome == outcome)


@dataclass
class StudentResult:
    student: str
    folder: str = ""
    impl: str = ""
    problem: str = ""
    items: list[ItemResult] = field(default_factory=list)

    @property
    def points(self) -> float:
        return sum(i.points for i in self.items)

    @property
    def max_points(self) -> float:
        return sum(i.max_points for i in self.items)

    @property
    def flagged(self) -> bool:
        return any(i.flagged for i in self.items)

    def item(self, slug: str) -> ItemResult | None:
        return next((i for i in self.items if i.slug == slug), None)


@dataclass
class Gradebook:
    items: list[str]
    titles: dict[str, str] = field(default_factory=dict)
    students: list[StudentResult] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    shards: list[str] = field(default_factory=list)
    sandbox: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0
    workers: int = 0
    version: int = FORMAT_VERSION
    #: What the jobs' sandbox lacked when the teacher passed ``--unsafe-no-sandbox`` (empty: sandboxed).
    unsandboxed: list[str] = field(default_factory=list)
    #: When the batch started, ISO 8601 in UTC (a merge keeps its shards' earliest; empty: not recorded).
    graded_at: str = ""

    def axis_pass_counts(self, axis: str) -> list[int]:
        """Per student, on how many of the items the axis said yes (for the histograms)."""
        return [sum(1 for i in s.items if i.axes.get(axis)) for s in self.students]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for student, raw in zip(self.students, data["students"]):
            raw["points"] = round(student.points, 4)
            raw["max_points"] = round(student.max_points, 4)
            for item, raw_item in zip(student.items, raw["items"]):
                raw_item["status"] = str(item.status)
                raw_item["flagged"] = item.flagged
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Gradebook:
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"gradebook format {data.get('version')!r} is not {FORMAT_VERSION}")
        students = [_student(s) for s in data.get("students", [])]
        plain = {f.name: data[f.name] for f in fields(cls) if f.name in data and f.name != "students"}
        return cls(**plain, students=students)


def _finding(data: dict[str, Any]) -> Finding:
    return Finding(str(data["code"]), str(data["path"]), int(data["line"]), str(data["message"]),
                   str(data.get("hint", "")), str(data.get("subject", "")))


def _item(data: dict[str, Any]) -> ItemResult:
    known = {f.name for f in fields(ItemResult)}
    plain = {k: v for k, v in data.items()
             if k in known and k not in ("status", "tests", "findings", "integrity", "recheck")}
    return ItemResult(**plain, status=Status.from_json(data.get("status")), tests=[GradedTest(**t) for t in data.get("tests", [])],
                      findings=[_finding(f) for f in data.get("findings", [])],
                      integrity=[_finding(f) for f in data.get("integrity", [])],
                      recheck=Recheck(**data.get("recheck", {})))


def _student(data: dict[str, Any]) -> StudentResult:
    return StudentResult(str(data["student"]), data.get("folder", ""), data.get("impl", ""), data.get("problem", ""),
                         [_item(i) for i in data.get("items", [])])


def cleaned(item: ItemResult) -> ItemResult:
    """The cell with every text in it printable (``text.clean``): much of it quotes the submission
    (test messages, findings, notes, the child's sandbox notes), and it is kept and shown as is by every
    output; each renderer then escapes it for its own format."""
    def finding(f: Finding) -> Finding:
        return replace(f, code=clean(f.code, 20), path=clean(f.path, 300), message=clean(f.message, 600),
                       hint=clean(f.hint, 300))

    return replace(
        item, verdict=clean(item.verdict, 400), outcome=clean(item.outcome, 400),
        tests=[replace(t, name=clean(t.name, 300), outcome=clean(t.outcome, 20), message=clean(t.message, 600))
               for t in item.tests],
        findings=[finding(f) for f in item.findings], notes=[clean(n, 300) for n in item.notes],
        integrity=[finding(f) for f in item.integrity],
        recheck=replace(item.recheck, status=clean(item.recheck.status, 40), detail=clean(item.recheck.detail, 400),
                        problems=[clean(p, 400) for p in item.recheck.problems]),
        files=[clean(f, 300) for f in item.files], sandbox=[clean(n, 300) for n in item.sandbox])


def axis_mark(item: ItemResult, axis: str) -> str:
    """``yes``/``NO`` for an axis that was scored, ``-`` otherwise (the same marks as the rubric table)."""
    if not item.status.scored or axis not in item.axes:
        return "-"
    return "yes" if item.axes[axis] else "NO"


__all__ = ["AXES", "Gradebook", "ItemResult", "Recheck", "StudentResult", "GradedTest", "axis_mark", "cleaned"]
