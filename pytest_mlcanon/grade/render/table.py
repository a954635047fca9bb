"""The cells and columns every renderer shares, so the CSV, Markdown, HTML and GitHub outputs agree.

The class and detail tables are built as typed ``Cell``s: the text every format shows, the number the
HTML report sorts the column by, and the ``Mark`` it colours the cell with, both taken from the model
(an item's status, axes, re-check, flags), never read back from the text."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pytest_mlcanon.evidence import Status
from pytest_mlcanon.grade.gradebook import Gradebook, ItemResult, StudentResult, axis_mark
from pytest_mlcanon.grade.text import number
from pytest_mlcanon.rubric.model import AXES, AXIS_TITLES

#: One column group per item in the wide CSV (and the JSON-free spreadsheets built from it).
ITEM_COLUMNS = ("status", *AXES, "score", "tests passed", "re-check", "points", "max points", "time s", "integrity",
                "verdict")
DETAIL_HEADERS = ["student", *(AXIS_TITLES[a] for a in AXES), "score", "tests", "re-check", "points", "time",
                  "integrity", "verdict"]


class Mark(enum.Enum):
    """What a cell of the class or detail table shows a reader at a glance (the HTML report's colour)."""

    PLAIN = "plain"
    FAIL = "fail"  # an axis said NO, the re-check failed; in the class table: the item's correctness is NO
    FLAGGED = "flagged"  # integrity flags: the item waits for a teacher's review
    ERROR = "error"  # the item could not be imported, or its job crashed, was killed or broke the grader
    TIMEOUT = "timeout"  # the job ran over a time limit


@dataclass(frozen=True)
class Cell:
    text: str
    sort: float | None = None  # the column's numeric order (None: the cell sorts by its text, after numbers)
    mark: Mark = Mark.PLAIN


def score_cell(item: ItemResult) -> str:
    return f"{item.score}/5" if item.status.scored and item.score is not None else "-"


def tests_cell(item: ItemResult) -> str:
    return f"{item.tests_count('passed')}/{len(item.tests)}" if item.tests else "-"


def summary_cell(item: ItemResult) -> str:
    """The class table's cell: the score, or what stopped the item; flagged and unverified items say so."""
    base = score_cell(item) if item.status is Status.SCORED else str(item.status)
    if item.recheck.status == "unverified" and item.status.scored:
        base = f"{base} UNVERIFIED"
    if item.recheck.withheld and item.status.scored:
        base = f"{base} ({number(item.recheck.withheld)} held)"
    return f"FLAGGED {base}" if item.flagged else base


def csv_header(book: Gradebook) -> list[str]:
    return ["student", *(f"{slug} {column}" for slug in book.items for column in ITEM_COLUMNS), "points",
            "max points", "flagged", "problem"]


def csv_row(book: Gradebook, student: StudentResult) -> list[str]:
    row = [student.student]
    for slug in book.items:
        item = student.item(slug)
        row += item_values(item) if item is not None else [""] * len(ITEM_COLUMNS)
    return row + [number(student.points), number(student.max_points), "yes" if student.flagged else "no",
                  student.problem]


def item_values(item: ItemResult) -> list[str]:
    return [str(item.status), *(axis_mark(item, a) for a in AXES), score_cell(item), tests_cell(item), item.recheck.label(),
            number(item.points), number(item.max_points), f"{item.time_s:.2f}", " ".join(item.codes), item.verdict]


#: Statuses the student earned, besides those the rubric scores: a missing or stub file, a module that
#: does not import. Anything else (a grader failure, a cell not reached) is not graded.
GRADED_UNSCORED = frozenset({Status.NOT_ATTEMPTED, Status.NOT_IMPLEMENTED, Status.ERROR})


def graded(item: ItemResult | None) -> bool:
    """The grader reached a result for the item that the student's work earned (``not attempted`` is
    one: no file, 0 points); a missing cell, a grader failure (``harness error``) or a status not
    listed here is not graded, so an LMS import leaves it empty rather than a 0."""
    return item is not None and (item.status.scored or item.status in GRADED_UNSCORED)


def item_mark(item: ItemResult) -> Mark:
    """The mark of the item as a whole: flagged, then timeout, then error, then failing correctness."""
    if item.flagged:
        return Mark.FLAGGED
    if item.status is Status.TIMEOUT:
        return Mark.TIMEOUT
    if item.status in BROKEN:
        return Mark.ERROR
    if item.status.scored and item.axes.get("correctness") is False:
        return Mark.FAIL
    return Mark.PLAIN


def summary_header(book: Gradebook) -> list[str]:
    return ["student", *book.items, "points"]


def summary_cells(book: Gradebook, student: StudentResult) -> list[Cell]:
    cells = [Cell(student.student)]
    for slug in book.items:
        item = student.item(slug)
        if item is None:
            cells.append(Cell("-"))
            continue
        score = float(item.score) if item.status is Status.SCORED and item.score is not None else None
        cells.append(Cell(summary_cell(item), score, item_mark(item)))
    unsandboxed = " (unsandboxed)" if book.unsandboxed else ""
    return [*cells, Cell(f"{number(student.points)}/{number(student.max_points)}{unsandboxed}", student.points)]


def summary_row(book: Gradebook, student: StudentResult) -> list[str]:
    return [c.text for c in summary_cells(book, student)]


def detail_cells(student: StudentResult, item: ItemResult) -> list[Cell]:
    """One row of an item's table, in the order of ``DETAIL_HEADERS``."""
    axes = [Cell(axis_mark(item, a), mark=Mark.FAIL if item.status.scored and item.axes.get(a) is False
                 else Mark.PLAIN) for a in AXES]
    score = float(item.score) if item.status.scored and item.score is not None else None
    return [Cell(student.student), *axes, Cell(score_cell(item), score),
            Cell(tests_cell(item), float(item.tests_count("passed")) if item.tests else None),
            Cell(item.recheck.label(), mark=Mark.FAIL if item.recheck.status == "failed" else Mark.PLAIN),
            Cell(f"{number(item.points)}/{number(item.max_points)}", item.points),
            Cell(f"{item.time_s:.1f}s", item.time_s, Mark.TIMEOUT if item.status is Status.TIMEOUT else Mark.PLAIN),
            Cell(" ".join(item.codes) or "-", mark=Mark.FLAGGED if item.flagged else Mark.PLAIN),
            Cell(item.verdict, mark=item_mark(item))]


def detail_row(student: StudentResult, item: ItemResult) -> list[str]:
    return [c.text for c in detail_cells(student, item)]


def counts(book: Gradebook) -> dict[str, int]:
    """Class-wide tallies for the headers: students, flagged students, items that did not finish."""
    items = [i for s in book.students for i in s.items]
    return {"students": len(book.students), "flagged": sum(1 for s in book.students if s.flagged),
            "timeouts": sum(1 for i in items if i.status is Status.TIMEOUT),
            "crashes": sum(1 for i in items if i.status in BROKEN)}


#: Items a headline counts as crashed or broken.
BROKEN = frozenset({Status.CRASHED, Status.KILLED, Status.ERROR, Status.HARNESS_ERROR})


def headline(book: Gradebook) -> str:
    tally = counts(book)
    unsandboxed = "UNSANDBOXED (--unsafe-no-sandbox); " if book.unsandboxed else ""
    return (f"{unsandboxed}{tally['students']} students, {len(book.items)} item(s); {tally['flagged']} flagged; "
            f"{tally['timeouts']} timeout(s); {tally['crashes']} crashed or broken item(s)")
