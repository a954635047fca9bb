"""``mlcanon check ITEM [--practice PATH] [--strict] [pytest args...]``: run the item's reference
tests and the rubric against your practice file, timed: ``pytest --canon-item=ITEM
--impl=practice --timed``, where ``practice`` is the directory the item was drilled in (``mlcanon
drill --practice PATH`` remembers it) unless ``--practice``/``--impl`` names another. Shows the
rubric table and the time against the target, records the attempt in .mlcanon/progress.json and,
when something went wrong, names the misses in .mlcanon/misslog.md. A check after the attempt passed
is practice: it runs and scores, untimed, records nothing and says so (``mlcanon drill ITEM`` starts
the next attempt). ``--strict`` is
``--timed=strict``: running over time then fails API fluency. Extra arguments go to pytest (``-x``,
``-k``, ``-q``). The item must have been drilled first. pytest's cache (``.pytest_cache``, what
``--lf`` reads) is the one at the repo's root, whichever folder the check runs from."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("check", help="run an item's tests and the rubric against your practice file, timed",
                            description=__doc__)
    parser.add_argument("items", metavar="ITEM", help="a slug, a number, or a selector naming drilled items")
    parser.add_argument("--practice", "--impl", dest="practice", default=None, metavar="PATH",
                        help="practice directory (default: the one the item was drilled in)")
    parser.add_argument("--strict", action="store_true", help="count running over time against API fluency")
    parser.set_defaults(func=run, passthrough=True)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from pathlib import Path

    from pytest_mlcanon import drill, warm
    from pytest_mlcanon.state import StateError, find_root

    try:
        items, sandbox, warnings = drill.checkable(find_root(Path.cwd()), args.items, args.practice)
    except (drill.DrillError, StateError) as exc:
        return drill.fail("check", exc)
    drill.warn(warnings)
    import pytest

    return int(pytest.main([*warm.check_args(items, sandbox.practice, args.strict, sandbox.root), *extra]))
