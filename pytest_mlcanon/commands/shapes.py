"""``mlcanon shapes [PROBLEM] [--check | --answer]``: thirty shape and broadcasting drills.

Each problem gives input shapes and asks for an output shape ("given logits (B, T, V) and tokens
(B, T), produce the log-probability of each token, (B, T)"), and teaches one trap: keepdim,
broadcasting (B,) against (B, T), transpose vs permute, .view on a non-contiguous tensor, einsum,
gather's index shape, the label shift...

  mlcanon shapes              the thirty problems, their traps and your progress
  mlcanon shapes 9            write practice/shapes/09_<name>.py (solve to fill in), start its clock
  mlcanon shapes 9 --check    run your solve and the intended operation on the same random inputs,
                              compare shape and values, then show the annotated answer and the trap
  mlcanon shapes 9 --answer   show the annotated answer now (noted on the attempt)

Checks are recorded in .mlcanon/progress.json like an item's attempts. PROBLEM is a number or a name."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_mlcanon import drill, progress
    from pytest_mlcanon.chapters import shapes


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("shapes", help="thirty 'given these shapes, produce that shape' drills, checked",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problem", nargs="?", help="a problem number (1-30) or name")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="check your answer file")
    action.add_argument("--answer", action="store_true", help="show the annotated answer and the trap")
    parser.add_argument("--practice", "--impl", dest="practice", default=None, metavar="PATH",
                        help="practice directory; answers go to PATH/shapes/ (default: your last drill's, else practice)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from pytest_mlcanon import drill, progress
    from pytest_mlcanon.chapters import shapes
    from pytest_mlcanon.state import StateError, find_root

    root = find_root(Path.cwd())
    try:
        if args.problem is None:
            if args.check or args.answer:
                raise drill.DrillError("--check and --answer need a PROBLEM (a number or a name)")
            return _list(progress.snapshot(root))
        problem = shapes.get(args.problem)
        known = progress.snapshot(root)
        sandbox = drill.Sandbox.at(root, args.practice, must_exist=False,
                                   remembered=progress.remembered_practice(known, []))
        path = sandbox.practice / "shapes" / problem.filename
        if args.answer:
            _reveal(root, problem)
            return 0
        if args.check:
            return _check(sandbox, problem, path)
        return _open(sandbox, problem, path)
    except (drill.DrillError, shapes.ShapesError, StateError) as exc:
        return drill.fail("shapes", exc)


def _list(current: progress.Session) -> int:
    from tabulate import tabulate

    from pytest_mlcanon import progress
    from pytest_mlcanon.chapters import shapes

    rows = []
    upcoming = None
    for problem in shapes.problems():
        summary = progress.summarize(current.peek_exercise("shapes", problem.name))
        if summary.passes:
            status = f"passed ({progress.format_minutes(summary.best_min)} min)"
        elif summary.started:
            status = f"{summary.attempts} attempt(s), not yet"
        else:
            status = "running" if summary.running else "-"
        if not summary.passes and upcoming is None:
            upcoming = problem
        rows.append((problem.number, problem.name, problem.trap, status))
    print(tabulate(rows, headers=["#", "problem", "the trap it teaches", "you"], maxcolwidths=[None, None, 52, None]))
    done = sum(1 for r in rows if r[3].startswith("passed"))
    print(f"\n{done} of {len(rows)} passed.", end=" ")
    print(f"Next: mlcanon shapes {upcoming.number}" if upcoming else "All done: start again from 1 in a week.")
    return 0


def _open(sandbox: drill.Sandbox, problem: shapes.Problem, path: Path) -> int:
    import time

    from pytest_mlcanon import drill, progress
    from pytest_mlcanon.chapters import shapes

    fresh = not path.exists()
    try:
        if fresh:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(problem.stub(), encoding="utf-8")
    except OSError as exc:
        raise drill.DrillError(f"cannot write {sandbox.show(path)}: {exc.strerror or exc}") from None
    now = progress.now()
    with progress.session(sandbox.root) as current:
        entry = current.exercise("shapes", problem.name)
        clock = progress.clock(entry) or progress.start_clock(entry, now)
        warnings = current.warnings
    drill.warn(warnings)
    print(f"{problem.label} (of {len(shapes.problems())})")
    print("Given")
    for line in problem.given():
        print(f"    {line}")
    print("Produce")
    print(f"    {problem.produce}")
    print()
    note = "new file: write solve" if fresh else "your file, as you left it"
    print(f"  edit    {sandbox.show(path)}  ({note})")
    started = time.strftime("%H:%M", time.localtime(clock.start))
    print(f"  clock   attempt {clock.attempt}, started at {started}; target {problem.minutes} min")
    print(f"  check   mlcanon shapes {problem.number} --check")
    return 0


def _check(sandbox: drill.Sandbox, problem: shapes.Problem, path: Path) -> int:
    from pytest_mlcanon import drill, progress
    from pytest_mlcanon.chapters import shapes

    if not path.is_file():
        raise drill.DrillError(f"no answer at {sandbox.show(path)}: `mlcanon shapes {problem.number}` writes it")
    try:
        shown = sandbox.show(path)
        verdict = shapes.check(problem, shapes.load_answer(path, shown), path, shown)
    except shapes.ShapesError as exc:  # the file does not import: a failed check, not bad input
        verdict = shapes.Verdict(False, 0, str(exc))
    if verdict.unimplemented:
        print(f"{problem.label}: not attempted yet: {verdict.failure} in {sandbox.show(path)}")
        return 1
    now = progress.now()
    with progress.session(sandbox.root) as current:
        entry = current.exercise("shapes", problem.name)
        running = progress.ensure_clock(entry, [path], now)
        elapsed = max(0.0, (now - running.start) / 60.0)
        outcome = progress.Check(passed=verdict.passed, score=None, axes_failed=(), elapsed_min=elapsed,
                                 allowed_min=float(problem.minutes), target_min=problem.minutes,
                                 over_time=elapsed > problem.minutes,
                                 misses=() if verdict.passed else (problem.trap,))
        progress.record_check(entry, running, outcome, now)
        if verdict.passed:
            progress.stop_clock(entry)
        warnings = current.warnings
    drill.warn(warnings)
    if not verdict.passed:
        print(f"{problem.label}: not yet: {verdict.failure}")
        print(f"Fix {sandbox.show(path)} and run `mlcanon shapes {problem.number} --check` again; "
              f"`mlcanon shapes {problem.number} --answer` shows the answer.")
        return 1
    late = f", over the {problem.minutes}-minute target" if elapsed > problem.minutes else ""
    print(f"{problem.label}: right. Shape and values match the intended operation on {verdict.runs} random inputs "
          f"({len(problem.cases)} sets of sizes x {len(shapes.SEEDS)} seeds), in {elapsed:.1f} min{late}.")
    _show_answer(problem)
    upcoming = problem.number + 1
    if upcoming <= len(shapes.problems()):
        print(f"\nNext: mlcanon shapes {upcoming}")
    return 0


def _reveal(root: Path, problem: shapes.Problem) -> None:
    from pytest_mlcanon import progress
    from pytest_mlcanon.state import StateError, state_dir

    print(f"{problem.label}")
    _show_answer(problem)
    if state_dir(root).is_dir():
        try:
            with progress.session(root) as current:
                progress.note_hint(current.peek_exercise("shapes", problem.name), 3)
        except StateError:
            pass  # showing an answer must never fail because the progress file is busy


def _show_answer(problem: shapes.Problem) -> None:
    import textwrap

    print(f"\nThe trap: {problem.trap}")
    print(textwrap.fill(problem.lesson, width=100, initial_indent="  ", subsequent_indent="  "))
    print("\nThe annotated answer:")
    print(textwrap.indent(problem.answer, "    "), end="")
