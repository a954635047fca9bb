"""Reading pytest's reports: a phase's outcome, the one-line message of a failure, and where it happened
(in the learner's files when the traceback reached them)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_mlcanon.evidence import Location
from pytest_mlcanon.layout import shown


def phase_outcome(report: pytest.TestReport) -> str | None:
    """A phase's outcome for the test: the call's, or a failed or skipped setup or teardown; None for
    a setup or teardown that passed (it says nothing about the test)."""
    if report.when == "call":
        return "skipped" if report.skipped else ("failed" if report.failed else "passed")
    if report.failed:
        return "error"
    if report.skipped:
        return "skipped"
    return None


def short_message(report: Any) -> str:
    """The last meaningful line of a failure (``E   AssertionError: ...``), trimmed to one line."""
    longrepr = getattr(report, "longrepr", None)
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # skip: (path, line, reason)
        return str(longrepr[2])
    crash = getattr(getattr(longrepr, "reprcrash", None), "message", None)
    text = crash if crash else str(longrepr)
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""


def failure_location(report: Any, learner_files: Mapping[str, str], root: Path,
                     rootpath: Path | None = None) -> Location | None:
    """Where a failure happened: the deepest traceback entry in the learner's files (``learner_files``
    maps their resolved paths to module files; such a location is a module file), else the failing
    line of the test function's own body (an assertion on a wrong value never enters the learner's
    code; a shared helper such as ``_close`` would name the same line for every test), else the
    deepest entry, else (no traceback: ``--tb=no``, a string report) the test function itself."""
    if not getattr(report, "failed", False):
        return None
    entries = getattr(getattr(getattr(report, "longrepr", None), "reprtraceback", None), "reprentries", None) or []
    locations = [(loc.path, loc.lineno) for e in entries if (loc := getattr(e, "reprfileloc", None)) is not None]
    test = _test_location(report, rootpath or root)
    if not locations:
        return test
    inside = [(learner_files[resolved], line) for path, line in locations
              if (resolved := _resolve_quietly(path, root)) in learner_files]
    if inside:
        return Location(inside[-1][0], int(inside[-1][1]), learner=True)
    in_test = [loc for loc in locations if test is not None and shown(_resolve_quietly(loc[0], root)) == test.path]
    path, line = in_test[0] if in_test else locations[-1]  # the outermost test-file entry: the test's body
    return Location(shown(_resolve_quietly(path, root)), int(line))


def _test_location(report: Any, rootpath: Path) -> Location | None:
    """The test function's file and ``def`` line (``report.location`` is relative to the rootdir)."""
    location = getattr(report, "location", None)
    if not location or not location[0]:
        return None
    path, lineno = location[0], location[1]
    return Location(shown(_resolve_quietly(path, rootpath)), int(lineno) + 1 if lineno is not None else 0)


def _resolve_quietly(path: str, root: Path) -> str:
    try:
        return str((root / path).resolve())
    except OSError:
        return path
