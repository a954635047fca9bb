"""HTML report: the class and item tables, and a per-axis histogram of the class drawn with
matplotlib (the optional ``html`` extra: ``pip install pytest-mlcanon[html]``). Without matplotlib
the page says so and keeps the tables. Every text is escaped: verdicts carry text from submissions."""

from __future__ import annotations

import base64
import importlib.util
import io
from html import escape

from pytest_mlcanon.grade.gradebook import Gradebook
from pytest_mlcanon.grade.render.table import (
    DETAIL_HEADERS,
    detail_row,
    headline,
    summary_header,
    summary_row,
)
from pytest_mlcanon.rubric.model import AXES, AXIS_TITLES

STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
         "td,th{border:1px solid #ccc;padding:.25em .5em;font-size:90%}th{background:#f3f3f3}"
         ".flag{background:#fde2e2}")


def render(book: Gradebook) -> str:
    parts = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'><title>mlcanon gradebook</title>",
             f"<style>{STYLE}</style></head><body>", "<h1>mlcanon gradebook</h1>", f"<p>{escape(headline(book))}</p>"]
    parts.append(_table(summary_header(book), [summary_row(book, s) for s in book.students],
                        [s.flagged for s in book.students]))
    parts.append(_histograms(book))
    for slug in book.items:
        pairs = [(s, i) for s in book.students if (i := s.item(slug)) is not None]
        parts.append(f"<h2>{escape(slug)}: {escape(book.titles.get(slug, ''))}</h2>")
        parts.append(_table(DETAIL_HEADERS, [detail_row(s, i) for s, i in pairs], [i.flagged for _, i in pairs]))
    notes = [f"seed(s) of the re-check: {', '.join(map(str, book.seeds))}", *book.sandbox, *book.notes]
    parts.append("<h2>How this batch ran</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _table(headers: list[str], rows: list[list[str]], flagged: list[bool]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        f"<tr{' class=flag' if flag else ''}>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>"
        for row, flag in zip(rows, flagged))
    return f"<table><tr>{head}</tr>{body}</table>"


def matplotlib_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _histograms(book: Gradebook) -> str:
    """One histogram per axis: how many students said yes on 0, 1, ... n of the items."""
    if not matplotlib_available():
        return ("<p><em>Histograms need matplotlib: <code>pip install pytest-mlcanon[html]</code>.</em></p>")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    n = len(book.items)
    figure, axes = plt.subplots(1, len(AXES), figsize=(3.2 * len(AXES), 2.8), sharey=True)
    for ax, axis in zip(axes, AXES):
        ax.hist(book.axis_pass_counts(axis), bins=[b - 0.5 for b in range(n + 2)], rwidth=0.8, color="#4c72b0")
        ax.set_title(AXIS_TITLES[axis])
        ax.set_xticks(range(n + 1))
        ax.set_xlabel(f"items passed (of {n})")
    axes[0].set_ylabel("students")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    data = base64.b64encode(buffer.getvalue()).decode()
    return f"<h2>The class per axis</h2><img alt='per-axis histogram of the class' src='data:image/png;base64,{data}'>"
