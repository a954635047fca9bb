"""Line coverage of the learner's files by the reference tests, measured with coverage.py.

Which lines of my code did the tests never reach? An uncovered branch is code the grade says
nothing about, so the report lists it beside the rubric.

One measurement per process: started before the learner's modules are imported (module-level lines
count), stopped after the tests. Under pytest-xdist each worker measures its share and sends the
executed lines to the controller (``workeroutput``), which takes the union. When another coverage.py
measurement is already running (``pytest --cov``), this one does not start a second tracer, which
would pause that one; it reads the learner's lines from the running measurement instead, so the
learner files must be inside ``--cov``'s sources to be reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import coverage

WORKER_KEY = "mlcanon_coverage"
# coverage.py's warnings about what was not measured: the report itself says what ran and what did not.
QUIET = ["no-data-collected", "module-not-imported", "module-not-measured"]


@dataclass(frozen=True)
class FileCoverage:
    """Coverage of one learner file: statements, how many ran, and the ones that never did.
    ``measured`` is false when no line of it was recorded (``pytest --cov`` left its folder out)."""

    path: str
    statements: int
    executed: int
    missing: str  # coverage.py's ranges, "12-14, 30"
    measured: bool = True

    @property
    def percent(self) -> float:
        return 100.0 * self.executed / self.statements if self.statements else 100.0

    def to_dict(self) -> dict[str, Any]:
        return {"measured": self.measured, "statements": self.statements, "executed": self.executed,
                "percent": round(self.percent, 1), "missing": self.missing}


def render(path: str, cov: Mapping[str, Any]) -> str:
    """One report line from ``FileCoverage.to_dict()``."""
    if not cov["measured"]:
        return (f"coverage: no line of {path} was recorded (with pytest --cov, its folder must be among "
                "--cov's sources)")
    never = f"; never reached: {cov['missing']}" if cov["missing"] else ""
    return f"coverage: {path} {cov['percent']:.0f}% of {cov['statements']} statements{never}"


class Measurement:
    """Executed lines of ``files`` for one run: measured while it runs (by our own tracer, or read
    from a running pytest-cov measurement), plus what xdist workers hand over."""

    def __init__(self, files: Iterable[Path], *, borrow: bool = False) -> None:
        """``borrow``: another tool (pytest-cov) measures this process, or will once the session
        starts (it starts late on an xdist worker): read its data instead of starting a tracer."""
        self.files = sorted({str(Path(f).resolve()) for f in files})
        self.borrow = borrow
        self._own: coverage.Coverage | None = None
        self._borrowed: coverage.Coverage | None = None
        self._lines: dict[str, set[int]] = {}

    def start(self) -> None:
        if not self.files:
            return
        self._borrowed = coverage.Coverage.current()
        if self._borrowed is None and not self.borrow:
            self._own = _quiet(coverage.Coverage(data_file=None, include=self.files, config_file=False))
            self._own.start()

    def attach(self) -> None:
        """Once the session runs, follow the measurement that is running now: pytest-cov on an
        xdist worker replaces its start-up measurement by another at session start, and stops that
        one before the session finishes."""
        current = coverage.Coverage.current()
        if self._own is None and current is not None and current is not self._borrowed:
            if self._borrowed is not None:
                self._harvest(self._borrowed)
            self._borrowed = current

    def stop(self) -> dict[str, list[int]]:
        """Stop measuring (our own tracer; a borrowed one is read, never stopped) and return the
        executed line numbers per file (absolute paths), an xdist worker's own included."""
        for cov in (self._own, self._borrowed):
            if cov is not None:
                self._harvest(cov)
        self._own = self._borrowed = None
        return {path: sorted(lines) for path, lines in self._lines.items()}

    def merge(self, lines: dict[str, list[int]]) -> None:
        """Add the lines an xdist worker executed (its ``stop()``)."""
        for path, numbers in lines.items():
            self._lines.setdefault(path, set()).update(numbers)

    @property
    def lines(self) -> dict[str, set[int]]:
        return self._lines

    def _harvest(self, cov: coverage.Coverage) -> None:
        if cov is self._own:
            cov.stop()
        data = cov.get_data()
        wanted = set(self.files)
        self.merge({path: data.lines(path) or [] for path in data.measured_files() if path in wanted})


def _quiet(cov: coverage.Coverage) -> coverage.Coverage:
    cov.set_option("run:disable_warnings", QUIET)
    return cov


def summarize(executed: dict[str, set[int]], display: dict[str, str]) -> list[FileCoverage]:
    """Per learner file (``display`` maps absolute path to the path shown), what ran and what did not."""
    analyser = _quiet(coverage.Coverage(data_file=None, config_file=False))
    analyser.get_data().add_lines({path: sorted(lines) for path, lines in executed.items() if lines})
    out = []
    for path, shown in display.items():
        if not Path(path).is_file():
            continue
        if not executed.get(path):
            out.append(FileCoverage(shown, 0, 0, "", measured=False))
            continue
        _, statements, _, missing, missing_text = analyser.analysis2(path)
        out.append(FileCoverage(shown, len(statements), len(statements) - len(missing), missing_text))
    return out
