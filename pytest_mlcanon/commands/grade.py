"""``mlcanon grade SUBMISSIONS --item ITEMS [--workers N] [--out DIR] [--shard i/n]``: grade a class.

SUBMISSIONS holds one sub-folder per student, each laid out like the canon (``<area>/<module>.py``,
or with it under practice/, src/mlbook/, mlbook/ or one folder down, or flat: attention.py is placed
by module name), or is itself one submission.
Every (student, item) runs in its own sandboxed child with time, CPU, memory and output limits, no
network and no root; the parent checks what the child reports, flags integrity problems, and writes
gradebook.csv, gradebook-lms.csv, gradebook.md, gradebook.json, report.html, feedback/<student>.md and
gradescope/<student>/results.json into DIR (and the GitHub step summary when $GITHUB_STEP_SUMMARY
is set). Settings come from the command line, then --config (default: mlcanon-grade.toml beside
SUBMISSIONS or here), then the defaults.

``mlcanon grade --merge SHARD... --out DIR`` combines the gradebook.json of each --shard job (files
or folders holding one) and writes every output for the whole class.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import signal
import sys
import threading
from collections.abc import Iterator


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("grade", help="grade a class of submissions into a gradebook", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", nargs="?", help="one sub-folder per student, or one submission")
    parser.add_argument("--item", dest="items", metavar="ITEMS", help="the items: a slug, number, glob, block:N or "
                        "comma list (default: the config's items)")
    parser.add_argument("--workers", type=int, metavar="N", help="parallel jobs (default: one per core)")
    parser.add_argument("--out", default="gradebook", metavar="DIR", help="output folder (default: gradebook)")
    parser.add_argument("--shard", metavar="i/n", help="grade only the i-th of n deterministic shares of the class")
    parser.add_argument("--config", metavar="FILE", help="teacher config (default: mlcanon-grade.toml beside "
                        "SUBMISSIONS or in the current folder)")
    parser.add_argument("--seed", type=int, help="seed of the re-check inputs (default: new on every run)")
    parser.add_argument("--timeout", dest="wall_s", type=float, metavar="S", help="wall-clock seconds per job")
    parser.add_argument("--test-timeout", dest="test_timeout_s", type=float, metavar="S", help="seconds per test")
    parser.add_argument("--memory", dest="memory_mb", type=int, metavar="MB", help="memory per job")
    parser.add_argument("--merge", nargs="+", metavar="SHARD", help="merge the shards' gradebooks instead")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="grade even where no sandbox can be made (not root, no unprivileged user namespaces); "
                        "every output then says the batch ran unsandboxed")
    parser.add_argument("--single", action="store_true", help="SUBMISSIONS is one student's submission, searched as "
                        "a student folder is (Gradescope's /autograder/submission)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from pathlib import Path

    from tabulate import tabulate

    from pytest_mlcanon import catalog
    from pytest_mlcanon.grade import batch, config, discover, render, shard
    from pytest_mlcanon.grade.render.table import headline, summary_header, summary_row
    from pytest_mlcanon.grade.text import clean

    failures = (config.ConfigError, shard.ShardError, discover.SubmissionsError, catalog.UnknownItemError,
                batch.BatchError)
    try:
        if args.merge:
            if args.submissions:
                raise shard.ShardError("--merge takes the shards' outputs, not SUBMISSIONS")
            book = shard.merge([shard.load(Path(p)) for p in args.merge])
        else:
            if not args.submissions:
                raise config.ConfigError("give SUBMISSIONS (a folder of student folders), or --merge SHARD...")
            submissions = Path(args.submissions)
            cli = {k: getattr(args, k) for k in ("items", "workers", "seed", "wall_s", "test_timeout_s", "memory_mb")}
            settings = config.load(config.find(args.config, submissions), cli)
            if args.unsafe_no_sandbox:
                settings = dataclasses.replace(settings, unsafe_no_sandbox=True)
            if args.single:
                settings = dataclasses.replace(settings, single=True)
            if not settings.items:
                raise config.ConfigError("which items? give --item ITEMS (or items = [...] in the config)")
            catalog.select(settings.items)
            part = shard.parse(args.shard) if args.shard else None
            with _terminate_cleanly():
                book = batch.grade(submissions, settings, shard=part, progress=not args.no_progress)
        out = Path(args.out)
        written = render.write_all(book, out)
    except failures as exc:
        print(f"mlcanon grade: {clean(exc)}", file=sys.stderr)
        return 2
    rows = [[clean(c, limit=200) for c in summary_row(book, s)] for s in book.students]
    print(tabulate(rows, headers=summary_header(book), tablefmt="simple", disable_numparse=True))
    print()
    print(headline(book))
    for note in book.sandbox + book.notes:
        print(f"  {clean(note)}")
    print(f"wrote {len(written)} files to {out}/ (gradebook.csv, gradebook.md, gradebook.json, report.html, "
          f"feedback/, gradescope/) in {book.elapsed_s:.1f} s")
    return 0


@contextlib.contextmanager
def _terminate_cleanly() -> Iterator[None]:
    """SIGTERM (a cancelled CI job, ``kill``) ends the batch as Ctrl-C does: by an exception, so the
    running children are killed, the sandbox users swept, their lock files and the job folders removed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
