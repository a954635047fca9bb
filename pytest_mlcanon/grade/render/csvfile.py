"""CSV renderers.

``render``: ``gradebook.csv``, one row per student, a column group per item (status, each axis, score,
tests, re-check, points, time, integrity codes, verdict), then the totals.

``lms``: ``gradebook-lms.csv``, what a learning-management system imports: ``student``, ``total``,
then one column per item, numbers only (the points), a cell empty when the item was not graded
(``table.graded``), and the total empty too unless every item was graded (an interrupted batch's
partial total would look final). The totals' header says ``(unsandboxed)`` when the batch was.

A cell with no value is empty (the tables' ``-`` is for people, not spreadsheets). Text a submission
controls is cleaned of control characters (``text.clean``) and cannot start a formula: a cell whose
first non-blank character is ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is prefixed with
``'`` (OWASP's CSV-injection rule), unless it is a plain decimal number (``-1.5``, ``2e-3``).
"""

from __future__ import annotations

import csv
import io
import re

from pytest_mlcanon.grade.gradebook import Gradebook
from pytest_mlcanon.grade.render.table import csv_header, csv_row, graded
from pytest_mlcanon.grade.text import clean, number

NO_VALUE = "-"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: A number as a spreadsheet reads it, and nothing else (``float`` would also take ``-inf``, ``1_0``, `` 1``).
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def render(book: Gradebook) -> str:
    return _write([csv_header(book), *(csv_row(book, student) for student in book.students)])


def lms(book: Gradebook) -> str:
    total = "total (unsandboxed)" if book.unsandboxed else "total"
    rows = [["student", total, *book.items]]
    for student in book.students:
        items = [student.item(slug) for slug in book.items]
        points = [number(i.points) if i is not None and graded(i) else "" for i in items]
        complete = bool(points) and all(points)  # a total over items still to grade would look final
        rows.append([student.student, number(student.points) if complete else "", *points])
    return _write(rows)


def _write(rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerows([_safe(cell) for cell in row] for row in rows)
    return buffer.getvalue()


def _safe(cell: str) -> str:
    """The cell as a spreadsheet may show it: empty for no value, never a formula."""
    if cell == NO_VALUE:
        return ""
    text = clean(cell, limit=4000)
    if text.lstrip(" ")[:1] in FORMULA_STARTS and not _NUMBER.fullmatch(text):
        return "'" + text
    return text
