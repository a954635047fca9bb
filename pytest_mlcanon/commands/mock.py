"""``mlcanon mock 1|2|3 [--speed X]``: a 60-minute mock interview.

The session's drills run in order on one clock (``mlcanon drills`` lists the three sessions). For
each drill: a fresh stub and its clock (work already in the file is kept in .mlcanon/attempts/),
the task and the two-minute set-up prompts, "write it now" at minute 2, what to do when you stall,
a two-minute warning, then at the end of its time (or when you press Enter) the item's check; then
the five-minute walkthrough prompts and the interviewer's follow-up question. Type h and Enter for
a hint, q and Enter to end the session early. At the end: the rubric per drill and a summary,
recorded in .mlcanon/progress.json beside each drill's own attempt. Each drill's clock stops after
its check (its attempt is recorded, as `mlcanon check` records it), and one left running when the
session ends early is stopped too: no clock outlives the session; `mlcanon drill ITEM` starts the
next attempt.

``--speed X`` runs the clock X times faster (60: a minute a second) for a dry run of the prompts;
the environment variable MLCANON_MOCK_SPEED does the same. A sped-up session is recorded with its
speed, so it never passes for a real one, and it records nothing in the items' histories: its
checks are untimed (no attempt, best time, review date or miss-log line) and every item's clock and
hints are left as it found them (it still writes each drill's fresh stub, keeping your file in
.mlcanon/attempts/)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_mlcanon import progress
    from pytest_mlcanon.chapters.drills import Drill
    from pytest_mlcanon.chapters.mock import Checked
    from pytest_mlcanon.drill import Sandbox

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
    real = speed == 1  # a sped-up dry run records nothing in the items' histories
    started_at = progress.now()
    inbox: queue.Queue[str | None] = queue.Queue()
    sessions.read_lines(sys.stdin, inbox)
    clock = sessions.SessionClock(speed, inbox)
    sandboxes: dict[str, drill.Sandbox] = {}
    clocks: dict[str, progress.Clock] = {}  # the clocks this session started and has not stopped yet

    def say(text: str) -> None:
        print(text, flush=True)

    def begin(item_drill: Drill) -> str:
        item = item_drill.item
        if real:
            started = drill.start(root, item, args.practice, restart=True)
            sandbox, written, clocks[item.slug] = started.sandbox, started.written, started.clock
            running = "the item's clock runs until its check"
        else:
            sandbox = drill.prepare(root, item, args.practice, progress.snapshot(root))
            written = sandbox.fresh_stub(item, progress.now())
            running = "a dry run: the item's clock and history are left as they are"
        sandboxes[item.slug] = sandbox
        shown = ", ".join(sandbox.show(w.path) for w in written)
        kept = [sandbox.show(w.archived) for w in written if w.archived]
        note = f"; your previous file is kept in {', '.join(kept)}" if kept else ""
        return f"Edit {shown} (a fresh stub; {running}{note})."

    def check(item_drill: Drill) -> Checked:
        try:
            return _check(root, item_drill, sandboxes[item_drill.item.slug], real)
        finally:
            _stop_clocks(root, clocks, [item_drill.item.slug])

    def on_hint(item_drill: Drill, level: int) -> None:
        if not real:
            return  # counted in the session's record only
        try:
            with progress.session(root) as current:
                progress.note_hint(current.peek(item_drill.item.slug), level)
        except StateError:
            pass

    runner = sessions.Runner(chosen, clock, say, begin, check, on_hint)
    try:
        session = runner.run(speed)
    except (drill.DrillError, StateError) as exc:
        return drill.fail("mock", exc)
    except KeyboardInterrupt:
        print("\nmlcanon mock: interrupted; the session is not recorded"
              + (" (each drill's checks are)." if real else "."), file=sys.stderr)
        return 130
    finally:
        _stop_clocks(root, clocks, list(clocks))  # a drill left mid-way: its clock does not outlive the session
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
    dry = f" (a dry run at {speed:g}x speed: nothing recorded in the items' histories)" if not real else ""
    print(f"Recorded as mock {chosen.number}, session {number}{dry}, in .mlcanon/progress.json.")
    return 0


def _stop_clocks(root: Path, clocks: dict[str, progress.Clock], slugs: list[str]) -> None:
    """Stop the clocks the session started for ``slugs``, each only while it is still that clock (a drill
    or reset in another terminal since then is left alone), and forget them."""
    from pytest_mlcanon import progress
    from pytest_mlcanon.state import StateError

    mine = {slug: clocks.pop(slug) for slug in slugs if slug in clocks}
    if not mine:
        return
    try:
        with progress.session(root) as current:
            for slug, started in mine.items():
                running = progress.clock(current.peek(slug))
                if running is not None and (running.attempt, running.start) == (started.attempt, started.start):
                    progress.stop_clock(current.entry(slug))
    except StateError as exc:
        print(f"mlcanon mock: warning: could not stop the clocks of {', '.join(mine)}: {exc}", file=sys.stderr)


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


def _check(root: Path, item_drill: Drill, sandbox: Sandbox, record: bool) -> Checked:
    """The item's check in a fresh process: what ``mlcanon check`` runs, recorded as its attempt when
    ``record`` (a real-speed session), else the same check untimed, which records nothing."""
    import subprocess
    import tempfile

    from pytest_mlcanon import warm
    from pytest_mlcanon.chapters.mock import Checked

    item = item_drill.item
    with tempfile.TemporaryDirectory(prefix="mlcanon-mock-") as folder:
        report = Path(folder) / "report.json"
        command = [sys.executable, "-m", "pytest", *warm.check_args([item], sandbox.practice, False, root, timed=record),
                   "-q", "-p", "no:cacheprovider", f"--canon-report=json:{report}"]
        try:
            done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return Checked(False, lines=(f"the check of {item.slug} ran past {CHECK_TIMEOUT_S} s and was stopped",))
        verdict = next((v for v in warm.read_verdicts(report) if v.slug == item.slug), None)
    return Checked.from_report(verdict, done.returncode, tuple(_rubric_lines(done.stdout + done.stderr)))


def _rubric_lines(output: str) -> list[str]:
    """The check's rubric table and findings, without pytest's banners."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if "mlcanon rubric" in line), None)
    body = lines[start + 1:] if start is not None else lines[-SHOWN_LINES:]
    kept = [line for line in body if line.strip() and not line.startswith(("=", "learner:"))]
    return kept[:SHOWN_LINES]
