"""Gradescope ``results.json`` of one student, in the autograder's format: top-level ``score``,
``execution_time``, ``output`` and ``visibility``, and ``tests`` whose entries each have ``name``,
``score``, ``max_score``, ``status`` (``passed``/``failed``), ``output`` and ``visibility``.

Every ``output`` is plain text (``output_format``, ``test_output_format`` and ``test_name_format`` are
``"text"``): Gradescope's default format renders HTML and links, and these outputs quote the submission.

Per item: one entry per reference test (each carries its share of the correctness points), one per
other rubric axis, and two zero-point entries for the seeded re-check and the integrity scan, so a
student sees why. A flagged item's entries score 0 under the default ``on_flag = "zero"``.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_mlcanon.grade.gradebook import Gradebook, ItemResult, StudentResult
from pytest_mlcanon.grade.render.table import number
from pytest_mlcanon.rubric import rules
from pytest_mlcanon.rubric.model import AXES, AXIS_TITLES


def results(book: Gradebook, student: StudentResult) -> dict[str, Any]:
    visibility = str(book.config.get("visibility", "visible"))
    test_visibility = str(book.config.get("test_visibility", "visible"))
    tests = [entry for item in student.items for entry in _entries(item, test_visibility)]
    output = [f"{student.student}: {number(student.points)} / {number(student.max_points)} points"]
    output += [f"#{i.number} {i.slug}: {i.verdict}" for i in student.items]
    return {
        "score": round(student.points, 4),
        "execution_time": int(round(sum(i.time_s for i in student.items))),
        "output": "\n".join(output),
        "output_format": "text",
        "test_output_format": "text",
        "test_name_format": "text",
        "visibility": visibility,
        "tests": tests,
    }


def render(book: Gradebook, student: StudentResult) -> str:
    return json.dumps(results(book, student), indent=2) + "\n"


def _entry(name: str, score: float, max_score: float, passed: bool, output: str, visibility: str) -> dict[str, Any]:
    return {"name": name, "score": round(score, 6), "max_score": round(max_score, 6),
            "status": "passed" if passed else "failed", "output": output, "visibility": visibility}


def _entries(item: ItemResult, visibility: str) -> list[dict[str, Any]]:
    label = f"#{item.number} {item.slug}"
    if not item.tests and not item.axes:
        return [_entry(f"{label}: {item.status}", 0.0, item.max_points, False, item.verdict, visibility)]
    entries = [_entry(f"{label} test {t.name}", t.points, t.max_points, t.outcome in ("passed", "skipped"),
                      f"{t.outcome}: {t.message}" if t.message else t.outcome, visibility)
               for t in item.tests if not t.probe]
    entries += [_entry(f"{label} numerics probe {t.name}", 0.0, 0.0, t.outcome == "passed", t.message or t.outcome,
                       visibility) for t in item.tests if t.probe]
    for axis in AXES[1:]:
        findings = [f.render() for f in item.findings if _axis_of(f.code) == axis]
        entries.append(_entry(f"{label} {AXIS_TITLES[axis]}", item.axis_points.get(axis, 0.0),
                              item.axis_max.get(axis, 0.0), bool(item.axes.get(axis)),
                              "\n".join(findings) or "no findings", visibility))
    entries.append(_entry(f"{label} seeded re-check", 0.0, 0.0, item.recheck.status == "passed",
                          "\n".join([f"{item.recheck.label()}: {item.recheck.detail}", *item.recheck.problems]),
                          visibility))
    entries.append(_entry(f"{label} integrity", 0.0, 0.0, not item.flagged,
                          "\n".join(f.render() for f in item.integrity) or "no integrity flags", visibility))
    return entries


def _axis_of(code: str) -> str:
    rule = rules.BY_CODE.get(code)
    return rule.axis if rule is not None else ""
