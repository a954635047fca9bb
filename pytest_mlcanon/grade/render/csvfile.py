"""CSV renderer: one row per student, a column group per item (status, each axis, score, tests,
re-check, points, time, integrity codes, verdict), then the totals."""

from __future__ import annotations

import csv
import io

from pytest_mlcanon.grade.gradebook import Gradebook
from pytest_mlcanon.grade.render.table import csv_header, csv_row


def render(book: Gradebook) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(csv_header(book))
    for student in book.students:
        writer.writerow([_safe(cell) for cell in csv_row(book, student)])
    return buffer.getvalue()


def _safe(cell: str) -> str:
    """Neutralise spreadsheet formulas in text a submission controls (``=cmd|...``)."""
    return "'" + cell if cell[:1] in ("=", "+", "-", "@") and not _numeric(cell) else cell


def _numeric(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
