"""``mlcanon grade`` from the command line: shards, merge, every output, and the usage errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import pytest
from test_calibration import CASES_DIR, load_case, write_learner_dir

from pytest_mlcanon.cli import main

pytestmark = pytest.mark.slow  # the fast lane, pytest -m "not slow", leaves it out (CONTRIBUTING.md)

REPO = Path(__file__).resolve().parents[1]
GOOD_BOXES = REPO / "examples" / "learners" / "good" / "detection" / "boxes.py"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A class of three graded in two shards and merged; returns (class folder, merged output)."""
    root = tmp_path_factory.mktemp("cli")
    submissions = root / "submissions"
    for student in ("amy", "bo"):
        (submissions / student / "detection").mkdir(parents=True)
        shutil.copyfile(GOOD_BOXES, submissions / student / "detection" / "boxes.py")
    (submissions / "cid" / "notes").mkdir(parents=True)
    (root / "mlcanon-grade.toml").write_text('items = ["detection/boxes"]\nworkers = 2\n[limits]\n'
                                            'test_timeout_s = 20\n[points]\ndefault = 4\n')
    for index in (1, 2):
        code = main(["grade", str(submissions), "--shard", f"{index}/2", "--out", str(root / f"shard-{index}"),
                     "--no-progress", "--seed", "11"])
        assert code == 0
    code = main(["grade", "--merge", str(root / "shard-1"), str(root / "shard-2" / "gradebook.json"),
                 "--out", str(root / "merged")])
    assert code == 0
    return submissions, root / "merged"


def test_shards_split_the_class_and_merge_restores_it(sharded: tuple[Path, Path]) -> None:
    _, merged = sharded
    book = json.loads((merged / "gradebook.json").read_text())
    assert [s["student"] for s in book["students"]] == ["amy", "bo", "cid"]
    assert sorted(book["shards"]) == ["1/2", "2/2"]
    first = json.loads((merged.parent / "shard-1" / "gradebook.json").read_text())
    assert [s["student"] for s in first["students"]] == ["amy", "cid"], "sorted by name, every second one"
    amy = book["students"][0]
    assert amy["points"] == 4 and amy["items"][0]["verdict"] == "strong 5/5"
    assert book["students"][2]["items"][0]["status"] == "not attempted"


def test_every_output_is_written(sharded: tuple[Path, Path]) -> None:
    _, merged = sharded
    for name in ("gradebook.csv", "gradebook.md", "gradebook.json", "report.html", "feedback/amy.md",
                 "feedback/cid.md", "gradescope/bo/results.json"):
        assert (merged / name).is_file(), name
    csv_header = (merged / "gradebook.csv").read_text().splitlines()[0]
    for column in ("detection/boxes correctness", "detection/boxes explanation", "detection/boxes score",
                   "detection/boxes time s", "detection/boxes integrity", "detection/boxes verdict"):
        assert column in csv_header
    results = json.loads((merged / "gradescope" / "amy" / "results.json").read_text())
    assert results["score"] == 4 and {t["status"] for t in results["tests"]} <= {"passed", "failed"}
    assert abs(sum(t["max_score"] for t in results["tests"]) - 4) < 1e-3


def test_the_merged_report_names_the_class_and_when_it_was_graded(sharded: tuple[Path, Path]) -> None:
    _, merged = sharded
    stamps = [json.loads((merged.parent / f"shard-{i}" / "gradebook.json").read_text())["graded_at"] for i in (1, 2)]
    book = json.loads((merged / "gradebook.json").read_text())
    assert book["graded_at"] == min(stamps) and book["config"]["assignment"] == "submissions"
    page = (merged / "report.html").read_text()
    when = datetime.fromisoformat(min(stamps))
    assert "<h1>submissions</h1>" in page and f"graded {when:%Y-%m-%d %H:%M} UTC; shard(s) " in page
    for student in ("amy", "bo", "cid"):
        assert f"<a href='feedback/{student}.md'>{student}</a>" in page and (merged / "feedback" / f"{student}.md").is_file()
    assert (merged / "gradebook-lms.csv").read_text() == "student,total,detection/boxes\namy,4,4\nbo,4,4\ncid,0,0\n"


def test_the_step_summary_is_appended_on_github(tmp_path: Path, sharded: tuple[Path, Path],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _, merged = sharded
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert main(["grade", "--merge", str(merged.parent / "shard-1"), str(merged.parent / "shard-2"),
                 "--out", str(tmp_path / "again")]) == 0
    text = summary.read_text()
    assert "## mlcanon grade (shard 1/2, 2/2)" in text and "| amy" in text


@pytest.mark.parametrize(("argv", "message"), [
    (["grade"], "give SUBMISSIONS"),
    (["grade", "{class}", "--item", "posttrain/dop"], "unknown canon item 'posttrain/dop'"),
    (["grade", "{class}", "--shard", "3/2"], "--shard '3/2'"),
    (["grade", "{class}", "--timeout", "0"], "command line --timeout=0.0: must be > 0"),
    (["grade", "{class}-missing", "--item", "detection/boxes"], "no such folder"),
    (["grade", "--merge", "{out}/shard-1"], "shard(s) 2/2 missing"),
])
def test_usage_errors_are_one_line_and_status_2(argv: list[str], message: str, sharded: tuple[Path, Path],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    submissions, merged = sharded
    args = [a.replace("{class}", str(submissions)).replace("{out}", str(merged.parent)) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("mlcanon grade: ") and message in err and err.count("\n") == 1


def test_sigterm_ends_the_batch_and_leaves_no_lock_file_process_or_folder(tmp_path: Path) -> None:
    """A cancelled CI job: the hanging child is killed, the sandbox users swept, and their lock files
    and the job folders removed; the gradebook is written, the job it killed ``not graded
    (interrupted)``, and the grader exits 143 with one line on stderr."""
    from pytest_mlcanon.grade import uids

    submissions = tmp_path / "submissions"
    (submissions / "hangs" / "detection").mkdir(parents=True)
    (submissions / "hangs" / "detection" / "boxes.py").write_text("while True:\n    pass\n")
    base = 63000 + os.getpid() % 500 * 8
    (tmp_path / "mlcanon-grade.toml").write_text(f'items = ["detection/boxes"]\nworkers = 1\n[sandbox]\n'
                                                f'uid_base = {base}\n')
    temp = Path(tempfile.mkdtemp(prefix="mlcanon-sigterm-"))  # not under tmp_path: the sandbox user must enter it
    os.chmod(temp, 0o711)
    env = {**os.environ, "TMPDIR": str(temp)}
    grader = subprocess.Popen([sys.executable, "-m", "pytest_mlcanon.cli", "grade", str(submissions), "--no-progress",
                               "--out", str(tmp_path / "out")], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    lock_dir = Path(uids._lock_dir()) if os.geteuid() == 0 else None  # noqa: SLF001
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(p.name.startswith("job-") for p in temp.glob("*/*")):
        assert grader.poll() is None, grader.communicate()[0]
        time.sleep(0.1)
    held = [p for p in lock_dir.glob(f"{uids.LOCK_PREFIX}*.lock")
            if base <= int(p.stem.rsplit("-", 1)[1]) < base + 64] if lock_dir else []
    time.sleep(0.5)
    grader.send_signal(signal.SIGTERM)
    assert grader.wait(timeout=60) == 128 + signal.SIGTERM
    err = grader.communicate()[1]
    assert err.count("\n") == 1 and err.startswith("mlcanon grade: interrupted (SIGTERM); wrote the gradebook"), err
    [row] = json.loads((tmp_path / "out" / "gradebook.json").read_text())["students"]
    assert [i["status"] for i in row["items"]] == ["not graded (interrupted)"]
    assert os.geteuid() != 0 or held, "the batch held a sandbox uid"
    assert not any(p.exists() for p in held)
    left = list(temp.iterdir())
    shutil.rmtree(temp, ignore_errors=True)
    assert left == []
    for path in held:
        assert uids.processes_of(int(path.stem.rsplit("-", 1)[1])) == []


def test_a_full_transpose_seen_at_run_time_reaches_the_gradebook(tmp_path: Path) -> None:
    """``k.T`` on a 4-D key parameter: only the child's run-time check can see it (static rules
    cannot know a parameter's rank); the parent takes it from the child's report."""
    student = tmp_path / "submissions" / "kim"
    [case] = load_case(CASES_DIR / "attention_param_k_T")
    write_learner_dir(case, student)
    code = main(["grade", str(tmp_path / "submissions"), "--item", "transformer/attention",
                 "--out", str(tmp_path / "out")])
    assert code == 0
    [row] = json.loads((tmp_path / "out" / "gradebook.json").read_text())["students"]
    [item] = row["items"]
    assert item["axes"]["api"] is False
    assert any(f["code"] == "API001" and "4-D value when the tests ran" in f["message"] for f in item["findings"])
