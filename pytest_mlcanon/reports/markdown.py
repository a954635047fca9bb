"""Markdown renderer: the same table and every finding, for a PR comment or a CI step summary."""

from __future__ import annotations

from tabulate import tabulate

from pytest_mlcanon.reports.model import Report
from pytest_mlcanon.reports.table import HEADERS, item_lines, rows


def render(report: Report) -> str:
    parts = ["# mlcanon rubric report", "", f"Learner: `{report.impl}`", ""]
    parts.append(tabulate(rows(report), headers=HEADERS, tablefmt="github"))
    for item in report.items:
        parts += ["", f"## #{item.number} {item.slug}: {item.title}", ""]
        parts += [f"- {line}" for line in item_lines(item, None)] or ["- no findings"]
    return "\n".join(parts) + "\n"
