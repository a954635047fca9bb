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

A DIR that holds anything is refused unless --force (clear it first) or --resume (keep it) is given.
Every finished job is recorded in DIR/records/ as it is assessed. Ctrl-C or SIGTERM stops the batch:
its running jobs are killed, the gradebook of what finished is written (the rest ``not graded
(interrupted)``) and it exits 130 or 143. ``--resume`` then grades only what is missing, under the
recorded configuration and seed; ``--only STUDENT...`` regrades those students into DIR's gradebook.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_mlcanon.catalog import Item
    from pytest_mlcanon.grade.config import GradeConfig
    from pytest_mlcanon.grade.gradebook import Gradebook, ItemResult


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
    parser.add_argument("--test-timeout", dest="test_timeout_s", type=float, metavar="S", help="seconds of CPU time per test (one stalled at 3 times that on the clock also ends)")
    parser.add_argument("--memory", dest="memory_mb", type=int, metavar="MB", help="memory per job")
    parser.add_argument("--merge", nargs="+", metavar="SHARD", help="merge the shards' gradebooks instead")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--force", action="store_true", help="clear a non-empty --out first (only what is inside it)")
    parser.add_argument("--resume", action="store_true", help="keep --out: grade only the jobs its records lack "
                        "(an interrupted batch), under the recorded configuration and seed")
    parser.add_argument("--only", nargs="+", metavar="STUDENT", help="regrade these students into --out's "
                        "gradebook, keeping everyone else's records")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="grade even where no sandbox can be made (not root, no unprivileged user namespaces); "
                        "every output then says the batch ran unsandboxed")
    parser.add_argument("--single", action="store_true", help="SUBMISSIONS is one student's submission, searched as "
                        "a student folder is (Gradescope's /autograder/submission)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from pytest_mlcanon import catalog
    from pytest_mlcanon.evidence import Status
    from pytest_mlcanon.grade import batch, config, discover, interrupt, outdir, records, render, shard
    from pytest_mlcanon.grade.text import clean

    failures = (config.ConfigError, shard.ShardError, discover.SubmissionsError, catalog.UnknownItemError,
                batch.BatchError, outdir.OutError, records.RecordError)
    out = Path(args.out)
    with interrupt.trapped() as trap:
        try:
            if args.force and (args.resume or args.only):
                raise outdir.OutError("--force clears --out; --resume and --only keep it: give one of them")
            if args.merge:
                if args.submissions:
                    raise shard.ShardError("--merge takes the shards' outputs, not SUBMISSIONS")
                if args.resume or args.only:
                    raise shard.ShardError("--merge writes a new gradebook from the shards; --resume and --only "
                                           "grade")
                outdir.check(out, force=args.force, keep=False, protected=[Path(p) for p in args.merge])
                book = shard.merge([shard.load(Path(p)) for p in args.merge])
                trap.armed = False  # from here on a signal does not cut the outputs short
                if args.force:
                    outdir.clear(out)
            else:
                if not args.submissions:
                    raise config.ConfigError("give SUBMISSIONS (a folder of student folders), or --merge SHARD...")
                submissions = Path(args.submissions)
                cli = {k: getattr(args, k) for k in ("items", "workers", "seed", "wall_s", "test_timeout_s",
                                                     "memory_mb")}
                found = config.find(args.config, submissions)
                settings = config.load(found, cli)
                if args.unsafe_no_sandbox:
                    settings = dataclasses.replace(settings, unsafe_no_sandbox=True)
                if args.single:
                    settings = dataclasses.replace(settings, single=True)
                if not settings.items:
                    raise config.ConfigError("which items? give --item ITEMS (or items = [...] in the config)")
                items = catalog.select(settings.items)
                part = shard.parse(args.shard) if args.shard else None
                outdir.check(out, force=args.force, keep=bool(args.resume or args.only),
                             protected=[submissions, *([found] if found else [])])
                book = _grade(args, out, submissions, settings, items, part)
                trap.armed = False
            written = render.write_all(book, out)
        except failures as exc:
            print(f"mlcanon grade: {clean(exc)}", file=sys.stderr)
            return 2
        except interrupt.Interrupted as exc:  # before the batch knew its students: nothing to write
            print(f"mlcanon grade: interrupted ({signal.Signals(exc.signum).name}) before any job ran; "
                  f"nothing written", file=sys.stderr)
            return 128 + exc.signum
        except OSError as exc:  # --out cannot be cleared or written
            print(f"mlcanon grade: {clean(exc)}", file=sys.stderr)
            return 2
        _summary(book, out, written)
    if trap.signum:
        left = sum(1 for s in book.students for i in s.items if i.status is Status.INTERRUPTED)
        print(f"mlcanon grade: interrupted ({signal.Signals(trap.signum).name}); wrote the gradebook of the "
              f"finished jobs, {left} not graded (interrupted): run the command again with --resume (without --force) to grade them",
              file=sys.stderr)
        return trap.exit_code
    return 0


def _grade(args: argparse.Namespace, out: Path, submissions: Path, settings: GradeConfig,
           items: tuple[Item, ...], part: tuple[int, int] | None) -> Gradebook:
    """Grade the class into ``out``, recording each job in ``out/records``: afresh, or, with
    --resume or --only, keeping the recorded batch's cells under its configuration and seed."""
    import secrets

    from pytest_mlcanon.grade import batch, outdir, records

    keep: dict[tuple[str, str], ItemResult] = {}
    only = set(args.only) if args.only else None
    recorded = None
    if (args.resume and records.Journal.exists(out)) or only:
        recorded, keep = records.Journal.load(out)
        if settings.seed in (None, recorded.seed):  # the recorded run's seed, as its config had it
            settings = dataclasses.replace(settings, seed=recorded.config.get("seed"))
        seed = recorded.seed
    elif args.resume and outdir.holds_anything(out):
        raise records.RecordError(f"--resume: {out} holds no record of a batch (records/run.json); "
                                  f"pass --force to grade into it afresh")
    else:
        seed = settings.seed if settings.seed is not None else secrets.randbits(31)
    batch_id = records.identity(settings, items, seed, part, submissions)
    if recorded is not None:
        differences = batch_id.differences(recorded)
        if differences:
            raise records.RecordError(f"{'--only' if only and not args.resume else '--resume'}: this batch is not "
                                      f"the one recorded in {out} ({'; '.join(differences)}); grade into another "
                                      f"--out, or pass --force to grade afresh")
        batch_id = dataclasses.replace(batch_id, calibration=recorded.calibration)
    if only:
        keep = {key: cell for key, cell in keep.items() if key[0] not in only}
    journal = records.Journal(out, batch_id, keep)
    started = False

    def start() -> None:
        """Clear --out (--force) and write the records' identity: once the batch is sure to run (a
        batch refused for its submissions or its sandbox leaves --out as it was), or was interrupted."""
        nonlocal started
        if not started:
            started = True
            if args.force:
                outdir.clear(out)
            journal.start(regraded=only or ())

    book = batch.grade(submissions, settings, shard=part, progress=not args.no_progress, on_result=journal.record,
                       seed=seed, keep=keep, only=None if args.resume else only, on_calibrated=journal.calibrated,
                       on_start=start)
    start()
    return book


def _summary(book: Gradebook, out: Path, written: list[Path]) -> None:
    from tabulate import tabulate

    from pytest_mlcanon.grade.render.table import headline, summary_header, summary_row
    from pytest_mlcanon.grade.text import clean

    rows = [[clean(c, limit=200) for c in summary_row(book, s)] for s in book.students]
    print(tabulate(rows, headers=summary_header(book), tablefmt="simple", disable_numparse=True))
    print()
    print(headline(book))
    for note in book.sandbox + book.notes:
        print(f"  {clean(note)}")
    print(f"wrote {len(written)} files to {out}/ (gradebook.csv, gradebook-lms.csv, gradebook.md, gradebook.json, "
          f"report.html, feedback/, gradescope/) in {book.elapsed_s:.1f} s")
