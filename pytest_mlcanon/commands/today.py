"""``mlcanon today``: today's 90 minutes, as the seed lays the day out.

  0-10   re-derive yesterday's item on paper: its one equation and its shapes, no code
 10-20   read today's item (from `mlcanon plan`), then close the book
 20-65   the 45-minute drill: `mlcanon drill ITEM`, write it, `mlcanon check ITEM`, clock running
         (an item already being drilled: write it, then `mlcanon check ITEM`)
 65-80   `mlcanon diff ITEM`: your attempt beside the reference; write the differences down
 80-90   explain it aloud: two minutes of set-up, five of walkthrough, then the follow-up question

Yesterday's item is the last one you checked before today; today's is the one you worked on last
today and have not passed (a clock started, a check made), else the first of this week's plan. An
item you passed today is done for the day, unless the plan says it is due today: the day moves on to
the next item and names the one you passed. Reads .mlcanon/progress.json of your repo (from any
subfolder) and changes nothing."""

from __future__ import annotations

import argparse
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_mlcanon import catalog, day


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("today", help="today's 90 minutes: re-derive, read, drill, diff, explain",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    import time
    from pathlib import Path

    from pytest_mlcanon import day, drill, progress
    from pytest_mlcanon.settings import SettingsError, read_pyproject, resolve
    from pytest_mlcanon.state import StateError, find_root

    root = find_root(Path.cwd())
    try:
        current = progress.snapshot(root)
        factor = resolve(cli={}, ini={}, pyproject=read_pyproject(root)).first_attempt_factor
    except (StateError, SettingsError) as exc:
        return drill.fail("today", exc)
    drill.warn(current.warnings)
    now = progress.now()
    plan = day.plan_day(current, now, drill.drillable)
    print(f"Today, {time.strftime('%A %d %B', time.localtime(now))}: 90 minutes.")
    _yesterday(plan)
    if plan.today is None:
        print("\nNothing left to drill in this canon: `mlcanon plan` says what comes back when.")
        return 0
    _today(plan.today, plan, factor, now)
    return 0


def _block(number: int, title: str) -> None:
    from pytest_mlcanon.day import BLOCKS

    start, end = BLOCKS[number]
    print(f"\n{start:>2}-{end:<3} {title}")


def _indent(text: str, width: int = 96) -> str:
    lines = []
    for paragraph in text.strip().splitlines():
        lines += textwrap.wrap(paragraph, width=width, initial_indent="        ", subsequent_indent="          ")
    return "\n".join(lines)


def _when(epoch: float) -> str:
    import time

    return time.strftime("%a %d %b %H:%M", time.localtime(epoch))


def _yesterday(plan: day.Day) -> None:
    from pytest_mlcanon.catalog import hints

    last = plan.yesterday
    if last is None:
        _block(0, "Re-derive yesterday's item: nothing checked before today; give these minutes to the reading.")
        return
    outcome = "passed" if last.passed else "not passed"
    score = f", {last.score}/5" if last.score is not None else ""
    _block(0, f"Re-derive yesterday's item on paper, no code: {last.item.label} (checked {_when(last.end)}, "
              f"{outcome}{score})")
    print("        The one equation and the shapes, to check yourself against once written:")
    print(_indent(hints.hint(last.item, 1)))


def _today(item: catalog.Item, plan: day.Day, factor: float, now: float) -> None:
    from pytest_mlcanon.chapters import explain
    from pytest_mlcanon.day import DRILL_MINUTES

    part = item.taught_in.replace(", ", ": ", 1)  # "VII, DPO and its relatives": the book's part, then its chapter
    _block(1, f"Read today's item, then close the book: {item.label}, {item.title} (taught in the book's part {part})")
    print(f"        why today: {plan.why}")
    for done in plan.passed_today:
        if done.item.number != item.number:
            print(f"        passed today: {done.item.label} at {_when(done.end)[-5:]}, done for the day "
                  f"(`mlcanon diff {done.item.slug}` sets it beside the reference)")
    passed_today = plan.checked_today is not None and plan.checked_today.passed
    first = plan.summary.passes - (1 if passed_today else 0) == 0
    allowed = item.minutes * (factor if first else 1.0)
    target = (f"{allowed:.0f} min on a first attempt (twice the {item.minutes}-minute target)" if first
              else f"{item.minutes} min from memory")
    _block(2, f"The {DRILL_MINUTES}-minute drill, timer running; stop when it rings. Target: {target}.")
    if plan.drilling is not None:  # a drill now would only say it is under way
        print(f"        already drilling (attempt {plan.drilling.attempt}): write it, then mlcanon check {item.slug}")
    else:
        print(f"        mlcanon drill {item.slug}    write it    mlcanon check {item.slug}")
    print(f"        clock: {_clock(plan, allowed, now)}")
    _block(3, "Diff your attempt against the reference; write the differences down.")
    print(f"        mlcanon diff {item.slug}")
    script = explain.script()
    _block(4, "Explain it aloud, as though someone asked.")
    print(f"        Set-up, {explain.SETUP_MINUTES} minutes:")
    for prompt in script.setup:
        print(_indent(f"- {prompt}"))
    print(f"        Walkthrough, {explain.WALKTHROUGH_MINUTES} minutes:")
    for prompt in script.walkthrough:
        print(_indent(f"- {prompt}"))
    print("        Then the follow-up question:")
    print(_indent(f'"{explain.follow_up(item)}"'))


def _clock(plan: day.Day, allowed: float, now: float) -> str:
    import time

    running = plan.drilling
    checked = plan.checked_today
    if running is not None:
        used = (now - running.start) / 60.0
        left = allowed - used
        state = f"{left:.0f} min left" if left >= 0 else f"{-left:.0f} min over"
        return (f"attempt {running.attempt} running since {time.strftime('%H:%M', time.localtime(running.start))} "
                f"({used:.0f} min in, {state})")
    if checked is not None:
        outcome = "passed" if checked.passed else "not passed yet"
        return f"checked at {time.strftime('%H:%M', time.localtime(checked.end))}, {outcome}"
    return "not started: `mlcanon drill` starts it"
