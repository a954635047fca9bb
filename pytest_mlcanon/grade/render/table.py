"""The cells and columns every renderer shares, so the CSV, Markdown, HTML and GitHub outputs agree."""

from __future__ import annotations

from pytest_mlcanon.evidence import Status
from pytest_mlcanon.grade.gradebook import Gradebook, ItemResult, StudentResult, axis_mark
from pytest_mlcanon.rubric.model import AXES, AXIS_TITLES

#: One column group per item in the wide CSV (and the JSON-free spreadsheets built from it).
ITEM_COLUMNS = ("status", *AXES, "score", "tests passed", "re-check", "points", "max points", "time s", "integrity",
                "verdict")
DETAIL_HEADERS = ["student", *(AXIS_TITLES[a] for a in AXES), "score", "tests", "re-check", "points", "time",
                  "integrity", "verdict"]


def number(value: float) -> str:
    """Points to two decimals without trailing zeros: 7.5, 10, 0.33."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text if text not in ("-0", "") else "0"


def score_cell(item: ItemResult) -> str:
    return f"{item.score}/5" if item.status.scored and item.score is not None else "-"


def tests_cell(item: ItemResult) -> str:
    return f"{item.tests_count('passed')}/{len(item.tests)}" if item.tests else "-"


def summary_cell(item: ItemResult) -> str:
    """The class table's cell: the score, or what stopped the item; flagged and unverified items say so."""
    base = score_cell(item) if item.status is Status.SCORED else str(item.status)
    if item.recheck.status == "unverified" and item.status.scored:
        base = f"{base} UNVERIFIED"
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


def summary_header(book: Gradebook) -> list[str]:
    return ["student", *book.items, "points"]


def summary_row(book: Gradebook, student: StudentResult) -> list[str]:
    cells = [summary_cell(i) if (i := student.item(slug)) else "-" for slug in book.items]
    unsandboxed = " (unsandboxed)" if book.unsandboxed else ""
    return [student.student, *cells, f"{number(student.points)}/{number(student.max_points)}{unsandboxed}"]


def detail_row(student: StudentResult, item: ItemResult) -> list[str]:
    return [student.student, *(axis_mark(item, a) for a in AXES), score_cell(item), tests_cell(item),
            item.recheck.label(), f"{number(item.points)}/{number(item.max_points)}", f"{item.time_s:.1f}s",
            " ".join(item.codes) or "-", item.verdict]


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
