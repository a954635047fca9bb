"""``mlcanon drill ITEM [--practice PATH]``: start an attempt from a blank stub.

``--practice`` (or its alias ``--impl``) is remembered in .mlcanon/progress.json: ``mlcanon check``
and ``mlcanon reset`` of the item, and the next drill, use it without being told again.

Writes (or refreshes) the item's signature-only stub in the practice directory, starts its clock,
and prints the file to edit, the reference tests that will run, the from-memory target (twice that
for a first attempt) and the check command. A file that already held your work is copied to
.mlcanon/attempts/ first, so nothing is lost. An item you are already drilling (its clock runs on an
attempt that has not passed) is left as it is, clock, hints and file, and the command says since
when; `mlcanon reset ITEM` ends that attempt, and the next drill starts over."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("drill", help="write a fresh stub for ITEM and start its clock", description=__doc__)
    parser.add_argument("item", help="a slug (posttrain/dpo) or a number (55)")
    parser.add_argument("--practice", "--impl", dest="practice", default=None, metavar="PATH",
                        help="practice directory (default: the one the item was last drilled in, else the last "
                        "drill's, else practice); remembered for check and reset")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    import time
    from pathlib import Path

    from pytest_mlcanon import catalog, drill, plan, progress, stubs
    from pytest_mlcanon.layout import tests_dir
    from pytest_mlcanon.settings import SettingsError
    from pytest_mlcanon.state import StateError, find_root

    root = find_root(Path.cwd())
    try:
        (item,) = drill.select(args.item, single=True)
        started = drill.start(root, item, args.practice)
    except (drill.DrillError, StateError, SettingsError, stubs.NoReferenceError) as exc:
        return drill.fail("drill", exc)
    except OSError as exc:
        return drill.fail("drill", f"cannot write the stub: {exc}")
    drill.warn(started.warnings)
    sandbox, clock = started.sandbox, started.clock
    if started.kept:
        hints = f", hint level {clock.hints} used" if clock.hints else ""
        print(f"{item.label}: already drilling since {time.strftime('%H:%M', time.localtime(clock.start))} "
              f"(attempt {clock.attempt}, {(progress.now() - clock.start) / 60:.0f} min{hints}); clock and file kept: "
              f"write it, then `mlcanon check {item.slug}`; `mlcanon reset {item.slug}` starts over")
        return 0
    print(f"drill {item.label}: {item.title} (level {item.level}, {plan.block_title(item.block)})")
    for w in started.written:
        note = {"written": "new stub", "refreshed": "fresh stub",
                "kept": "your work in it is kept: a first drill only starts the clock",
                "replaced": f"fresh stub; your previous file is kept in {sandbox.show(w.archived) if w.archived else ''}"}
        print(f"  edit    {sandbox.show(w.path)}  ({note[w.action]})")
    others = drill.shared_with(item)
    if others:
        print(f"          (this module also holds {', '.join(o.label for o in others)}: its stub was refreshed too)")
    base = [catalog.get(n) for n in item.depends_on]
    if base:
        print(f"  uses    {', '.join(b.label for b in base)} (your files once written, the references until then)")
    for name, count in stubs.count_tests(item, tests_dir()):
        print(f"  tests   canon_tests/{name}: {count} test function(s) of this item (a parametrised one runs "
              "several cases, so a check counts more tests)")
    if started.first:
        print(f"  target  {started.allowed_min:.0f} min for this first attempt ({item.minutes} min from memory once it "
              "has passed)")
    else:
        print(f"  target  {item.minutes} min from memory (attempt {clock.attempt}; {started.passes_before} passed before)")
    print(f"  clock   attempt {clock.attempt} started at {time.strftime('%H:%M', time.localtime(clock.start))}")
    if started.running:
        shown = ", ".join(f"{slug} (since {time.strftime('%H:%M', time.localtime(start))})"
                          for slug, start in started.running[:3])
        more = f" and {len(started.running) - 3} more" if len(started.running) > 3 else ""
        print(f"  note    {len(started.running)} other clock(s) still run: {shown}{more}; each item's time counts "
              "from its own drill, so drill the next item once this one passes (`mlcanon reset ITEM` stops a clock)")
    print(f"  check   mlcanon check {item.slug}")
    print(f"  stuck?  mlcanon hint {item.slug}   (levels 1-3, each a step closer to the answer)")
    return 0
