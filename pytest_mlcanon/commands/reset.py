"""``mlcanon reset ITEM [--practice PATH]`` or ``mlcanon reset --all [--yes]``: wipe an attempt.

Writes the clean stub back over your practice file and stops the item's clock; the attempt history
in .mlcanon/progress.json is kept (that is what `mlcanon plan` schedules from), and the file you
wrote is copied to .mlcanon/attempts/ for the diff against the reference. The seed's habit: reset
as soon as an item passes, because a file you can peek at is a file you will peek at.
``--all`` resets every item with a practice file or a running clock, after asking (or with --yes).
Without ``--practice``/``--impl``, each item is reset in the directory it was drilled in."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_mlcanon import drill, progress


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("reset", help="restore the clean stub of ITEM and stop its clock", description=__doc__)
    parser.add_argument("item", nargs="?", help="a slug or a number (or --all)")
    parser.add_argument("--all", action="store_true", help="reset every item you have a file or a clock for")
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation with --all")
    parser.add_argument("--practice", "--impl", dest="practice", default=None, metavar="PATH",
                        help="practice directory (default: the one the item was drilled in)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    import sys

    from pytest_mlcanon import catalog, drill, progress, stubs
    from pytest_mlcanon.state import StateError, find_root

    root = find_root(Path.cwd())
    if bool(args.item) == bool(args.all):
        return drill.fail("reset", "name one ITEM, or pass --all")
    try:
        current = progress.snapshot(root)
        if args.all:
            sandbox = drill.Sandbox.at(root, args.practice, must_exist=True,
                                       remembered=progress.remembered_practice(current, []))
            own = {i.slug: _own_sandbox(root, args.practice, current, i.slug, sandbox) for i in catalog.all_items()}
            items = [i for i in catalog.all_items() if stubs.has_reference(i) and (
                any(own[i.slug].file(m).exists() for m in i.modules) or progress.clock(current.peek(i.slug)))]
        else:
            items = drill.select(args.item, single=True)
            sandbox = drill.Sandbox.at(root, args.practice, must_exist=True,
                                       remembered=progress.remembered_practice(current, [items[0].slug]))
            sandbox.require_drillable(items[0])
            own = {items[0].slug: sandbox}
    except (drill.DrillError, StateError) as exc:
        return drill.fail("reset", exc)
    if args.all and not items:
        print("nothing to reset: no practice file and no running clock")
        return 0
    if args.all and not args.yes:
        if not sys.stdin.isatty():
            return drill.fail("reset", f"--all would reset {len(items)} item(s); confirm with --yes")
        answer = input(f"Reset {len(items)} item(s) to clean stubs and stop their clocks? [y/N] ")
        if answer.strip().lower() not in {"y", "yes"}:
            print("nothing reset")
            return 1
    now = progress.now()
    try:
        with progress.session(root) as current:
            warnings = current.warnings
            stopped = {item.slug: progress.stop_clock(current.entry(item.slug)) for item in items}
            summaries = {item.slug: progress.summarize(current.peek(item.slug)) for item in items}
        written = {item.slug: own[item.slug].fresh_stub(item, now) for item in items}
    except StateError as exc:
        return drill.fail("reset", exc)
    except OSError as exc:
        return drill.fail("reset", f"cannot write the stub: {exc}")
    drill.warn(warnings)
    for item in items:
        files = ", ".join(own[item.slug].show(w.path) for w in written[item.slug])
        kept = [own[item.slug].show(w.archived) for w in written[item.slug] if w.archived]
        clock = stopped[item.slug]
        line = f"reset {item.label}: {files} is the clean stub again"
        if kept:
            line += f"; your attempt is kept in {', '.join(kept)}"
        line += f"; clock stopped (attempt {clock.attempt})" if clock else "; no clock was running"
        print(line)
        summary = summaries[item.slug]
        if summary.attempts:
            print(f"  history kept: {summary.attempts} attempt(s), {summary.passes} passed; next review "
                  f"{progress.format_due(summary.due, now)}")
    return 0


def _own_sandbox(root: Path, practice: str | None, current: progress.Session, slug: str,
                 default: drill.Sandbox) -> drill.Sandbox:
    """The item's practice directory: ``--practice``, else the one it was drilled in (if it is still there)."""
    from pytest_mlcanon import drill

    drilled = None if practice else current.peek(slug).get("practice")
    if isinstance(drilled, str) and drilled and (root / drilled).expanduser().is_dir():
        return drill.Sandbox.at(root, None, must_exist=True, remembered=drilled)
    return default
