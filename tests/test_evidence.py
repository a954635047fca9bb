"""The evidence model: statuses, the strict JSON codecs, and the grader scoring a job's evidence once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_mlcanon import catalog
from pytest_mlcanon.evidence import (
    MAX_NAME,
    MAX_TEXT,
    EvidenceError,
    ItemEvidence,
    LeftOut,
    Location,
    NonFinite,
    Outcome,
    RecheckFailure,
    ShapeCheck,
    ShapeStatus,
    ShapeTrace,
    Status,
    Timing,
    Transpose,
)
from pytest_mlcanon.grade import assess, config
from pytest_mlcanon.grade.runner import ExitInfo, JobRun

GOOD_BOXES = Path(__file__).resolve().parents[1] / "examples" / "learners" / "good" / "detection" / "boxes.py"
BOXES = catalog.get("detection/boxes")
FILE = "detection/boxes.py"

FULL = ItemEvidence(
    "detection/boxes", Status.SCORED, "", (FILE,), ("detection/other.py",),
    (Outcome("test_detection_boxes.py::test_a", "passed", duration=0.25),
     Outcome("test_detection_boxes.py::test_b[x]", "failed", probe=True, edge=True, contract=True, message="boom",
             where=Location(FILE, 12, learner=True), nonfinite=NonFinite(FILE, 9, "(N, M)"))),
    ShapeTrace((ShapeCheck(FILE, 9, ShapeStatus.CONTRADICTED, "line 9 says (N, M)"), ShapeCheck(FILE, 11, ShapeStatus.CONFIRMED)),
               ((FILE, 0), (FILE, 80)), (Transpose(FILE, 14, 3),)),
    LeftOut(("test_c",), ("-k 'a or b'",), ("test_d",), True, 4),
    {FILE: (1, 2, 3)},
    Timing(12.5, 20.0, 10, "first attempt", "drill", 2, strict=True),
    RecheckFailure("failed", ("box_iou(case 1): off by 0.3",)),
)


def test_evidence_round_trips_through_json() -> None:
    assert ItemEvidence.from_json(json.loads(json.dumps(FULL.to_json()))) == FULL
    bare = ItemEvidence("posttrain/dpo", Status.NOT_ATTEMPTED, "no posttrain/dpo.py under practice")
    assert ItemEvidence.from_json(bare.to_json()) == bare


def _with(path: tuple[str | int, ...], value: object) -> dict:
    data = json.loads(json.dumps(FULL.to_json()))
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize(("path", "value"), [
    (("slug",), 55),                                              # wrong type
    (("status",), "strong"),                                      # outside the vocabulary
    (("outcomes", 0, "outcome"), "won"),
    (("outcomes", 0, "probe"), 1),                                # an int is not a flag
    (("outcomes", 0, "duration"), float("nan")),
    (("outcomes", 0, "duration"), -1),
    (("outcomes", 1, "where", "line"), True),                     # a flag is not a line
    (("outcomes", 1, "where", "line"), -3),
    (("outcomes", 1, "message"), "x" * (MAX_TEXT + 1)),           # past its bound
    (("outcomes", 1, "nonfinite"), ["detection/boxes.py", 9]),
    (("shapes", "checks", 0), [FILE, 9, "maybe", ""]),
    (("shapes", "checks", 0), [FILE, 9, "confirmed"]),
    (("shapes", "transposes", 0), [FILE, 14, 2]),                # a 2-D .T is no full transpose
    (("shapes", "entered", 0), [FILE]),
    (("files",), ["x" * (MAX_NAME + 1)]),
    (("files",), "detection/boxes.py"),
    (("coverage",), {FILE: ["1"]}),
    (("left_out", "interrupted"), "yes"),
    (("recheck", "outcome"), "passed"),
    (("timing", "target_min"), 1.5),
    (("outcomes",), [{"nodeid": "t"}] * 2),                       # outcome missing
    (("outcomes",), [FULL.outcomes[0].to_json()] * 5001),         # too many
])
def test_decoding_is_strict_with_one_error_type(path: tuple[str | int, ...], value: object) -> None:
    with pytest.raises(EvidenceError):
        ItemEvidence.from_json(_with(path, value))


@pytest.mark.parametrize("data", [None, [], "evidence", 3])
def test_anything_but_an_object_is_a_decode_error(data: object) -> None:
    with pytest.raises(EvidenceError, match="expected an object"):
        ItemEvidence.from_json(data)


def test_encoding_clips_text_so_honest_evidence_always_decodes() -> None:
    long = Outcome("t.py::" + "x" * 400, "failed", message="m" * 10_000)
    decoded = Outcome.from_json(long.to_json())
    assert len(decoded.message) == MAX_TEXT and decoded.message.endswith("...")
    assert len(decoded.nodeid) == MAX_NAME


def test_status_properties_are_the_one_vocabulary() -> None:
    ran = {s for s in Status if s.ran}
    scored = {s for s in Status if s.scored}
    assert scored == {Status.SCORED, Status.TIMEOUT, Status.CRASHED, Status.KILLED}
    assert ran == scored | {Status.PARTIAL}
    assert {s for s in Status if not s.fails_run} == {Status.SCORED, Status.PARTIAL, Status.PENDING}
    assert str(Status.NOT_IMPLEMENTED) == "not implemented yet" and Status.from_json("partial") is Status.PARTIAL


def test_traces_of_several_tests_merge_worst_first() -> None:
    first = ShapeTrace((ShapeCheck(FILE, 9, ShapeStatus.CONFIRMED),), ((FILE, 0),), (Transpose(FILE, 14, 3),))
    second = ShapeTrace((ShapeCheck(FILE, 9, ShapeStatus.CONTRADICTED, "why"), ShapeCheck(FILE, 3, ShapeStatus.CONFIRMED)),
                        ((FILE, 80),), (Transpose(FILE, 14, 4),))
    merged = first.merge(second)
    assert [(c.line, c.status) for c in merged.checks] == [(3, ShapeStatus.CONFIRMED), (9, ShapeStatus.CONTRADICTED)]
    assert merged.entered == ((FILE, 0), (FILE, 80)) and merged.transposes == (Transpose(FILE, 14, 4),)
    assert merged.merge(first) == merged  # a later confirmation never clears a contradiction


def test_a_partial_run_says_what_it_left_out() -> None:
    assert not LeftOut(collected=3)
    assert LeftOut(("a", "b", "c", "d"), ("-k 'x'",), collected=6).describe() == (
        "4 of 6 tests left out by -k 'x' (a, b, c and 1 more)")
    assert LeftOut(not_run=("e",), collected=6).describe() == "stopped early (-x, --maxfail, --sw): 1 tests not run (e)"
    assert LeftOut(not_run=("e",), interrupted=True).describe() == "interrupted with 1 tests not run (e)"
    assert LeftOut(by=("--lf",), collected=6).describe() == "narrowed by --lf"


# -- the grader scores a job's evidence once --------------------------------------------------------------------------

def _job(tmp_path: Path, frames: list[dict]) -> tuple[Path, Path, JobRun]:
    root = tmp_path / "snapshots"
    (root / "amy" / "detection").mkdir(parents=True)
    shutil.copyfile(GOOD_BOXES, root / "amy" / FILE)
    return root / "amy", root, JobRun(frames=frames, exit=ExitInfo(0, 0.1, 10.0), wall_s=1.0)


def _graded(tmp_path: Path, frames: list[dict], policy: str = "review", **run: object):  # type: ignore[no-untyped-def]
    impl, root, job = _job(tmp_path, frames)
    calibration = assess.Calibration(nodeids={BOXES.slug: ["test_detection_boxes.py::test_iou",
                                                           "test_detection_boxes.py::test_giou",
                                                           "test_detection_boxes.py::test_fp16"]},
                                     probes={BOXES.slug: ["test_detection_boxes.py::test_fp16"]})
    grading = config.from_table({"recheck": {"enabled": False, "unverified": policy}})
    for key, value in run.items():
        setattr(job, key, value)
    return assess.assess(BOXES, impl, root, job, calibration, [], grading, grading.settings())


def test_the_parent_scores_the_childs_evidence_with_its_own_files(tmp_path: Path) -> None:
    """The first NaN line, a contradicted comment and a full transpose cross the channel as data and
    become NUM100, SHP002 and API001 at the parent's own copy of the file."""
    probe = Outcome("x/test_detection_boxes.py::test_fp16", "failed", probe=False, message="NaN in the output",
                    nonfinite=NonFinite(FILE, 100, "(N, M)"))
    trace = ShapeTrace((ShapeCheck(FILE, 96, ShapeStatus.CONTRADICTED, "line 96 says (N, M, 2) but the value is (3,)"),),
                       ((FILE, 0),), (Transpose(FILE, 113, 3),))
    evidence = ItemEvidence(BOXES.slug, Status.SCORED, files=(FILE,), shapes=trace)
    frames = [{"kind": "hello", "notes": []},
              {"kind": "outcome", "outcome": Outcome("x/test_detection_boxes.py::test_iou", "passed").to_json()},
              {"kind": "outcome", "outcome": Outcome("x/test_detection_boxes.py::test_giou", "passed").to_json()},
              {"kind": "outcome", "outcome": probe.to_json()},
              {"kind": "evidence", "evidence": evidence.to_json()}, {"kind": "done"}]
    cell = _graded(tmp_path, frames)
    found = {(f.code, f.path, f.line) for f in cell.findings}
    assert ("NUM100", "amy/detection/boxes.py", 100) in found  # the probe flag is the calibration's, not the child's
    assert ("SHP002", "amy/detection/boxes.py", 96) in found
    assert ("API001", "amy/detection/boxes.py", 113) in found
    assert cell.axes == {"correctness": True, "shapes": False, "numerics": False, "api": False, "explanation": True}
    assert cell.verdict == ("no 2/5: shapes, numerics and API fluency failed; correctness unverified (6 points held "
                            "for review): the re-check is turned off in the teacher's config") and not cell.integrity


def _passed(name: str) -> dict:
    return {"kind": "outcome", "outcome": Outcome(f"test_detection_boxes.py::{name}", "passed").to_json()}


def test_a_run_that_finished_earns_its_tests(tmp_path: Path) -> None:
    cell = _graded(tmp_path, [_passed("test_iou"), _passed("test_giou"), _passed("test_fp16"), {"kind": "done"}],
                   policy="award")
    assert cell.status is Status.SCORED and cell.unfinished == 0
    assert cell.axis_max["correctness"] > 0
    assert cell.axis_points["correctness"] == pytest.approx(cell.axis_max["correctness"])


@pytest.mark.parametrize(("ending", "frames", "run", "status", "words"), [
    # the test timeout, after one test passed: a hang keeps nothing
    ("timeout", [_passed("test_iou"), {"kind": "start", "test": "test_detection_boxes.py::test_giou"}],
     {"killed": "test", "killed_in": "test_detection_boxes.py::test_giou"}, Status.TIMEOUT,
     "timeout: test_giou ran over 20 s of CPU time; 1 of 3 tests had passed; no correctness points: the run did not "
     "finish (2 of 3 tests never reported)"),
    # a test that sleeps or blocks: no CPU used, but no progress for three times the limit
    ("stalled", [_passed("test_iou"), {"kind": "start", "test": "test_detection_boxes.py::test_giou"}],
     {"killed": "stalled", "killed_in": "test_detection_boxes.py::test_giou", "killed_cpu_s": 0.02}, Status.TIMEOUT,
     "timeout: test_giou did not finish in 60 s on the clock (0.0 s of CPU time); 1 of 3 tests had passed; no "
     "correctness points: the run did not finish (2 of 3 tests never reported)"),
    # the process ended (os._exit, a signal of its own, a closed channel) after one test passed
    ("crash", [_passed("test_iou"), {"kind": "start", "test": "test_detection_boxes.py::test_giou"}], {},
     Status.CRASHED, "crashed: the process ended during test_giou (exit status 0); 1 of 3 tests had passed; "
     "no correctness points: the run did not finish (2 of 3 tests never reported)"),
    # every test reported, then the job hung on its way out: stopped all the same
    ("wall", [_passed("test_iou"), _passed("test_giou"), _passed("test_fp16")],
     {"killed": "wall", "killed_in": "starting"}, Status.TIMEOUT,
     "timeout: the job ran over 120 s; 3 of 3 tests had passed; no correctness points: the run did not finish"),
    # the session ended early (pytest.exit, an interrupt) and said done: the tests never run are missing
    ("session", [_passed("test_iou"), {"kind": "done"}], {}, Status.SCORED,
     "no correctness points: the run did not finish (2 of 3 tests never reported)"),
])
def test_a_run_that_did_not_finish_earns_no_correctness_points(tmp_path: Path, ending: str, frames: list[dict],
                                                                run: dict, status: Status, words: str) -> None:
    """Whatever passed before a job ended early, even with correctness the teacher awards unverified."""
    cell = _graded(tmp_path, frames, policy="award", **run)
    assert cell.status is status, cell.verdict
    assert cell.axis_points["correctness"] == 0.0 and all(t.points == 0.0 for t in cell.tests), ending
    assert cell.tests_count("passed") >= 1
    assert words in cell.verdict and not cell.flagged, cell.verdict


def test_a_skip_the_reference_did_not_make_is_a_failure(tmp_path: Path) -> None:
    """A skip raised from the learner's code (``unittest.SkipTest``) would take the test out of the
    count; only what the machine lacks (the reference skipped it too) may."""
    skipped = {"kind": "outcome", "outcome": Outcome("test_detection_boxes.py::test_giou", "skipped",
                                                     message="no").to_json()}
    cell = _graded(tmp_path, [_passed("test_iou"), skipped, _passed("test_fp16"), {"kind": "done"}], policy="award")
    giou = next(t for t in cell.tests if t.name == "test_giou")
    assert giou.outcome == "failed" and giou.message.startswith("skipped, where the reference ran it")
    assert cell.axis_points["correctness"] == pytest.approx(cell.axis_max["correctness"] / 2)
    assert not cell.axes["correctness"]


def test_malformed_evidence_is_a_corrupted_channel(tmp_path: Path) -> None:
    forged = FULL.to_json() | {"status": "strong"}
    frames = [{"kind": "outcome", "outcome": Outcome("test_detection_boxes.py::test_iou", "passed").to_json()},
              {"kind": "evidence", "evidence": forged}, {"kind": "done"}]
    cell = _graded(tmp_path, frames)
    assert "INT107" in cell.codes and cell.verdict.startswith("flagged: INT107")
