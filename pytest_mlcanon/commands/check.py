"""``mlcanon check ITEMS [--impl PATH] [pytest args...]``: run the items' reference tests and the
rubric against your files, i.e. ``pytest --canon-item=ITEMS``."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("check", help="run an item's tests and the rubric (pytest --canon-item)",
                            description=__doc__)
    parser.add_argument("items")
    parser.add_argument("--impl", default=None, help="learner directory (default: discovered)")
    parser.set_defaults(func=run, passthrough=True)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    import pytest

    argv = [f"--canon-item={args.items}", *([f"--impl={args.impl}"] if args.impl else []), *extra]
    return int(pytest.main(argv))
