"""Markdown renderer: the class table, one detail table per item, and how the batch ran.

Every text from the gradebook goes through ``cell``: much of it quotes a submission (a test's
message, a finding, a file name), and Markdown would otherwise render what it carries: raw HTML
(``<img onerror=...>``), links and images (``[click](https://...)``), emphasis, code spans, table
pipes, entities, GitHub's math.
"""

from __future__ import annotations

import re

from tabulate import tabulate

from pytest_mlcanon.grade.gradebook import Gradebook
from pytest_mlcanon.grade.render.table import (
    DETAIL_HEADERS,
    detail_row,
    headline,
    summary_header,
    summary_row,
)
from pytest_mlcanon.grade.text import clean

#: ASCII punctuation with a meaning in CommonMark or GitHub Markdown inside a line (backslash-escaping
#: any ASCII punctuation is valid CommonMark and renders the character itself).
_MARKUP = re.compile(r"([\\`*_{}\[\]<>!|~&$])")


def cell(text: object) -> str:
    """Gradebook data as literal Markdown, for a table cell or a line of prose: cleaned
    (``text.clean``: one line, no control characters), every markup character escaped."""
    return _MARKUP.sub(r"\\\1", clean(text))


def table(headers: list[str], rows: list[list[str]]) -> str:
    return tabulate([[cell(c) for c in row] for row in rows], headers=[cell(h) for h in headers], tablefmt="github")


def summary(book: Gradebook) -> str:
    """The class table alone (also the GitHub step summary's body)."""
    return table(summary_header(book), [summary_row(book, s) for s in book.students])


def render(book: Gradebook) -> str:
    parts = ["# mlcanon gradebook", "", headline(book), "", summary(book)]
    for slug in book.items:
        rows = [detail_row(s, i) for s in book.students if (i := s.item(slug)) is not None]
        parts += ["", f"## {slug}: {book.titles.get(slug, '')}", "", table(DETAIL_HEADERS, rows)]
    parts += ["", "## How this batch ran", ""]
    parts += [f"- seed(s) of the re-check: {', '.join(map(str, book.seeds))}"]
    if book.shards:
        parts.append(f"- shard(s): {', '.join(book.shards)}")
    parts += [f"- {cell(note)}" for note in book.sandbox + book.notes]
    parts.append(f"- {book.workers} worker(s), {book.elapsed_s:.1f} s")
    return "\n".join(parts) + "\n"
