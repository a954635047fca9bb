"""``mlcanon diff ITEM``: your last attempt beside the reference, side by side.

The seed's 90-minute day spends minutes 65 to 80 here: "read the reference module and diff it against
what you wrote; write down the differences". Your attempt is the practice file while it holds work,
else the newest copy in .mlcanon/attempts/ (where `mlcanon drill` and `mlcanon reset` keep every
file they replace). ``--archived`` skips the practice file. While the item is being drilled and its
practice file is still the untouched stub, there is nothing of this attempt to diff: it says so. Rows are marked ``|`` changed, ``<`` only
in yours, ``>`` only in the reference; runs of equal lines are folded (``--context``).
``--unified`` prints a unified diff instead, for other tools."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("diff", help="your last attempt at ITEM beside the reference, side by side",
                            description=__doc__)
    parser.add_argument("item", help="a slug (posttrain/dpo) or a number (55)")
    parser.add_argument("--archived", action="store_true", help="use the newest copy in .mlcanon/attempts/")
    parser.add_argument("--unified", action="store_true", help="a unified diff instead of two columns")
    parser.add_argument("--context", type=int, default=3, metavar="N", help="equal lines kept around a change (3)")
    parser.add_argument("--width", type=int, default=None, metavar="N", help="total width (default: the terminal's)")
    parser.add_argument("--practice", "--impl", dest="practice", default=None, metavar="PATH",
                        help="practice directory (default: the one the item was drilled in)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    import shutil
    import time
    from pathlib import Path

    from pytest_mlcanon import diffview, drill, progress, stubs
    from pytest_mlcanon.state import StateError, find_root

    if args.context < 0:
        return drill.fail("diff", f"--context must be 0 or more, got {args.context}")
    if args.width is not None and args.width < 60:
        return drill.fail("diff", f"--width must be at least 60, got {args.width}")
    root = find_root(Path.cwd())
    try:
        (item,) = drill.select(args.item, single=True)
        current = progress.snapshot(root)
        sandbox = drill.Sandbox.at(root, args.practice, must_exist=False,
                                   remembered=progress.remembered_practice(current, [item.slug]))
    except (drill.DrillError, StateError) as exc:
        return drill.fail("diff", exc)
    running = progress.drilling(current.peek(item.slug))
    files = [sandbox.file(m) for m in item.modules]
    if (running is not None and not args.archived and all(f.is_file() for f in files)
            and not any(diffview.holds_work(f, m) for f, m in zip(files, item.modules))):
        any_kept = any(diffview.archived(root, m) for m in item.modules)
        return drill.fail("diff", f"nothing written yet for {item.label}; its stub is untouched (attempt "
                          f"{running.attempt}, drilling since {time.strftime('%H:%M', time.localtime(running.start))}): "
                          f"write it, then `mlcanon check {item.slug}`"
                          + ("; `--archived` shows your last kept attempt" if any_kept else ""))
    pairs = []
    for module in item.modules:
        reference = stubs.reference_file(module)
        attempt = diffview.latest_attempt(root, sandbox.practice, module, archived_only=args.archived)
        if reference is not None and attempt is not None:
            pairs.append((attempt, reference))
    if not pairs:
        where = ".mlcanon/attempts/" if args.archived else f"{sandbox.name}/ or .mlcanon/attempts/"
        return drill.fail("diff", f"no attempt of {item.label} in {where}: `mlcanon drill {item.slug}` starts one, "
                          "and every drill or reset keeps the file it replaces")
    width = args.width or min(max(shutil.get_terminal_size((160, 24)).columns, 80), 220)
    for attempt, reference in pairs:
        try:
            mine = attempt.path.read_text(encoding="utf-8").splitlines()
            theirs = reference.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            return drill.fail("diff", f"cannot read {attempt.path}: {exc}")
        yours = sandbox.show(attempt.path)
        ref_name = f"canon_refs/{attempt.module}.py"
        if args.unified:
            print("\n".join(diffview.unified(mine, theirs, yours, ref_name, args.context)))
            continue
        kept = ""
        if attempt.archived:
            kept = f", kept {time.strftime('%Y-%m-%d %H:%M', time.localtime(attempt.path.stat().st_mtime))}"
        print(f"{item.label}: your attempt ({yours}{kept}) beside the reference ({ref_name})")
        column = max(20, (width - 3) // 2)
        print(f"{'yours':<{column}}   reference")
        print("\n".join(diffview.side_by_side(mine, theirs, width, args.context)))
        c = diffview.counts(mine, theirs)
        print(f"\n{c.changed} line(s) changed, {c.only_yours} only in yours, {c.only_reference} only in the reference.")
    if not args.unified:
        print("Write down the differences: shape handling and edge cases are most of them, and what the "
              "interviewer probes.")
    return 0
