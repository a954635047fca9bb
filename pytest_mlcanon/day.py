"""The seed's 90-minute day, from the drill history (``mlcanon today``).

=========  ==========================================================================
0 to 10    re-derive yesterday's item on paper: its one equation and shapes, no code
10 to 20   read today's item, then close the book
20 to 65   the 45-minute drill: ``mlcanon drill``, write, ``mlcanon check``, timer running
65 to 80   ``mlcanon diff``: your attempt beside the reference; write the differences down
80 to 90   explain it aloud: two minutes of set-up, five of walkthrough, then the follow-up
=========  ==========================================================================

*Yesterday's item* is the last item checked before today began. *Today's item* is the one you worked
on last today and have not passed yet (the latest of a clock started today on an attempt not yet
passed, and a check made today that did not pass), else the first item of this week's plan
(:func:`pytest_mlcanon.plan.weekly`) other than yesterday's and other than one passed today: an item
you just passed is done for the day (its next review is days away), unless the plan says it is due
today. The items passed today are kept (``passed_today``) for the diff and the explanation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from pytest_mlcanon import catalog, plan, progress

BLOCKS = ((0, 10), (10, 20), (20, 65), (65, 80), (80, 90))
DRILL_MINUTES = 45


@dataclass(frozen=True)
class Last:
    """An item's latest attempt: when it ended and how it went."""

    item: catalog.Item
    end: float
    passed: bool
    score: int | None


@dataclass(frozen=True)
class Day:
    yesterday: Last | None
    today: catalog.Item | None
    why: str  # why today's item is today's
    summary: progress.ItemProgress  # today's item's progress
    checked_today: Last | None
    passed_today: tuple[Last, ...] = ()  # items whose latest check, made today, passed
    drilling: progress.Clock | None = None  # today's item's attempt under way (``progress.drilling``)


def start_of_day(now: float) -> float:
    """Local midnight before ``now``."""
    moment = datetime.fromtimestamp(now)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def last_attempts(current: progress.Session) -> list[Last]:
    """Every item's latest attempt, oldest first."""
    found = []
    for item in catalog.all_items():
        summary = progress.summarize(current.peek(item.slug))
        if summary.last_end is not None:
            found.append(Last(item, summary.last_end, bool(summary.last_passed), summary.last_score))
    return sorted(found, key=lambda last: last.end)


def plan_day(current: progress.Session, now: float, available: Callable[[catalog.Item], bool]) -> Day:
    """Yesterday's item and today's, from the attempt history in ``current``."""
    midnight = start_of_day(now)
    lasts = last_attempts(current)
    before = [last for last in lasts if last.end < midnight]
    today_checks = [last for last in lasts if last.end >= midnight]
    yesterday = before[-1] if before else None
    summaries = {i.number: progress.summarize(current.peek(i.slug)) for i in catalog.all_items()}
    running = [(c.start, i) for i in catalog.all_items()
               if (c := progress.drilling(current.peek(i.slug))) is not None and c.start >= midnight]
    checked = today_checks[-1] if today_checks else None
    passed = tuple(c for c in today_checks if c.passed)
    open_check = [(checked.end, checked.item)] if checked is not None and not checked.passed else []
    item: catalog.Item | None
    latest = max([*running, *open_check], key=lambda pair: pair[0], default=None)
    if latest is not None:
        item = latest[1]
        why = "you checked it today" if open_check and latest == open_check[0] else "its clock started today"
    else:
        week = plan.weekly(summaries, now, available)
        end_of_day = midnight + progress.DAY_S
        done = {c.item.number for c in passed if (summaries[c.item.number].due or end_of_day) >= end_of_day}
        skip = {yesterday.item.number} if yesterday else set()
        pick = next((p for p in week.picks if p.item.number not in skip | done), None)
        item = pick.item if pick else None
        why = pick.reason if pick else ""
    mine = checked if checked is not None and item is not None and checked.item.number == item.number else None
    summary = summaries[item.number] if item is not None else progress.ItemProgress()
    under_way = progress.drilling(current.peek(item.slug)) if item is not None else None
    return Day(yesterday, item, why, summary, mine, passed, under_way)
