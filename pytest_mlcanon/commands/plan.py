"""``mlcanon plan [--size N]`` or ``mlcanon plan --week-before``: what to drill.

The week, during the first pass: five new items (--size), alternating between the block you know
best and the first block you have not finished, each once what it builds on has passed; beside them
at most two due items (a failed or over-time attempt comes back the next day, a pass after 2, 4, 7,
14, 30 and 60 days). Every item comes up within twelve weeks. Once through, the rotation restarts at
#1 and, as a second pass takes about a third of the time, proposes three times as many a week. The
week before an interview: the five items most asked in real loops, what they stand on and their
usual follow-up, eleven items, with targets."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("plan", help="this week's five items, or the week-before list", description=__doc__)
    parser.add_argument("--week-before", action="store_true", help="the short list for the week before an interview")
    parser.add_argument("--size", type=int, default=5,
                        help="new items a week in the first pass (default 5; later passes take three times as many)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from pathlib import Path

    from tabulate import tabulate

    from pytest_mlcanon import catalog, drill, plan, progress
    from pytest_mlcanon.state import StateError, find_root

    if args.size < 1:
        return drill.fail("plan", f"--size must be at least 1, got {args.size}")
    try:
        current = progress.snapshot(find_root(Path.cwd()))
    except StateError as exc:
        return drill.fail("plan", exc)
    drill.warn(current.warnings)
    now = progress.now()
    state = {i.number: progress.summarize(current.peek(i.slug)) for i in catalog.all_items()}
    if args.week_before:
        chosen = plan.week_before()
        rows = [(i.number, i.slug, i.level, i.minutes, progress.format_minutes(state[i.number].best_min), role)
                for i, role in chosen]
        total = sum(i.minutes for i, _ in chosen)
        print(f"The week before an interview: {len(chosen)} items")
        print(tabulate(rows, headers=["#", "item", "level", "target", "best", "why"]))
        hours = (total + plan.WEEK_BEFORE_OVERHEAD_MIN * len(chosen)) / 60
        print(f"\nTargets add up to {total} min ({total // 60} h {total % 60:02d}); with the paper re-derivation "
              f"and a two-minute explanation of each, about {hours:.0f} hours.")
        print("Drill each from a blank file (`mlcanon drill ITEM`), reset it when it passes, and say it aloud.")
        return 0
    week = plan.weekly(state, now, drill.drillable, size=args.size)
    attempted = sum(1 for s in state.values() if s.started)
    due = len(week.of_kind("retry", "review"))
    print(f"This week, pass {week.pass_number} through the canon: {len(week.picks)} items, {due} of them due again "
          f"({attempted} of 60 items attempted so far):")
    picks = [(p.item.number, p.item.slug, p.item.level, p.item.minutes, p.reason) for p in week.picks]
    print(tabulate(picks, headers=["#", "item", "level", "target", "why"]))
    print(f"\nTargets add up to {week.minutes} min; a first attempt takes about twice its target.")
    if week.waiting:
        print(f"{week.waiting} more item(s) are due; they come back in the next weeks, retries first.")
    if week.known_block is not None and week.new_block is not None:
        print(f"Interleaved: {plan.block_title(week.known_block)} with {plan.block_title(week.new_block)}, "
              "so each day makes you recall a block rather than repeat yesterday's (interleaved practice).")
    if week.unavailable:
        print(f"Not proposed: {len(week.unavailable)} item(s) this canon cannot check yet "
              f"({', '.join('#' + str(i.number) for i in week.unavailable)}).")
    print("Start one with `mlcanon drill ITEM`.")
    return 0
