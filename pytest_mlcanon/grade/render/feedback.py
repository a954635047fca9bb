"""Per-student Markdown feedback: for each item the verdict, the axes, the re-check, the integrity
flags, the failing tests and every finding with its ``file:line`` and fix. Every text from the
gradebook goes through ``markdown.cell`` (it quotes the submission: raw HTML and links stay text), after
``redact.student_text`` (the page is the student's: no grader path or host detail, their own files
relative to their submission)."""

from __future__ import annotations

from collections.abc import Callable

from pytest_mlcanon.grade import integrity
from pytest_mlcanon.grade.gradebook import Gradebook, ItemResult, StudentResult, axis_mark
from pytest_mlcanon.grade.redact import student_text
from pytest_mlcanon.grade.render.markdown import cell, table
from pytest_mlcanon.grade.text import number
from pytest_mlcanon.rubric.model import AXES, AXIS_TITLES

FAILING = ("failed", "error", "timeout", "crashed", "killed", "not run")


def render(book: Gradebook, student: StudentResult) -> str:
    def say(text: object) -> str:
        return cell(student_text(str(text), student.student))

    parts = [f"# Feedback: {cell(student.student)}", "",
             f"Points: **{number(student.points)} / {number(student.max_points)}**"]
    if book.unsandboxed:
        parts += ["", f"This batch ran unsandboxed (--unsafe-no-sandbox): nothing isolated "
                      f"{cell(', '.join(book.unsandboxed))}."]
    if student.problem:
        parts += ["", f"Note: {say(student.problem)}"]
    for item in student.items:
        parts += ["", *_item(item, say)]
    return "\n".join(parts) + "\n"


def _item(item: ItemResult, say: Callable[[object], str]) -> list[str]:
    lines = [f"## #{item.number} {item.slug}: {item.title}", "",
             f"**{say(item.verdict)}** ({number(item.points)} / {number(item.max_points)} points)"]
    if item.axes:
        rows = [[AXIS_TITLES[a], axis_mark(item, a), number(item.axis_points.get(a, 0.0))] for a in AXES]
        lines += ["", table(["axis", "yes?", "points"], rows)]
    if item.recheck.status != "not re-checked" or item.recheck.detail:
        lines += ["", f"Seeded re-check: **{say(item.recheck.label())}** ({say(item.recheck.detail)})"]
        lines += [f"- {say(p)}" for p in item.recheck.problems]
        held = [t.name for t in item.held_tests()]
        if held and item.recheck.policy == "review":
            lines += ["", f"Held for the teacher's review ({number(item.recheck.withheld)} points: the grader could not "
                          "check these tests' calls on fresh inputs): " + ", ".join(say(n) for n in held[:30])
                      + (f", and {len(held) - 30} more" if len(held) > 30 else "")]
    if item.integrity:
        lines += ["", "Integrity flags (the item is flagged for review):"]
        lines += [f"- {say(f.render())}" for f in item.integrity]
        lines += ["", "What they mean: " + "; ".join(
            f"{code}: {integrity.RULES[code].title}" for code in item.codes if code in integrity.RULES) + "."]
    failing = [t for t in item.tests if t.outcome in FAILING]
    if item.tests:
        lines += ["", f"Tests: {item.tests_count('passed')} of {len(item.tests)} passed."]
        lines += [f"- {say(t.name)} {say(t.outcome)}: {say(t.message)}" for t in failing[:30]]
        if len(failing) > 30:
            lines.append(f"- ... and {len(failing) - 30} more")
    if item.findings:
        lines += ["", "Findings:"]
        lines += [f"- {say(f.render())}" for f in item.findings]
    if item.notes:
        lines += ["", *[f"- {say(n)}" for n in item.notes]]
    return lines
