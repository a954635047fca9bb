"""Shared timing for the benchmark scripts: interleaved repeated runs of shell commands, medians,
and one printed line per figure with its target and a pass/fail mark."""

from __future__ import annotations

import atexit
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# Where the pytest runs start: a directory with no pytest configuration, as a learner's repo would
# be. From the repository root pytest would also load this project's own ``addopts`` (pytester) and
# ``tests/conftest.py``, which a learner never pays for.
NEUTRAL = Path(tempfile.mkdtemp(prefix="mlcanon-bench-"))
atexit.register(shutil.rmtree, NEUTRAL, ignore_errors=True)


def run(argv: Sequence[str], cwd: Path = NEUTRAL, env: dict[str, str] | None = None) -> float:
    """Wall time of one run of ``argv`` in seconds; raises if it fails."""
    start = time.perf_counter()
    proc = subprocess.run(list(argv), cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0,):
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return elapsed


def interleaved_medians(commands: dict[str, Sequence[str]], repeats: int = 5, cwd: Path = NEUTRAL) -> dict[str, float]:
    """Median wall time per command, the commands run in turn ``repeats`` times (A B A B ...),
    after one untimed warm-up each, so drift in machine load hits every command alike."""
    for argv in commands.values():
        run(argv, cwd)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, argv in commands.items():
            times[name].append(run(argv, cwd))
    return {name: statistics.median(values) for name, values in times.items()}


@dataclass(frozen=True)
class Figure:
    """One measured figure against its target. ``gated=False`` prints it for the record (marked
    INFO) without letting it fail the run: for a target shown to be unreachable by its own bound."""

    name: str
    value: float
    target: float
    unit: str = "x"
    gated: bool = True

    @property
    def passed(self) -> bool:
        return self.value <= self.target or not self.gated

    def line(self) -> str:
        met = self.value <= self.target
        mark = ("PASS" if met else "FAIL") if self.gated else "INFO"
        return f"{mark}  {self.name}: {self.value:.2f}{self.unit} (target <= {self.target:.2f}{self.unit})"


def pytest_argv(*args: str) -> list[str]:
    return [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
