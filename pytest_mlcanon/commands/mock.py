"""``mlcanon mock 1|2|3 [--speed X]``: a 60-minute mock interview.

The session's drills run in order on one clock (``mlcanon drills`` lists the three sessions). For
each drill: a fresh stub and its clock (work already in the file is kept in .mlcanon/attempts/),
the task and the two-minute set-up prompts, "write it now" at minute 2, what to do when you stall,
a two-minute warning, then at the end of its time (or when you press Enter) the item's check; then
the five-minute walkthrough prompts and the interviewer's follow-up question. Type h and Enter for
a hint, q and Enter to end the session early. At the end: the rubric per drill and a summary,
recorded in .mlcanon/progress.json beside each drill's own attempt.

``--speed X`` runs the clock X times faster (60: a minute a second) for a dry run of the prompts;
the environment variable MLCANON_MOCK_SPEED does the same. A sped-up session is recorded with its
speed, so it never passes for a real one."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_mlcanon.chapters.drills import Drill
    from pytest_mlcanon.chapters.mock import Checked

SPEED_ENV = "MLCANON_MOCK_SPEED"
CHECK_TIMEOUT_S = 900
SHOWN_LINES = 14


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("mock", help="a 60-minute mock interview: drills on one clock, narration, rubric",
                            description=__doc__)
    parser.add_argument("session", help="which mock session: 1, 2 or 3")
    parser.add_argument("--speed", type=float, default=None, metavar="X",
                        help=f"run the clock X times faster (default 1, or ${SPEED_ENV})")
    parser.add_argument("--practice", "--impl", dest="practice", default=None, metavar="PATH",
                        help="practice directory (default: the one your last drill used, else practice)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    import os
    import queue
    import sys
    from pathlib import Path

    from pytest_mlcanon import drill, progress
    from pytest_mlcanon.chapters import drills
    from pytest_mlcanon.chapters import mock as sessions
    from pytest_mlcanon.state import StateError, find_root

    try:
        chosen = drills.mock(args.session)
        speed = _speed(args.speed, os.environ.get(SPEED_ENV))
    except (drills.DrillError, ValueError) as exc:
        return drill.fail("mock", exc)
    root = find_root(Path.cwd())
    missing = [d.item.label for d in chosen.drills if not drill.drillable(d.item)]
    if missing:
        return drill.fail("mock", f"this canon cannot check {', '.join(missing)} yet, so mock {chosen.number} cannot run")
    started_at = progress.now()
    inbox: queue.Queue[str | None] = queue.Queue()
    sessions.read_lines(sys.stdin, inbox)
    clock = sessions.SessionClock(speed, inbox)

    def say(text: str) -> None:
        print(text, flush=True)

    def begin(item_drill: Drill) -> str:
        started = drill.start(root, item_drill.item, args.practice)
        shown = ", ".join(started.sandbox.show(w.path) for w in started.written)
        kept = [started.sandbox.show(w.archived) for w in started.written if w.archived]
        note = f"; your previous file is kept in {', '.join(kept)}" if kept else ""
        return f"Edit {shown} (a fresh stub; the item's clock is running{note})."

    def on_hint(item_drill: Drill, level: int) -> None:
        try:
            with progress.session(root) as current:
                progress.note_hint(current.peek(item_drill.item.slug), level)
        except StateError:
            pass

    runner = sessions.Runner(chosen, clock, say, begin, lambda d: _check(root, d, args.practice), on_hint)
    try:
        session = runner.run(speed)
    except (drill.DrillError, StateError) as exc:
        return drill.fail("mock", exc)
    except KeyboardInterrupt:
        print("\nmlcanon mock: interrupted; the session is not recorded (each drill's checks are).", file=sys.stderr)
        return 130
    print()
    print("\n".join(sessions.summary(session)))
    try:
        with progress.session(root) as current:
            entry = current.exercise("mocks", str(chosen.number))
            number = len(entry["attempts"]) + 1
            entry["attempts"].append({"attempt": number, "start": progress.iso(started_at),
                                      "end": progress.iso(progress.now()), **session.record()})
    except StateError as exc:
        return drill.fail("mock", exc)
    dry = f" (a dry run at {speed:g}x speed)" if speed != 1 else ""
    print(f"Recorded as mock {chosen.number}, session {number}{dry}, in .mlcanon/progress.json.")
    return 0


def _speed(option: float | None, env: str | None) -> float:
    if option is not None:
        value, where = option, "--speed"
    elif env:
        try:
            value, where = float(env), f"${SPEED_ENV}"
        except ValueError:
            raise ValueError(f"${SPEED_ENV} must be a number, got {env!r}") from None
    else:
        return 1.0
    if not value > 0:
        raise ValueError(f"{where} must be above 0, got {value:g}")
    return value


def _check(root: Path, item_drill: Drill, practice: str | None) -> Checked:
    """``mlcanon check ITEM`` in a fresh process, then the attempt it recorded."""
    import subprocess
    import sys

    from pytest_mlcanon import progress
    from pytest_mlcanon.chapters.mock import Checked

    slug = item_drill.item.slug
    command = [sys.executable, "-m", "pytest_mlcanon.cli", "check", slug, "-q", "-p", "no:cacheprovider"]
    if practice:
        command[4:4] = ["--practice", practice]
    try:
        done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired:
        output = f"the check of {slug} ran past {CHECK_TIMEOUT_S} s and was stopped"
    entry = progress.snapshot(root).peek(slug)
    running = progress.clock(entry)
    record = next((a for a in reversed(entry.get("attempts", []))
                   if running is not None and a.get("attempt") == running.attempt), None)
    lines = tuple(_rubric_lines(output))
    if record is None:
        return Checked(False, lines=lines)
    score = record.get("score")
    return Checked(True, bool(record.get("passed")), score if isinstance(score, int) else None,
                   tuple(record.get("axes_failed", [])), lines)


def _rubric_lines(output: str) -> list[str]:
    """The check's rubric table and findings, without pytest's banners."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if "mlcanon rubric" in line), None)
    body = lines[start + 1:] if start is not None else lines[-SHOWN_LINES:]
    kept = [line for line in body if line.strip() and not line.startswith(("=", "learner:"))]
    return kept[:SHOWN_LINES]
