"""HTML report: the assignment's name and when it was graded, the class and item tables (each student
linked to their ``feedback/<student>.md``, every column sortable by a click, failing, flagged, error
and timeout cells coloured, with a legend), and a per-axis histogram of the class drawn with
matplotlib (the optional ``html`` extra: ``pip install pytest-mlcanon[html]``). Without matplotlib
the page says so and keeps the tables.

The page is one self-contained file: its style and its sorting script are inline, the plots are SVG
images in ``data:`` URLs that scale to the page's width, and it fetches nothing. Every text is
escaped: student ids, verdicts and notes carry text from submissions; a cell's colour and its sort
order come from the typed ``table.Cell``, never from its text.
"""

from __future__ import annotations

import base64
import importlib.util
import io
from datetime import datetime
from html import escape
from urllib.parse import quote

from pytest_mlcanon.grade.gradebook import Gradebook, StudentResult
from pytest_mlcanon.grade.render.table import (
    DETAIL_HEADERS,
    Cell,
    Mark,
    detail_cells,
    headline,
    summary_cells,
    summary_header,
)
from pytest_mlcanon.rubric.model import AXES, AXIS_TITLES

#: The background of each mark, and what the legend says it means.
MARK_COLOURS = {
    Mark.FAIL: ("#f8c9c9", "NO / failing: an axis said no or the re-check failed (class table: correctness NO)"),
    Mark.FLAGGED: ("#fde68a", "flagged: integrity flags, waits for a teacher's review"),
    Mark.ERROR: ("#ddd0f5", "error: did not import, crashed, was killed, or broke the grader"),
    Mark.TIMEOUT: ("#c7dcf7", "timeout: ran over a time limit"),
}
STYLE = ("body{font-family:sans-serif;margin:1.5em;max-width:100%}h1{margin-bottom:.2em}"
         ".when{color:#555;margin-top:0}.wide{max-width:100%;overflow-x:auto}"
         "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .5em;font-size:90%;"
         "vertical-align:top;overflow-wrap:break-word}thead th{background:#f3f3f3;padding:0}"
         "tbody th{font-weight:normal;text-align:left}table.detail td:last-child{overflow-wrap:anywhere;min-width:14em}"
         "th button{font:inherit;font-weight:bold;border:0;background:none;padding:.25em .5em;cursor:pointer;"
         "width:100%;text-align:left}th button::after{content:'\\00a0\\2195'/'';color:#999}"
         "th[aria-sort=ascending] button::after{content:'\\00a0\\2191'/'';color:#000}"
         "th[aria-sort=descending] button::after{content:'\\00a0\\2193'/'';color:#000}"
         ".legend{display:flex;flex-wrap:wrap;gap:.4em 1.2em;padding:0;list-style:none;font-size:90%}"
         ".legend span{display:inline-block;width:1em;height:1em;border:1px solid #999;vertical-align:middle;"
         "margin-right:.3em}"
         ".plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,220px),1fr));gap:.5em;"
         "max-width:100%}.plots img{width:100%;height:auto;display:block}"
         + "".join(f"td.{mark.value},.legend .{mark.value}{{background:{colour}}}"
                   for mark, (colour, _) in MARK_COLOURS.items()))
#: Sorts a table by the column of the clicked header button: numerically on the cells' ``data-sort``
#: (cells without one after the numbers), else by text; a second click reverses. ``aria-sort`` is on
#: the sorted column's header only.
SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  heads.forEach(function (th, column) {
    th.querySelector('button').addEventListener('click', function () {
      var ascending = th.getAttribute('aria-sort') !== 'ascending';
      heads.forEach(function (other) { other.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', ascending ? 'ascending' : 'descending');
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[column], y = b.cells[column];
        var nx = x.hasAttribute('data-sort'), ny = y.hasAttribute('data-sort');
        var order;
        if (nx && ny) { order = parseFloat(x.dataset.sort) - parseFloat(y.dataset.sort); }
        else if (nx || ny) { return nx ? -1 : 1; }
        else { order = x.textContent.localeCompare(y.textContent, undefined, {numeric: true}); }
        return ascending ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


def render(book: Gradebook) -> str:
    title = str(book.config.get("assignment") or "") or "mlcanon gradebook"
    parts = ["<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
             "<meta name='viewport' content='width=device-width, initial-scale=1'>",
             f"<title>{escape(title)}: mlcanon gradebook</title>", f"<style>{STYLE}</style></head><body>",
             f"<h1>{escape(title)}</h1>", f"<p class='when'>{escape(_when(book))}</p>",
             f"<p>{escape(headline(book))}</p>", _legend()]
    parts.append(_table("class", summary_header(book), [(s, summary_cells(book, s)) for s in book.students],
                        "sortable"))
    parts.append(_histograms(book))
    for slug in book.items:
        rows = [(s, detail_cells(s, i)) for s in book.students if (i := s.item(slug)) is not None]
        parts.append(f"<h2>{escape(slug)}: {escape(book.titles.get(slug, ''))}</h2>")
        parts.append(_table(slug, DETAIL_HEADERS, rows, "sortable detail"))
    notes = [f"seed(s) of the re-check: {', '.join(map(str, book.seeds))}", *book.sandbox, *book.notes]
    parts.append("<h2>How this batch ran</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    parts.append(f"<script>{SCRIPT}</script>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _when(book: Gradebook) -> str:
    """``graded 2026-12-02 12:10 UTC`` (the batch's start), with the shards when merged."""
    shards = f"; shard(s) {', '.join(book.shards)}" if book.shards else ""
    try:
        stamp = datetime.fromisoformat(book.graded_at)
    except ValueError:
        return f"mlcanon gradebook; date of grading not recorded{shards}"
    zone = stamp.tzname() or ""
    return f"mlcanon gradebook, graded {stamp:%Y-%m-%d %H:%M} {zone}".rstrip() + shards


def _legend() -> str:
    entries = "".join(f"<li><span class='{mark.value}'></span>{escape(meaning)}</li>"
                      for mark, (_, meaning) in MARK_COLOURS.items())
    return f"<ul class='legend' aria-label='cell colours'>{entries}</ul>"


def feedback_link(student: StudentResult) -> str:
    """The student's feedback page, relative to ``report.html`` (``render.write_all`` writes both)."""
    return f"feedback/{quote(student.student, safe='')}.md"


def _table(name: str, headers: list[str], rows: list[tuple[StudentResult, list[Cell]]], kind: str) -> str:
    head = "".join(f"<th scope='col'><button type='button'>{escape(h)}</button></th>" for h in headers)
    body = "".join(
        f"<tr data-student='{escape(student.student)}'>" + _student(student, cells[0])
        + "".join(_cell(c) for c in cells[1:]) + "</tr>"
        for student, cells in rows)
    return (f"<div class='wide'><table class='{kind}' data-table='{escape(name)}'><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table></div>")


def _student(student: StudentResult, cell: Cell) -> str:
    return f"<th scope='row'><a href='{escape(feedback_link(student))}'>{escape(cell.text)}</a></th>"


def _cell(cell: Cell) -> str:
    attributes = "" if cell.mark is Mark.PLAIN else f" class='{cell.mark.value}'"
    if cell.sort is not None:
        attributes += f" data-sort='{cell.sort!r}'"
    return f"<td{attributes}>{escape(cell.text)}</td>"


def matplotlib_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _histograms(book: Gradebook) -> str:
    """One histogram per axis: how many students said yes on 0, 1, ... n of the items. Each is an SVG
    image in a grid that puts them side by side on a wide page and wraps them on a narrow one."""
    if not matplotlib_available():
        return ("<p><em>Histograms need matplotlib: <code>pip install pytest-mlcanon[html]</code>.</em></p>")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    n = len(book.items)
    counts = {axis: book.axis_pass_counts(axis) for axis in AXES}
    top = max([1, *(max([0, *(c.count(k) for k in range(n + 1))]) for c in counts.values())])
    images = []
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "mlcanon"}):
        for axis in AXES:
            figure, ax = plt.subplots(figsize=(3.2, 2.6))
            ax.hist(counts[axis], bins=[b - 0.5 for b in range(n + 2)], rwidth=0.8, color="#4c72b0")
            ax.set_title(AXIS_TITLES[axis])
            ax.set_xticks(range(n + 1))
            ax.set_ylim(0, top * 1.05)
            ax.set_xlabel(f"items passed (of {n})")
            ax.set_ylabel("students")
            figure.tight_layout()
            buffer = io.BytesIO()
            figure.savefig(buffer, format="svg", metadata={"Date": None})
            plt.close(figure)
            data = base64.b64encode(buffer.getvalue()).decode()
            images.append(f"<img alt='per-axis histogram of the class: {escape(AXIS_TITLES[axis])}' "
                          f"src='data:image/svg+xml;base64,{data}'>")
    return "<h2>The class per axis</h2><div class='plots'>" + "".join(images) + "</div>"
