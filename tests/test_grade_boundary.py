"""Unit tests of what keeps a class's submissions from reaching the grading parent (issue 23.5-23.7):
names, links, budgets, the limited worker processes, the text every output shows. Fast: no child
process is forked, no torch is imported by the code under test."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from pytest_mlcanon import catalog
from pytest_mlcanon.grade import discover, scan, snapshot, text
from pytest_mlcanon.grade.progress import Progress
from pytest_mlcanon.grade.render import csvfile, markdown
from pytest_mlcanon.grade.worker import WorkerError, WorkerPool
from pytest_mlcanon.rubric import explanation
from pytest_mlcanon.rubric.model import AxisResult, Finding

#: The Explanation axis's shape pattern before it was made linear: kept as the broken fixture the
#: worker's deadline must survive.
BACKTRACKING_PATTERN = re.compile(
    r"(?<![\w.\])])\(\s*(?:[A-Za-z_][\w]*|\d+|\.\.\.)\s*(?:,\s*(?:[A-Za-z_][\w*+\-/ ]*|\d+|\.\.\.)\s*)*,\s*"
    r"(?:[A-Za-z_][\w*+\-/ ]*|\d+|\.\.\.)?\s*\)")
BACKTRACKING_TEXT = "(a" + ", a        " * 40 + "!"


# -- names ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "expected"), [
    ("ann", "ann"),
    ("c d!", "c_d"),
    ("José Núñez", "José_Núñez"),
    (b"caf\xe9", "café"),
    (b"\x81\x8d", "student"),
    ("../../etc", "etc"),
    ("CON", "CON_"),
    ("nul.txt", "nul.txt_"),
    ("\x1b[31mred\x1b[0m", "31mred_0m"),
    ("", "student"),
])
def test_student_ids_are_safe_file_names(name: str | bytes, expected: str) -> None:
    assert text.student_id(name) == expected


def test_long_names_are_cut_with_a_hash_that_keeps_them_apart() -> None:
    a, b = text.student_id("x" * 250 + "a"), text.student_id("x" * 250 + "b")
    assert a != b and len(a) == len(b) == text.ID_MAX
    assert len(text.student_id("é" * 250).encode("utf-8")) + len(".md") <= 255


def test_ids_are_unique_ignoring_case() -> None:
    taken: set[str] = set()
    assert [text.unique(n, taken) for n in ("Ann", "ann", "ANN", "bob")] == ["Ann", "ann-2", "ANN-3", "bob"]


def test_clean_removes_control_and_direction_characters_and_shows_undecodable_bytes() -> None:
    assert text.clean("ok\x1b[2J\x1b]0;title\x07 \u202eevil\u202c\r\nnext") == "ok[2J]0;title evil next"
    assert text.clean(os.fsdecode(b"caf\xe9")) == "caf\\xe9"
    assert text.clean("a\nb", lines=True) == "a\nb"
    assert text.clean("x" * 50, limit=10) == "x" * 9 + "\u2026"


# -- discovery -------------------------------------------------------------------------------------------------


def _module(folder: Path, module: str = "detection/boxes", content: str = "X = 1\n") -> Path:
    path = folder / f"{module}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return path


def test_discovery_never_follows_a_link(tmp_path: Path) -> None:
    _module(tmp_path / "ann")
    (tmp_path / "bob").mkdir()
    (tmp_path / "bob" / "practice").symlink_to(tmp_path / "ann")
    (tmp_path / "eve").symlink_to(tmp_path / "ann")
    _module(tmp_path / "dan" / "work")
    (tmp_path / "dan" / "copy").symlink_to(tmp_path / "ann")
    found = {s.student: s for s in discover.find(tmp_path)}
    assert found["ann"].impl == (tmp_path / "ann").resolve()
    assert found["bob"].impl is None and "practice is a link" in found["bob"].problem
    assert found["eve"].impl is None and "is a link" in found["eve"].problem
    assert found["dan"].impl == (tmp_path / "dan" / "work").resolve()


def test_discovery_has_a_budget_of_files_and_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(discover, "MAX_ENTRIES", 50)
    for n in range(60):
        (tmp_path / "ann" / "maze" / f"d{n:02d}").mkdir(parents=True)
    _module(tmp_path / "ann" / "maze" / "d00" / "x")
    located, problem = discover.locate(tmp_path / "ann")
    assert located is None and "first 50 files and folders" in problem
    monkeypatch.setattr(discover, "MAX_ENTRIES", 5000)
    assert discover.locate(tmp_path / "ann")[0] == (tmp_path / "ann" / "maze" / "d00" / "x").resolve()


def test_a_folder_holding_only_a_fifo_is_not_canon_like_and_discovery_does_not_block(tmp_path: Path) -> None:
    (tmp_path / "ann" / "detection").mkdir(parents=True)
    os.mkfifo(tmp_path / "ann" / "detection" / "boxes.py")
    located, problem = discover.locate(tmp_path / "ann")
    assert located is None and "no folder laid out like the canon" in problem


# -- the snapshot ------------------------------------------------------------------------------------------------


def test_the_snapshot_copies_regular_module_files_and_names_everything_else(tmp_path: Path) -> None:
    source = tmp_path / "src"
    _module(source, "detection/boxes", "BOXES = 1\n")
    _module(source, "posttrain/dpo", "DPO = 1\n")
    os.link(source / "posttrain" / "dpo.py", tmp_path / "second-name.py")
    (source / "detection" / "nms.py").symlink_to(source / "detection" / "boxes.py")
    os.mkfifo(source / "detection" / "anchors.py")
    (source / "detection" / "focal_loss.py").mkdir()
    (source / "detection" / "notes.txt").write_text("not a module")
    (source / "linked").symlink_to(source / "detection")
    os.mkdir(os.fsencode(source / "detection") + b"/x\xe9.py")
    big = _module(source, "transformer/attention")
    big.write_bytes(b"#" * (snapshot.MAX_FILE_BYTES + 1))
    skipped = snapshot.take(source, tmp_path / "snap")
    assert sorted(p.relative_to(tmp_path / "snap").as_posix() for p in (tmp_path / "snap").rglob("*.py")) == [
        "detection/boxes.py"]
    assert (tmp_path / "snap" / "detection" / "boxes.py").read_text() == "BOXES = 1\n"
    assert set(skipped) == {"detection/anchors.py (a FIFO)", "detection/focal_loss.py (a folder)",
                            "detection/nms.py (a link)", "detection/xé.py (not a module name)",
                            "linked/ (a link to a folder)", "posttrain/dpo.py (a hard link)",
                            "transformer/attention.py (over 1 MB)"}
    assert stat.S_IMODE((tmp_path / "snap").stat().st_mode) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="only root makes device files")
def test_the_snapshot_names_a_device(tmp_path: Path) -> None:
    (tmp_path / "src" / "detection").mkdir(parents=True)
    os.mknod(tmp_path / "src" / "detection" / "boxes.py", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    assert snapshot.take(tmp_path / "src", tmp_path / "snap") == ["detection/boxes.py (a device)"]


# -- the integrity scan follows every import of a learner file ----------------------------------------------------


@pytest.mark.parametrize("line", [
    "from ..detection import _machinery",
    "from ..detection._machinery import helper",
    "from . import _machinery",
    "from ._machinery import helper",
    "from canon_refs.detection import _machinery",
    "import mlbook.detection._machinery",
])
def test_the_scan_follows_relative_and_absolute_imports_to_helpers(tmp_path: Path, line: str) -> None:
    _module(tmp_path, "detection/boxes", f"{line}\n")
    _module(tmp_path, "detection/_machinery", "import torch\ntorch.allclose = lambda *a, **k: True\n")
    found = scan.scan(catalog.get("detection/boxes"), tmp_path, tmp_path)
    assert any(f.code == "INT002" and f.path.endswith("detection/_machinery.py") for f in found), found


def test_the_scan_reaches_another_areas_module_two_levels_up(tmp_path: Path) -> None:
    _module(tmp_path, "posttrain/dpo", "from ..transformer.gpt import GPT\n")
    _module(tmp_path, "transformer/gpt", "import sys\nsys.exit(0)\n")
    assert [p.relative_to(tmp_path).as_posix() for p in scan.reachable_files(catalog.get("posttrain/dpo"), tmp_path)
            ] == ["posttrain/dpo.py", "transformer/gpt.py"]


# -- the worker pool -----------------------------------------------------------------------------------------------


@pytest.fixture()
def pool() -> WorkerPool:
    workers = WorkerPool(1, timeout_s=20)
    yield workers
    workers.close()


def test_a_worker_answers_and_its_failures_are_one_line_errors(pool: WorkerPool) -> None:
    assert pool.call(len, "abc") == 3
    with pytest.raises(WorkerError, match="^ZeroDivisionError"):
        pool.call(divmod, 1, 0)
    deep = "x = " + " + ".join(["1"] * 100_000)
    with pytest.raises(WorkerError, match="RecursionError"):
        pool.call(compile, deep, "deep.py", "exec")
    assert pool.call(len, "abcd") == 4, "the pool goes on after a failure"


def test_a_worker_that_dies_is_replaced(pool: WorkerPool) -> None:
    with pytest.raises(WorkerError, match=r"died \(exit status 3\)"):
        pool.call(os._exit, 3)
    assert pool.call(len, "abc") == 3


def test_a_worker_past_its_deadline_is_killed_and_replaced(pool: WorkerPool) -> None:
    started = time.monotonic()
    with pytest.raises(WorkerError, match="ran over its time limit"):
        pool.call(BACKTRACKING_PATTERN.search, BACKTRACKING_TEXT, timeout=1.0)
    assert time.monotonic() - started < 10
    assert pool.call(len, "ab") == 2


def test_the_parent_waiting_on_a_worker_stays_responsive_to_sigterm(pool: WorkerPool) -> None:
    """A SIGTERM (a cancelled CI job) reaches the parent within a second while its worker is stuck in a
    pattern that backtracks; the worker is killed with the call."""
    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    started = time.monotonic()
    try:
        timer.start()
        with pytest.raises(SystemExit):
            pool.call(BACKTRACKING_PATTERN.search, BACKTRACKING_TEXT, timeout=120)
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, previous)
    assert time.monotonic() - started < 5
    assert pool.call(len, "ab") == 2


def test_a_worker_answer_may_hold_only_plain_data_and_rubric_results(pool: WorkerPool) -> None:
    finding = Finding("EXP001", "a.py", 1, "m", "h")
    assert pool.call(AxisResult, False, (finding,)) == AxisResult(False, (finding,))
    with pytest.raises(WorkerError, match="may not hold"):
        pool.call(Path, "/tmp")
    assert pool.call(len, "a") == 1


def test_reading_shapes_in_prose_is_linear_on_docstrings_built_to_be_slow(pool: WorkerPool) -> None:
    """The broken fixture above needs minutes on ``BACKTRACKING_TEXT`` (each added ``, a        ``
    multiplies its work about ninefold), and a 300 KB parenthesised group once cost its length squared
    (94 s); the Explanation axis reads both at once, and still tells shapes from the rest (a group
    longer than ``shape_grammar.MAX_TEXT`` is not read as a shape)."""
    long_group = "(" + "a, " * 100_000 + "b)"
    assert pool.call(explanation.states_a_shape, BACKTRACKING_TEXT, timeout=10) is False
    assert pool.call(explanation.states_a_shape, long_group, timeout=5) is False
    assert pool.call(explanation.states_a_shape, "(" + "a, " * 100 + "b)", timeout=5) is True
    for prose in ("(B, T, d)", "(N,)", "shape (B*T, V)", "(n/world,)", "(B, ..., d)"):
        assert explanation.states_a_shape(prose), prose
    for prose in ("sigmoid(z)", "(RetinaNet)", "(Karpathy, 2020)", "(1 - p_t)"):  # a 1-D shape in prose keeps its comma
        assert not explanation.states_a_shape(prose), prose


# -- what the outputs show -----------------------------------------------------------------------------------------


def test_progress_lines_carry_no_terminal_control(tmp_path: Path) -> None:
    stream = (tmp_path / "log").open("w+")
    bar = Progress(1, stream=stream)
    bar.advance("eve x: error: \x1b[2J\x1b]0;pwned\x07gone\rback")
    stream.seek(0)
    assert stream.read() == "[1/1] eve x: error: [2J]0;pwnedgone back\n"


def test_markdown_cells_render_submission_text_literally() -> None:
    assert markdown.cell("<b>x</b> [a](http://e) `c` *e* _u_ a|b &amp; $m$ ![i](j)\nnext") == (
        "\\<b\\>x\\</b\\> \\[a\\](http://e) \\`c\\` \\*e\\* \\_u\\_ a\\|b \\&amp; \\$m\\$ \\!\\[i\\](j) next")


@pytest.mark.parametrize(("value", "shown"), [
    ("-", ""), ("", ""), ("=1+1", "'=1+1"), ("  @SUM(A1)", "'  @SUM(A1)"), ("+x", "'+x"), ("-2.5", "-2.5"),
    ("\x1b[31mred", "[31mred"), ("ok", "ok"),
])
def test_csv_cells_are_empty_or_inert(value: str, shown: str) -> None:
    assert csvfile._safe(value) == shown


# -- the sandbox -----------------------------------------------------------------------------------------------------

CONFINED = """
import os, sys, json, subprocess, time
from pytest_mlcanon.grade import sandbox
spec = sandbox.SandboxSpec(**json.loads(sys.argv[1]))
report = int(sys.argv[2])
done = sandbox.confine(spec, report)
seen = {
    "pid": os.getpid(),
    "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "outside": os.path.exists(sys.argv[3]),
    "root_entries": sorted(os.listdir("/")),
    "environment": sorted(os.environ),
    "capabilities": [line.split()[1] for line in open("/proc/self/status") if line.startswith(("CapEff", "CapPrm"))],
    "uid": os.getuid(),
}
try:
    open("/mlcanon-write-test", "w")
    seen["wrote_root"] = True
except OSError:
    seen["wrote_root"] = False
os.write(report, json.dumps({"missing": done.missing, "seen": seen}).encode())
os.close(report)
if sys.argv[4] == "spin":
    while True:
        pass
if sys.argv[4] == "flood":
    while True:
        try:
            sys.stdout.write("x" * 65536)
            sys.stdout.flush()
        except OSError:
            pass
"""


def _confined(tmp_path: Path, action: str, cpu_s: float = 30.0, output_mb: int = 16) -> tuple[dict[str, object], int]:
    """Run ``CONFINED`` in a sandbox as a job would be; (what it saw, its wait status)."""
    import json
    import subprocess
    import sys

    import sandboxing

    sandboxing.require()
    from pytest_mlcanon.grade import batch, sandbox, uids

    root = Path(tempfile.mkdtemp(prefix="mlcanon-confined-"))
    os.chmod(root, 0o711)
    pool = uids.UidPool(61900, 1) if os.geteuid() == 0 else None
    uid = pool.acquire() if pool else None
    try:
        work, scratch, _ = batch.job_folder(root / "job", "work", None, uid, "")
        spec = sandbox.SandboxSpec(str(root / "job"), str(work), str(scratch), uid, uid, cpu_s=cpu_s,
                                   output_mb=output_mb)
        secret = tmp_path / "outside.txt"
        secret.write_text("x")
        read_end, write_end = os.pipe()
        env = {**os.environ, "MLCANON_FAKE_CI_TOKEN": "t"}
        process = subprocess.Popen([sys.executable, "-c", CONFINED, json.dumps(asdict(spec)), str(write_end),
                                    str(secret), action], pass_fds=(write_end,), env=env, cwd="/")
        os.close(write_end)
        with os.fdopen(read_end, "rb") as answer:
            data = json.loads(answer.read() or b"{}")
        status = process.wait(timeout=60)
    finally:
        if pool is not None:
            pool.close()
        shutil.rmtree(root, ignore_errors=True)
    return data, status


_SYSTEM_ROOT = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "dev", "tmp", "proc", "sys"}


def _python_roots() -> set[str]:
    """The top folders holding Python, its import path and our packages (a CI checkout may live at
    ``/check``, a user's site folder under ``/root``): what the sandbox shows a job besides the system."""
    import sys
    import sysconfig

    import pytest_mlcanon

    places = [sys.prefix, sys.base_prefix, os.path.realpath(sys.executable), *sysconfig.get_paths().values(),
              os.path.realpath(os.path.dirname(pytest_mlcanon.__file__)), *(p for p in sys.path if p)]
    places += [os.path.realpath(place) for place in places]
    return {Path(place).parts[1] for place in places if place.startswith("/") and len(Path(place).parts) > 1}


def test_a_confined_job_sees_nothing_of_the_machine(tmp_path: Path) -> None:
    data, status = _confined(tmp_path, "exit")
    seen = data["seen"]
    assert data["missing"] == [] and status == 0
    assert seen["pid"] == 1 and seen["processes"] == [1], "only its own processes"
    assert seen["outside"] is False and seen["wrote_root"] is False
    assert set(seen["root_entries"]) <= _SYSTEM_ROOT | _python_roots(), "system folders, Python and our packages"
    assert "MLCANON_FAKE_CI_TOKEN" not in seen["environment"]
    assert seen["capabilities"] == ["0000000000000000", "0000000000000000"] and seen["uid"] != 0


def test_a_confined_job_past_its_cpu_limit_ends_by_sigxcpu(tmp_path: Path) -> None:
    _, status = _confined(tmp_path, "spin", cpu_s=1)
    assert status == -signal.SIGXCPU


def test_a_confined_job_past_its_output_limit_ends_by_sigxfsz_even_if_it_catches_the_error(tmp_path: Path) -> None:
    _, status = _confined(tmp_path, "flood", output_mb=1)
    assert status == -signal.SIGXFSZ
