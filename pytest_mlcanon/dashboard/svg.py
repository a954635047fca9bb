"""The dashboard's two charts as inline SVG: an item's attempt times against its target over time,
and the most frequent misses as bars. Plain SVG keeps the page self-contained and each mark a DOM
element (``data-*`` attributes carry the values), so a test can read the page it renders."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape

from pytest_mlcanon.dashboard.model import AttemptPoint

PASS_COLOUR = "#2e8540"
FAIL_COLOUR = "#c9302c"
OVER_TIME_COLOUR = "#e07b00"
TARGET_COLOUR = "#555"
ALLOWANCE_COLOUR = "#999"
BAR_COLOUR = "#4c72b0"


@dataclass(frozen=True)
class TimeAxis:
    """The time span every item's chart shares, so the small charts line up."""

    start: float
    end: float

    @classmethod
    def spanning(cls, stamps: Sequence[float], now: float) -> TimeAxis:
        if not stamps:
            return cls(now - 7 * 86_400.0, now)
        low, high = min(stamps), max(max(stamps), now)
        pad = max((high - low) * 0.05, 43_200.0)
        return cls(low - pad, high + pad)

    def x(self, stamp: float, left: float, width: float) -> float:
        return left + (stamp - self.start) / (self.end - self.start) * width


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def attempt_chart(slug: str, points: Sequence[AttemptPoint], target_min: float, axis: TimeAxis,
                  width: int = 300, height: int = 130) -> str:
    """Minutes per attempt (dots: green passed, orange passed over time, red failed) against the
    target (dashed) and the first-attempt allowance (dotted), on the shared time axis."""
    left, right, top, bottom = 34.0, 8.0, 8.0, 22.0
    plot_w, plot_h = width - left - right, height - top - bottom
    allowances = [p.allowed_min for p in points if p.allowed_min is not None]
    allowance = max(allowances) if allowances else None
    y_max = max([target_min * 1.2, *(p.elapsed_min * 1.1 for p in points), *((allowance * 1.05,) if allowance else ())])

    def y(minutes: float) -> float:
        return top + plot_h - minutes / y_max * plot_h

    parts = [f"<svg class='times' data-item='{escape(slug)}' data-target='{_fmt(target_min)}' width='{width}' "
             f"height='{height}' viewBox='0 0 {width} {height}' role='img' "
             f"aria-label='{escape(slug)}: attempt times against the {target_min:g}-minute target'>",
             f"<rect x='{left}' y='{top}' width='{_fmt(plot_w)}' height='{_fmt(plot_h)}' fill='#fafafa' stroke='#ddd'/>"]
    for tick in _nice_ticks(y_max):
        parts.append(f"<text x='{left - 4}' y='{_fmt(y(tick) + 3)}' font-size='9' text-anchor='end' "
                     f"fill='#666'>{tick:g}</text>")
    parts.append(f"<line class='target' x1='{left}' x2='{left + plot_w}' y1='{_fmt(y(target_min))}' "
                 f"y2='{_fmt(y(target_min))}' stroke='{TARGET_COLOUR}' stroke-dasharray='5 3'/>")
    parts.append(f"<text x='{left + plot_w - 2}' y='{_fmt(y(target_min) - 3)}' font-size='9' text-anchor='end' "
                 f"fill='{TARGET_COLOUR}'>target {target_min:g} min</text>")
    if allowance is not None and allowance > target_min:
        parts.append(f"<line class='allowance' x1='{left}' x2='{left + plot_w}' y1='{_fmt(y(allowance))}' "
                     f"y2='{_fmt(y(allowance))}' stroke='{ALLOWANCE_COLOUR}' stroke-dasharray='1 3'/>")
    ordered = sorted(points, key=lambda p: p.end)
    if len(ordered) > 1:
        path = " ".join(f"{_fmt(axis.x(p.end, left, plot_w))},{_fmt(y(p.elapsed_min))}" for p in ordered)
        parts.append(f"<polyline points='{path}' fill='none' stroke='#bbb'/>")
    for point in ordered:
        colour = (OVER_TIME_COLOUR if point.over_time else PASS_COLOUR) if point.passed else FAIL_COLOUR
        outcome = ("passed over time" if point.over_time else "passed") if point.passed else "failed"
        when = datetime.fromtimestamp(point.end).strftime("%Y-%m-%d %H:%M")
        parts.append(f"<circle class='attempt' data-attempt='{point.attempt}' data-minutes='{point.elapsed_min:g}' "
                     f"data-outcome='{outcome}' cx='{_fmt(axis.x(point.end, left, plot_w))}' "
                     f"cy='{_fmt(y(point.elapsed_min))}' r='4' fill='{colour}'><title>attempt {point.attempt}: "
                     f"{point.elapsed_min:.1f} min, {outcome}, {when}</title></circle>")
    for stamp, anchor in ((axis.start, "start"), (axis.end, "end")):
        parts.append(f"<text x='{_fmt(axis.x(stamp, left, plot_w))}' y='{height - 6}' font-size='9' "
                     f"text-anchor='{anchor}' fill='#666'>{datetime.fromtimestamp(stamp).strftime('%b %d')}</text>")
    parts.append("</svg>")
    return "".join(parts)


def miss_bars(rows: Sequence[tuple[str, int, str]], width: int = 820, bar_h: int = 18) -> str:
    """Horizontal bars: (miss, how often, items) per row, most frequent first."""
    if not rows:
        return ""
    label_w, count_w = 420.0, 30.0
    plot_w = width - label_w - count_w - 10
    top = max(count for _, count, _ in rows)
    height = len(rows) * (bar_h + 6) + 4
    parts = [f"<svg class='misses' width='{width}' height='{height}' viewBox='0 0 {width} {height}' role='img' "
             "aria-label='the most frequent misses'>"]
    for index, (miss, count, items) in enumerate(rows):
        y = 2 + index * (bar_h + 6)
        bar = max(plot_w * count / top, 2.0)
        parts.append(f"<g class='miss' data-count='{count}'><title>{escape(miss)}: {count} time(s) on "
                     f"{escape(items)}</title>"
                     f"<text x='{label_w - 6}' y='{y + bar_h - 5}' font-size='12' text-anchor='end'>"
                     f"{escape(_clip(miss, 62))}</text>"
                     f"<rect x='{label_w}' y='{y}' width='{_fmt(bar)}' height='{bar_h}' fill='{BAR_COLOUR}'/>"
                     f"<text x='{_fmt(label_w + bar + 5)}' y='{y + bar_h - 5}' font-size='12'>{count}</text></g>")
    parts.append("</svg>")
    return "".join(parts)


def _nice_ticks(top: float) -> list[float]:
    """Two or three round values in (0, top] for the minutes axis."""
    for step in (1, 2, 5, 10, 15, 20, 30, 60, 120, 240):
        if top / step <= 3:
            return [step * k for k in range(1, int(top // step) + 1)] or [step]
    return [top]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
