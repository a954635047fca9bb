"""An interrupted batch keeps its work (issue 18.3), on the teacher's example class as the README
grades it: Ctrl-C at half way writes the gradebook of the finished jobs and exits 130 with one line;
``--resume`` grades the rest, and the gradebook equals one uninterrupted run's apart from times;
``--only`` regrades some students into it. The outputs follow the umask (18.2): a CI upload step
running as another user reads them."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # grades a class three times (CONTRIBUTING.md's fast lane leaves it out)

REPO = Path(__file__).resolve().parents[1]
TEACHER = REPO / "examples" / "teacher"
#: examples/teacher/README.md's command, with a fixed seed so that two batches can be compared.
COMMAND = [sys.executable, "-m", "pytest_mlcanon.cli", "grade", str(TEACHER / "submissions"),
           "--item", "posttrain/dpo,transformer/attention", "--seed", "7"]
#: What two runs of one batch may differ in: when it ran, how long things took, and what they used.
TIMES = frozenset({"graded_at", "elapsed_s", "time_s", "cpu_s", "peak_mb"})
#: The batch's private scratch folder (``mlcanon-grade-XXXXXXXX``), random per run, shows in a few
#: messages of a submission that cannot be imported; any two uninterrupted runs differ there too.
SCRATCH = re.compile(r"mlcanon-grade-[A-Za-z0-9_]+")


def _comparable(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _comparable(v) for k, v in data.items() if k not in TIMES}
    if isinstance(data, list):
        return [_comparable(v) for v in data]
    return SCRATCH.sub("mlcanon-grade-*", data) if isinstance(data, str) else data


def _book(out: Path) -> dict[str, Any]:
    return json.loads((out / "gradebook.json").read_text(encoding="utf-8"))


def _statuses(book: dict[str, Any]) -> list[str]:
    return [i["status"] for s in book["students"] for i in s["items"]]


def _modes(out: Path) -> set[tuple[str, int]]:
    return {("dir" if p.is_dir() else "file", stat.S_IMODE(p.stat().st_mode)) for p in [out, *out.rglob("*")]}


@pytest.fixture(scope="module")
def place() -> Iterator[Path]:
    """A folder every user may enter (a CI upload step runs as another user than ``sudo mlcanon``)."""
    folder = Path(tempfile.mkdtemp(prefix="mlcanon-resume-"))
    os.chmod(folder, 0o755)
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


@pytest.fixture(scope="module")
def uninterrupted(place: Path) -> Path:
    """The class graded in one go, under umask 077: every output stays private."""
    out = place / "uninterrupted"
    done = subprocess.run([*COMMAND, "--out", str(out), "--no-progress"], capture_output=True, text=True,
                          timeout=900, check=False, umask=0o077)
    assert done.returncode == 0, done.stderr
    assert _modes(out) == {("dir", 0o700), ("file", 0o600)}
    return out


@dataclass
class Interrupted:
    out: Path
    status: int
    finished: int  # jobs finished when the signal went
    stderr: str  # what the grader printed after it
    book: dict[str, Any]
    records: dict[str, bytes]


def _records(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (out / "records" / "students").glob("*.json")}


@pytest.fixture(scope="module")
def interrupted(place: Path, uninterrupted: Path) -> Interrupted:
    """The same batch, Ctrl-C'd once half its jobs have finished (the progress lines on stderr say so)."""
    out = place / "resumed"
    grader = subprocess.Popen([*COMMAND, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, umask=0o022)
    assert grader.stderr is not None
    finished = 0
    for line in grader.stderr:
        progress = re.match(r"\[(\d+)/(\d+)\] ", line)
        if progress and int(progress.group(1)) >= int(progress.group(2)) // 2:
            finished = int(progress.group(1))
            grader.send_signal(signal.SIGINT)
            break
    rest = grader.stderr.read()
    grader.communicate(timeout=120)
    return Interrupted(out, grader.wait(), finished, rest, _book(out), _records(out))


@pytest.fixture(scope="module")
def resumed(interrupted: Interrupted) -> Path:
    done = subprocess.run([*COMMAND, "--out", str(interrupted.out), "--resume", "--no-progress"], capture_output=True,
                          text=True, timeout=900, check=False, umask=0o022)
    assert done.returncode == 0, done.stderr
    return interrupted.out


def test_ctrl_c_writes_the_finished_jobs_and_exits_130_with_one_line(interrupted: Interrupted,
                                                                     uninterrupted: Path) -> None:
    assert interrupted.status == 130 and interrupted.finished >= 8
    assert interrupted.stderr.count("\n") == 1, interrupted.stderr  # one line, no traceback
    assert interrupted.stderr.startswith("mlcanon grade: interrupted (SIGINT); wrote the gradebook of the finished")
    statuses, whole = _statuses(interrupted.book), _statuses(_book(uninterrupted))
    not_graded = statuses.count("not graded (interrupted)")
    assert not_graded >= 1 and len(whole) - whole.count("not attempted") - not_graded >= interrupted.finished
    kept = [(s, w) for s, w in zip(statuses, whole) if s != "not graded (interrupted)"]
    assert all(s == w for s, w in kept), "a finished job is kept as it was graded"
    assert len(interrupted.records) >= 4


def test_resume_grades_the_rest_and_equals_one_uninterrupted_run(interrupted: Interrupted, resumed: Path,
                                                                 uninterrupted: Path) -> None:
    book = _book(resumed)
    assert "not graded (interrupted)" not in _statuses(book)
    assert _comparable(book) == _comparable(_book(uninterrupted))
    after = _records(resumed)
    assert [n for n in interrupted.records if interrupted.records[n] == after[n]], "a finished student was regraded"


def test_only_regrades_those_students_into_the_gradebook(resumed: Path, uninterrupted: Path) -> None:
    before = _records(resumed)
    done = subprocess.run([*COMMAND, "--out", str(resumed), "--only", "ada", "--no-progress"], capture_output=True,
                          text=True, timeout=900, check=False, umask=0o022)
    assert done.returncode == 0, done.stderr
    after = _records(resumed)
    assert {n for n in before if before[n] != after[n]} == {"ada.json"}
    assert _comparable(_book(resumed)) == _comparable(_book(uninterrupted))


def test_the_outputs_are_readable_by_another_user(resumed: Path) -> None:
    """``sudo -E mlcanon grade ...`` under the usual umask: 0644 files in 0755 folders, and a process of
    another user (the CI runner's upload step) reads every one."""
    out = resumed
    assert _modes(out) == {("dir", 0o755), ("file", 0o644)}
    if os.geteuid() != 0:
        pytest.skip("reading as another user needs root")
    files = sorted(p for p in out.rglob("*") if p.is_file())
    reader = subprocess.run(["cat", *map(str, files)], user=65534, group=65534, capture_output=True, timeout=60,
                            check=False, cwd="/")
    assert reader.returncode == 0, reader.stderr
    assert len(reader.stdout) == sum(p.stat().st_size for p in files) > 0
