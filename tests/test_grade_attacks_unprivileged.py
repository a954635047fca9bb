"""The attack batch graded by a teacher without root (issue 23.7 and its acceptance): with unprivileged
user namespaces it meets the bar of the root batch; without them ``mlcanon grade`` refuses.

From root the grader runs as an unprivileged uid (``unprivileged.py``); run by a user who is not root, it runs
as that user. The class is the honest good learner beside the attacks that matter most without root:
those that go around the audit hook to the kernel (``kernel_attacks``), the classics of the root batch
that reach outside (a write outside, a socket, a fork bomb, a symlink to a classmate), a forged notes
frame and hostile text. Kept small (one item) for CI time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kernel_attacks
import pytest
import sandboxing
from test_grade_attacks import (
    ATTACKS,
    BOXES,
    CHANNEL_ATTACKS,
    ESCAPE_MARK,
    GOOD,
    OUTPUT_ATTACKS,
    _attack_source,
    _tree_symlink_to_classmate,
    _write,
)

CLASSICS = ("write_outside", "open_socket", "fork_bomb", "patch_comparisons", "os_exit_mid_test",
            "read_reference_files", "load_reference_by_path")
#: Honest classmates whose code hangs after seven calls: a timeout, never a flag. Without root, the second
#: fresh-teacher trial (stop 32) saw every honest timeout flagged INT110 for the killed job's zombie, and the
#: third (stop 33) 7 of 10 for the killed job still exiting when swept: three, so a race shows.
SLOW = ("slow_then_hangs", "slow_then_hangs_too", "slow_then_hangs_as_well")
#: issue 23.1: the job runs as the grader's own uid here; the answers must stay out of its reach all the same.
TRUST = ("read_other_processes_memory",)
CONFIG = (f'items = ["{BOXES}"]\nworkers = 2\nseed = 20240607\n'
          '[limits]\nwall_s = 120\ntest_timeout_s = 15\ncpu_s = 60\nmemory_mb = 768\noutput_mb = 4\n')


@pytest.fixture(scope="module")
def place() -> Iterator[Path]:
    """A folder every user can read (the class) with one the grader may write (its outputs, its temp)."""
    folder = Path(tempfile.mkdtemp(prefix="mlcanon-unprivileged-"))
    os.chmod(folder, 0o755)
    for name in ("out", "out-alone", "out-refused", "out-user-off", "tmp"):
        (folder / name).mkdir(mode=0o777)
        os.chmod(folder / name, 0o1777)
    (folder / "mlcanon-grade.toml").write_text(CONFIG)
    (folder / "user-off.toml").write_text(CONFIG + "[sandbox]\nuser = false\n")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _good(root: Path, student: str) -> None:
    _write(root, student, {BOXES: (GOOD / f"{BOXES}.py").read_bytes()})


def _grade(place: Path, submissions: Path, out: str, no_userns: bool = False,
           config: str = "mlcanon-grade.toml") -> subprocess.CompletedProcess[str]:
    for path in [submissions, *submissions.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    argv = [sys.executable, "-m", "pytest_mlcanon.cli", "grade", str(submissions), "--config",
            str(place / config), "--out", str(place / out), "--no-progress"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": str(place / "tmp"),
           kernel_attacks.SECRET_ENV: kernel_attacks.SECRET_VALUE}
    if os.environ.get("PYTHONPATH"):  # a checkout run from its folder grades with its own code, not the installed one
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    if os.geteuid() == 0:
        return sandboxing.run_unprivileged(argv, no_userns=no_userns, env=env)
    if no_userns:
        pytest.skip("only root can take user namespaces away from a run")
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False)


@pytest.fixture(scope="module")
def data(place: Path) -> dict[str, Any]:
    """The class graded without root: its gradebook.json."""
    submissions = place / "class"
    _good(submissions, "honest_good")
    for student in SLOW:
        _write(submissions, student, {BOXES: _attack_source(*ATTACKS["infinite_loop"]).encode()})
    for name in CLASSICS:
        _write(submissions, f"attack_{name}", {BOXES: _attack_source(*ATTACKS[name]).encode()})
    for name in TRUST:
        _write(submissions, f"attack_{name}", {BOXES: _attack_source("", CHANNEL_ATTACKS[name]).encode()})
    for name, (header, footer) in {**OUTPUT_ATTACKS,
                                   **kernel_attacks.attacks(kernel_attacks.write_victim(submissions))}.items():
        _write(submissions, f"attack_{name}", {BOXES: _attack_source(header, footer).encode()})
    _tree_symlink_to_classmate(submissions / "attack_symlink_to_classmate")
    ESCAPE_MARK.unlink(missing_ok=True)
    result = _grade(place, submissions, "out")
    if result.returncode == 2 and "no sandbox for the jobs" in result.stderr:
        assert result.stderr.count("\n") == 1, result.stderr
        pytest.skip(f"refused, as it must without user namespaces: {result.stderr.strip()}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return dict(json.loads((place / "out" / "gradebook.json").read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def book(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Student -> the boxes cell of the gradebook."""
    return {s["student"]: s["items"][0] for s in data["students"]}


def _passed(cell: dict[str, Any]) -> bool:
    return bool(cell["status"] == "scored" and not cell["flagged"] and cell["axes"].get("correctness")
                and cell["points"] > 0)


def test_the_batch_ran_in_user_namespaces(data: dict[str, Any]) -> None:
    notes = " ".join(data["sandbox"])
    assert "user namespace of its own" in notes and "minimal root" in notes and "own PID namespace" in notes
    assert "the item's reference files show empty" in notes
    assert "time: 15 s of CPU time per test" in notes and "120 s on the clock per job" in notes
    assert data["unsandboxed"] == []


def test_every_attack_gets_nothing(book: dict[str, dict[str, Any]]) -> None:
    attacks = {name: cell for name, cell in book.items() if name.startswith("attack_")}
    assert len(attacks) == len(CLASSICS) + len(TRUST) + len(OUTPUT_ATTACKS) + len(kernel_attacks.attacks(Path("/"))) + 1
    for name, cell in attacks.items():
        assert not _passed(cell), f"{name} passed: {cell['verdict']}"


def test_the_answers_are_out_of_reach_without_root(book: dict[str, dict[str, Any]]) -> None:
    """The job runs as the grader's own uid: the item's reference files (which that uid may read)
    show empty, and no other process's memory (the grader's holds the calibration) can be read."""
    for name in ("read_reference_files", "load_reference_by_path"):
        cell = book[f"attack_{name}"]
        assert cell["flagged"] and cell["points"] == 0, (name, cell["verdict"])
    messages = [str(t["message"]) for t in book["attack_read_other_processes_memory"]["tests"]]
    assert any("LOOT:" in m for m in messages) and not any("MEMORY-OF-" in m for m in messages), messages[:1]


def test_what_only_the_kernel_stops_reaches_nothing(book: dict[str, dict[str, Any]]) -> None:
    for name in kernel_attacks.attacks(Path("/")):
        cell = book[f"attack_{name}"]
        messages = [str(t["message"]) for t in cell["tests"]]
        assert any("LOOT:" in m for m in messages), f"{name} never ran: {cell['verdict']}"
        assert kernel_attacks.loot(messages) == [], (name, messages[:1])
    assert kernel_attacks.daemons() == []
    assert not kernel_attacks.node_mark().exists() and not ESCAPE_MARK.exists()


@pytest.mark.parametrize("student", SLOW)
def test_an_honest_timeout_is_a_timeout_and_no_flag(book: dict[str, dict[str, Any]], student: str) -> None:
    cell = book[student]
    assert cell["status"] == "timeout" and "ran over 15 s" in cell["verdict"], cell["verdict"]
    assert not cell["flagged"] and cell["integrity"] == [], (cell["verdict"], cell["integrity"])
    assert cell["points"] > 0, "the tests before the hang keep the points of the axes they earned"


def test_the_notes_of_the_class_are_the_graders(data: dict[str, Any]) -> None:
    assert not any("FORGED-NOTE" in note for note in data["sandbox"] + data["notes"])


def test_the_honest_classmate_gets_the_grade_it_gets_alone(place: Path, book: dict[str, dict[str, Any]]) -> None:
    alone = place / "alone"
    _good(alone, "honest_good")
    result = _grade(place, alone, "out-alone")
    assert result.returncode == 0, result.stderr[-2000:]
    by_itself = json.loads((place / "out-alone" / "gradebook.json").read_text())["students"][0]["items"][0]
    in_class = book["honest_good"]
    keys = ("status", "score", "axes", "points", "integrity")
    assert {k: in_class[k] for k in keys} == {k: by_itself[k] for k in keys}
    assert in_class["score"] == 5 and in_class["points"] == in_class["max_points"]


def test_nothing_is_left_behind(place: Path, book: dict[str, dict[str, Any]]) -> None:
    assert list((place / "tmp").iterdir()) == [], "the batch's folders are removed"
    assert kernel_attacks.daemons() == []


def test_without_user_namespaces_it_refuses_in_one_line(place: Path) -> None:
    submissions = place / "refused"
    _good(submissions, "honest_good")
    result = _grade(place, submissions, "out-refused", no_userns=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("mlcanon grade: no sandbox for the jobs (the grader is not root and this "
                                    "kernel refuses unprivileged user namespaces)")
    assert result.stderr.count("\n") == 1 and "--unsafe-no-sandbox" in result.stderr
    assert list((place / "out-refused").iterdir()) == []


def test_the_user_wall_turned_off_in_the_config_is_refused_without_root_too(place: Path) -> None:
    # the third fresh-teacher trial: without root, [sandbox] user = false was neither refused nor marked
    submissions = place / "user-off"
    _good(submissions, "honest_good")
    result = _grade(place, submissions, "out-user-off", config="user-off.toml")
    if result.returncode == 2 and "user namespaces" in result.stderr:
        pytest.skip("this kernel refuses unprivileged user namespaces: refused for that first")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == ("mlcanon grade: no sandbox for the jobs (the grade config turns off [sandbox] user); set "
                             "user = true under [sandbox] in the grade config, or pass --unsafe-no-sandbox to grade "
                             "anyway, marked unsandboxed\n")
