"""``mlcanon list [ITEMS]``: the catalog as a table."""

from __future__ import annotations

import argparse
import sys

from pytest_mlcanon import catalog


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("list", help="show the catalog", description=__doc__)
    parser.add_argument("items", nargs="?", help="a selector: slug, number, glob, block:N or a comma list")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from tabulate import tabulate

    try:
        items = catalog.select(args.items) if args.items else catalog.all_items()
    except catalog.UnknownItemError as exc:
        print(f"mlcanon: {exc}", file=sys.stderr)
        return 2
    rows = [(i.number, i.slug, i.title, i.level, i.block, i.minutes, i.framework) for i in items]
    print(tabulate(rows, headers=["#", "slug", "title", "level", "block", "min", "framework"]))
    return 0
