"""The attack suite of ``mlcanon grade`` and the broken-submission list (issue 8).

One batch grades, side by side, two honest students (the shipped good and flawed learners), the
twelve attacks of the issue (plus two variants) and the nine broken submissions. Every attack must
come out flagged or failed, never passed; every broken submission gets a one-line verdict; the
honest students keep exactly the grades they get alone. The attacks target ``detection/boxes`` (a
small item); the honest students are also graded on ``posttrain/dpo``.

Each submission is the good learner's ``boxes.py`` with one change, so a grade other than "passed"
can only come from that change.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from pytest_mlcanon.evidence import Status
from pytest_mlcanon.grade import batch, config
from pytest_mlcanon.grade.gradebook import Gradebook, ItemResult

pytestmark = pytest.mark.slow  # the fast lane, pytest -m "not slow", leaves it out (CONTRIBUTING.md)

REPO = Path(__file__).resolve().parents[1]
GOOD = REPO / "examples" / "learners" / "good"
FLAWED = REPO / "examples" / "learners" / "flawed"
BOXES = "detection/boxes"
DPO = "posttrain/dpo"
ESCAPE_MARK = Path("/tmp") / f"mlcanon-attack-escaped-{os.getpid()}"

WRONG_IOU = '''
def box_iou(boxes1, boxes2):
    """IoU matrix (N, M) (wrong on purpose: the ratio of areas)."""
    a1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])
    a2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])
    return torch.minimum(a1[:, None], a2[None, :]) / torch.maximum(a1[:, None], a2[None, :]).clamp_min(1e-9)
'''

# name -> (code inserted after the imports, code appended at the end of the module)
ATTACKS: dict[str, tuple[str, str]] = {
    "exit_at_import": ("import sys\nsys.exit(0)\n", ""),
    "os_exit_mid_test": ("import os\n_CALLS = [0]\n", '''
_original_iou = box_iou


def box_iou(boxes1, boxes2):
    """IoU, then end the process on the fourth call: a test is running by then."""
    _CALLS[0] += 1
    if _CALLS[0] >= 4:
        os._exit(0)
    return _original_iou(boxes1, boxes2)
'''),
    "patch_comparisons": ("import numpy as np\n", WRONG_IOU + '''
torch.allclose = lambda *args, **kwargs: True
torch.testing.assert_close = lambda *args, **kwargs: None
np.testing.assert_allclose = lambda *args, **kwargs: None
'''),
    "patch_test_report": ("", WRONG_IOU + '''
import _pytest.reports

_init = _pytest.reports.TestReport.__init__


def _always_passed(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.outcome = "passed"
    self.longrepr = None


_pytest.reports.TestReport.__init__ = _always_passed
'''),
    "import_reference": ("from canon_refs.detection.boxes import box_iou as _reference_iou\n", '''
box_iou = _reference_iou  # noqa: F811
'''),
    "load_reference_by_path": ("import importlib.util\nimport os\n\nimport canon_refs\n", '''
_spec = importlib.util.spec_from_file_location(
    "_copied", os.path.join(os.path.dirname(canon_refs.__file__), "detection", "boxes.py"))
_copied = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_copied)
box_iou = _copied.box_iou  # noqa: F811
generalized_box_iou = _copied.generalized_box_iou  # noqa: F811
'''),
    "read_test_file": ("import canon_tests\nimport pathlib\n", '''
_SOURCE = (pathlib.Path(canon_tests.__file__).parent / "test_detection_boxes.py").read_text()
'''),
    "infinite_loop": ("_CALLS = [0]\n", '''
_original_iou = box_iou


def box_iou(boxes1, boxes2):
    """Honest for seven calls, then never returns, swallowing whatever tries to stop it."""
    _CALLS[0] += 1
    while _CALLS[0] >= 8:
        try:
            sum(range(10_000))
        except BaseException:
            pass
    return _original_iou(boxes1, boxes2)
'''),
    "memory_bomb": ("", '''
def box_iou(boxes1, boxes2):
    """Allocate until something gives."""
    hog = []
    while True:
        hog.append(b"x" * (64 << 20))
'''),
    "fork_bomb": ("import os\nimport subprocess\n", '''
def box_iou(boxes1, boxes2):
    """Fork until the machine falls over; try harder when refused."""
    for _ in range(10_000):
        try:
            os.fork()
        except BaseException:
            try:
                subprocess.Popen(["sh", "-c", ":(){ :|:& };:"])
            except BaseException:
                pass
    return torch.zeros(boxes1.shape[0], boxes2.shape[0])
'''),
    "open_socket": ("import socket\n", '''
try:
    socket.create_connection(("93.184.216.34", 80), timeout=1).sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
except BaseException:
    pass
'''),
    "write_outside": ("", f'''
try:
    with open({str(ESCAPE_MARK)!r}, "w") as _handle:
        _handle.write("escaped")
except BaseException:
    pass
'''),
    "hard_coded": ("", '''
_KNOWN = {
    ((0.0, 0.0, 2.0, 2.0),): {((1.0, 1.0, 3.0, 3.0),): 1 / 7},
}


def box_iou(boxes1, boxes2):
    """The public example's answer when asked it, a guess otherwise."""
    key1 = tuple(tuple(float(v) for v in b) for b in boxes1.tolist())
    key2 = tuple(tuple(float(v) for v in b) for b in boxes2.tolist())
    if key1 in _KNOWN and key2 in _KNOWN[key1]:
        return torch.full((1, 1), _KNOWN[key1][key2], dtype=boxes1.dtype)
    return torch.full((boxes1.shape[0], boxes2.shape[0]), 0.5, dtype=boxes1.dtype)
'''),
    "frame_peek": ("import sys\n", '''
_original_iou = box_iou


def box_iou(boxes1, boxes2):
    """Read the caller's expected value from its frame (and answer honestly anyway)."""
    try:
        sys._getframe(1).f_locals.get("expected")
    except BaseException:
        pass
    return _original_iou(boxes1, boxes2)
'''),
}

# name -> the whole file, or None for a file built from the good one
BROKEN: dict[str, str | bytes] = {
    "syntax_error": "def box_iou(boxes1, boxes2)\n    return boxes1\n",
    "missing_function": "GOOD-WITHOUT:generalized_box_iou",
    "wrong_signature": "GOOD-APPEND:\ndef box_iou(boxes1):\n    \"\"\"One argument only.\"\"\"\n    return boxes1[:, :1]\n",
    "wrong_return_shape": "GOOD-APPEND:\ndef box_iou(boxes1, boxes2):\n    \"\"\"A flat vector.\"\"\"\n"
                          "    return torch.zeros(boxes1.shape[0] * boxes2.shape[0])\n",
    "nan_output": "GOOD-APPEND:\ndef box_iou(boxes1, boxes2):\n    \"\"\"NaN everywhere.\"\"\"\n"
                  "    return torch.full((boxes1.shape[0], boxes2.shape[0]), float('nan'))\n",
    "empty_file": "",
    "missing_package": "import einops_that_is_not_installed\n",
    "not_utf8": b'CAFE = "caf\xe9"\n\n\ndef box_iou(boxes1, boxes2):\n    return boxes1\n',
    "print_loop": "GOOD-APPEND:\ndef box_iou(boxes1, boxes2):\n    \"\"\"A megabyte per second, forever.\"\"\"\n"
                  "    import time\n    while True:\n        print('x' * (1 << 20))\n        time.sleep(1)\n",
}


def _good_boxes() -> str:
    return (GOOD / BOXES).with_suffix(".py").read_text(encoding="utf-8")


def _insert_after_imports(source: str, header: str) -> str:
    anchor = "from torch import Tensor\n"
    assert anchor in source
    return source.replace(anchor, anchor + header, 1)


def _attack_source(header: str, footer: str) -> str:
    return _insert_after_imports(_good_boxes(), header) + textwrap.dedent(footer)


def _broken_source(spec: str | bytes) -> bytes:
    if isinstance(spec, bytes):
        return spec
    if spec.startswith("GOOD-WITHOUT:"):
        name = spec.split(":", 1)[1]
        source = _good_boxes()
        return source[:source.index(f"def {name}(")].encode()
    if spec.startswith("GOOD-APPEND:"):
        return (_good_boxes() + spec.split(":", 1)[1]).encode()
    return spec.encode()


def _write(root: Path, student: str, files: dict[str, bytes]) -> None:
    for module, content in files.items():
        path = root / student / f"{module}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def _honest(root: Path, student: str, source: Path) -> None:
    _write(root, student, {m: (source / f"{m}.py").read_bytes() for m in (BOXES, DPO)
                           if (source / f"{m}.py").is_file()})


def _config(**sandbox: bool) -> config.GradeConfig:
    table = {"items": [BOXES, DPO], "workers": 2, "seed": 20240607,
             "limits": {"wall_s": 120, "test_timeout_s": 15, "cpu_s": 60, "memory_mb": 768, "output_mb": 4},
             "sandbox": sandbox}
    return config.from_table(table, source="the attack suite's config")


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Gradebook:
    root = tmp_path_factory.mktemp("class")
    _honest(root, "honest_good", GOOD)
    _honest(root, "honest_flawed", FLAWED)
    for name, (header, footer) in ATTACKS.items():
        _write(root, f"attack_{name}", {BOXES: _attack_source(header, footer).encode()})
    for name, spec in BROKEN.items():
        _write(root, f"broken_{name}", {BOXES: _broken_source(spec)})
    ESCAPE_MARK.unlink(missing_ok=True)
    try:
        yield batch.grade(root, _config(), progress=False)
    finally:
        ESCAPE_MARK.unlink(missing_ok=True)


def _cell(book: Gradebook, student: str, slug: str = BOXES) -> ItemResult:
    found = next(s for s in book.students if s.student == student).item(slug)
    assert found is not None
    return found


def passed(item: ItemResult) -> bool:
    """What an attack must never get: scored, not flagged, correctness yes, and points."""
    return item.status is Status.SCORED and not item.flagged and bool(item.axes.get("correctness")) and item.points > 0


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_every_attack_is_flagged_or_failed_never_passed(graded: Gradebook, name: str) -> None:
    item = _cell(graded, f"attack_{name}")
    assert not passed(item), f"{name} passed: {item.verdict}"
    assert item.verdict, "every attack gets a one-line verdict"
    assert "\n" not in item.verdict


EXPECTED_FLAGS = {
    "exit_at_import": "INT001",
    "os_exit_mid_test": "INT001",
    "patch_comparisons": "INT002",
    "patch_test_report": "INT002",
    "import_reference": "INT003",
    "load_reference_by_path": "INT009",
    "read_test_file": "INT004",
    "fork_bomb": "INT007",
    "open_socket": "INT008",
    "write_outside": "INT006",
    "frame_peek": "INT004",
}


@pytest.mark.parametrize(("name", "code"), sorted(EXPECTED_FLAGS.items()))
def test_attacks_that_leave_a_trace_are_flagged_with_the_right_code(graded: Gradebook, name: str, code: str) -> None:
    item = _cell(graded, f"attack_{name}")
    assert code in item.codes, (item.codes, item.verdict)
    assert item.verdict.startswith(f"flagged: {code}") or item.verdict.startswith("flagged: ")
    assert item.points == 0.0, "a flagged item scores zero under the default on_flag"


def test_run_time_guard_blocks_and_reports_what_the_scan_saw(graded: Gradebook) -> None:
    assert "INT103" in _cell(graded, "attack_open_socket").codes
    assert "INT101" in _cell(graded, "attack_write_outside").codes
    assert not ESCAPE_MARK.exists(), "the write outside the job's folder must not have happened"
    assert "INT104" in _cell(graded, "attack_fork_bomb").codes
    assert "INT102" in _cell(graded, "attack_read_test_file").codes
    assert "INT106" in _cell(graded, "attack_patch_test_report").codes
    assert "INT105" in _cell(graded, "attack_frame_peek").codes


def test_forged_passes_do_not_survive_the_parents_recheck(graded: Gradebook) -> None:
    for name in ("patch_comparisons", "patch_test_report"):
        item = _cell(graded, f"attack_{name}")
        assert item.recheck.status == "failed", item.recheck
        assert not item.axes.get("correctness")


def test_hard_coded_answers_fail_the_seeded_recheck(graded: Gradebook) -> None:
    item = _cell(graded, "attack_hard_coded")
    assert item.recheck.status == "failed"
    assert any("box_iou" in p for p in item.recheck.problems)
    assert not item.axes["correctness"]


def test_timeouts_and_crashes_say_what_happened(graded: Gradebook) -> None:
    loop = _cell(graded, "attack_infinite_loop")
    assert loop.status is Status.TIMEOUT and "ran over 15 s" in loop.verdict, loop.verdict
    crash = _cell(graded, "attack_os_exit_mid_test")
    assert crash.status is Status.CRASHED and "the process ended during" in crash.verdict, crash.verdict
    bomb = _cell(graded, "attack_memory_bomb")
    assert bomb.status in (Status.KILLED, Status.SCORED) and not bomb.axes.get("correctness", False), bomb.verdict


def test_a_timeout_keeps_the_verdicts_of_the_tests_before_it(graded: Gradebook) -> None:
    loop = _cell(graded, "attack_infinite_loop")
    outcomes = {t.outcome for t in loop.tests}
    assert "timeout" in outcomes
    assert loop.tests_count("passed") > 0, "tests that ran before the hang keep their verdict"


def test_honest_students_keep_their_grades_in_the_same_batch(graded: Gradebook) -> None:
    for slug in (BOXES, DPO):
        good = _cell(graded, "honest_good", slug)
        assert good.status is Status.SCORED and good.score == 5 and not good.flagged, good.verdict
        assert good.recheck.status == "passed"
        assert good.points == good.max_points
    flawed = _cell(graded, "honest_flawed", DPO)
    assert flawed.status is Status.SCORED and not flawed.flagged
    assert flawed.score == 3 and not flawed.axes["correctness"]
    assert flawed.recheck.status == "failed", "a sign flip shows on fresh inputs too"
    assert _cell(graded, "honest_flawed", BOXES).status is Status.NOT_ATTEMPTED


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_broken_submission_gets_a_one_line_verdict(graded: Gradebook, name: str) -> None:
    item = _cell(graded, f"broken_{name}")
    assert item.verdict and "\n" not in item.verdict
    assert not passed(item), item.verdict


def test_broken_submissions_fail_for_the_right_reason(graded: Gradebook) -> None:
    verdicts = {name: _cell(graded, f"broken_{name}").verdict for name in BROKEN}
    assert verdicts["syntax_error"].startswith("error: SyntaxError at broken_syntax_error/detection/boxes.py:1")
    assert verdicts["missing_package"].startswith("error: ModuleNotFoundError")
    assert "SyntaxError" in verdicts["not_utf8"], verdicts["not_utf8"]
    assert "COR002" in {f.code for f in _cell(graded, "broken_missing_function").findings}
    assert _cell(graded, "broken_print_loop").status in (Status.TIMEOUT, Status.KILLED), verdicts["print_loop"]
    for name in ("wrong_signature", "wrong_return_shape", "nan_output", "empty_file"):
        item = _cell(graded, f"broken_{name}")
        assert item.status is Status.SCORED and not item.axes["correctness"], (name, item.verdict)
        # the verdict word never praises failing code, and it says what held the item back
        assert item.verdict.startswith(f"no {item.score}/5: correctness failed ("), (name, item.verdict)
    failing = _cell(graded, "broken_wrong_return_shape")
    failed = sum(1 for t in failing.tests if t.outcome in ("failed", "error") and not (t.probe or t.contract))
    ran = sum(1 for t in failing.tests if t.outcome != "skipped")
    assert f"correctness failed ({failed} of {ran} tests" in failing.verdict, failing.verdict


def test_the_batch_completes_with_a_row_per_student(graded: Gradebook) -> None:
    students = {s.student for s in graded.students}
    assert len(students) == 2 + len(ATTACKS) + len(BROKEN)
    assert all(s.item(BOXES) is not None for s in graded.students)


def test_sandbox_notes_reach_the_gradebook(graded: Gradebook) -> None:
    notes = " ".join(graded.sandbox)
    assert "network:" in notes and "file system:" in notes and "user:" in notes
    if os.geteuid() == 0:
        assert "network: isolated" in notes
        assert "user: not root" in notes


def test_without_the_kernel_sandbox_the_audit_hook_still_holds(tmp_path: Path) -> None:
    """The fallback of a grader that is not root: no namespaces, no sandbox user; the attacks that
    reach outside still come out flagged and do nothing."""
    for name in ("write_outside", "open_socket", "fork_bomb"):
        _write(tmp_path, f"attack_{name}", {BOXES: _attack_source(*ATTACKS[name]).encode()})
    ESCAPE_MARK.unlink(missing_ok=True)
    book = batch.grade(tmp_path, _config(network=False, filesystem=False, user=False), progress=False)
    for student in book.students:
        item = student.item(BOXES)
        assert item is not None and item.flagged and not passed(item), item.verdict if item else student
    assert not ESCAPE_MARK.exists()
    assert any("network: not isolated" in n for n in book.sandbox)
