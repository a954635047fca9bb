"""``mlcanon hint ITEM [--level 1|2|3]``: three escalating hints for every item.

Level 1 is the one equation and the shapes; level 2 the numerics or indexing pitfall the tests
probe; level 3 the skeleton: signatures and every intermediate's shape comment, with the bodies
left out. Asking during a running attempt is noted on that attempt in .mlcanon/progress.json."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("hint", help="a hint for ITEM: 1 the equation, 2 the pitfall, 3 the skeleton",
                            description=__doc__)
    parser.add_argument("item", help="a slug or a number")
    parser.add_argument("--level", type=int, choices=(1, 2, 3), default=1, help="1, 2 or 3 (default 1)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from pathlib import Path

    from pytest_mlcanon import drill, progress
    from pytest_mlcanon.catalog import hints
    from pytest_mlcanon.state import StateError, find_root, state_dir

    try:
        (item,) = drill.select(args.item, single=True)
        text = hints.hint(item, args.level)
    except (drill.DrillError, LookupError) as exc:
        return drill.fail("hint", exc)
    print(f"{item.label}, hint {args.level} of 3: {hints.LEVEL_TITLES[args.level]}")
    print()
    print(text.rstrip())
    if args.level < 3:
        print(f"\nnext: mlcanon hint {item.slug} --level {args.level + 1}")
    root = find_root(Path.cwd())
    if state_dir(root).is_dir():
        try:
            with progress.session(root) as current:
                progress.note_hint(current.peek(item.slug), args.level)
        except StateError:
            pass  # a hint must never fail because the progress file is busy
    return 0
