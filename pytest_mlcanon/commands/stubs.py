"""``mlcanon stubs [--out practice] [--item ITEMS]``: write signature-only stubs, made from the
references by AST (signatures, type hints, docstrings and dataclass fields kept; every body raises
NotImplementedError). A file that already holds your work is kept; `mlcanon reset ITEM` replaces it.
No clock starts: `mlcanon drill ITEM` does that."""

from __future__ import annotations

import argparse

from pytest_mlcanon import catalog


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("stubs", help="write signature-only stubs of the canon into practice/",
                            description=__doc__)
    parser.add_argument("--out", default=None, metavar="PATH",
                        help="practice directory (default: your repo's, the one the last drill used, else practice)")
    parser.add_argument("--item", default=None, metavar="ITEMS",
                        help="only these items: slug, number, glob, block:N or a comma list (default: all)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from pathlib import Path

    from pytest_mlcanon import drill, progress, stubs
    from pytest_mlcanon.state import StateError, find_root

    root = find_root(Path.cwd())
    try:
        items = drill.select(args.item) if args.item else list(catalog.all_items())
        remembered = progress.remembered_practice(progress.snapshot(root), [])
        sandbox = drill.Sandbox.at(root, args.out, must_exist=False, remembered=remembered)
    except (drill.DrillError, StateError) as exc:
        return drill.fail("stubs", exc)
    now = progress.now()
    counts = {"written": 0, "refreshed": 0}
    kept: list[str] = []
    skipped: list[catalog.Item] = []
    done: set[str] = set()
    for item in items:
        if not stubs.has_reference(item):
            skipped.append(item)
            continue
        try:
            fresh = sandbox.fresh_stub(item, now, keep_work=True)
        except OSError as exc:
            return drill.fail("stubs", f"cannot write the stubs of {item.label}: {exc}")
        for written in fresh:
            shown = sandbox.show(written.path)
            if shown in done:
                continue
            done.add(shown)
            if written.action == "kept":
                kept.append(shown)
            else:
                counts[written.action] += 1
    where = sandbox.show(sandbox.practice)
    print(f"stubs in {where}/: {counts['written']} written, {counts['refreshed']} refreshed")
    if kept:
        print(f"kept {len(kept)} file(s) holding your work: {', '.join(kept)} (`mlcanon reset ITEM` replaces one)")
    if skipped:
        listed = ", ".join(f"#{i.number}" for i in skipped)
        print(f"no reference in this canon yet, so no stub: {listed}")
    print("next: `mlcanon drill ITEM` starts the clock on one of them")
    return 0
