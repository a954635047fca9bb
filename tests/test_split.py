"""A watched check's tests in two processes (``split``): the same report as one process, whatever the
helper does."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_mlcanon import cli, split

REPO = Path(__file__).resolve().parents[1]
FLAWED_DPO = REPO / "examples" / "learners" / "flawed" / "posttrain" / "dpo.py"


def test_the_partition_runs_every_test_once_in_collection_order_and_balances_the_seconds() -> None:
    nodeids = [f"t{i}" for i in range(10)]
    seconds = {"t0": 0.5, "t3": 0.4, "t7": 0.3, **{f"t{i}": 0.01 for i in (1, 2, 4, 5, 6, 8, 9)}}
    here, there = split.partition(nodeids, seconds)
    assert sorted(here + there) == list(range(10))
    assert here == sorted(here) and there == sorted(there)
    load = [sum(seconds[nodeids[i]] for i in side) for side in (here, there)]
    assert abs(load[0] - load[1]) <= 0.3  # at most the shortest long test apart
    assert split.partition([], {}) == ([], [])


def test_the_warm_up_times_each_test_over_its_phases() -> None:
    timer = split.Durations()
    for when, seconds in (("setup", 0.1), ("call", 0.2), ("teardown", 0.05)):
        timer.pytest_runtest_logreport(pytest.TestReport("a.py::t", ("a.py", 1, "t"), {}, "passed", None, when,
                                                         duration=seconds))
    assert timer.seconds == {"a.py::t": pytest.approx(0.35)}


SCRIPT = """
import json, os, sys
from pathlib import Path
from pytest_mlcanon import catalog, split, warm
item = catalog.get('posttrain/dpo')
root = Path.cwd()
warmed = warm.warm_up([item], root)
argv = warm.check_args([item], root / 'practice', False, root, timed=False)
report = warm.report_path([item])
helper_main, send = split._helper_main, split._Sender.send

def marked(session, items, fd):
    (root / f'helper-{MODE}').write_text(str(len(items)))
    helper_main(session, items, fd)

def stops_early(session, items, fd):
    marked(session, items[:2], fd)  # reports two tests, then ends as if killed

def garbles(self, kind, body):
    self.sent = getattr(self, 'sent', 0) + 1
    if self.sent == 4:
        self.pipe.write(b'{"kind": "report", "body": {"nodeid"\\n')
    send(self, kind, body)

def cannot_fork(cls, session, items):
    raise OSError(11, 'Resource temporarily unavailable')

fork = split._Helper.fork
runs = {}
for MODE in ('serial', 'split', 'stops', 'garbles', 'cannot_fork'):
    split.MIN_TESTS = 10**9 if MODE == 'serial' else 1
    split.MIN_SECONDS = 0.0  # the flawed DPO's tests take 0.11 s on a fast machine: split them whatever they take
    split._helper_main = stops_early if MODE == 'stops' else marked
    split._Sender.send = garbles if MODE == 'garbles' else send
    split._Helper.fork = classmethod(cannot_fork) if MODE == 'cannot_fork' else fork
    run = warm.check(argv, root, report, 120, output=root / f'{MODE}.txt', extra=warmed.lean_args())
    runs[MODE] = {'ending': run.ending.name, 'report': json.loads((root / report).read_text()),
                  'helper': (root / f'helper-{MODE}').read_text() if (root / f'helper-{MODE}').exists() else None}
print(json.dumps(runs))
"""


def _without_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_times(v) for key, v in value.items() if key not in ("duration", "seconds")}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


@pytest.mark.slow
def test_a_split_check_reports_exactly_what_one_process_reports(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The flawed learner's DPO (failures, shape traces, numerics probes) checked in one process, split in
    two, split with a helper that stops after two tests, with a helper that writes a broken frame, and
    where no helper can be forked: five identical reports (times aside); the tests the helper did not
    report ran in the check's process."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["drill", "posttrain/dpo"]) == 0
    shutil.copyfile(FLAWED_DPO, tmp_path / "practice" / "posttrain" / "dpo.py")
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout.splitlines()[-1])
    serial = runs.pop("serial")
    assert serial["helper"] is None and serial["ending"] == "FINISHED"
    assert serial["report"]["items"][0]["verdict"].startswith("no: correctness failed (9 of 32 tests failed)")  # 52 ran: 7 probes and 13 input checks count apart
    no_fork = runs.pop("cannot_fork")  # no helper: the check runs in its own process, as ever
    assert no_fork["helper"] is None and no_fork["ending"] == "FINISHED"
    assert _without_times(no_fork["report"]) == _without_times(serial["report"])
    for mode, run in runs.items():
        assert run["helper"] is not None and int(run["helper"]) >= 2, mode  # the helper ran tests
        assert run["ending"] == "FINISHED", mode
        assert _without_times(run["report"]) == _without_times(serial["report"]), mode
