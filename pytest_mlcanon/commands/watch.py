"""``mlcanon watch ITEM [ITEM...] [--practice PATH] [--strict] [--timeout S] [--clear]``: check on every
save. Keeps one warm process (torch, pytest, the items' reference tests run once) and, each time you
save one of your files for the items (the items' own modules and the ones they build on, in your
practice directory), runs the check ``mlcanon check`` runs in a child forked from it: the same report,
the same record in .mlcanon/progress.json and .mlcanon/misslog.md, in a fraction of the time. A save
while a check runs restarts it. A test that computes without end is stopped after four fifths of
--timeout seconds of CPU time (--timeout: by default ten times the reference run, at least 10 s) and fails,
naming the line it was on, as under ``mlcanon check``; the item's other tests then fail at once. A file
that crashes, exits, or waits without computing (a sleep) ends that check only (the wait is stopped
after --timeout seconds); such a check is partial and records nothing. A save that does not parse (mid
edit) is not checked, and records nothing. A failing test shows pytest's short traceback (``--tb=short``:
where it failed and why, not the source of every function on the way), so the verdict stays in
sight; the report and the verdict are those of ``mlcanon check``. Extra arguments go to pytest, as
with ``mlcanon check`` (``--tb=long`` for the full tracebacks, ``-q``; a check narrowed by ``-k`` or
stopped by ``-x`` is partial and records nothing). Ctrl-C stops watching. The items must have been
drilled."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_mlcanon.catalog import Item
    from pytest_mlcanon.drill import Sandbox

POLL_S = 0.01  # a save waits 5 ms on average to be seen; a look at the files costs ~40 us
# A file seen empty (a save truncates, then writes) is looked at again after this; a save seen
# mid-write otherwise makes the check it started stale, and a fresh one follows (Watched.dirty).
SETTLE_S = 0.01
# pytest arguments a watch adds before the learner's own (a --tb they pass comes later and wins)
DEFAULT_PYTEST_ARGS = ("--tb=short",)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("watch", help="re-check items on every save, from a warm process", description=__doc__)
    parser.add_argument("items", metavar="ITEM", nargs="+", help="a slug, a number, or a selector naming drilled items")
    parser.add_argument("--practice", "--impl", dest="practice", default=None, metavar="PATH",
                        help="practice directory (default: the one the items were drilled in)")
    parser.add_argument("--strict", action="store_true", help="count running over time against API fluency")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="stop a check still running after S seconds, and a test computing for 0.8 x S "
                        "seconds of CPU (default: 10 x the reference run, at least 10 s)")
    parser.add_argument("--clear", action="store_true", help="clear the screen before each check")
    parser.set_defaults(func=run, passthrough=True)


class Watched:
    """The learner's files a check of the items reads, and when each last changed."""

    def __init__(self, files: Sequence[Path]) -> None:
        self.files = tuple(dict.fromkeys(files))
        self.seen = self.stamps()

    def stamps(self) -> tuple[tuple[int, int] | None, ...]:
        """(modification time, size) of each file; None for one that does not exist."""
        out: list[tuple[int, int] | None] = []
        for path in self.files:
            try:
                stat = path.stat()
            except OSError:
                out.append(None)
                continue
            out.append((stat.st_mtime_ns, stat.st_size))
        return tuple(out)

    def changed(self) -> list[Path]:
        """The files saved (or created, or deleted) since the last call; they count as seen from now."""
        now = self.stamps()
        if now == self.seen:
            return []
        if any(new is not None and new[1] == 0 for old, new in zip(self.seen, now) if old != new):
            time.sleep(SETTLE_S)  # truncated and not written yet, most likely: let the write land
            now = self.stamps()
        changed = [path for path, old, new in zip(self.files, self.seen, now) if old != new]
        self.seen = now
        return changed

    def dirty(self) -> bool:
        """Whether a file changed since the last :meth:`changed` (without marking it seen)."""
        return self.stamps() != self.seen


def watched_files(items: Sequence[Item], practice: Path) -> list[Path]:
    """The practice files a check of ``items`` reads: theirs, and those of every item they build on."""
    from pytest_mlcanon import catalog

    modules = [m for item in items for other in (item, *catalog.builds_on(item)) for m in other.modules]
    return [practice / f"{module}.py" for module in dict.fromkeys(modules)]


def run(args: argparse.Namespace, extra: list[str]) -> int:
    import signal

    from pytest_mlcanon import drill
    from pytest_mlcanon.state import StateError, find_root

    if args.timeout is not None and args.timeout <= 0:
        return drill.fail("watch", f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    root = find_root(Path.cwd())
    try:
        items, sandbox, warnings = drill.checkable(root, ",".join(args.items), args.practice)
    except (drill.DrillError, StateError) as exc:
        return drill.fail("watch", exc)
    drill.warn(warnings)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # a closed terminal or a kill ends the watch as Ctrl-C does

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    try:
        return _watch(items, sandbox, args, extra)
    except KeyboardInterrupt:
        print("\nmlcanon watch: stopped", flush=True)
        return 0


def _watch(items: Sequence[Item], sandbox: Sandbox, args: argparse.Namespace, extra: Sequence[str]) -> int:
    from pytest_mlcanon import drill, warm
    from pytest_mlcanon.redirect import untouched_stub
    from pytest_mlcanon.state import StateError

    labels = ", ".join(item.label for item in items)
    selector = ",".join(item.slug for item in items)
    watched = Watched(watched_files(items, sandbox.practice))
    print(f"mlcanon watch {labels}: warming up (torch, pytest, the reference tests) ...", flush=True)
    warmed = warm.warm_up(items, sandbox.root)
    if warmed.status != 0:
        print(f"mlcanon watch: warning: the reference run ended with status {warmed.status}; the checks still run:\n"
              + warmed.log[-2000:], file=sys.stderr, flush=True)
    timeout = args.timeout if args.timeout is not None else warmed.timeout_s
    own = [sandbox.show(sandbox.file(m)) for item in items for m in item.modules]
    others = len(watched.files) - len(own)
    also = f" (or one of the {others} file(s) of the items it builds on)" if others else ""
    print(f"ready ({warmed.seconds:.1f} s reference run). Save {', '.join(own)}{also} to check; Ctrl-C stops.",
          flush=True)
    argv = warm.check_args(items, sandbox.practice, args.strict, sandbox.root)
    report = warm.report_path(items)
    extra = (*DEFAULT_PYTEST_ARGS, *test_limit(timeout, extra), *warmed.lean_args(extra), *extra)
    ready = None  # the next check's child, forked ahead of the save (warm.standby)
    try:
        while True:
            if ready is None:
                ready = warm.standby(argv, sandbox.root, report, extra=extra)
            changed = watched.changed()
            if not changed:
                time.sleep(POLL_S)
                continue
            saved_at = max((_mtime(path) for path in changed), default=time.time())
            if args.clear:
                print("\033[2J\033[H", end="")
            names = ", ".join(sandbox.show(path) for path in changed)
            try:  # as `mlcanon check` would: the items may have been reset since (in another terminal)
                drill.checkable(sandbox.root, selector, str(sandbox.practice))
            except (drill.DrillError, StateError) as exc:
                print(f"\n── {time.strftime('%H:%M:%S')} saved {names}: not checked: {exc} ──", flush=True)
                continue
            if all(untouched_stub(sandbox.file(m)) for item in items for m in item.modules):
                # a fresh stub (`mlcanon drill` again): a check would only log "unimplemented" as a miss
                print(f"\n── {time.strftime('%H:%M:%S')} saved {names}: a fresh stub, not checked ──", flush=True)
                continue
            broken = unparsed(watched.files)
            if broken:  # a save mid-edit (an editor's auto-save): a check would log "does not import" as a miss
                print(f"\n── {time.strftime('%H:%M:%S')} saved {names}: not checked: {sandbox.show(broken[0])} "
                      f"{broken[1]} (nothing recorded; save it whole to check) ──", flush=True)
                continue
            print(f"\n── {time.strftime('%H:%M:%S')} saved {names}: checking {labels} ──", flush=True)
            result = warm.check(argv, sandbox.root, report, timeout, cancelled=watched.dirty, extra=extra,
                                ready=ready)
            ready = None
            cut = "" if result.ending.whole else "\n"  # a check cut short may have stopped mid-line
            if result.ending is warm.Ending.CANCELLED:
                print(f"{cut}── saved again: this check is stopped (nothing recorded) and a new one starts ──",
                      flush=True)
                continue
            latency = time.time() - saved_at
            print(f"{cut}── {result.describe(labels)} · {latency:.2f} s after the save ──", flush=True)
    finally:
        if ready is not None:
            ready.discard()


def unparsed(files: Sequence[Path]) -> tuple[Path, str] | None:
    """The first of ``files`` that exists and does not parse, and why (``does not parse (line 12:
    SyntaxError: ...)``); None when every one parses. The parse is the one the stub check keeps."""
    from pytest_mlcanon.rubric import source

    for path in files:
        if not path.is_file():
            continue
        try:
            source.tree(path)
        except source.SourceError as exc:
            return path, f"does not parse (line {exc.line}: {exc})" if exc.line else f"does not parse ({exc})"
    return None


def test_limit(timeout_s: float, extra: Sequence[str]) -> tuple[str, ...]:
    """The per-test CPU limit of a watched check, at four fifths of the watch's timeout: a test that
    computes without end is stopped by the run's watchdog, which names the line it was on, before the watch
    has to stop the whole check (which can only say it was still running). Close to the timeout, so a
    slow but finishing test is not failed where the whole check would have finished in time (only one
    of 0.8 to 1 times the timeout is). An explicit ``--canon-test-timeout`` among the learner's arguments wins."""
    if any(arg.startswith("--canon-test-timeout") for arg in extra):
        return ()
    return (f"--canon-test-timeout={max(round(timeout_s * 0.8, 1), 0.5):g}",)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()
