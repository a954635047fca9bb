"""Unit tests of ``pytest_mlcanon.grade``: the parts that need no child process (fast)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import sandboxing
import torch

from pytest_mlcanon import catalog
from pytest_mlcanon.evidence import Status
from pytest_mlcanon.grade import (
    answers,
    assess,
    batch,
    channel,
    compare,
    config,
    discover,
    integrity,
    recheck,
    sandbox,
    scan,
    shard,
    uids,
    values,
)
from pytest_mlcanon.grade.gradebook import Gradebook, GradedTest, ItemResult, Recheck, StudentResult
from pytest_mlcanon.grade.guard import Guard, resolve
from pytest_mlcanon.grade.progress import Progress
from pytest_mlcanon.grade.render import csvfile, github, gradescope, html, markdown, write_all
from pytest_mlcanon.grade.runner import ExitInfo, JobRun
from pytest_mlcanon.redirect import reference_dir
from pytest_mlcanon.rubric.model import Finding

REPO = Path(__file__).resolve().parents[1]
BOXES = catalog.get("detection/boxes")


# -- the channel's codec and framing --------------------------------------------------------------------------


@dataclass
class _Pair:
    loss: torch.Tensor
    count: int


def test_codec_round_trips_plain_data_exactly() -> None:
    value = (torch.tensor([1.5, float("nan")], dtype=torch.float32), torch.tensor([0.1], dtype=torch.bfloat16),
             torch.tensor([[True, False]]), np.arange(6, dtype=np.int64).reshape(2, 3), float("inf"), 0.1,
             {"beta": 0.25, "name": "x", "none": None}, [1, 2], torch.float64)
    back = values.decode(values.encode(value), to_torch=True)
    assert torch.equal(back[0][:1], value[0][:1]) and torch.isnan(back[0][1])
    assert back[1].dtype == torch.bfloat16 and torch.equal(back[1], value[1])
    assert back[2].dtype == torch.bool and torch.equal(back[2], value[2])
    assert np.array_equal(back[3], value[3]) and back[4] == float("inf") and back[5] == 0.1
    assert back[6] == {"beta": 0.25, "name": "x", "none": None} and back[7] == [1, 2] and back[8] is torch.float64


def test_the_parent_decodes_without_torch_into_arrays_and_records() -> None:
    decoded = values.decode(values.encode(_Pair(torch.tensor(0.5, dtype=torch.float64), 3)))
    assert isinstance(decoded, values.Record) and decoded.type == "_Pair"
    loss = decoded.fields["loss"]
    assert isinstance(loss, values.Array) and loss.kind == "tensor" and loss.dtype == "float64"
    assert loss.values.shape == () and float(loss.values) == 0.5 and decoded.fields["count"] == 3


@pytest.mark.parametrize("bad", [
    {"$": "tensor", "dtype": "object", "shape": [1], "data": ""},
    {"$": "ndarray", "dtype": "float64", "shape": [2], "data": "AAAAAAAAAAA="},
    {"$": "ndarray", "dtype": "float64", "shape": [-1], "data": ""},
    {"$": "float", "hex": "not a float"},
    {"$": "pickle", "data": "gASVAAAAAAAAAAA="},
    [1, 2, 3],
])
def test_the_parent_rejects_malformed_values(bad: object) -> None:
    with pytest.raises(values.CodecError):
        values.decode(bad)


def test_frames_survive_arbitrary_splits_and_the_reader_caps_them() -> None:
    read, write = os.pipe()
    writer = channel.ChannelWriter(write)
    writer.send("start", test="t1")
    writer.send("done")
    os.close(write)
    reader = channel.FrameReader(read)
    frames = []
    while not reader.eof:
        frames += reader.read()
    os.close(read)
    assert [f["kind"] for f in frames] == ["start", "done"] and not reader.error


@pytest.mark.parametrize(("payload", "error"), [
    (channel.HEADER.pack(10_000_000), "exceeds"),
    (channel.HEADER.pack(4) + b"nope", "not valid JSON"),
    (channel.HEADER.pack(2) + b"[]", "no kind"),
    (channel.HEADER.pack(9), "inside a frame"),
])
def test_a_forged_or_corrupt_channel_is_an_error_not_a_frame(payload: bytes, error: str) -> None:
    read, write = os.pipe()
    os.write(write, payload)
    os.close(write)
    reader = channel.FrameReader(read, max_frame=1 << 20)
    frames = []
    while not reader.eof:
        frames += reader.read()
    os.close(read)
    assert frames == [] and error in reader.error


# -- the parent's comparison ----------------------------------------------------------------------------------------


def _enc(value: object) -> object:
    return values.decode(values.encode(value))


def test_compare_accepts_float_noise_and_names_a_real_difference() -> None:
    expected = _enc(torch.tensor([0.1, 0.2, 0.3]))
    assert compare.compare(expected, _enc(torch.tensor([0.1, 0.2, 0.3 + 1e-7]))) == []
    problems = compare.compare(expected, _enc(torch.tensor([0.1, -0.2, 0.3])), "iou")
    assert problems and problems[0].startswith("iou: off by up to 0.4 (at (1,)")


@pytest.mark.parametrize(("got", "words"), [
    (torch.zeros(2), "shape (2,) instead of (3,)"),
    (torch.tensor([0.1, float("nan"), 0.3]), "NaN where"),
    (values.Raised("TypeError", "bad"), "raised TypeError: bad"),
    (values.Opaque("generator"), "got a generator"),
    (np.array([0.1, 0.2, 0.3], dtype=np.float32), "expected a float32 tensor of shape (3,), got a float32 ndarray"),
])
def test_compare_explains_each_kind_of_mismatch(got: object, words: str) -> None:
    decoded = got if isinstance(got, (values.Raised, values.Opaque)) else _enc(got)
    (problem,) = compare.compare(_enc(torch.tensor([0.1, 0.2, 0.3])), decoded)
    assert words in problem


def test_compare_walks_records_by_field_and_wants_the_same_type() -> None:
    expected = _enc(_Pair(torch.tensor(1.0), 2))
    assert compare.compare(expected, _enc(_Pair(torch.tensor(1.0), 2))) == []
    assert compare.compare(expected, values.Record("_Pair", {"loss": _enc(torch.tensor(1.0))})) == [
        "result.count: missing"]
    assert compare.compare(expected, values.Record("Other", {"loss": _enc(torch.tensor(1.0)), "count": 2})) == [
        "result: expected a _Pair, got a Other"]


def test_an_additive_mask_is_no_magnitude_an_answer_may_be_off_by() -> None:
    """The allowance for a difference of large inputs never counts a mask: an attention case whose mask is
    ``finfo.min`` once allowed an absolute error of 1e34, any answer of the right shape."""
    mask = torch.zeros(2, 3)
    mask[0, 1] = torch.finfo(torch.float32).min
    x = torch.tensor([[0.5, -2.0, 1.0], [0.25, 0.75, -1.5]])
    case = {"function": "f", "steps": [{"function": "f", "args": values.encode((x, mask)), "kwargs": values.encode({})}]}
    context = compare.Context.of("transformer/attention", case)
    assert context.scale == 2.0 and context.precision == "float32"
    expected = values.decode(values.encode_result(torch.ones(2, 3)))
    assert compare.compare(expected, values.decode(values.encode_result(torch.full((2, 3), 5.0))), context=context)


def test_the_zygote_reads_the_raises_blocks_of_the_tests_before_any_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shape checker looks for ``pytest.raises`` blocks in its callers' files when a comment is
    contradicted; in a job that read of a test file, with learner code on the stack, was blocked and flagged
    INT102: an honest student with a wrong shape comment scored zero. The zygote reads them first."""
    from pytest_mlcanon.grade import zygote
    from pytest_mlcanon.rubric import shape_instrument

    tests = REPO / "canon_tests"
    shape_instrument._raises_blocks.cache_clear()  # noqa: SLF001
    zygote._rewrite([str(tests / "test_transformer_multihead.py")])  # noqa: SLF001
    opened: list[object] = []
    monkeypatch.setattr(shape_instrument, "Path", lambda name: opened.append(name) or Path(name))
    shape_instrument._raises_block_at(str(tests / "test_transformer_multihead.py"), 1)  # noqa: SLF001
    shape_instrument._raises_block_at(str(tests / "_toy_lm.py"), 1)  # noqa: SLF001 - a helper beside them
    assert opened == []


# -- the static integrity scan ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("snippet", "code"), [
    ("import sys\nsys.exit(0)", "INT001"),
    ("from os import _exit as leave\nleave(0)", "INT001"),
    ("raise SystemExit", "INT001"),
    ("import torch\ntorch.allclose = lambda *a, **k: True", "INT002"),
    ("import numpy as np\nsetattr(np.testing, 'assert_allclose', print)", "INT002"),
    ("import torch\nvars(torch.testing)['assert_close'] = print", "INT002"),
    ("import _pytest.reports", "INT002"),
    ("def pytest_runtest_makereport(item, call):\n    pass", "INT002"),
    ("from canon_refs.detection.boxes import box_iou", "INT003"),
    ("import mlbook.detection.boxes", "INT003"),
    ("import sys\nsys._getframe(1).f_locals", "INT004"),
    ("import gc\nframes = gc.get_referrers(print)", "INT004"),
    ("from gc import get_objects", "INT004"),
    ("PATH = 'canon_tests/test_detection_boxes.py'", "INT004"),
    ("import torchvision.ops\nbox_iou = torchvision.ops.box_iou", "INT005"),
    ("data = open('x').read()", "INT006"),
    ("import os\nos.fork()", "INT007"),
    ("import socket", "INT008"),
    ("exec('x = 1')", "INT009"),
    ("import ctypes", "INT009"),
    ("import unittest\nraise unittest.SkipTest('not today')", "INT002"),
    # values that answer a test's comparisons their own way
    ("from torch import Tensor\nclass Agree(Tensor):\n    pass", "INT002"),
    ("import numpy as np\nclass Agree(np.ndarray):\n    pass", "INT002"),
    ("class Agree:\n    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
     "        return True", "INT002"),
    ("class Agree:\n    __array_ufunc__ = None", "INT002"),
    ("class Yes(float):\n    def __eq__(self, other):\n        return True", "INT002"),
    ("class Agree:\n    def __eq__(self, other):\n        return True\n    __hash__ = None", "INT002"),
    ("class Agree:\n    __eq__ = lambda self, other: True", "INT002"),
    ("class Agree(list):\n    def __bool__(self):\n        return True", "INT002"),
    ("import torch\nx = torch.zeros(2).as_subclass(type)", "INT002"),
    ("Agree = type('Agree', (float,), {})", "INT009"),
    ("import numpy as np\nw = np.ma.masked_all(3)", "INT002"),  # masked entries skip np.testing's checks
    ("import numpy.ma as ma\nw = ma.masked_all(3)", "INT002"),
    ("from numpy import ma", "INT002"),
])
def test_scan_rules(tmp_path: Path, snippet: str, code: str) -> None:
    path = tmp_path / "detection" / "boxes.py"
    path.parent.mkdir()
    path.write_text(snippet + "\n", encoding="utf-8")
    codes = {f.code for f in scan.scan(BOXES, tmp_path, tmp_path)}
    assert code in codes, codes


def test_scan_leaves_a_field_wise_equality_alone(tmp_path: Path) -> None:
    path = tmp_path / "detection" / "boxes.py"
    path.parent.mkdir()
    path.write_text("class Box:\n    def __init__(self, x):\n        self.x = x\n\n"
                    "    def __eq__(self, other):\n        if not isinstance(other, Box):\n"
                    "            return NotImplemented\n        return self.x == other.x\n", encoding="utf-8")
    assert scan.scan(BOXES, tmp_path, tmp_path) == []


def test_scan_leaves_ordinary_gc_use_alone(tmp_path: Path) -> None:
    path = tmp_path / "detection" / "boxes.py"
    path.parent.mkdir()
    path.write_text("import gc\ngc.disable()\ngc.collect()\ngc.enable()\n", encoding="utf-8")
    assert scan.scan(BOXES, tmp_path, tmp_path) == []


def test_scan_follows_canon_imports_to_the_learners_other_files(tmp_path: Path) -> None:
    (tmp_path / "detection").mkdir()
    (tmp_path / "detection" / "nms.py").write_text("from canon_refs.detection.boxes import box_iou\n")
    (tmp_path / "detection" / "boxes.py").write_text("import os\nos._exit(3)\n")
    found = scan.scan(catalog.get("detection/nms"), tmp_path, tmp_path)
    assert [(f.code, f.path) for f in found] == [("INT001", "detection/boxes.py")]


def test_scan_reads_a_file_as_python_does_its_coding_cookie_included(tmp_path: Path) -> None:
    """Read as UTF-8, this file holds one comment; Python reads it as UTF-7 (its cookie), where ``+AAo-``
    is a line break, and runs the patch. The scan reads what Python runs."""
    (tmp_path / "detection").mkdir()
    (tmp_path / "detection" / "boxes.py").write_bytes(
        b"# -*- coding: utf-7 -*-\nimport torch\n# +AAo-torch.allclose = lambda *args, **kwargs: True\n")
    assert [(f.code, f.line) for f in scan.scan(BOXES, tmp_path, tmp_path)] == [("INT002", 4)]


@pytest.mark.parametrize("line", ["grad = _helper.torch.autograd.grad", "lib = getattr(_helper, 'torch')",
                                  "lib = vars(_helper)['torch']"])
def test_scan_flags_a_forbidden_package_reached_through_another_module(tmp_path: Path, line: str) -> None:
    """nn/mlp forbids torch; another item's reference imported it, so ``_helper.torch`` is torch with no
    import naming it, and a function the re-check does not reach (MLP.backward) ran autograd unflagged."""
    (tmp_path / "nn").mkdir()
    (tmp_path / "nn" / "mlp.py").write_text(f"from canon_refs.transformer import attention as _helper\n{line}\n")
    found = scan.scan(catalog.get("nn/mlp"), tmp_path, tmp_path)
    assert [(f.code, f.line) for f in found] == [("INT005", 2)], found


def test_scan_reads_a_forbidden_packages_name_only_on_an_imported_module(tmp_path: Path) -> None:
    # an honest learner's own attribute or dict key of that name is no package
    (tmp_path / "nn").mkdir()
    (tmp_path / "nn" / "mlp.py").write_text("class Net:\n    def f(self, timings):\n"
                                            "        return self.torch, timings['torch']\n")
    assert [f.code for f in scan.scan(catalog.get("nn/mlp"), tmp_path, tmp_path) if f.code == "INT005"] == []


def test_scan_flags_a_verbatim_copy_of_the_reference(tmp_path: Path) -> None:
    (tmp_path / "detection").mkdir()
    text = (reference_dir() / "detection" / "boxes.py").read_text()
    (tmp_path / "detection" / "boxes.py").write_text(text.replace('"""', '"""Mine. ', 1))
    assert "INT011" in {f.code for f in scan.scan(BOXES, tmp_path, tmp_path)}


@pytest.mark.parametrize("root", [reference_dir(), REPO / "examples" / "learners" / "good",
                                  REPO / "examples" / "learners" / "flawed"], ids=["references", "good", "flawed"])
def test_honest_code_raises_no_integrity_flag(root: Path) -> None:
    found = [f.render() for item in catalog.all_items() for f in scan.scan(item, root, root)
             if not (root == reference_dir() and f.code == "INT011")]
    assert found == []


def test_every_integrity_code_has_a_title_and_a_hint() -> None:
    assert all(rule.title and rule.hint and code.startswith("INT") for code, rule in integrity.RULES.items())


# -- the run-time guard (its judgement; the hook itself runs in the attack suite) -----------------------------------


def test_guard_judges_writes_and_reads(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    guard = Guard(channel.ChannelWriter(os.open(os.devnull, os.O_WRONLY)), str(tmp_path / "work"), str(scratch),
                  str(tmp_path), (str(REPO / "canon_tests"),), (str(reference_dir() / "detection" / "boxes.py"),))
    assert guard._judge("open", "INT101", (str(scratch / "ok.txt"), "w", 0)) is None  # noqa: SLF001
    assert guard._judge("open", "INT101", ("/tmp/elsewhere", "w", 0))[0] == "INT101"  # noqa: SLF001
    assert guard._judge("open", "INT101", ("/etc/hostname", "r", 0)) is None  # noqa: SLF001
    test_file = str(REPO / "canon_tests" / "test_detection_boxes.py")
    assert guard._judge("open", "INT101", (test_file, "r", 0))[0] == "INT102"  # noqa: SLF001
    assert guard._judge("socket.connect", "INT103", ()) == ("INT103", "socket.connect")  # noqa: SLF001


def test_the_tamper_check_sees_the_codec_that_frames_an_outcome_rebound(tmp_path: Path, monkeypatch) -> None:
    """What turns a test's outcome into the frame the parent reads is learner-reachable: rebinding it (the
    outcome's codec, the JSON encoder the channel uses) rewrites every test's word, so it is tampering."""
    import json.encoder

    from pytest_mlcanon.evidence import Outcome

    reports: list[tuple[str, str]] = []
    guard = Guard(channel.ChannelWriter(os.open(os.devnull, os.O_WRONLY)), str(tmp_path / "work"), str(tmp_path),
                  str(tmp_path), (), ())
    monkeypatch.setattr(guard, "report", lambda code, detail, *rest: reports.append((code, detail)))
    guard.snapshot()
    guard.check()
    assert reports == []
    monkeypatch.setattr(Outcome, "to_json", lambda self: {"outcome": "passed"})
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    guard.check()
    assert ("INT106", "`pytest_mlcanon.evidence.Outcome.to_json` was replaced") in reports, reports
    assert ("INT106", "`json.encoder.c_make_encoder` was replaced") in reports, reports


def test_guard_resolves_without_importing() -> None:
    assert resolve("torch.testing.assert_close") is torch.testing.assert_close
    assert resolve("module_that_is_not_imported.f") is None


# -- the seeded re-check's inputs ------------------------------------------------------------------------------------


def test_perturbation_keeps_masks_integers_and_booleans() -> None:
    rng = np.random.default_rng(0)
    mask = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    additive = torch.tensor([0.0, -1e9, 0.0])
    values = torch.tensor([0.5, 2.0, -3.0], dtype=torch.float64)
    out = recheck.perturb((mask, additive, values, 3, True, 0.1, 1.0, torch.tensor([1, 2])), rng)
    assert torch.equal(out[0], mask) and torch.equal(out[1], additive)
    assert not torch.equal(out[2], values) and torch.allclose(out[2], values, rtol=0.021)
    assert out[3:5] == (3, True) and out[5] != 0.1 and abs(out[5] - 0.1) <= 0.1 * 0.021 and out[6] == 1.0
    assert torch.equal(out[7], torch.tensor([1, 2]))


def test_perturbed_distributions_stay_distributions() -> None:
    # a transition model P[s, a, s'] and a stochastic policy: an input check of the reference (rows summing
    # to 1) would reject plainly scaled ones, and the function taking them would never be re-checked
    transitions = np.random.default_rng(1).dirichlet(np.ones(4), size=(4, 2))  # (S, A, S)
    policy = np.full((4, 2), 0.5)
    out = recheck.perturb((transitions, policy), np.random.default_rng(0))
    for before, after in zip((transitions, policy), out, strict=True):
        assert not np.array_equal(after, before) and np.allclose(after, before, rtol=0.05)
        assert (after >= 0).all() and np.allclose(after.sum(axis=-1), 1.0, rtol=0, atol=1e-12)


def test_the_child_never_sees_the_expected_outputs() -> None:
    case = {"item": "a/b", "module": "a/b", "function": "f", "args": [], "kwargs": {}, "expected": 1,
            "mutated": {"0": 2}}
    (shown,) = recheck.child_cases([case])
    assert "expected" not in shown and shown["mutated"] == ["0"]


# -- what the parent makes of a child's frames ---------------------------------------------------------------------


def _run(frames: list[dict], *, killed: str = "", killed_in: str = "", status: int = 0) -> JobRun:
    return JobRun(frames=frames, exit=ExitInfo(status, 0.1, 10.0), wall_s=1.0, killed=killed, killed_in=killed_in)


def test_protocol_violations_are_integrity_flags() -> None:
    claims = assess.read_frames([{"kind": "done"}, {"kind": "done"}, {"kind": "mystery"},
                                 {"kind": "outcome", "outcome": {"nodeid": "x", "outcome": "won"}}])
    assert len(claims.protocol) == 3
    found = assess._integrity([], claims, _run([]))  # noqa: SLF001
    assert {f.code for f in found} == {"INT107"}


def test_tests_that_never_reported_are_failed_and_say_why() -> None:
    calibration = assess.Calibration(nodeids={BOXES.slug: ["a/test_detection_boxes.py::t1", "b/test_detection_boxes"
                                                                                              ".py::t2", "x::t3"]})
    outcome = {"nodeid": "elsewhere/test_detection_boxes.py::t1", "outcome": "passed"}
    run = _run([{"kind": "outcome", "outcome": outcome}, {"kind": "start", "test": "c/test_detection_boxes.py::t2"}],
               killed="test", killed_in="c/test_detection_boxes.py::t2")
    claims = assess.read_frames(run.frames)
    settings = config.from_table({"limits": {"test_timeout_s": 3}})
    status, ending = assess._status(run, claims, BOXES, settings)  # noqa: SLF001
    assert (status, ending) == (Status.TIMEOUT, "t2 ran over 3 s of CPU time")
    _, tests = assess._tests(BOXES, calibration, claims, run, status, ending, settings)  # noqa: SLF001
    assert [(t.name, t.outcome) for t in tests] == [("t1", "passed"), ("t2", "timeout"), ("t3", "not run")]


@pytest.mark.parametrize(("run", "status"), [
    (JobRun(exit=ExitInfo(signal.SIGXCPU, 1.0, 1.0)), Status.TIMEOUT),
    (JobRun(exit=ExitInfo(signal.SIGXFSZ, 1.0, 1.0)), Status.KILLED),
    (JobRun(exit=ExitInfo(0, 1.0, 1.0), killed="memory"), Status.KILLED),
    (JobRun(exit=ExitInfo(0, 1.0, 1.0), frames=[{"kind": "start", "test": "f::t"}]), Status.CRASHED),
])
def test_status_comes_from_the_parents_own_observations(run: JobRun, status: Status) -> None:
    claims = assess.read_frames(run.frames)
    assert assess._status(run, claims, BOXES, config.GradeConfig())[0] == status  # noqa: SLF001


# -- configuration, discovery, shards -------------------------------------------------------------------------------


def test_config_layers_and_errors(tmp_path: Path) -> None:
    path = tmp_path / config.CONFIG_NAME
    path.write_text('items = ["detection/boxes"]\nworkers = 3\n[limits]\nwall_s = 30\n[points]\n'
                    '"detection/boxes" = 5\n[weights]\ncorrectness = 2\n[tests]\n"test_iou*" = 3\n')
    loaded = config.load(path, {"workers": 1, "wall_s": None})
    assert (loaded.items, loaded.workers, loaded.limits.wall_s) == ("detection/boxes", 1, 30.0)
    assert loaded.points.item("detection/boxes") == 5 and loaded.points.item("posttrain/dpo") == 10
    assert loaded.points.share("correctness") == pytest.approx(2 / 6)
    assert loaded.points.test_weight("test_iou_closed_form") == 3 and loaded.points.test_weight("other") == 1
    with pytest.raises(config.ConfigError, match=r"command line --timeout=-1: must be > 0"):
        config.load(path, {"wall_s": -1})
    path.write_text("[limits]\nmemory_mb = 'lots'\n")
    with pytest.raises(config.ConfigError, match=r"\[limits\] memory_mb='lots'"):
        config.load(path, {})
    path.write_text("colour = 1\n")
    with pytest.raises(config.ConfigError, match="unknown key"):
        config.load(path, {})
    # the third fresh-teacher trial: a misspelt key inside a section was silently its default
    for section, typo, meant in (("sandbox", "netwrk = false", "network"), ("limits", "test_timout_s = 5", "test_timeout_s"),
                                 ("recheck", "unverifed = 'zero'", "unverified"),
                                 ("gradescope", "visibilty = 'hidden'", "visibility")):
        path.write_text(f"[{section}]\n{typo}\n")
        with pytest.raises(config.ConfigError, match=rf"\[{section}\]: unknown key\(s\) \w+ \(did you mean {meant}\?\)"):
            config.load(path, {})
    path.write_text("on_flagg = 'review'\n")
    with pytest.raises(config.ConfigError, match=r"unknown key\(s\) on_flagg \(did you mean on_flag\?\)"):
        config.load(path, {})


def test_config_is_found_beside_the_submissions(tmp_path: Path) -> None:
    (tmp_path / "subs").mkdir()
    (tmp_path / config.CONFIG_NAME).write_text("")
    assert config.find(None, tmp_path / "subs") == tmp_path / config.CONFIG_NAME
    with pytest.raises(config.ConfigError):
        config.find(str(tmp_path / "missing.toml"), None)


def test_discovery_of_student_folders(tmp_path: Path) -> None:
    for path in ("ann/detection/boxes.py", "bob/practice/detection/boxes.py", "c d!/notes.txt",
                 "two/x/detection/boxes.py", "two/y/detection/boxes.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    found = {s.student: s for s in discover.find(tmp_path)}
    assert found["ann"].impl == (tmp_path / "ann").resolve()
    assert found["bob"].impl == (tmp_path / "bob" / "practice").resolve()
    assert found["c_d"].impl is None and "no folder laid out like the canon" in found["c_d"].problem
    assert found["two"].impl is None and "several learner directories" in found["two"].problem
    single = discover.find(tmp_path / "ann")
    assert [s.student for s in single] == ["ann"]


def test_shards_split_the_class_deterministically_and_completely() -> None:
    @dataclass
    class S:
        student: str

    students = [S(f"s{n:02d}") for n in range(7)]
    parts = [shard.select(list(reversed(students)), i, 3) for i in (1, 2, 3)]
    assert sorted(s.student for p in parts for s in p) == sorted(s.student for s in students)
    assert [len(p) for p in parts] == [3, 2, 2]
    assert parts[0] == shard.select(students, 1, 3)
    for bad in ("0/2", "3/2", "x", "1-2"):
        with pytest.raises(shard.ShardError):
            shard.parse(bad)


def _book(students: list[str], shards: list[str]) -> Gradebook:
    item = ItemResult("detection/boxes", 18, "IoU", Status.SCORED, "strong 5/5", {"correctness": True}, 5,
                      [GradedTest("t1", "passed", points=6, max_points=6)], [Finding("SHP001", "a.py", 3, "m", "h")],
                      ["note"], [], Recheck("passed", "ok", 3), 10.0, 10.0)
    return Gradebook(["detection/boxes"], {"detection/boxes": "IoU"},
                     [StudentResult(s, items=[item]) for s in students], [1], shards)


def test_merge_combines_shards_and_refuses_inconsistent_ones(tmp_path: Path) -> None:
    merged = shard.merge([_book(["b"], ["2/2"]), _book(["a"], ["1/2"])])
    assert [s.student for s in merged.students] == ["a", "b"] and merged.shards == ["2/2", "1/2"]
    with pytest.raises(shard.ShardError, match="in two shards"):
        shard.merge([_book(["a"], ["1/2"]), _book(["a"], ["2/2"])])
    with pytest.raises(shard.ShardError, match="missing"):
        shard.merge([_book(["a"], ["1/3"]), _book(["b"], ["2/3"])])
    (tmp_path / "s1").mkdir()
    (tmp_path / "s1" / "gradebook.json").write_text(json.dumps(_book(["a"], ["1/1"]).to_dict()))
    assert shard.load(tmp_path / "s1").students[0].student == "a"


def test_gradebook_json_round_trips() -> None:
    book = _book(["a", "b"], [])
    again = Gradebook.from_dict(json.loads(json.dumps(book.to_dict())))
    assert again == book


# -- renderers -----------------------------------------------------------------------------------------------------------


def test_gradescope_results_follow_the_autograder_format() -> None:
    book = _book(["a"], [])
    data = json.loads(gradescope.render(book, book.students[0]))
    assert set(data) == {"score", "execution_time", "output", "output_format", "test_output_format",
                         "test_name_format", "visibility", "tests"}
    assert data["output_format"] == data["test_output_format"] == data["test_name_format"] == "text"
    assert isinstance(data["score"], float) and isinstance(data["execution_time"], int)
    assert data["visibility"] in config.VISIBILITY
    for test in data["tests"]:
        assert set(test) == {"name", "score", "max_score", "status", "output", "visibility"}
        assert test["status"] in ("passed", "failed") and test["score"] <= test["max_score"] + 1e-9


def test_renderers_escape_what_submissions_control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    book = _book(["=cmd|' /C calc'!A0"], [])
    book.students[0].items[0].verdict = "<script>alert(1)</script> | a\nb"
    page = html.render(book)  # the page's one script is its own (the sorting); the submission's is text
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("<script") == 1 and "=cmd|&#x27; /C calc&#x27;!A0" in page
    assert "\\|" in markdown.render(book) and "a b" in markdown.render(book)
    assert "'=cmd" in csvfile.render(book)
    monkeypatch.setattr(html, "matplotlib_available", lambda: False)
    assert "pip install pytest-mlcanon[html]" in html.render(book)


def test_write_all_writes_every_output_and_appends_the_step_summary(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setattr(html, "matplotlib_available", lambda: False)
    written = write_all(_book(["a", "b"], ["1/2"]), tmp_path / "out")
    names = {p.relative_to(tmp_path / "out").as_posix() for p in written if (tmp_path / "out") in p.parents}
    assert {"gradebook.csv", "gradebook.md", "gradebook.json", "report.html", "feedback/a.md",
            "gradescope/b/results.json"} <= names
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "## mlcanon grade (shard 1/2)" in text
    assert github.render(_book(["a"], [])) in github.render(_book(["a"], []))


def test_progress_prints_a_line_per_job_when_not_a_terminal(tmp_path: Path) -> None:
    stream = (tmp_path / "log").open("w+")
    bar = Progress(2, stream=stream)
    bar.advance("a x: strong 5/5")
    bar.advance("b x: error")
    bar.close()
    stream.seek(0)
    assert stream.read() == "[1/2] a x: strong 5/5\n[2/2] b x: error\n"


# -- sandbox users --------------------------------------------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="sandbox users need a root grader")
def test_sweep_kills_everything_a_sandbox_uid_left_behind(tmp_path: Path) -> None:
    pool = uids.UidPool(62000, 1, lock_dir=tmp_path)
    uid = pool.acquire()
    try:
        stragglers = [subprocess.Popen(["sleep", "60"], user=uid, group=uid, extra_groups=[], start_new_session=True)
                      for _ in range(3)]
        assert len(uids.processes_of(uid)) == 3
        assert uids.sweep(uid, stragglers[0].pid) == 3
        assert all(p.wait(timeout=10) == -signal.SIGKILL for p in stragglers)
        assert uids.processes_of(uid) == []
    finally:
        pool.release(uid)
        pool.close()


def test_uid_pools_of_two_graders_never_share_a_uid(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("sandbox users need a root grader")
    first = uids.UidPool(62100, 2, lock_dir=tmp_path)
    second = uids.UidPool(62100, 2, lock_dir=tmp_path)
    try:
        mine = {first.acquire(), first.acquire()}
        theirs = {second.acquire(), second.acquire()}
        assert not mine & theirs
    finally:
        first.close()
        second.close()


def test_uid_pool_removes_its_lock_files_and_those_a_killed_grader_left(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("sandbox users need a root grader")
    stale = tmp_path / f"{uids.LOCK_PREFIX}62290.lock"
    stale.touch()  # a grader killed with SIGKILL: its file stays, its flock went with it
    held = tmp_path / f"{uids.LOCK_PREFIX}62291.lock"
    holder = uids.lock(held)
    assert holder is not None
    pool = uids.UidPool(62200, 2, lock_dir=tmp_path)
    try:
        assert not stale.exists() and held.exists()  # a live grader's lock is never taken away
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            [held.name] + [f"{uids.LOCK_PREFIX}{uid}.lock" for uid in pool.uids])
    finally:
        pool.close()
        uids.unlock(held, holder)
    assert list(tmp_path.iterdir()) == []


def test_a_lock_file_removed_by_its_holder_is_never_held_twice(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    first = uids.lock(path)
    assert first is not None and uids.lock(path) is None
    waiting = os.open(path, os.O_RDWR)  # another grader opened the file just before the holder released it
    uids.unlock(path, first)
    second = uids.lock(path)  # takes the lock on a new file at the path, not the removed one
    assert second is not None and os.fstat(second).st_ino == os.stat(path).st_ino
    assert uids.lock(path) is None
    os.close(waiting)
    uids.unlock(path, second)
    assert not path.exists()


def test_progress_draws_a_bar_on_a_terminal() -> None:
    code = ("import io, sys\nfrom pytest_mlcanon.grade.progress import Progress\n"
            "class T(io.StringIO):\n    def isatty(self): return True\n"
            "s = T(); p = Progress(4, stream=s); p.advance('x'); sys.stdout.write(s.getvalue())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "grading [#######" in out and "1/4" in out and time.time() > 0


def test_the_html_report_draws_the_per_axis_histogram_with_matplotlib() -> None:
    pytest.importorskip("matplotlib")
    text = html.render(_book(["a", "b"], []))
    assert text.count("data:image/svg+xml;base64,") == 5 and "per-axis histogram" in text


def test_the_per_test_limit_counts_the_cpu_time_of_the_jobs_processes_not_the_clock() -> None:
    """A busy grandchild's CPU counts toward its job's test; a sleeping job uses none, however long it
    waits (a loaded machine slows the clock, never the CPU time an honest test needs)."""
    from pytest_mlcanon.grade import runner

    spin = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'while True: pass']); time.sleep(60)"
    busy = subprocess.Popen([sys.executable, "-c", spin], start_new_session=True)
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while runner._tree_cpu_s(busy.pid) < 0.5 and time.monotonic() < deadline:  # noqa: SLF001
            time.sleep(0.1)
        assert runner._tree_cpu_s(busy.pid) >= 0.5  # noqa: SLF001
        assert runner._tree_cpu_s(idle.pid) < 0.4  # noqa: SLF001  - its start-up only
    finally:
        for process in (busy, idle):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_a_probe_that_fails_is_a_one_line_refusal_or_with_the_flag_an_unsandboxed_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the fresh-user trial: a grader in a user namespace of its own got 'the sandbox probe failed: ...' and
    # exit 2 even with --unsafe-no-sandbox, which the README says grades anyway
    def failing(spec: sandbox.SandboxSpec) -> sandbox.Confinement:
        raise sandbox.ProbeError("the sandbox probe failed: PermissionError: [Errno 1] Operation not permitted")

    monkeypatch.setattr(sandbox, "probe", failing)
    os.chmod(tmp_path, 0o711)
    with pytest.raises(batch.BatchError, match=r"probe failed: .*; run as root .*--unsafe-no-sandbox"):
        batch.probe(tmp_path, config.from_table({}, source="test"), None)
    unsafe = dataclasses.replace(config.from_table({}, source="test"), unsafe_no_sandbox=True)
    confinement = batch.probe(tmp_path, unsafe, None)
    assert confinement.mode == "none"
    assert confinement.missing == ["no namespaces (the sandbox probe failed: PermissionError: [Errno 1] Operation not "
                                   "permitted)"]


def test_a_wall_the_teachers_config_turns_off_is_named_in_the_refusal() -> None:
    # the second fresh-teacher trial: [sandbox] filesystem = false, as root, was refused with advice to run as
    # root and allow user namespaces, which the teacher had already done; the refusal names the key instead
    folder = Path(tempfile.mkdtemp(prefix="mlcanon-refusal-"))  # the sandbox user must read it (not pytest's 0700 tmp)
    os.chmod(folder, 0o711)
    settings = config.from_table({"sandbox": {"filesystem": False, "network": False}}, source="test")
    pool = uids.UidPool(settings.uid_base + 901, 1) if os.geteuid() == 0 else None
    try:
        with pytest.raises(batch.BatchError) as refused:
            batch.probe(folder, settings, pool)
    finally:
        if pool is not None:
            pool.close()
        shutil.rmtree(folder, ignore_errors=True)
    message = str(refused.value)
    assert "\n" not in message and message.endswith("or pass --unsafe-no-sandbox to grade anyway, marked unsandboxed")
    if sandboxing.refusal():  # this machine refuses a sandbox anyway: the refusal says so first
        assert "run as root" in message, message
        return
    assert "set network = true and filesystem = true under [sandbox] in the grade config" in message, message
    assert "run as root" not in message and "user namespaces" not in message, message


def test_the_refusal_gives_each_fix_it_needs() -> None:
    off = sandbox.Confinement([], ["a user of its own (turned off in the teacher's config)"], "root", ["user"])
    assert batch.refusal(off) == ("no sandbox for the jobs (the grade config turns off [sandbox] user); set user = "
                                  "true under [sandbox] in the grade config, or pass --unsafe-no-sandbox to grade "
                                  "anyway, marked unsandboxed")
    both = sandbox.Confinement([], ["network (turned off in the teacher's config)", "processes (the probe saw 3 "
                                    "other process(es))"], "user namespace", ["network"])
    with mock.patch.object(os, "geteuid", return_value=1000):  # a grader without root: the namespace refused
        assert "set network = true under [sandbox] in the grade config, run as root (sudo -E), allow " \
            "unprivileged" in batch.refusal(both)


def test_another_reference_that_defines_an_items_answers_is_hidden_with_it(tmp_path: Path) -> None:
    # the capstone's preference stage defines dpo_loss, run_dpo...: a DPO job must not read it (red-team round
    # of stop 32), while the GPT its tests train stays readable; the capstone, in turn, cannot read the
    # posttrain references
    dpo = answers.answer_modules(catalog.get("posttrain/dpo"))
    assert dpo[0] == "posttrain/dpo" and "capstone/preference_stage" in dpo and "transformer/gpt" not in dpo
    assert {"posttrain/dpo", "posttrain/grpo"} <= set(answers.answer_modules(catalog.get("capstone/agent")))
    assert any(path.endswith("capstone/preference_stage.py") for path in batch.reference_files(catalog.get("posttrain/dpo")))
    assert not any(path.endswith("capstone/preference_stage.py")
                   for path in batch.readable_references((catalog.get("posttrain/dpo"),)))
    (tmp_path / "posttrain").mkdir()
    (tmp_path / "posttrain" / "dpo.py").write_text("from canon_refs.capstone.preference_stage import dpo_loss\n")
    assert [f.code for f in scan.scan(catalog.get("posttrain/dpo"), tmp_path, tmp_path)] == ["INT003"]


def test_a_long_verdict_is_cut_with_an_ellipsis() -> None:
    # the fresh-user trial: a verdict holding a student's long exception message lost its end, closing
    # parenthesis included, with nothing to say it was cut
    cell = assess.not_run(BOXES, Status.HARNESS_ERROR, "a very long message " * 50,
                          config.from_table({}, source="test"))
    assert len(cell.verdict) == 400 and cell.verdict.endswith("\u2026"), cell.verdict[-20:]


def test_a_verdict_names_no_folder_of_the_grader() -> None:
    # the third fresh-teacher trial: an import error's message named the job's folder in the gradebook
    ending = ("ImportError at jo/optim/optimizers.py:4 while importing: cannot import name 'SGD' (most likely due to "
              "a circular import) (/tmp/mlcanon-grade-lfpt227e/job-0007/jo/optim/optimizers.py)")
    cell = assess.not_run(BOXES, Status.ERROR, ending, config.from_table({}, source="test"))
    assert "mlcanon-grade-" not in cell.verdict and cell.verdict.endswith("(jo/optim/optimizers.py)"), cell.verdict
    ran = ItemResult(BOXES.slug, BOXES.number, BOXES.title, Status.ERROR)
    assert assess._outcome_line(ran, ending, None).endswith(" (jo/optim/optimizers.py)")  # noqa: SLF001


def test_a_sweep_without_a_uid_counts_live_processes_not_the_jobs_zombie() -> None:
    # the second fresh-teacher trial: without root, an honest timeout was flagged INT110 because the killed
    # job, not yet reaped, still made its process group exist
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while uids.group_members(pid) and time.monotonic() < deadline:  # until it is a zombie
            time.sleep(0.01)
        assert uids.sweep(None, pid) == 0
    finally:
        os.waitpid(pid, 0)
    alive = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert uids.sweep(None, alive.pid) == 1
        assert alive.wait(timeout=10) == -signal.SIGKILL
    finally:
        alive.kill()
