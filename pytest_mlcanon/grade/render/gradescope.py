"""Gradescope ``results.json`` of one student, in the autograder's format: top-level ``score``,
``execution_time``, ``output`` and ``visibility``, and ``tests`` whose entries each have ``name``,
``score``, ``max_score``, ``status`` (``passed``/``failed``), ``output`` and ``visibility``.

Every ``output`` is plain text (``output_format``, ``test_output_format`` and ``test_name_format`` are
``"text"``): Gradescope's default format renders HTML and links, and these outputs quote the submission.

Per item: one entry per reference test (each carries its share of the correctness points), one per
other rubric axis, and two zero-point entries for the seeded re-check and the integrity scan, so a
student sees why. The results agree with themselves:

* points are in cents: each item's maximum and its points (rounded to two decimals) are split over its
  entries by largest remainder, the credited entries sharing the item's points and the others the
  rest, so the entries add up exactly to the item's points, and the items to the submission's ``score``;
* an entry is ``passed`` only when it earned its whole ``max_score``: a test that passed but whose
  credit was voided (the seeded re-check failed or never finished, correctness unverified, the item
  flagged under ``on_flag = "zero"``) is ``failed``, and its ``output`` says why;
* no text names a grader path or a host detail (``redact.student_text``);
* integrity flags take ``[gradescope] flags_visibility`` (default ``hidden``: until a teacher reviewed
  them): the integrity entries carry it, and while it is not ``visible`` only flagged items have one
  and no other text names a flag (a flagged item whose points are zeroed says they are held for the
  teacher's review).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_mlcanon.grade.gradebook import Gradebook, GradedTest, ItemResult, StudentResult
from pytest_mlcanon.grade.redact import student_text
from pytest_mlcanon.rubric import rules
from pytest_mlcanon.rubric.model import AXES, AXIS_TITLES

#: The default of ``[gradescope] flags_visibility``: a flag is the teacher's to review first.
FLAGS_VISIBILITY = "hidden"
HELD = "held for your teacher's review"


@dataclass
class _Entry:
    name: str
    score: float  # the raw points (0 or the whole max_score: every entry is all-or-nothing)
    max_score: float
    ok: bool  # the check itself passed (a test passed, an axis said yes)
    output: str
    visibility: str
    score_cents: int = 0
    max_cents: int = 0


@dataclass(frozen=True)
class _View:
    """What the student may see, from the teacher's config."""

    test_visibility: str
    flags_visibility: str
    on_flag: str
    text: Callable[[str], str]

    @property
    def flags_shown(self) -> bool:
        return self.flags_visibility == "visible"


def results(book: Gradebook, student: StudentResult) -> dict[str, Any]:
    config = book.config
    view = _View(str(config.get("test_visibility", "visible")), str(config.get("flags_visibility", FLAGS_VISIBILITY)),
                 str(config.get("on_flag", "zero")), functools.partial(student_text, student=student.student))
    tests: list[dict[str, Any]] = []
    lines: list[str] = []
    total = total_max = 0
    for item in student.items:
        entries = _entries(item, view)
        score, maximum = split_cents(entries)
        total, total_max = total + score, total_max + maximum
        lines.append(f"#{item.number} {item.slug}: {_points(score)} / {_points(maximum)} points; "
                     f"{view.text(_verdict(item, view))}")
        tests += [_json(e) for e in entries]
    output = [f"{view.text(student.student)}: {_points(total)} / {_points(total_max)} points", *lines]
    if student.problem:
        output.append(f"Note: {view.text(student.problem)}")
    return {
        "score": total / 100,
        "execution_time": int(round(sum(i.time_s for i in student.items))),
        "output": "\n".join(output),
        "output_format": "text",
        "test_output_format": "text",
        "test_name_format": "text",
        "visibility": str(config.get("visibility", "visible")),
        "tests": tests,
    }


def render(book: Gradebook, student: StudentResult) -> str:
    return json.dumps(results(book, student), indent=2) + "\n"


def allocate(values: list[float], total: int) -> list[int]:
    """``total`` cents split over ``values`` (in points) by largest remainder: each gets its value in
    cents rounded down, then the cents left go one each to the largest remainders (ties to the earlier
    value); should ``total`` fall short of the rounded-down sum, the cents come off the smallest."""
    exact = [max(0.0, v) * 100 for v in values]
    cents = [math.floor(e + 1e-6) for e in exact]
    order = sorted(range(len(values)), key=lambda i: (cents[i] - exact[i], i))
    left = total - sum(cents)
    while left > 0 and order:
        for i in order[:left]:
            cents[i] += 1
        left -= min(left, len(order))
    for i in reversed(order):
        if left >= 0:
            break
        taken = min(cents[i], -left)
        cents[i] -= taken
        left += taken
    return cents


def split_cents(entries: list[_Entry]) -> tuple[int, int]:
    """Set each entry's ``score_cents`` and ``max_cents``: the item's points, rounded to cents, shared
    by the credited entries, and the rest of its maximum by the others. Returns the item's (points,
    maximum) in cents: the sums of its entries'."""
    credited = [e for e in entries if e.score > 0]
    rest = [e for e in entries if e.score <= 0]
    maximum = round(sum(e.max_score for e in entries) * 100)
    points = min(round(sum(e.score for e in credited) * 100), maximum)
    for group, cents in ((credited, points), (rest, maximum - points)):
        for entry, share in zip(group, allocate([e.max_score for e in group], cents)):
            entry.max_cents = share
            entry.score_cents = share if entry.score > 0 else 0
    return sum(e.score_cents for e in entries), sum(e.max_cents for e in entries)


def _json(entry: _Entry) -> dict[str, Any]:
    earned = entry.ok and entry.score_cents == entry.max_cents
    return {"name": entry.name, "score": entry.score_cents / 100, "max_score": entry.max_cents / 100,
            "status": "passed" if earned else "failed", "output": entry.output, "visibility": entry.visibility}


def _points(cents: int) -> str:
    return f"{cents / 100:.2f}".rstrip("0").rstrip(".")


def _verdict(item: ItemResult, view: _View) -> str:
    """The item's line: its verdict, without the flag while flags are hidden from the student."""
    if not item.flagged or view.flags_shown:
        return item.verdict
    held = f"; {HELD}" if view.on_flag == "zero" else ""
    return f"{item.outcome or item.status}{held}"


def _no_credit(item: ItemResult, view: _View, test: GradedTest | None = None) -> str:
    """Why a check that passed earned none of its points, in the student's terms."""
    if item.flagged and view.on_flag == "zero":
        if view.flags_shown:
            return f"earns no points: the item is flagged for an integrity review (see #{item.number} integrity)"
        return f"its points are {HELD}"
    check = item.recheck
    if check.status == "failed":
        return ("earns no points: the seeded re-check (your functions run again on fresh inputs) disagreed with "
                f"the reference, so no test's correctness points count (see #{item.number} seeded re-check)")
    if check.status == "not run":
        return ("earns no points: the seeded re-check (your functions run again on fresh inputs) did not finish, "
                f"so no test's correctness points count (see #{item.number} seeded re-check)")
    if check.status == "unverified" or (test is not None and test.unverified):
        what = "what this test calls" if check.status == "passed" else "this item's correctness"
        if check.policy == "review":
            return f"its points are {HELD}: the grader could not check {what} on fresh inputs"
        return f"earns no points: the grader cannot check {what} on fresh inputs"
    return f"earns no points: {item.status}"


def _entries(item: ItemResult, view: _View) -> list[_Entry]:
    label = f"#{item.number} {item.slug}"
    text, visibility = view.text, view.test_visibility
    integrity = _Entry(f"{label} integrity", 0.0, 0.0, not item.flagged,
                       text("\n".join(f.render() for f in item.integrity) or "no integrity flags"),
                       view.flags_visibility)
    # While flags are not shown, only a flagged item has an integrity entry (the teacher's): an entry
    # saying "no integrity flags" on every other item would tell a student theirs is missing.
    flags = [integrity] if item.flagged or view.flags_shown else []
    if not item.tests and not item.axes:
        return [_Entry(f"{label}: {item.status}", 0.0, item.max_points, False, text(_verdict(item, view)),
                       visibility), *([integrity] if item.flagged else [])]
    entries = []
    for t in item.tests:
        if t.probe:
            entries.append(_Entry(f"{label} numerics probe {t.name}", 0.0, 0.0, t.outcome == "passed",
                                  text(t.message or t.outcome), visibility))
            continue
        ok = t.outcome in ("passed", "skipped")
        said = f"{t.outcome}: {t.message}" if t.message else t.outcome
        if ok and t.points < t.max_points:
            said = f"{said}; {_no_credit(item, view, t)}"
        entries.append(_Entry(f"{label} test {t.name}", t.points, t.max_points, ok, text(said), visibility))
    for axis in AXES[1:]:
        findings = [f.render() for f in item.findings if _axis_of(f.code) == axis]
        passed = bool(item.axes.get(axis))
        points, maximum = item.axis_points.get(axis, 0.0), item.axis_max.get(axis, 0.0)
        said = "\n".join(findings) or "no findings"
        if passed and points < maximum:
            said = f"{said}; {_no_credit(item, view)}"
        entries.append(_Entry(f"{label} {AXIS_TITLES[axis]}", points, maximum, passed, text(said), visibility))
    check = item.recheck
    entries.append(_Entry(f"{label} seeded re-check", 0.0, 0.0, check.status == "passed",
                          text("\n".join([f"{check.label()}: {check.detail}", *check.problems])), visibility))
    return entries + flags


def _axis_of(code: str) -> str:
    rule = rules.BY_CODE.get(code)
    return rule.axis if rule is not None else ""
