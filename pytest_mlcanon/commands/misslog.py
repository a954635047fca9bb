"""``mlcanon misslog [ITEMS] [--all]``: your recurring misses, ranked.

Reads .mlcanon/misslog.md (one line per item per attempt that went wrong, written by
`mlcanon check`, plus any lines you added) and counts each miss across items and attempts, most
frequent first. The recurring ones are the seed's "actual study list". ``--all`` also shows the
misses seen only once."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("misslog", help="rank the recurring entries of your miss log", description=__doc__)
    parser.add_argument("items", nargs="?", help="only misses of these items (a selector)")
    parser.add_argument("--all", action="store_true", help="also list misses seen only once")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from pathlib import Path

    from tabulate import tabulate

    from pytest_mlcanon import drill, layout, misslog
    from pytest_mlcanon.state import find_root

    try:
        chosen = {i.slug for i in drill.select(args.items)} if args.items else None
    except drill.DrillError as exc:
        return drill.fail("misslog", exc)
    root = find_root(Path.cwd())
    path = misslog.path_of(root)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        print(f"no miss log yet ({layout.shown(path)}): `mlcanon check` adds a line when an "
              "attempt goes wrong")
        return 0
    except (OSError, UnicodeDecodeError) as exc:
        return drill.fail("misslog", f"cannot read {path}: {exc}")
    entries = misslog.parse(text)
    ranked = misslog.rank(entries, chosen)
    recurring = [r for r in ranked if r.count > 1]
    shown = ranked if args.all or not recurring else recurring
    print(f"miss log: {len(entries)} line(s), {len(ranked)} distinct miss(es), {len(recurring)} recurring")
    if not shown:
        return 0
    rows = [(r.count, r.miss, ", ".join(r.items[:4]) + (" ..." if len(r.items) > 4 else ""), r.last)
            for r in shown]
    print(tabulate(rows, headers=["times", "miss", "items", "last"], colalign=("right", "left", "left", "left")))
    if not recurring:
        print("\nnothing recurs yet: every miss above was seen once")
    elif not args.all and len(ranked) > len(recurring):
        print(f"\n{len(ranked) - len(recurring)} miss(es) seen only once are hidden (--all shows them)")
    return 0
