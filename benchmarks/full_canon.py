"""P2: the whole reference canon (every item with a reference, the capstone excepted) under
``pytest -n 2`` (pytest-xdist), against 90 s on this 2-core machine; and the 10 slowest tests
from ``--durations``. Run: ``python benchmarks/full_canon.py``."""

from __future__ import annotations

import subprocess
import sys
import time

from _common import NEUTRAL, REPO, Figure, pytest_argv

sys.path.insert(0, str(REPO))

from pytest_mlcanon import catalog  # noqa: E402
from pytest_mlcanon.layout import in_canon  # noqa: E402


def selector() -> str:
    return ",".join(str(i.number) for i in catalog.all_items() if in_canon(i) and i.slug != "capstone/agent")


def figures() -> list[Figure]:
    argv = pytest_argv(f"--canon-item={selector()}", f"--impl={REPO / 'canon_refs'}", "-n", "2", "--durations=10")
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=NEUTRAL, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    lines = proc.stdout.splitlines()
    if "slowest 10 durations" in proc.stdout:
        first = next(i for i, line in enumerate(lines) if "slowest 10 durations" in line)
        print("\n".join(lines[first:first + 11]))
    if proc.returncode != 0:
        print(proc.stdout[-3000:])
        raise SystemExit(f"the reference canon failed (exit {proc.returncode})")
    return [Figure("P2 whole reference canon, -n 2", elapsed, 90.0, unit=" s")]


if __name__ == "__main__":
    results = figures()
    for figure in results:
        print(figure.line())
    sys.exit(0 if all(f.passed for f in results) else 1)
