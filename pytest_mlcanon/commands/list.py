"""``mlcanon list [ITEMS]``: the canon with your progress: number, item, level, from-memory target,
attempts, best time, last score and when the item is due again, then a summary per block.
Progress comes from .mlcanon/progress.json of your repo, found from any subfolder (nothing is created)."""

from __future__ import annotations

import argparse

from pytest_mlcanon import catalog


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("list", help="show the canon with attempts, best times, scores and due dates",
                            description=__doc__)
    parser.add_argument("items", nargs="?", help="a selector: slug, number, glob, block:N or a comma list")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from pathlib import Path

    from tabulate import tabulate

    from pytest_mlcanon import drill, plan, progress
    from pytest_mlcanon.state import StateError, find_root

    try:
        items = catalog.select(args.items) if args.items else catalog.all_items()
        current = progress.snapshot(find_root(Path.cwd()))
    except catalog.UnknownItemError as exc:
        return drill.fail("list", exc)
    except StateError as exc:
        return drill.fail("list", exc)
    drill.warn(current.warnings)
    now = progress.now()
    summaries = {item.number: progress.summarize(current.peek(item.slug)) for item in items}
    rows = []
    for item in items:
        s = summaries[item.number]
        score = f"{s.last_score}/5" if s.last_score is not None else ("-" if s.last_passed is None else "fail")
        due = progress.format_due(s.due, now) if s.started else ("running" if s.running else "new")
        rows.append((item.number, item.slug, item.level, item.minutes, s.attempts or "-",
                     progress.format_minutes(s.best_min), score, due))
    print(tabulate(rows, headers=["#", "item", "level", "target", "attempts", "best", "last", "due"],
                   colalign=("right", "left", "left", "right", "right", "right", "left", "left")))
    print()
    block_rows = []
    for block in sorted({item.block for item in items}):
        members = [i for i in items if i.block == block]
        done = [summaries[i.number] for i in members]
        attempted = sum(1 for s in done if s.started)
        passed = sum(1 for s in done if s.passes)
        due_now = sum(1 for s in done if s.due is not None and s.due <= now)
        scores = [s.last_score for s in done if s.last_score is not None]
        mean = f"{sum(scores) / len(scores):.1f}/5" if scores else "-"
        block_rows.append((plan.block_title(block), f"{attempted}/{len(members)}", passed, due_now, mean))
    print(tabulate(block_rows, headers=["block", "attempted", "passed", "due now", "mean last score"],
                   colalign=("left", "right", "right", "right", "right")))
    return 0
