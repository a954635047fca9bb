"""``mlcanon drills [DRILL] [--tier 1|2|3] [--hint 1|2|3]``: the twenty-two timed drills.

Each drill is a canon item against a clock of its tier (15, 25 or 35 minutes, the set-up included),
with the task as an interviewer says it, three hints that escalate (a question, the pitfall, the
structure), what a yes looks like on each rubric axis, the narration prompts for the two-minute
set-up and the five-minute walkthrough, and the interviewer's follow-up question.

  mlcanon drills              the drills by tier, and the three mock sessions
  mlcanon drills dpo-loss     one drill's card (a number, a name, or the item's slug)
  mlcanon drills 3 --hint 2   its second hint (noted on the item's running attempt)

Run one with `mlcanon drill ITEM` and its tier's minutes on a timer, or three in a row with
`mlcanon mock 1|2|3`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_mlcanon.chapters.drills import Drill


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("drills", help="twenty-two timed drills at three tiers, with hints, rubric and narration",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("drill", nargs="?", help="a drill number, name, or the slug of its item")
    parser.add_argument("--tier", type=int, choices=(1, 2, 3), default=None, help="list only this tier")
    parser.add_argument("--hint", type=int, choices=(1, 2, 3), default=None, metavar="LEVEL",
                        help="show the drill's hint at LEVEL (1, 2 or 3)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from pathlib import Path

    from pytest_mlcanon import drill as sandbox
    from pytest_mlcanon import progress
    from pytest_mlcanon.chapters import drills
    from pytest_mlcanon.state import StateError, find_root, state_dir

    if args.drill is None:
        if args.hint is not None:
            return sandbox.fail("drills", "--hint needs a DRILL (a number, a name or an item slug)")
        _list(args.tier)
        return 0
    if args.tier is not None:
        return sandbox.fail("drills", "--tier filters the list; leave it out when naming a drill")
    try:
        chosen = drills.get(args.drill)
    except drills.DrillError as exc:
        return sandbox.fail("drills", exc)
    if args.hint is None:
        _card(chosen)
        return 0
    print(f"{chosen.label}, hint {args.hint} of 3:")
    print(f"  {chosen.hints[args.hint - 1]}")
    if args.hint < 3:
        print(f"\nnext: mlcanon drills {chosen.name} --hint {args.hint + 1}")
    root = find_root(Path.cwd())
    if state_dir(root).is_dir():
        try:
            with progress.session(root) as current:
                progress.note_hint(current.peek(chosen.item.slug), args.hint)
        except StateError:
            pass  # a hint must never fail because the progress file is busy
    return 0


def _list(tier: int | None) -> None:
    from tabulate import tabulate

    from pytest_mlcanon.chapters import drills

    rows = [(d.number, d.name, d.item.label, f"{d.tier.name}, {d.minutes} min")
            for d in drills.drills() if tier is None or d.tier.number == tier]
    print(tabulate(rows, headers=["#", "drill", "built on", "tier"]))
    print("\nMock sessions, 60 minutes each (`mlcanon mock N`):")
    for session in drills.mocks():
        listed = ", ".join(f"{d.name} ({d.minutes})" for d in session.drills)
        print(f"  {session.number}. {session.title}: {listed}")
    print("\nA drill's card: mlcanon drills NAME")


def _card(chosen: Drill) -> None:
    from pytest_mlcanon.chapters import explain
    from pytest_mlcanon.chapters.drills import AXIS_TITLES

    print(f"{chosen.label}: {chosen.item.label}, {chosen.item.title}; {chosen.tier.name} tier, {chosen.minutes} minutes")
    print(f"\nTask: {chosen.task}")
    print(f"\nSet-up, {explain.SETUP_MINUTES} minutes, aloud:")
    for prompt in (*chosen.setup, *explain.script().setup):
        print(f"  - {prompt}")
    print(f"\nWalkthrough, {explain.WALKTHROUGH_MINUTES} minutes, aloud:")
    for prompt in (*chosen.walkthrough, *explain.script().walkthrough):
        print(f"  - {prompt}")
    print(f'\nThe interviewer\'s follow-up: "{explain.follow_up(chosen.item)}"')
    print("\nRubric, what a yes looks like:")
    for axis, criterion in chosen.rubric:
        print(f"  {AXIS_TITLES[axis]:<12} {criterion}")
    print("\nIf you stall:")
    for prompt in explain.script().stall:
        print(f"  - {prompt}")
    print(f"\nRun it: mlcanon drill {chosen.item.slug}, a {chosen.minutes}-minute timer, then mlcanon check "
          f"{chosen.item.slug}. Hints: mlcanon drills {chosen.name} --hint 1 (2, 3).")
