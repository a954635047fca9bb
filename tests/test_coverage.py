"""The learner files' line coverage by the reference tests, in the rubric report: measured by the
plugin with ``--canon-coverage``, or read from ``pytest --cov`` when pytest-cov runs, serially or
under pytest-xdist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_mlcanon.learner_coverage import summarize

REFS = Path(__file__).resolve().parents[1] / "canon_refs"

# Appended to the reference IoU module: the tests never call it, so its body is never reached.
UNCALLED = '''

def never_called(boxes):
    """(N, 4) -> (N,): no reference test calls this."""
    widths = boxes[:, 2] - boxes[:, 0]  # (N,)
    return widths * 2
'''


def _learner_with_dead_code(learner) -> tuple[Path, list[int]]:  # type: ignore[no-untyped-def]
    """The reference boxes module plus an uncalled function; returns the file and that body's lines."""
    text = (REFS / "detection" / "boxes.py").read_text() + UNCALLED
    base = learner(files={"detection/boxes": text})
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines, 1) if line.startswith("def never_called"))
    return base / "detection" / "boxes.py", [start + 2, start + 3]  # the two statements of the body


def _missing(report: Path) -> tuple[dict, set[int]]:
    [item] = json.loads(report.read_text())["items"]
    [(path, cov)] = item["coverage"].items()
    missing: set[int] = set()
    for part in filter(None, (p.strip() for p in cov["missing"].split(","))):
        first, _, last = part.partition("-")
        missing.update(range(int(first), int(last or first) + 1))
    return cov, missing


def test_report_lists_the_lines_the_tests_never_reached(pytester: pytest.Pytester, learner) -> None:
    _, body = _learner_with_dead_code(learner)
    result = pytester.runpytest("--canon-item=18", "--canon-coverage", "--canon-report=json:r.json", "-q",
                                "-p", "no:cacheprovider")
    assert result.ret == 0
    cov, missing = _missing(pytester.path / "r.json")
    assert cov["measured"] and set(body) <= missing
    assert cov["executed"] == cov["statements"] - len(missing)
    assert cov["percent"] == pytest.approx(100 * cov["executed"] / cov["statements"], abs=0.05)
    result.stdout.fnmatch_lines([
        f"*coverage: practice/detection/boxes.py {round(cov['percent'])}% of {cov['statements']} statements; "
        f"never reached: *{body[0]}-{body[1]}*",
    ])


def test_coverage_is_off_by_default(pytester: pytest.Pytester, learner) -> None:
    _learner_with_dead_code(learner)
    result = pytester.runpytest("--canon-item=18", "--canon-report=json:r.json", "-q", "-p", "no:cacheprovider")
    assert result.ret == 0
    assert "coverage:" not in result.stdout.str()
    assert json.loads((pytester.path / "r.json").read_text())["items"][0]["coverage"] == {}


def test_the_ini_key_turns_it_on(pytester: pytest.Pytester, learner) -> None:
    _, body = _learner_with_dead_code(learner)
    result = pytester.runpytest("--canon-item=18", "-o", "mlcanon_coverage=true", "-q", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"*coverage: practice/detection/boxes.py *never reached: *{body[0]}-{body[1]}*"])


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_alongside_pytest_cov_both_report_the_same_lines(pytester: pytest.Pytester, learner,
                                                         workers: list[str]) -> None:
    pytest.importorskip("pytest_cov")
    _, body = _learner_with_dead_code(learner)
    result = pytester.runpytest_subprocess("--canon-item=18", "--cov=practice", "--cov-report=term-missing",
                                           "--canon-report=json:r.json", "-q", "-p", "no:cacheprovider", *workers)
    assert result.ret == 0
    cov, missing = _missing(pytester.path / "r.json")
    assert set(body) <= missing
    row = re.search(r"practice/detection/boxes\.py\s+(\d+)\s+(\d+)\s+\d+%\s+(.*)", result.stdout.str())
    assert row is not None, result.stdout.str()
    assert (int(row[1]), int(row[2])) == (cov["statements"], len(missing))  # pytest-cov's own table agrees
    assert row[3].strip() == cov["missing"]


@pytest.mark.slow
def test_pytest_cov_without_the_learner_folder_says_so(pytester: pytest.Pytester, learner) -> None:
    pytest.importorskip("pytest_cov")
    _learner_with_dead_code(learner)
    pytester.mkdir("elsewhere")
    result = pytester.runpytest_subprocess("--canon-item=18", "--cov=elsewhere", "-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*coverage: no line of practice/detection/boxes.py was recorded*--cov*"])


def test_summarize_counts_statements_not_lines(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("x = 1\n\n\ndef f():\n    return (1 +\n            2)\n")  # statements: 1, 4, 5
    [cov] = summarize({str(source): {1, 4}}, {str(source): "m.py"})
    assert (cov.statements, cov.executed, cov.missing) == (3, 2, "5")  # a statement counts at its first line
    [unmeasured] = summarize({}, {str(source): "m.py"})
    assert not unmeasured.measured
