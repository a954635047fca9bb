"""``mlcanon dashboard [--out FILE]``: your progress as one self-contained HTML page (no network,
no script): the sixty items as a grid coloured by state and due date, each attempted item's times
against its target over time, your most frequent misses, this week's plan and your mock sessions.
Reads the .mlcanon/ of your learner repo (the nearest at or above the current folder, else the git
root's: the one every command uses; nothing there is changed) and writes its dashboard.html unless
--out names another file (a path from where you typed it); open it in any browser."""

from __future__ import annotations

import argparse

DEFAULT_OUT = "dashboard.html"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("dashboard", help="write your progress as one HTML page", description=__doc__)
    parser.add_argument("--out", metavar="FILE", default=None,
                        help=f"where to write the page (default: .mlcanon/{DEFAULT_OUT} of the repo root)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from pathlib import Path

    from pytest_mlcanon import drill, progress
    from pytest_mlcanon.dashboard import model, page
    from pytest_mlcanon.reports.model import atomic_write
    from pytest_mlcanon.state import StateError, find_root, state_dir

    root = find_root(Path.cwd())  # the learner repo's one .mlcanon/, from any folder in it
    out = Path(args.out) if args.out else state_dir(root) / DEFAULT_OUT
    if out.is_dir():
        return drill.fail("dashboard", f"--out {args.out} is a directory; name the HTML file to write")
    try:
        board = model.gather(root, progress.now())
    except StateError as exc:
        return drill.fail("dashboard", exc)
    drill.warn(list(board.warnings))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, page.render(board))
    except OSError as exc:
        return drill.fail("dashboard", f"cannot write {out}: {exc.strerror or exc}")
    print(f"wrote {drill.shown(out)}: {board.attempted} of {len(board.items)} items attempted, "
          f"{board.passed} passed, {board.count(model.State.DUE, model.State.FAILED)} due now")
    return 0
