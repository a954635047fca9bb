"""``mlcanon drill ITEM [--practice PATH]``: start an attempt from a blank stub.

``--practice`` (or its alias ``--impl``) is remembered in .mlcanon/progress.json: ``mlcanon check``
and ``mlcanon reset`` of the item, and the next drill, use it without being told again.

Writes (or refreshes) the item's signature-only stub in the practice directory, starts its clock,
and prints the file to edit, the reference tests that will run, the from-memory target (twice that
for a first attempt) and the check command. A file that already held your work is copied to
.mlcanon/attempts/ first, so nothing is lost."""

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
    from pytest_mlcanon.run import tests_dir
    from pytest_mlcanon.settings import SettingsError, read_pyproject, resolve
    from pytest_mlcanon.state import StateError

    root = Path.cwd()
    try:
        (item,) = drill.select(args.item, single=True)
        known = progress.snapshot(root)
        sandbox = drill.Sandbox.at(root, args.practice, must_exist=False,
                                   remembered=progress.remembered_practice(known, [item.slug]))
        sandbox.require_drillable(item)
        factor = resolve(cli={}, ini={}, pyproject=read_pyproject(root)).first_attempt_factor
        now = progress.now()
        written = sandbox.fresh_stub(item, now)
        with progress.session(root) as current:
            entry = current.entry(item.slug)
            clock = progress.start_clock(entry, now)
            progress.remember_practice(current, item.slug, sandbox.name)
            passes = progress.passes_before(entry, clock.attempt)
            warnings = [*known.warnings, *current.warnings]
    except (drill.DrillError, StateError, SettingsError, stubs.NoReferenceError) as exc:
        return drill.fail("drill", exc)
    except OSError as exc:
        return drill.fail("drill", f"cannot write the stub: {exc}")
    drill.warn(warnings)
    first = passes == 0
    allowed = item.minutes * (factor if first else 1.0)
    print(f"drill {item.label}: {item.title} (level {item.level}, {plan.block_title(item.block)})")
    for w in written:
        note = {"written": "new stub", "refreshed": "fresh stub",
                "replaced": f"fresh stub; your previous file is kept in {sandbox.show(w.archived) if w.archived else ''}"}
        print(f"  edit    {sandbox.show(w.path)}  ({note[w.action]})")
    others = drill.shared_with(item)
    if others:
        print(f"          (this module also holds {', '.join(o.label for o in others)}: its stub was refreshed too)")
    base = [catalog.get(n) for n in item.depends_on]
    if base:
        print(f"  uses    {', '.join(b.label for b in base)} (your files once written, the references until then)")
    for name, count in stubs.count_tests(item, tests_dir()):
        print(f"  tests   canon_tests/{name}: {count} test function(s) of this item")
    if first:
        print(f"  target  {allowed:.0f} min for this first attempt ({item.minutes} min from memory once it has passed)")
    else:
        print(f"  target  {item.minutes} min from memory (attempt {clock.attempt}; {passes} passed before)")
    print(f"  clock   attempt {clock.attempt} started at {time.strftime('%H:%M', time.localtime(now))}")
    print(f"  check   mlcanon check {item.slug}")
    print(f"  stuck?  mlcanon hint {item.slug}   (levels 1-3, each a step closer to the answer)")
    return 0
