"""pytest-xdist with --canon-item: the rubric is computed on the controller from the workers'
reports (and their line coverage), so the report equals a serial run's."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # the fast lane, pytest -m "not slow", leaves it out (CONTRIBUTING.md)


def _scores(path) -> list[dict]:  # type: ignore[no-untyped-def]
    items = json.loads(path.read_text())["items"]
    for item in items:
        item.pop("timing", None)
    return items


def test_parallel_report_equals_serial_report(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["detection/boxes", "detection/nms"], files={})
    serial = pytester.runpytest("--canon-item=18,19", "--canon-coverage", "--canon-report=json:serial.json", "-q")
    parallel = pytester.runpytest_subprocess("--canon-item=18,19", "--canon-coverage",
                                             "--canon-report=json:parallel.json", "-q", "-n", "2")
    assert serial.ret == parallel.ret == 0
    assert _scores(pytester.path / "parallel.json") == _scores(pytester.path / "serial.json")
    assert all(item["coverage"] for item in _scores(pytester.path / "serial.json"))  # the workers' lines merged
    parallel.stdout.fnmatch_lines(["*#18 detection/boxes*5/5*strong*", "*#19 detection/nms*5/5*strong*",
                                   "*runtime: * confirmed, 0 contradicted*"])
