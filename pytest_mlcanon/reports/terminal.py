"""Terminal renderer: a summary table (tabulate) and the top findings per item, with file:line."""

from __future__ import annotations

from tabulate import tabulate

from pytest_mlcanon.reports.model import Report
from pytest_mlcanon.reports.table import HEADERS, item_lines, rows

TOP_FINDINGS = 8


def render(report: Report) -> list[str]:
    """Lines for pytest's terminal summary."""
    lines = [f"learner: {report.impl}", ""]
    lines += tabulate(rows(report), headers=HEADERS, tablefmt="simple").splitlines()
    for item in report.items:
        detail = item_lines(item, TOP_FINDINGS)
        if detail:
            lines += ["", f"#{item.number} {item.slug} ({item.title})"]
            lines += [f"  {line}" for line in detail]
    failed = report.failed_items
    if report.min_score:
        lines += ["", f"minimum score {report.min_score}/5: " + (
            "all items meet it" if not failed else "not met by " + ", ".join(
                f"#{i.number} {i.slug} ({f'{i.score}/5' if i.scored else i.verdict})" for i in failed))]
    return lines
