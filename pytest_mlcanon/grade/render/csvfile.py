"""CSV renderer: one row per student, a column group per item (status, each axis, score, tests,
re-check, points, time, integrity codes, verdict), then the totals.

A cell with no value is empty (the tables' ``-`` is for people, not spreadsheets). Text a submission
controls is cleaned of control characters (``text.clean``) and cannot start a formula: a cell whose
first non-blank character is ``=``, ``+``, ``-``, ``@``, a tab or a carriage return, and that is not a
number, is prefixed with ``'`` (OWASP's CSV-injection rule).
"""

from __future__ import annotations

import csv
import io

from pytest_mlcanon.grade.gradebook import Gradebook
from pytest_mlcanon.grade.render.table import csv_header, csv_row
from pytest_mlcanon.grade.text import clean

NO_VALUE = "-"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def render(book: Gradebook) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(csv_header(book))
    for student in book.students:
        writer.writerow([_safe(cell) for cell in csv_row(book, student)])
    return buffer.getvalue()


def _safe(cell: str) -> str:
    """The cell as a spreadsheet may show it: empty for no value, never a formula."""
    if cell == NO_VALUE:
        return ""
    text = clean(cell, limit=4000)
    if text.lstrip(" ")[:1] in FORMULA_STARTS and not _numeric(text):
        return "'" + text
    return text


def _numeric(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
