"""Benchmark of ``mlcanon grade`` (issue 8, "Speed"): a runnable script, not a unit test.

It grades copies of the good learner's DPO (one small item) and prints:

* the marginal cost of one submission: one worker grades N submissions in a row; the cost is the
  time between the first and the last job's completion divided by N - 1, so the batch's fixed
  start-up (the zygote importing torch, the verifier's reference run) is not in it. Target: <= 0.5 s;
* the verifier's cost: its one-off reference run and the re-check cases it builds (wall and CPU);
* 40 submissions on 2 workers against the bound 1.2 x (40 x marginal / 2): the jobs phase (from
  the first job's start to the last grade recorded) is gated; the batch total is printed beside it as
  INFO, split into its one-off start-up and the jobs phase, because the bound has no start-up term.

Exit status 1 when the marginal cost or the jobs phase misses its target.

Wall times on a shared machine include other processes' load, so the CPU seconds per job (from
the kernel's accounting of each child) are printed too, beside the floor: the item's own reference
tests run by plain ``pytest --canon-item`` on the same files with the jobs' ini, in a process forked
from a warm one (what any grader that runs the tests must pay), so the grader's own share of a job
is the difference. The parent's CPU per job (snapshot, watch, assessment) and its scoring workers'
(the scan and the rubric it recomputes, on the untrusted files) run beside the children: free with
one worker on two cores, not with two.

    python benchmarks/grade_speed.py [--item posttrain/dpo] [--marginal-n 10] [--batch-n 40]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_mlcanon import catalog
from pytest_mlcanon.evidence import Status
from pytest_mlcanon.grade import batch, config
from pytest_mlcanon.grade.gradebook import Gradebook, ItemResult
from pytest_mlcanon.grade.worker import WorkerPool

REPO = Path(__file__).resolve().parents[1]
GOOD = REPO / "examples" / "learners" / "good"
TARGET_MARGINAL_S = 0.5
BOUND_FACTOR = 1.2


def make_class(root: Path, item: catalog.Item, count: int) -> Path:
    folder = root / f"class-{count}"
    for n in range(count):
        for module in item.modules:
            target = folder / f"student{n:03d}" / f"{module}.py"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(GOOD / f"{module}.py", target)
    return folder


def settings_for(item: str, workers: int) -> config.GradeConfig:
    return config.from_table({"items": item, "workers": workers, "seed": 7,
                              "limits": {"wall_s": 120, "test_timeout_s": 30}}, source="benchmark")


@dataclass
class Timing:
    """One batch: its wall time, each job's (start, end) in the parent's watch, each (recorded, cell),
    the parent's CPU seconds, and the verifier's calibration (wall, CPU, cases of the item)."""

    total: float
    spans: list[tuple[float, float]]
    done: list[tuple[float, ItemResult]]
    parent_cpu: float
    workers_cpu: float  # the scoring workers' (the scan and the rubric, on the untrusted files)
    verifier: tuple[float, float, int] = (0.0, 0.0, 0)


def timed_batch(folder: Path, item: str, workers: int) -> tuple[Gradebook, Timing]:
    done: list[tuple[float, ItemResult]] = []
    spans: list[tuple[float, float]] = []
    run_job = batch.run_job

    def timed_run_job(*args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            return run_job(*args, **kwargs)
        finally:
            spans.append((start, time.monotonic()))

    calibrate = batch._calibrate  # noqa: SLF001
    verifier: list[tuple[float, float, int]] = []

    def timed_calibrate(*args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        calibration = calibrate(*args, **kwargs)
        verifier.append((time.monotonic() - start, calibration.cpu_s, len(calibration.cases.get(item, []))))
        return calibration

    batch._calibrate = timed_calibrate  # noqa: SLF001
    pools: list[WorkerPool] = []

    class CountedPool(WorkerPool):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            pools.append(self)

    batch.run_job = timed_run_job
    batch.WorkerPool = CountedPool  # type: ignore[misc]
    cpu = time.process_time()
    started = time.monotonic()
    try:
        book = batch.grade(folder, settings_for(item, workers), progress=False,
                           on_result=lambda _, cell: done.append((time.monotonic(), cell)))
    finally:
        batch.run_job = run_job
        batch._calibrate = calibrate  # noqa: SLF001
        batch.WorkerPool = WorkerPool  # type: ignore[misc]
    total = time.monotonic() - started
    bad = [c.verdict for _, c in done if c.status is not Status.SCORED or c.score != 5]
    if bad:
        sys.exit(f"grade_speed: the good learner did not score 5/5: {bad[:3]}")
    return book, Timing(total, spans, done, time.process_time() - cpu, sum(p.spent_s for p in pools),
                        verifier[0] if verifier else (0.0, 0.0, 0))


def floor_cpu(item: catalog.Item, runs: int = 5) -> float:
    """CPU seconds of the item's tests on a submission of the good learner's files for the item (as
    a job has them), plain pytest with the jobs' ini, forked from a process warmed up as the zygote
    is (on the references: a student's file is new to it), run in a fresh interpreter so this one
    stays torch-free; the median of ``runs``."""
    out = subprocess.run([sys.executable, __file__, "--floor-child", item.slug, str(runs)], check=True,
                         capture_output=True, text=True).stdout
    return float(out.split()[-1])


def _floor_child(slug: str, runs: int) -> None:
    import contextlib
    import gc
    import io

    import pytest

    from pytest_mlcanon.grade import child, zygote

    zygote._preload()  # noqa: SLF001 - the same warm state a zygote has: imports, no reference
    zygote._rewrite(batch._test_files((catalog.get(slug),)))  # noqa: SLF001 - its tests compiled
    with tempfile.TemporaryDirectory() as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text(batch._ini(settings_for(slug, 1)))  # noqa: SLF001 - the jobs' own ini
        os.chdir(tmp)
        tests = str(REPO / "canon_tests")
        argv = child.pytest_argv(str(ini), tests, slug, str(make_class(Path(tmp), catalog.get(slug), 1) / "student000"))
        gc.collect()
        gc.freeze()
        times = []
        for _ in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            pid = os.fork()
            if pid == 0:
                with contextlib.redirect_stdout(io.StringIO()):
                    code = pytest.main(argv)
                os._exit(int(code))
            os.waitpid(pid, 0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            times.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    print(statistics.median(times))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--item", default="posttrain/dpo")
    parser.add_argument("--marginal-n", type=int, default=10)
    parser.add_argument("--batch-n", type=int, default=40)
    parser.add_argument("--floor-child", nargs=2, metavar=("ITEM", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_child:
        _floor_child(args.floor_child[0], int(args.floor_child[1]))
        return 0
    item = catalog.get(args.item)
    floor = floor_cpu(item)
    with tempfile.TemporaryDirectory(prefix="mlcanon-grade-bench-") as tmp:
        root = Path(tmp)
        book, timing = timed_batch(make_class(root, item, args.marginal_n), item.slug, 1)
        ends = sorted(end for _, end in timing.spans)
        marginal = (ends[-1] - ends[0]) / (len(ends) - 1)
        cpu = statistics.median(c.cpu_s for _, c in timing.done)
        print(f"mlcanon grade speed: {item.label}, the good learner; {os.cpu_count()} cores; load average "
              f"{os.getloadavg()[0]:.1f}")
        for note in book.sandbox:
            print(f"  sandbox: {note}")
        print(f"floor: the item's own tests, plain pytest forked from a warm process: {floor:.2f} s CPU")
        mark = "PASS" if marginal <= TARGET_MARGINAL_S else "FAIL"
        print(f"marginal cost per submission (1 worker, {args.marginal_n} submissions): {marginal:.2f} s wall, "
              f"{cpu:.2f} s CPU per job (median; the grader's share: {cpu - floor:+.2f} s); target <= "
              f"{TARGET_MARGINAL_S} s: {mark}")
        print(f"  the parent beside it: {timing.parent_cpu / args.marginal_n:.2f} s CPU per job (with its start-up), "
              f"its scoring workers {timing.workers_cpu / args.marginal_n:.2f} s")
        wall, cpu_v, cases = timing.verifier
        print(f"the verifier (once per batch, beside the zygote's start): the reference run and {cases} re-check "
              f"cases with their answers in {wall:.1f} s wall, {cpu_v:.2f} s CPU; a job replays the cases before "
              f"its tests (in the CPU per job above)")
        book, timing = timed_batch(make_class(root, item, args.batch_n), item.slug, 2)
        total = timing.total
        jobs = max(t for t, _ in timing.done) - min(start for start, _ in timing.spans)  # to the last grade
        bound = BOUND_FACTOR * args.batch_n * marginal / 2
        mark_jobs = "PASS" if jobs <= bound else "FAIL"
        print(f"{args.batch_n} submissions on 2 workers: jobs phase {jobs:.1f} s; bound {BOUND_FACTOR} x "
              f"({args.batch_n} x {marginal:.2f} / 2) = {bound:.1f} s: {mark_jobs}")
        over = "within" if total <= bound else f"{total - bound:.1f} s over"
        print(f"  INFO batch total {total:.1f} s = {total - jobs:.1f} s one-off start-up (the zygote imports torch and "
              f"the lazy torch modules, the verifier runs the references; snapshots and scans overlap it) + the jobs phase: "
              f"{over} the bound, which has no start-up term")
        print(f"  CPU per job: {statistics.median(c.cpu_s for _, c in timing.done):.2f} s (median), the parent's "
              f"{timing.parent_cpu / args.batch_n:.2f} s; parallel speed-up {args.batch_n * marginal / jobs:.2f}x on 2 workers")
    return 0 if mark == "PASS" and mark_jobs == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
