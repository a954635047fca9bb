"""Benchmark of ``mlcanon watch`` (issue 22.1): the time from a save to the verdict, beside the cold
``mlcanon check``. A runnable script, not a unit test.

In a fresh learner repo it drills ``posttrain/dpo`` and writes the good learner's DPO, then:

* cold: ``mlcanon check posttrain/dpo`` in a new process, ``--repeats`` times (wall and CPU seconds);
* warm: one ``mlcanon watch posttrain/dpo``; after it is ready, ``--saves`` saves of the file (each adds
  a comment line, so every check still passes and is recorded); for each, the wall time from just
  before the write to the moment the watch prints the verdict line, and the CPU seconds of the forked
  check (the watch's children, from ``/proc``).

Target: the median save-to-verdict time at most 0.5 s (on a quiet machine). Exit status 1 on a miss.
On a shared machine read the CPU figures and the load printed beside them: wall time includes
everyone else's processes.

    python benchmarks/watch_latency.py [--item posttrain/dpo] [--saves 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import queue
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from pytest_mlcanon import catalog

REPO = Path(__file__).resolve().parents[1]
GOOD = REPO / "examples" / "learners" / "good"
TARGET_S = 0.5
IDLE_S = 1.5  # between a verdict and the next save: a learner reads and types for longer (the next check's child is forked meanwhile)
MLCANON = [sys.executable, "-m", "pytest_mlcanon.cli"]
VERDICT_PREFIX = "── #"  # the watch's line after each check: "── #55 posttrain/dpo: strong 5/5 · ... ──"


def learner_repo(item: catalog.Item) -> Path:
    root = Path(tempfile.mkdtemp(prefix="mlcanon-watch-bench-"))
    subprocess.run([*MLCANON, "drill", item.slug], cwd=root, check=True, capture_output=True)
    for module in item.modules:
        shutil.copyfile(GOOD / f"{module}.py", root / "practice" / f"{module}.py")
    return root


def cold(root: Path, item: catalog.Item, repeats: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([*MLCANON, "check", item.slug, "-q"], cwd=root, capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(f"the cold check failed:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return walls, cpus


def children_cpu(pid: int) -> float:
    """CPU seconds of the reaped children of ``pid`` (fields cutime and cstime of /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def warm(root: Path, item: catalog.Item, saves: int) -> tuple[float, list[float], list[float]]:
    """(seconds until ready, save-to-verdict seconds, CPU seconds per check)."""
    watch = subprocess.Popen([*MLCANON, "watch", item.slug], cwd=root, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in watch.stdout or ()], daemon=True).start()

    def wait_for(prefix: str, timeout: float = 300.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise SystemExit(f"mlcanon watch printed no line starting {prefix!r} in {timeout:.0f} s") from None
            if line.startswith(prefix):
                return line

    try:
        start = time.perf_counter()
        wait_for("ready")
        ready = time.perf_counter() - start
        target = root / "practice" / f"{item.modules[0]}.py"
        text = target.read_text()
        latencies, cpus = [], []
        for n in range(saves):
            time.sleep(IDLE_S)  # the watch idles between saves, as it does while a learner types
            cpu_before = children_cpu(watch.pid)
            saved = time.perf_counter()
            target.write_text(f"{text}\n# save {n}\n")
            line = wait_for(VERDICT_PREFIX)
            latencies.append(time.perf_counter() - saved)
            cpus.append(children_cpu(watch.pid) - cpu_before)
            if "strong 5/5" not in line:
                raise SystemExit(f"save {n}: the check did not pass: {line.strip()}")
        return ready, latencies, cpus
    finally:
        watch.terminate()
        watch.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--item", default="posttrain/dpo")
    parser.add_argument("--saves", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    item = catalog.get(args.item)
    root = learner_repo(item)
    try:
        load = os.getloadavg()
        print(f"{item.label}, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} CPUs")
        walls, cold_cpus = cold(root, item, args.repeats)
        print(f"cold mlcanon check:  median {statistics.median(walls):.2f} s wall, "
              f"{statistics.median(cold_cpus):.2f} s CPU ({args.repeats} runs)")
        ready, latencies, cpus = warm(root, item, args.saves)
        median = statistics.median(latencies)
        print(f"mlcanon watch:       ready after {ready:.1f} s (once); save to verdict: median {median:.2f} s wall "
              f"(min {min(latencies):.2f}, max {max(latencies):.2f}), {statistics.median(cpus):.2f} s CPU per check "
              f"({args.saves} saves)")
        print(f"speed-up over the cold check: {statistics.median(walls) / median:.1f}x wall, "
              f"{statistics.median(cold_cpus) / statistics.median(cpus):.1f}x CPU")
        load = os.getloadavg()
        print(f"load average after: {load[0]:.1f}")
        met = median <= TARGET_S
        print(f"{'PASS' if met else 'FAIL'}  save to verdict: {median:.2f} s (target <= {TARGET_S:.2f} s)")
        return 0 if met else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
