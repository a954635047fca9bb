"""The rows both the terminal and the markdown renderer show: one per item, and its top findings."""

from __future__ import annotations

from pytest_mlcanon import learner_coverage
from pytest_mlcanon.reports.model import Report
from pytest_mlcanon.rubric.model import AXES, AXIS_TITLES, ItemScore

HEADERS = ["item", *(AXIS_TITLES[a] for a in AXES), "score", "verdict"]


def mark(item: ItemScore, axis: str) -> str:
    if not item.scored:
        return "-"
    return "yes" if item.axes[axis].passed else "NO"


def rows(report: Report) -> list[list[str]]:
    out = []
    for item in report.items:
        score = f"{item.score}/5" if item.scored else "-"
        out.append([f"#{item.number} {item.slug}", *(mark(item, a) for a in AXES), score, item.verdict])
    return out


def item_lines(item: ItemScore, limit: int | None) -> list[str]:
    """The lines under an item's heading: its error, test counts, axis notes and findings."""
    lines: list[str] = []
    if item.error:
        lines.append(f"{item.status}: {item.error}")
    if item.files:
        lines.append("files: " + ", ".join(item.files))
    if item.fallback:
        lines.append("from the reference (not written in your folder): " + ", ".join(item.fallback))
    if item.built_on:
        lines.append("also runs your files: " + ", ".join(item.built_on) + " (a failure may start there)")
    if item.tests:
        lines.append("tests: " + ", ".join(f"{v} {k}" for k, v in item.tests.items() if v))
    for axis in AXES:
        result = item.axes.get(axis)
        for note in result.notes if result else ():
            lines.append(f"{AXIS_TITLES[axis]}: {note}")
    lines += [learner_coverage.render(path, cov) for path, cov in item.coverage.items()]
    if item.timing:
        t = item.timing
        lines.append(f"time: {t['elapsed_min']:.1f} min of {t['allowed_min']:.0f} allowed "
                     f"(target {t['target_min']} min, {t['attempt']})")
    findings = item.findings
    shown = findings if limit is None else findings[:limit]
    lines += [f.render() for f in shown]
    if len(shown) < len(findings):
        lines.append(f"... and {len(findings) - len(shown)} more (see --canon-report=markdown:PATH)")
    return lines
