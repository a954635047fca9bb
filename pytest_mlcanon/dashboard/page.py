"""The dashboard as one self-contained HTML page: inline CSS and SVG, no script, nothing fetched.

Sections: a summary line; the sixty items as a grid, one row per block, each cell coloured by its
state and labelled with when it is due; each attempted item's times against its target over time;
the most frequent misses; the week's plan; the mock sessions. Every text that came from the state
files is escaped (the miss log is hand-editable).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape

from pytest_mlcanon import plan, progress
from pytest_mlcanon.dashboard import svg
from pytest_mlcanon.dashboard.model import Dashboard, ItemView, State

STATE_COLOURS = {
    State.UNAVAILABLE: ("#eeeeee", "#888"), State.NEW: ("#f6f6f4", "#333"), State.DRILLING: ("#3b82c4", "#fff"),
    State.FAILED: ("#c9302c", "#fff"), State.DUE: ("#ee8a2a", "#1b1b1b"), State.SOON: ("#f3d35c", "#1b1b1b"),
    State.PASSED: ("#2e8540", "#fff"),
}

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px 32px;color:#1b1b1b;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e3e3e3;padding-bottom:4px}
.sub{color:#666;font-size:13px}.empty{color:#777;font-style:italic}
.tiles{display:flex;gap:12px;margin:14px 0}.tile{border:1px solid #e3e3e3;border-radius:6px;padding:8px 14px}
.tile b{display:block;font-size:20px}.tile span{font-size:12px;color:#666}
.block{display:flex;align-items:stretch;margin:3px 0}.block-name{width:150px;font-size:12px;color:#444;
padding-top:8px;flex:none}.cells{display:flex;flex-wrap:wrap;gap:3px}
.cell{width:84px;height:52px;border-radius:4px;padding:3px 4px;box-sizing:border-box;font-size:10.5px;
line-height:1.3;overflow:hidden;white-space:nowrap;text-overflow:ellipsis;border:1px solid rgba(0,0,0,.12)}
.cell b{font-size:12px}.cell span{display:block;overflow:hidden;text-overflow:ellipsis}
.cell.unavailable{border-style:dashed}
.legend{display:flex;flex-wrap:wrap;gap:14px;font-size:12px;margin:8px 0}.swatch{display:inline-block;width:12px;
height:12px;border-radius:2px;margin-right:4px;vertical-align:-2px;border:1px solid rgba(0,0,0,.15)}
.charts{display:flex;flex-wrap:wrap;gap:10px}.chart{border:1px solid #eee;border-radius:6px;padding:4px 6px}
.chart h3{font-size:12px;margin:2px 0;font-weight:600}
table{border-collapse:collapse;font-size:13px}td,th{border-bottom:1px solid #e6e6e6;padding:4px 10px;text-align:left}
th{background:#f6f6f6}
"""


def render(board: Dashboard) -> str:
    """The whole page."""
    generated = datetime.fromtimestamp(board.now).strftime("%Y-%m-%d %H:%M")
    parts = ["<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
             "<meta name='viewport' content='width=device-width, initial-scale=1'>",
             "<title>mlcanon dashboard</title>", f"<style>{STYLE}</style></head><body>",
             "<h1>Your ML canon</h1>",
             f"<p class='sub'>{escape(str(board.root))} · as of {generated} · from .mlcanon/progress.json and "
             ".mlcanon/misslog.md</p>"]
    parts += [f"<p class='sub'>warning: {escape(w)}</p>" for w in board.warnings]
    parts.append(_tiles(board))
    parts.append(_grid(board))
    parts.append(_times(board))
    parts.append(_misses(board))
    parts.append(_plan(board))
    parts.append(_mocks(board))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _tiles(board: Dashboard) -> str:
    drilled = f"{board.drilled_min / 60:.1f} h" if board.drilled_min >= 60 else f"{board.drilled_min:.0f} min"
    tiles = [(f"{board.attempted}/{len(board.items)}", "items attempted"), (str(board.passed), "passed"),
             (str(board.count(State.DUE, State.FAILED)), "due now"), (str(board.count(State.DRILLING)), "drilling"),
             (str(board.checks), "checks"), (drilled, "drilled to green")]
    body = "".join(f"<div class='tile'><b>{escape(value)}</b><span>{escape(label)}</span></div>"
                   for value, label in tiles)
    return f"<div class='tiles' id='summary'>{body}</div>"


def _grid(board: Dashboard) -> str:
    parts = ["<section id='grid'><h2>The canon</h2>", _legend(board)]
    for block in sorted({v.item.block for v in board.items}):
        members = [v for v in board.items if v.item.block == block]
        cells = "".join(_cell(view, board.now) for view in members)
        parts.append(f"<div class='block' data-block='{block}'><div class='block-name'>"
                     f"{escape(plan.block_title(block))}</div><div class='cells'>{cells}</div></div>")
    parts.append("</section>")
    return "".join(parts)


def _legend(board: Dashboard) -> str:
    entries = []
    for state in State:
        background, _ = STATE_COLOURS[state]
        entries.append(f"<span data-state='{state.value}'><span class='swatch' style='background:{background}'>"
                       f"</span>{escape(state.title)} ({board.count(state)})</span>")
    return f"<div class='legend'>{''.join(entries)}</div>"


def _cell(view: ItemView, now: float) -> str:
    item, summary = view.item, view.summary
    background, colour = STATE_COLOURS[view.state]
    module = item.slug.split("/", 1)[-1]
    if view.state in (State.DUE, State.SOON, State.PASSED, State.FAILED):
        due = "due " + _short_due(summary.due, now)
    elif view.state is State.DRILLING:
        due = "clock running"
    else:
        due = f"target {item.minutes} min"
    best = f"best {summary.best_min:.0f}/{item.minutes} min" if summary.best_min is not None else ""
    tip = [f"#{item.number} {item.slug}: {item.title}", view.state.title,
           f"target {item.minutes} min, {summary.attempts} attempt(s), {summary.passes} pass(es)"]
    if summary.last_score is not None:
        tip.append(f"last score {summary.last_score}/5")
    if summary.due is not None:
        tip.append(f"due {progress.format_due(summary.due, now)}")
    return (f"<div class='cell {view.state.value}' data-item='{item.number}' data-slug='{escape(item.slug)}' "
            f"data-state='{view.state.value}' style='background:{background};color:{colour}' "
            f"title='{escape(' · '.join(tip))}'><b>{item.number}</b> {escape(module)}"
            f"<span class='due'>{escape(due)}</span>{f'<span>{escape(best)}</span>' if best else ''}</div>")


def _short_due(due: float | None, now: float) -> str:
    """``now``, or the day it comes back (``Jun 19``); the tooltip has the full date."""
    text = progress.format_due(due, now)
    return text if due is None or due <= now else datetime.fromtimestamp(due).strftime("%b %d")


def _times(board: Dashboard) -> str:
    attempted = [v for v in board.items if v.points]
    parts = ["<section id='times'><h2>Attempt times against the target</h2>"]
    if not attempted:
        parts.append("<p class='empty'>No timed attempt yet: `mlcanon drill ITEM`, then `mlcanon check ITEM`.</p>")
        return "".join(parts) + "</section>"
    parts.append("<p class='sub'>Minutes from the drill to green per attempt (green: passed; orange: passed over "
                 "time; red: failed), the from-memory target dashed and the first-attempt allowance dotted. "
                 "The charts share one time axis.</p>")
    axis = svg.TimeAxis.spanning([p.end for v in attempted for p in v.points], board.now)
    charts = "".join(f"<div class='chart'><h3>#{v.item.number} {escape(v.item.slug)}</h3>"
                     f"{svg.attempt_chart(v.item.slug, v.points, v.item.minutes, axis)}</div>" for v in attempted)
    parts.append(f"<div class='charts'>{charts}</div></section>")
    return "".join(parts)


def _misses(board: Dashboard) -> str:
    parts = ["<section id='misses'><h2>Your most frequent misses</h2>"]
    if not board.misses:
        parts.append("<p class='empty'>The miss log is empty: a check that goes wrong adds a line to "
                     ".mlcanon/misslog.md.</p>")
    else:
        parts.append(f"<p class='sub'>The top {len(board.misses)} of {board.miss_lines} miss-log line(s), counted "
                     "across items and attempts: the recurring ones are your study list.</p>")
        parts.append(svg.miss_bars([(r.miss, r.count, ", ".join(r.items)) for r in board.misses]))
    return "".join(parts) + "</section>"


def _plan(board: Dashboard) -> str:
    week = board.week
    parts = ["<section id='plan'><h2>This week's plan</h2>"]
    if not week.picks:
        parts.append("<p class='empty'>Nothing to propose.</p></section>")
        return "".join(parts)
    due = len(week.of_kind("retry", "review"))
    waiting = f"; {week.waiting} more due item(s) come back in the next weeks" if week.waiting else ""
    parts.append(f"<p class='sub'>Pass {week.pass_number} through the canon: {len(week.picks)} items, {due} of them "
                 f"due again{waiting}; {week.minutes} minutes of targets (a first attempt takes about twice its "
                 "target). <code>mlcanon plan</code> prints the same.</p>")
    rows = [(p.item.number, p.item.slug, p.item.level, f"{p.item.minutes} min", p.reason) for p in week.picks]
    parts.append(_table(["#", "item", "level", "target", "why"], rows, "item",
                        [str(p.item.number) for p in week.picks]))
    return "".join(parts) + "</section>"


def _mocks(board: Dashboard) -> str:
    parts = ["<section id='mocks'><h2>Mock sessions</h2>"]
    if not board.mocks:
        parts.append("<p class='empty'>No mock session recorded yet.</p></section>")
        return "".join(parts)
    rows = [(run.session, run.attempt, _when(run.end or run.start), progress.format_minutes(run.elapsed_min),
             run.score or "-", {True: "passed", False: "not passed", None: "-"}[run.passed], run.verdict or "-")
            for run in board.mocks]
    parts.append(_table(["session", "run", "when", "minutes", "score", "result", "verdict"], rows, "session",
                        [run.session for run in board.mocks]))
    return "".join(parts) + "</section>"


def _when(stamp: float | None) -> str:
    return datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M") if stamp is not None else "-"


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], key: str, keys: Sequence[str]) -> str:
    """A table whose rows carry ``data-<key>`` (the item, the session), for readers of the DOM."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(f"<tr data-{key}='{escape(value)}'>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>"
                   for row, value in zip(rows, keys))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
