"""Reading pytest's reports: a phase's outcome, the one-line message of a failure, and where it happened
(in the learner's files when the traceback reached them); and rewriting a failure's report in the
learner's terms (17.5)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_mlcanon.evidence import Location, ValueOrigin
from pytest_mlcanon.feedback import learner_names, summarize_call
from pytest_mlcanon.layout import in_package, shown, tests_dir
from pytest_mlcanon.rubric.shape_instrument import Recorder
from pytest_mlcanon.testing import ValueMismatch
from pytest_mlcanon.watchdog import CanonTimeout


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


def raised_by(excinfo: Any, learner_files: Mapping[str, str]) -> tuple[str, str] | None:
    """For a test that failed on an exception other than its own check (an ``AssertionError``, pytest's
    ``fail``/``skip``, a watchdog stop): the exception's class name and where its innermost frame is
    (``evidence.RAISED_AT``): a line of the learner's files, the canon's test file, or a library."""
    error = getattr(excinfo, "value", None)
    if not isinstance(error, Exception) or isinstance(error, (AssertionError, pytest.fail.Exception,
                                                              pytest.skip.Exception)):
        return None
    try:
        innermost = _resolve_quietly(str(excinfo.traceback[-1].path), Path.cwd())
    except (IndexError, AttributeError, TypeError):
        return type(error).__name__, "library"
    if innermost in learner_files:
        return type(error).__name__, "learner"
    in_tests = (in_package(innermost) or "").startswith(f"{tests_dir().name}/")  # a test, or its helpers
    return type(error).__name__, "test" if in_tests else "library"


# -- feedback in the learner's terms (17.5) ----------------------------------------------------------------

def value_origin(recorder: Recorder, excinfo: Any, by_path: Mapping[str, str]) -> ValueOrigin | None:
    """For a test that failed a value check (``testing.ValueMismatch``): the learner's line that bound
    or returned the value compared, and the call it ran in, when the shape instrumenter noted it."""
    error = excinfo[1] if isinstance(excinfo, tuple) else getattr(excinfo, "value", None)
    if not isinstance(error, ValueMismatch):
        return None
    produced = recorder.origin(error.actual)
    if produced is None or produced.path not in by_path:
        return None
    return ValueOrigin(by_path[produced.path], produced.line,
                       summarize_call(produced.call.function, produced.call.args))


def in_learner_terms(report: pytest.TestReport, served: Mapping[str, str], origin: ValueOrigin | None) -> None:
    """Rewrite a failure's report for the learner: the canon's files as ``canon_tests/test_x.py``
    (never ``.venv/.../site-packages/...``), the learner's classes as theirs
    (``practice/posttrain/dpo.py:DPOOutput``, not ``canon_refs.posttrain.dpo.DPOOutput``), and, for a
    failed value check, a section naming the learner's line that produced the value."""
    longrepr = report.longrepr
    chain = getattr(longrepr, "chain", None)
    parts = [(tb, crash) for tb, crash, _ in chain] if chain else [
        (getattr(longrepr, "reprtraceback", None), getattr(longrepr, "reprcrash", None))]
    for reprtraceback, reprcrash in parts:
        for entry in getattr(reprtraceback, "reprentries", None) or []:
            location = getattr(entry, "reprfileloc", None)
            if location is not None:
                location.path = in_package(location.path) or location.path
                location.message = learner_names(location.message, served)
            if isinstance(getattr(entry, "lines", None), list):
                entry.lines = [learner_names(_unqualified(line), served) for line in entry.lines]
        if reprcrash is not None:
            reprcrash.message = learner_names(_unqualified(reprcrash.message), served)
    if origin is not None:
        report.sections.append(("mlcanon: where the wrong value came from",
                                f"{origin.call}\nproduced it at {served.get(_module(origin.file), origin.file)}:"
                                f"{origin.line}"))


def skip_in_package_terms(report: pytest.TestReport) -> None:
    """A skip's place (pytest's ``SKIPPED [1] path:line: reason`` summary line) as the canon's
    package shows it, ``canon_tests/test_x.py``, as its node id is."""
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3:
        path, line, reason = longrepr
        report.longrepr = (in_package(path) or path, line, reason)


#: The plugin's own failures, whose message is the whole verdict: shown without the class's dotted path.
_OWN_ERRORS = tuple(f"{cls.__module__}.{cls.__qualname__}: " for cls in (ValueMismatch, CanonTimeout))


def _unqualified(text: str) -> str:
    for prefix in _OWN_ERRORS:
        text = text.replace(prefix, "")
    return text


def _module(file: str) -> str:
    return file.removesuffix(".py")
