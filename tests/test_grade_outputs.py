"""``mlcanon grade``'s output folder and batch control, without grading (fast): the outputs' modes
follow the umask, a non-empty ``--out`` is refused unless ``--force`` (which clears only inside it) or
``--resume``, the records a resume keeps, and the first Ctrl-C or SIGTERM stopping a batch once."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_mlcanon import catalog
from pytest_mlcanon.cli import main
from pytest_mlcanon.evidence import Status
from pytest_mlcanon.grade import config, interrupt, outdir, records
from pytest_mlcanon.grade.gradebook import Gradebook, GradedTest, ItemResult, Recheck, StudentResult
from pytest_mlcanon.grade.render import html, write_all
from pytest_mlcanon.grade.verifier import Calibration
from pytest_mlcanon.reports import Report
from pytest_mlcanon.reports.model import write
from pytest_mlcanon.rubric.model import Finding

REPO = Path(__file__).resolve().parents[1]
BOXES = catalog.get("detection/boxes")
GOOD_BOXES = REPO / "examples" / "learners" / "good" / "detection" / "boxes.py"


def _cell(verdict: str = "strong 5/5", status: Status = Status.SCORED) -> ItemResult:
    return ItemResult("detection/boxes", 18, "IoU", status, verdict, {"correctness": True}, 5,
                      [GradedTest("t1", "passed", points=6, max_points=6)], [Finding("SHP001", "a.py", 3, "m", "h")],
                      ["note"], [], Recheck("passed", "ok", 3), 10.0, 10.0, time_s=1.5)


def _book(students: list[str]) -> Gradebook:
    return Gradebook(["detection/boxes"], {"detection/boxes": "IoU"},
                     [StudentResult(s, items=[_cell()]) for s in students], [1])


@pytest.fixture
def umask() -> Iterator[object]:
    """Set the process's umask for the test (``umask(0o077)``), and restore it."""
    previous = os.umask(0o022)
    os.umask(previous)
    yield os.umask
    os.umask(previous)


def _modes(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.rglob("*")]}


# -- the outputs' modes follow the umask -----------------------------------------------------------------------


def _write_every_output(out: Path) -> None:
    """The batch's outputs, its records, and a learner's --canon-report, all into ``out``."""
    book = _book(["ann", "bob"])
    write_all(book, out)
    journal = records.Journal(out, records.identity(config.GradeConfig(items="detection/boxes"), [BOXES], 1, None,
                                                    out))
    journal.start()
    journal.record("ann", _cell())
    write(Report("impl"), "json", out / "learner" / "canon-report.json")
    write(Report("impl"), "markdown", out / "learner" / "canon-report.md")


@pytest.mark.parametrize(("mask", "file_mode", "folder_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700),
                                                                (0o002, 0o664, 0o775)])
def test_every_output_file_and_folder_follows_the_umask(mask: int, file_mode: int, folder_mode: int, tmp_path: Path,
                                                        umask: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """After ``sudo -E mlcanon grade`` a CI upload step, another user, must read the outputs: under
    umask 022 they are 0644 in 0755 folders (they were 0600, mkstemp's mode); under 077 they stay private."""
    monkeypatch.setattr(html, "matplotlib_available", lambda: False)
    os.umask(mask)
    out = tmp_path / "out"
    _write_every_output(out)
    modes = _modes(out)
    files = {name for name in modes if (out / name).is_file()}
    assert {"gradebook.json", "gradebook.csv", "gradebook.md", "report.html", "feedback/ann.md",
            "gradescope/bob/results.json", "records/run.json", "records/students/ann.json",
            "learner/canon-report.json", "learner/canon-report.md"} <= files
    assert {name: mode for name, mode in modes.items() if name in files} == dict.fromkeys(files, file_mode)
    assert {name: mode for name, mode in modes.items() if name not in files} == dict.fromkeys(
        set(modes) - files, folder_mode)


def test_a_rewritten_output_gets_the_umask_mode_again(tmp_path: Path, umask: object) -> None:
    from pytest_mlcanon.reports.model import atomic_write

    os.umask(0o022)
    path = tmp_path / "gradebook.md"
    path.write_text("old")
    os.chmod(path, 0o600)
    atomic_write(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["gradebook.md"]  # no temporary file left beside it


# -- a non-empty --out, --force ------------------------------------------------------------------------------


@pytest.fixture
def klass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A class of one (no grading happens in these tests: every refusal comes first)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    submissions = tmp_path / "course" / "submissions"
    (submissions / "amy" / "detection").mkdir(parents=True)
    (submissions / "amy" / "detection" / "boxes.py").write_bytes(GOOD_BOXES.read_bytes())
    return submissions


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mlcanon grade: ") and err.count("\n") == 1, err
    return err


def test_a_non_empty_out_is_refused_and_kept(klass: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    (out / "feedback").mkdir(parents=True)
    (out / "feedback" / "zed.md").write_text("a student of last year")
    err = _refused(["grade", str(klass), "--item", "detection/boxes", "--out", str(out)], capsys)
    assert "is not empty; pass --force to clear it, --resume" in err
    assert (out / "feedback" / "zed.md").read_text() == "a student of last year"
    err = _refused(["grade", "--merge", str(out), "--out", str(out)], capsys)
    assert "is not empty" in err


@pytest.mark.parametrize(("out", "why"), [
    ("/", "it is the file system's root"),
    ("{home}", "it is a home folder"),
    ("{tmp}", "it holds the current folder"),
    ("{tmp}/work", "it is the current folder"),
    ("{tmp}/course", "it holds {tmp}/course/submissions"),
    ("{tmp}/course/submissions", "it is {tmp}/course/submissions"),
    ("{tmp}/course/submissions/amy", "it is inside {tmp}/course/submissions"),
    ("{tmp}/link", "is a link"),
])
def test_force_clears_no_folder_it_could_hurt(out: str, why: str, klass: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / "notes").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    os.chdir(tmp_path / "work")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    folder = out.replace("{home}", str(home)).replace("{tmp}", str(tmp_path))
    err = _refused(["grade", str(klass), "--item", "detection/boxes", "--out", folder, "--force"], capsys)
    assert why.replace("{tmp}", str(tmp_path)) in err
    assert (klass / "amy" / "detection" / "boxes.py").is_file() and (home / "notes").is_dir()


def test_force_clears_only_inside_out_and_follows_no_link(tmp_path: Path) -> None:
    out, outside = tmp_path / "out", tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "file").write_text("x")
    (out / "feedback").mkdir(parents=True)
    (out / "feedback" / "zed.md").write_text("stale")
    (out / "gradescope" / "zed").mkdir(parents=True)
    (out / "linked-folder").symlink_to(outside / "keep")
    (out / "gradescope" / "zed" / "link").symlink_to(outside / "keep")
    outdir.check(out, force=True, keep=False, protected=[tmp_path / "submissions"])
    outdir.clear(out)
    assert list(out.iterdir()) == []
    assert (outside / "keep" / "file").read_text() == "x"


def test_force_and_resume_exclude_each_other(klass: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(["grade", str(klass), "--item", "detection/boxes", "--out", str(tmp_path / "o"), "--force",
                    "--resume"], capsys)
    assert "--force clears --out; --resume and --only keep it" in err


# -- the records of a batch, and what a resume refuses ---------------------------------------------------------


def test_the_records_keep_each_finished_cell_exactly(tmp_path: Path) -> None:
    batch = records.identity(config.GradeConfig(items="detection/boxes"), [BOXES], 5, (1, 2), tmp_path)
    journal = records.Journal(tmp_path, batch)
    journal.start()
    first, second = _cell("strong 5/5"), _cell("no 2/5: correctness failed")
    journal.record("ann", first)
    journal.record("bob", second)
    journal.calibrated(Calibration(nodeids={"detection/boxes": ["t1"]}))
    recorded, cells = records.Journal.load(tmp_path)
    assert cells == {("ann", "detection/boxes"): first, ("bob", "detection/boxes"): second}
    assert recorded == dataclasses.replace(batch, calibration=recorded.calibration) and recorded.calibration
    assert recorded.seed == 5 and recorded.shard == "1/2" and recorded.items == ["detection/boxes"]
    records.Journal(tmp_path, recorded, cells).start(regraded=["bob"])  # --only bob forgets bob's cell on disk
    assert set(records.Journal.load(tmp_path)[1]) == {("ann", "detection/boxes")}


def test_a_different_reference_run_is_refused(tmp_path: Path) -> None:
    batch = records.identity(config.GradeConfig(), [BOXES], 5, None, tmp_path)
    journal = records.Journal(tmp_path, dataclasses.replace(
        batch, calibration=records.calibration_digest(Calibration(nodeids={"detection/boxes": ["t1"]}))))
    journal.calibrated(Calibration(nodeids={"detection/boxes": ["t1"]}))  # the same: accepted
    with pytest.raises(records.RecordError, match="reference run on this machine differs"):
        journal.calibrated(Calibration(nodeids={"detection/boxes": ["t1", "t2"]}))


def test_identity_names_what_differs(tmp_path: Path) -> None:
    base = config.GradeConfig(items="detection/boxes")
    before = records.identity(base, [BOXES], 5, None, tmp_path)
    changed = config.GradeConfig(items="18", workers=7, limits=config.Limits(wall_s=5.0), source="elsewhere.toml")
    assert records.identity(changed, [BOXES], 5, None, tmp_path).differences(before) == [
        "config limits.wall_s 120.0 -> 5.0"]  # the worker count, the file's place and the items' spelling are no change
    assert records.identity(base, [BOXES], 6, (1, 2), tmp_path / "x").differences(before) == [
        "seed 5 -> 6", "shard - -> 1/2", f"submissions {tmp_path} -> {tmp_path / 'x'}"]
    assert records.identity(base, [BOXES, catalog.get("posttrain/dpo")], 5, None, tmp_path).differences(before)[0] == (
        "items detection/boxes -> detection/boxes,posttrain/dpo")


def _record(out: Path, submissions: Path, **settings: object) -> None:
    batch = records.identity(config.GradeConfig(items="detection/boxes", **settings),  # type: ignore[arg-type]
                             [BOXES], 9, None, submissions)
    journal = records.Journal(out, batch)
    journal.start()
    journal.record("amy", _cell())


def test_resume_refuses_a_batch_that_is_not_the_recorded_one(klass: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    _record(out, klass, limits=config.Limits(wall_s=30.0))
    err = _refused(["grade", str(klass), "--item", "detection/boxes", "--out", str(out), "--resume"], capsys)
    assert "--resume: this batch is not the one recorded in" in err and "config limits.wall_s 30.0 -> 120.0" in err
    assert "--force" in err
    err = _refused(["grade", str(klass), "--item", "detection/boxes", "--out", str(out), "--resume", "--timeout",
                    "30", "--seed", "4"], capsys)
    assert "config seed null -> 4" in err
    err = _refused(["grade", str(klass), "--item", "posttrain/dpo", "--out", str(out), "--only", "amy", "--timeout",
                    "30"], capsys)
    assert "--only: this batch is not the one recorded" in err and "items detection/boxes -> posttrain/dpo" in err


def test_resume_and_only_need_records(klass: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "gradebook.json").write_text("{}")
    err = _refused(["grade", str(klass), "--item", "detection/boxes", "--out", str(out), "--resume"], capsys)
    assert "holds no record of a batch (records/run.json); pass --force" in err
    err = _refused(["grade", str(klass), "--item", "detection/boxes", "--out", str(tmp_path / "none"), "--only",
                    "amy"], capsys)
    assert "holds no record of a batch" in err


# -- the first signal stops the batch once -------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_interrupts_and_later_ones_are_ignored(signum: int) -> None:
    with interrupt.trapped() as trap:
        with pytest.raises(interrupt.Interrupted) as stopped:
            os.kill(os.getpid(), signum)
            signal.sigtimedwait([], 0)  # let the handler run here
        assert stopped.value.signum == signum
        os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C while the outputs are written: ignored
        os.kill(os.getpid(), signal.SIGTERM)
    assert trap.signum == signum and trap.exit_code == 128 + signum
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_signal_during_cleanup_is_noted_not_raised() -> None:
    with interrupt.trapped() as trap:
        with interrupt.held():
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0)
        assert trap.armed
    assert trap.signum == signal.SIGTERM


def test_interrupted_is_no_exception_a_fence_could_swallow() -> None:
    assert not issubclass(interrupt.Interrupted, Exception)
    assert str(Status.INTERRUPTED) == "not graded (interrupted)"
    assert not Status.INTERRUPTED.scored and not Status.INTERRUPTED.ran
    cell = json.loads(json.dumps(_book(["a"]).to_dict()))
    cell["students"][0]["items"][0]["status"] = "not graded (interrupted)"
    assert Gradebook.from_dict(cell).students[0].items[0].status is Status.INTERRUPTED


def test_a_refused_batch_leaves_out_as_it_was(klass: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--force clears, and the records start, only once the batch is sure to run: bad input loses nothing."""
    out = tmp_path / "out"
    (out / "feedback").mkdir(parents=True)
    (out / "feedback" / "zed.md").write_text("last year")
    err = _refused(["grade", str(klass.parent / "missing"), "--item", "detection/boxes", "--out", str(out), "--force"],
                   capsys)
    assert "no such folder" in err
    assert [p.relative_to(out).as_posix() for p in out.rglob("*")] == ["feedback", "feedback/zed.md"]
    fresh = tmp_path / "fresh"
    _refused(["grade", str(klass.parent / "missing"), "--item", "detection/boxes", "--out", str(fresh)], capsys)
    assert not fresh.exists()


def test_only_names_students_of_the_class(klass: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    _record(out, klass)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    err = _refused(["grade", str(klass), "--item", "detection/boxes", "--out", str(out), "--only", "ghost"], capsys)
    assert "--only: no submission of ghost in" in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
