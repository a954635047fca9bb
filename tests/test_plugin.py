"""The plugin as a learner and a teacher use it: options, discovery, redirect, errors and reports."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "learners" / "good"

BROKEN_BOX_IOU = '''
"""Boxes with IoU that forgets to subtract the intersection from the union."""
import torch

def box_area(boxes):
    """(N, 4) -> (N,)"""
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])

def box_iou(boxes1, boxes2):
    """(N, 4), (M, 4) -> (N, M)"""
    lt = torch.max(boxes1[:, None, :2], boxes2[None, :, :2])  # (N, M, 2)
    rb = torch.min(boxes1[:, None, 2:], boxes2[None, :, 2:])  # (N, M, 2)
    inter = (rb - lt).clamp(min=0).prod(-1)
    union = box_area(boxes1)[:, None] + box_area(boxes2)[None, :]  # (N, M)
    return inter / union
'''


def test_without_canon_item_the_plugin_stays_out_of_the_way(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="def test_ok():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest("-q")
    result.assert_outcomes(passed=1)
    assert "mlcanon rubric" not in result.stdout.str()


def test_discovers_practice_and_scores_five(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["posttrain/dpo"])
    result = pytester.runpytest("--canon-item=posttrain/dpo", "-q", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines([
        "*learner: *practice (discovered)*",
        "*#55 posttrain/dpo*yes*yes*yes*yes*yes*5/5*strong*",
    ])


def test_unknown_item_is_a_usage_error_with_suggestions(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--canon-item=posttrain/dop")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown canon item 'posttrain/dop'; did you mean posttrain/dpo*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


@pytest.mark.parametrize("selector, expected", [
    ("55", ["#55 posttrain/dpo"]),
    ("block:7", ["#54 posttrain/reward_model", "#59 evaluation/harness"]),
    ("posttrain/*", ["#54 posttrain/reward_model", "#55 posttrain/dpo", "#56 posttrain/grpo"]),
    ("4,detection/nms", ["#4 classical/knn", "#19 detection/nms"]),
])
def test_selectors_in_every_form(pytester: pytest.Pytester, learner, selector: str, expected: list[str]) -> None:
    learner()
    result = pytester.runpytest(f"--canon-item={selector}", "--impl=practice", "-q")
    for label in expected:
        result.stdout.fnmatch_lines([f"*{label}*not attempted*"])


def test_nonexistent_impl_is_one_clear_line(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--canon-item=55", "--impl=nowhere")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --impl path 'nowhere' does not exist*"])


def test_many_learner_directories_are_named_in_one_short_line(pytester: pytest.Pytester) -> None:
    for n in range(12):
        (pytester.path / f"try{n:02d}" / "posttrain").mkdir(parents=True)
        (pytester.path / f"try{n:02d}" / "posttrain" / "dpo.py").write_text("")
    result = pytester.runpytest("--canon-item=55")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: several learner directories under *: try00, try01, try02, try03, try04 "
                                 "and 7 more; choose one with --impl=PATH"])


def test_impl_one_level_too_deep_suggests_the_parent(pytester: pytest.Pytester, learner, monkeypatch) -> None:
    learner(copy=["posttrain/dpo"])
    result = pytester.runpytest("--canon-item=55", "--impl=practice/posttrain")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --impl path 'practice/posttrain' is one level too deep: it is the area "
                                 "folder posttrain/, *; did you mean --impl=practice?"])
    monkeypatch.setenv("MLCANON_IMPL", str(pytester.path / "practice" / "posttrain"))
    result = pytester.runpytest("--canon-item=55")
    result.stderr.fnmatch_lines([f"*did you mean MLCANON_IMPL={pytester.path / 'practice'}?"])


def test_no_learner_directory_found_says_what_to_do(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--canon-item=55")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no learner directory found*practice/posttrain/dpo.py*--impl=canon_refs*"])


def test_empty_learner_dir_reports_not_attempted_and_fails(pytester: pytest.Pytester, learner) -> None:
    learner()
    result = pytester.runpytest("--canon-item=55", "--impl=practice")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*#55 posttrain/dpo*not attempted*", "*no posttrain/dpo.py under*"])


@pytest.mark.parametrize("variable", ["MLCANON_IMPL", "MLBOOK_IMPL"])  # MLBOOK_IMPL: the seed's name for it
def test_env_variable_names_the_learner_dir(pytester: pytest.Pytester, learner, monkeypatch, variable: str) -> None:
    path = learner(copy=["detection/boxes"], root="elsewhere")
    monkeypatch.setenv(variable, str(path))
    result = pytester.runpytest("--canon-item=18", "-q")
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"*elsewhere (from ${variable})*"])


def test_mlcanon_impl_and_its_alias_must_agree(pytester: pytest.Pytester, learner, monkeypatch) -> None:
    path = learner(copy=["detection/boxes"], root="elsewhere")
    monkeypatch.setenv("MLBOOK_IMPL", str(path))
    monkeypatch.setenv("MLCANON_IMPL", str(path))  # both naming the same directory is fine
    assert pytester.runpytest("--canon-item=18", "-q").ret == 0
    monkeypatch.setenv("MLCANON_IMPL", str(pytester.path))
    result = pytester.runpytest("--canon-item=18", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: MLCANON_IMPL=* and MLBOOK_IMPL=* name different learner directories*"])


def test_learner_module_is_used_by_the_items_built_on_it(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["detection/nms"], files={"detection/boxes": BROKEN_BOX_IOU})
    result = pytester.runpytest("--canon-item=19", "--impl=practice", "-q")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, "the reference NMS must run on the learner's box_iou"


def test_missing_modules_fall_back_to_the_reference(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["detection/nms"])  # no boxes.py: box_iou comes from canon_refs
    result = pytester.runpytest("--canon-item=19", "--impl=practice", "-q")
    assert result.ret == 0


def test_syntax_error_is_a_per_item_verdict(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["detection/boxes"], files={"posttrain/dpo": "def dpo_loss(:\n    pass\n"})
    result = pytester.runpytest("--canon-item=18,55", "--impl=practice")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*#18 detection/boxes*5/5*strong*",
        "*#55 posttrain/dpo*error*",
        "*SyntaxError at practice/posttrain/dpo.py:1*",
    ])
    assert "INTERNALERROR" not in result.stdout.str()


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_a_coding_cookie_is_honoured_as_python_honours_it(pytester: pytest.Pytester, learner, encoding: str) -> None:
    """The plugin's instrumented import, the rubric and the grader's scan read a file through one helper,
    as Python does: an honest file with a cookie is scored like any other."""
    path = learner(copy=["detection/boxes"]) / "detection" / "boxes.py"
    text = path.read_text(encoding="utf-8")
    path.write_bytes(f"# -*- coding: {encoding} -*-\n# caf\u00e9\n{text}".encode(encoding, "replace"))
    result = pytester.runpytest("--canon-item=18", "--impl=practice")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*#18 detection/boxes*5/5*strong*"])
    assert "does not parse" not in result.stdout.str()


def test_a_cookie_python_refuses_is_the_syntax_error_python_gives(pytester: pytest.Pytester, learner) -> None:
    """``rot13`` is no text encoding: Python will not import the file, and neither does the plugin (it
    used to run it as UTF-8)."""
    path = learner(copy=["detection/boxes"]) / "detection" / "boxes.py"
    path.write_text("# -*- coding: rot13 -*-\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    result = pytester.runpytest("--canon-item=18", "--impl=practice")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*#18 detection/boxes*error*", "*SyntaxError*rot13*"])


def test_import_time_exception_names_file_and_line(pytester: pytest.Pytester, learner) -> None:
    learner(files={"posttrain/dpo": '"""x"""\nimport sys\n\nraise RuntimeError("boom")\n'})
    result = pytester.runpytest("--canon-item=55", "--impl=practice")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*RuntimeError at practice/posttrain/dpo.py:4 while importing: boom*"])


def test_sys_exit_at_import_does_not_stop_the_run(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["detection/boxes"], files={"posttrain/dpo": "import sys\nsys.exit(0)\n"})
    result = pytester.runpytest("--canon-item=18,55", "--impl=practice")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*#18 detection/boxes*5/5*", "*SystemExit at practice/posttrain/dpo.py:2*"])


def test_missing_public_name_fails_correctness(pytester: pytest.Pytester, learner) -> None:
    path = learner(copy=["detection/boxes"])
    source = (path / "detection/boxes.py").read_text()
    cut = source.index("def box_xywh_to_xyxy")
    end = source.index("\ndef ", cut + 1)
    (path / "detection/boxes.py").write_text(source[:cut] + source[end + 1:])
    result = pytester.runpytest("--canon-item=18", "--impl=practice")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*COR002 `box_xywh_to_xyxy` is a public name of the API your module lacks*"])


def test_mlbook_alias_is_the_same_module(pytester: pytest.Pytester, learner) -> None:
    path = learner(copy=["detection/boxes", "detection/nms"])
    text = (path / "detection/nms.py").read_text().replace(
        "from canon_refs.detection.boxes import", "from mlbook.detection.boxes import")
    (path / "detection/nms.py").write_text(text)
    pytester.makepyfile(test_alias="""
        def test_same():
            import canon_refs.detection.boxes as a
            import mlbook.detection.boxes as b
            assert a is b and a.__name__ == "canon_refs.detection.boxes"
    """)
    result = pytester.runpytest("--canon-item=19", "--impl=practice", "-q")
    assert result.ret == 0


def test_positional_paths_with_canon_item_are_rejected(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["posttrain/dpo"])
    pytester.makepyfile(test_user="def test_ok():\n    pass\n")
    result = pytester.runpytest("--canon-item=55", "test_user.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--canon-item collects the item's reference tests itself*"])


def test_json_and_markdown_reports(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["posttrain/dpo"])
    result = pytester.runpytest("--canon-item=55", "--canon-report=json:out/r.json",
                                "--canon-report=markdown:out/r.md", "-q")
    assert result.ret == 0
    data = json.loads((pytester.path / "out/r.json").read_text())
    (item,) = data["items"]
    assert (item["slug"], item["score"], item["verdict"]) == ("posttrain/dpo", 5, "strong")
    assert set(item["axes"]) == {"correctness", "shapes", "numerics", "api", "explanation"}
    markdown = (pytester.path / "out/r.md").read_text()
    assert "| #55 posttrain/dpo | yes" in markdown and "## #55 posttrain/dpo: DPO loss" in markdown


def test_bad_report_target_is_a_usage_error(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["posttrain/dpo"])
    result = pytester.runpytest("--canon-item=55", "--canon-report=pdf:x.pdf")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--canon-report='pdf:x.pdf': expected json:PATH or markdown:PATH*"])


def test_min_score_turns_a_low_score_into_a_failing_exit(pytester: pytest.Pytester, learner) -> None:
    path = learner(copy=["posttrain/dpo"])
    text = (path / "posttrain/dpo.py").read_text()
    (path / "posttrain/dpo.py").write_text(text.split('"""', 2)[2])  # drop the module docstring
    ok = pytester.runpytest("--canon-item=55", "-q")
    assert ok.ret == 0
    ok.stdout.fnmatch_lines(["*#55 posttrain/dpo*yes*yes*yes*yes*NO*4/5*strong*", "*EXP001*"])
    strict = pytester.runpytest("--canon-item=55", "--canon-min-score=5", "-q")
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    strict.stdout.fnmatch_lines(["*minimum score 5/5: not met by #55 posttrain/dpo (4/5)*"])


def test_min_score_from_pyproject_and_a_bad_value_names_its_layer(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["posttrain/dpo"])
    pytester.makefile(".toml", pyproject="[tool.mlcanon]\nmin_score = 9\n")
    result = pytester.runpytest("--canon-item=55")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*[[]tool.mlcanon] min_score=9: must be between 0 and 5*"])


def test_ignore_codes_turn_rules_off(pytester: pytest.Pytester, learner) -> None:
    path = learner(copy=["posttrain/dpo"])
    text = (path / "posttrain/dpo.py").read_text()
    (path / "posttrain/dpo.py").write_text(text.split('"""', 2)[2])
    result = pytester.runpytest("--canon-item=55", "--canon-ignore=EXP", "-q")
    result.stdout.fnmatch_lines(["*#55 posttrain/dpo*5/5*strong*"])


def test_junitxml_carries_axes_and_score(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["posttrain/dpo"])
    pytester.runpytest("--canon-item=55", "--junitxml=junit.xml", "-q")
    root = ET.parse(pytester.path / "junit.xml").getroot()
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["mlcanon.posttrain/dpo.score"] == "5"
    assert props["mlcanon.posttrain/dpo.verdict"] == "strong"
    assert props["mlcanon.posttrain/dpo.numerics"] == "pass"


def test_timed_shows_elapsed_against_the_target(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["posttrain/dpo"])
    result = pytester.runpytest("--canon-item=55", "--timed", "-q")
    assert result.ret == 0
    result.stdout.fnmatch_lines([
        "*time: * min of 30 allowed (target 15 min, first attempt)*",
        "*#55 posttrain/dpo attempt 1: passed in * min (30 allowed, target 15 min); best * min*",
    ])
    state = json.loads((pytester.path / ".mlcanon/progress.json").read_text())
    (attempt,) = state["items"]["posttrain/dpo"]["attempts"]
    assert attempt["passed"] is True and attempt["score"] == 5 and attempt["over_time"] is False
    assert state["items"]["posttrain/dpo"]["clock"]["source"] == "file"


def _clock_started_long_ago(pytester: pytest.Pytester) -> None:
    (pytester.path / ".mlcanon").mkdir()
    (pytester.path / ".mlcanon/progress.json").write_text(json.dumps({"version": 1, "items": {
        "posttrain/dpo": {"clock": {"attempt": 1, "start": 0, "source": "drill"}, "attempts": []}}}))


def test_timed_past_the_allowance_is_over_time_but_not_a_finding(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["posttrain/dpo"])
    _clock_started_long_ago(pytester)
    result = pytester.runpytest("--canon-item=55", "--timed", "-q")
    result.stdout.fnmatch_lines([
        "*#55 posttrain/dpo*yes*yes*yes*yes*yes*5/5*",
        "*attempt 1: passed in * min (30 allowed, target 15 min), OVER TIME (--timed=strict would count it*",
    ])
    assert "API006" not in result.stdout.str()
    state = json.loads((pytester.path / ".mlcanon/progress.json").read_text())
    assert state["items"]["posttrain/dpo"]["attempts"][0]["over_time"] is True


def test_timed_strict_counts_the_stall_against_api_fluency(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["posttrain/dpo"])
    _clock_started_long_ago(pytester)
    result = pytester.runpytest("--canon-item=55", "--timed=strict", "-q")
    result.stdout.fnmatch_lines(["*#55 posttrain/dpo*yes*yes*yes*NO*yes*4/5*", "*API006*allowed (first attempt*",
                                 "*OVER TIME (counts against API fluency: API006)*"])


def test_timed_rejects_an_unknown_mode(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["posttrain/dpo"])
    result = pytester.runpytest("--canon-item=55", "--timed=lenient")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--timed*invalid choice: 'lenient'*"])


def test_corrupt_progress_state_is_backed_up_and_reported(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["posttrain/dpo"])
    (pytester.path / ".mlcanon").mkdir()
    (pytester.path / ".mlcanon/progress.json").write_text("{not json")
    result = pytester.runpytest("--canon-item=55", "--timed", "-q")
    result.stdout.fnmatch_lines(["*progress.json was unreadable (not valid JSON*moved it to progress.json.corrupt-*"])
    (backup,) = (pytester.path / ".mlcanon").glob("progress.json.corrupt-*")
    assert backup.read_text() == "{not json"
    assert json.loads((pytester.path / ".mlcanon/progress.json").read_text())["items"]["posttrain/dpo"]


def test_a_stub_is_not_implemented_yet_not_a_wall_of_tracebacks(pytester: pytest.Pytester, learner) -> None:
    from pytest_mlcanon import stubs

    learner(files={"posttrain/dpo": stubs.stub_source("posttrain/dpo")})
    result = pytester.runpytest("--canon-item=55", "-q")
    assert result.ret != 0
    result.stdout.fnmatch_lines([
        "*#55 posttrain/dpo*not implemented yet*",
        "*not implemented yet: practice/posttrain/dpo.py: every function still raises NotImplementedError*",
    ])
    assert "Traceback" not in result.stdout.str() and "NotImplementedError(" not in result.stdout.str()


def test_help_does_not_import_torch(tmp_path) -> None:
    code = "import sys, pytest; pytest.main(['--help']); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout
    assert "--canon-item=ITEMS" in out
    assert out.strip().splitlines()[-1] == "False"


def test_a_rubric_failure_is_an_item_verdict_not_a_crash(pytester: pytest.Pytester, learner, monkeypatch) -> None:
    import importlib

    rubric = importlib.import_module("pytest_mlcanon.rubric")  # the live module (an attribute may be stale)

    def explode(*args: object, **kwargs: object) -> None:
        raise RecursionError("deeply nested learner code")

    monkeypatch.setattr(rubric, "score", explode)
    learner(copy=["posttrain/dpo"])
    result = pytester.runpytest("--canon-item=55", "-q")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*#55 posttrain/dpo*error*",
                                 "*the rubric could not score this item: RecursionError: deeply nested learner code*"])
    assert "INTERNALERROR" not in result.stdout.str()


def test_an_item_of_several_modules_is_attempted_once_one_exists(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["multimodal/hungarian"])
    result = pytester.runpytest("--canon-item=40", "--impl=practice", "-q")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*#40 multimodal/detr*5/5*strong*",
                                 "*from the reference (not written in your folder): multimodal/detr_loss.py (missing)*"])


def test_failures_outside_the_rootdir_are_located_at_a_path(pytester: pytest.Pytester, learner) -> None:
    # The canon's tests live outside the learner's repo, so pytest's node ids there have no path
    # (``::test_x``); without a traceback (--tb=no) a failure is placed at its test function instead.
    learner(files={"detection/boxes": BROKEN_BOX_IOU})
    result = pytester.runpytest("--canon-item=18", "--impl=practice", "--tb=no", "-q", "-p", "no:cacheprovider",
                                "--canon-report=json:r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["  canon_tests/test_detection_boxes.py:*: COR001 test_* failed: *"])
    result.stdout.no_fnmatch_line("*::test_*: COR001*")
    findings = json.loads((pytester.path / "r.json").read_text())["items"][0]["axes"]["correctness"]["findings"]
    # a value the learner's code made is placed at the learner's line that made it (17.5), the rest at the test
    assert findings and all(f["path"] in ("canon_tests/test_detection_boxes.py", "practice/detection/boxes.py")
                            and f["line"] > 0 for f in findings if f["code"] == "COR001")


def test_a_failure_in_a_shared_test_helper_is_located_at_the_learners_line(pytester: pytest.Pytester,
                                                                           learner) -> None:
    # DPO's closed-form tests compare through a helper ``_close``: the deepest traceback entry is the
    # helper's body, one line for every failure; the useful line is the learner's line that made the value.
    text = (EXAMPLES / "posttrain" / "dpo.py").read_text()
    broken = text.replace("chosen = beta * (pc - rc)", "chosen = beta * pc").replace(
        "rejected = beta * (pr - rr)", "rejected = beta * pr")
    assert broken.count("beta * p") == 2
    learner(files={"posttrain/dpo": broken})
    result = pytester.runpytest("--canon-item=55", "--impl=practice", "-q", "-p", "no:cacheprovider",
                                "--canon-report=json:r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    findings = json.loads((pytester.path / "r.json").read_text())["items"][0]["axes"]["correctness"]["findings"]
    closed_form = [f for f in findings if f["code"] == "COR001" and "test_seed_pairs_closed_form[" in f["message"]]
    # the wrong margin was made by the learner's code: the finding sits at the learner's line that made it
    # (17.5); the helper's body, one line for every failure, is never the place
    made_at = {n for n, line in enumerate(broken.splitlines(), 1) if line.lstrip().startswith(("margin =", "return"))}
    assert closed_form and all(f["path"] == "practice/posttrain/dpo.py" and f["line"] in made_at for f in closed_form), closed_form


def test_last_failed_is_a_partial_run_that_names_what_it_left_out(pytester: pytest.Pytester, learner) -> None:
    text = (EXAMPLES / "posttrain" / "dpo.py").read_text()
    unstable = text.replace("losses = -F.logsigmoid(margin) ", "losses = -torch.log(torch.sigmoid(margin))")
    assert unstable != text  # only the numerics probes fail
    learner(files={"posttrain/dpo": unstable})
    first = pytester.runpytest("--canon-item=55", "--impl=practice", "-q", "--tb=no")
    first.assert_outcomes(passed=48, failed=4)
    result = pytester.runpytest("--canon-item=55", "--impl=practice", "-q", "--tb=no", "--lf")
    result.assert_outcomes(failed=4, deselected=48)
    result.stdout.fnmatch_lines([
        "*#55 posttrain/dpo*-*-*-*-*-*-*partial: not scored*",
        "  partial: 48 of 52 tests left out by --lf (*and 45 more)",
    ])
    result.stdout.no_fnmatch_line("*COR003*")


@pytest.mark.parametrize("installed", ["outside the rootdir", "below the rootdir"])
def test_node_ids_name_the_canon_file_as_its_package_shows_it(pytester: pytest.Pytester, learner,
                                                              monkeypatch: pytest.MonkeyPatch, installed: str) -> None:
    """pytest's progress lines, the short summary and ``--deselect`` name a canon test
    ``canon_tests/test_x.py::test_y`` wherever the package is installed: outside the learner's rootdir
    (pytester's folder lies outside this repository, as a learner's does; pytest named these
    ``test_x.py::test_y``) or below it (a ``.venv`` inside the learner's repo; pytest named them
    ``.venv/lib/python3.11/site-packages/canon_tests/test_x.py::test_y``)."""
    from pytest_mlcanon.layout import tests_dir

    practice = learner(copy=["detection/boxes"])
    where: list[str] = []
    if installed == "below the rootdir":
        above = tests_dir().parents[1]  # the package two folders down, as site-packages/canon_tests in lib/
        monkeypatch.chdir(above)
        where = [f"--rootdir={above}", f"--impl={practice}"]
    result = pytester.runpytest("--canon-item=18", "-v", "-rA", "-p", "no:cacheprovider", *where,
                                "--deselect=canon_tests/test_detection_boxes.py::test_box_area_values")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["canon_tests/test_detection_boxes.py::test_* PASSED*",
                                 "PASSED canon_tests/test_detection_boxes.py::test_*", "*1 deselected*"])
    text = result.stdout.str()
    assert " ::test_" not in text and "test_box_area_values PASSED" not in text
    # every place the file is named (progress lines, PASSED/SKIPPED lines of the summary) says canon_tests/
    assert set(re.findall(r"(\S*)test_detection_boxes\.py", text)) == {"canon_tests/"}, text


def test_the_header_does_not_name_the_learners_testpaths(pytester: pytest.Pytester, learner) -> None:
    """A learner repo whose pytest configuration sets ``testpaths``: pytest's header said
    ``testpaths: tests`` although the run collects the canon's tests, not the learner's."""
    learner(copy=["detection/boxes"])
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_mine.py").write_text("def test_mine():\n    assert False\n")
    result = pytester.runpytest("--canon-item=18", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["configfile: pyproject.toml", "collected * items"])
    result.stdout.no_fnmatch_line("testpaths:*")
    result.stdout.no_fnmatch_line("*test_mine*")


def _boxes_without_validation() -> str:
    """The reference boxes module with its argument checks turned into no-ops."""
    source = (Path(__file__).resolve().parents[1] / "canon_refs" / "detection" / "boxes.py").read_text()
    return source + "\n\ndef _check_xyxy(*args, **kwargs):\n    return None\n\n\ndef _check_last_dim(*args, **kwargs):\n    return None\n"


def test_a_failing_input_check_is_advice_by_default(pytester: pytest.Pytester, learner) -> None:
    learner(files={"detection/boxes": _boxes_without_validation()})
    result = pytester.runpytest("--canon-item=detection/boxes", "-q", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()[-3000:]
    outcomes = result.parseoutcomes()
    assert outcomes.get("xfailed", 0) >= 1 and "failed" not in outcomes
    result.stdout.fnmatch_lines([
        "*#18 detection/boxes*yes*",
        "*Correctness: input checks (advice): * of * held; not held: test_*raise* (contract = required would count them)",
    ])


def test_contract_required_counts_input_checks(pytester: pytest.Pytester, learner) -> None:
    learner(files={"detection/boxes": _boxes_without_validation()})
    pytester.makefile(".ini", pytest="[pytest]\nmlcanon_contract = required\n")
    result = pytester.runpytest("--canon-item=detection/boxes", "-q", "-p", "no:cacheprovider")
    assert result.ret == 1
    assert result.parseoutcomes().get("failed", 0) >= 1
    result.stdout.fnmatch_lines(["*#18 detection/boxes*NO*", "*COR001*raise*"])


def test_contract_setting_rejects_an_unknown_mode(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--canon-item=detection/boxes", "--impl=canon_refs", "--canon-contract=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--canon-contract='sometimes': must be one of advice, required*"])


def test_selecting_a_module_checks_every_item_it_holds(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["transformer/multihead"])
    report = pytester.path / "report.json"
    result = pytester.runpytest("--canon-item=transformer/multihead", "--impl=practice", "-q", "-p", "no:randomly",
                                f"--canon-report=json:{report}")
    assert result.ret == 0
    scored = {i["slug"]: i["status"] for i in json.loads(report.read_text())["items"]}
    assert scored == {"transformer/multihead": "scored", "transformer/cross_attention": "scored"}
    result.stdout.fnmatch_lines(["*#28 transformer/cross_attention*5/5*",
                                 "*also checked #28 transformer/cross_attention: it lives in "
                                 "transformer/multihead.py with #26 transformer/multihead*"])


def test_a_module_mate_still_a_stub_is_named_not_failed(tmp_path: Path) -> None:
    from pytest_mlcanon import catalog, stubs
    from pytest_mlcanon.impl import Impl, with_module_mates

    stub = stubs.stub_source("transformer/multihead")
    written = stub.replace('raise NotImplementedError("MultiHeadAttention.forward: not implemented yet")',
                           "return x")
    assert written != stub
    path = tmp_path / "transformer" / "multihead.py"
    path.parent.mkdir()
    path.write_text(written)
    items, notes = with_module_mates((catalog.get(26),), Impl(tmp_path, "--impl"))
    assert [i.number for i in items] == [26]
    assert notes == ["#28 transformer/cross_attention also lives in transformer/multihead.py and is not written yet "
                     "(CrossAttention); check it with --canon-item=transformer/cross_attention once it is"]
    path.write_text(stub)  # an untouched stub: nothing of the module is written, no note
    assert with_module_mates((catalog.get(26),), Impl(tmp_path, "--impl")) == ((catalog.get(26),), [])


def test_a_dependency_still_a_stub_comes_from_the_reference(pytester: pytest.Pytester, learner) -> None:
    from pytest_mlcanon import stubs

    learner(copy=["classical/kmeans"], files={"classical/knn": stubs.stub_source("classical/knn")})
    report = pytester.path / "report.json"
    result = pytester.runpytest("--canon-item=classical/kmeans", "--impl=practice", "-q", "-p", "no:randomly",
                                f"--canon-report=json:{report}")
    assert result.ret == 0, result.stdout.str()[-2000:]
    (item,) = json.loads(report.read_text())["items"]
    assert item["axes"]["correctness"]["passed"]
    assert item["fallback"] == ["classical/knn.py (still a stub; #4 classical/knn, which this item builds on)"]
    result.stdout.fnmatch_lines(["*from the reference (not written in your folder): classical/knn.py (still a stub*"])


def test_a_dependency_the_learner_wrote_is_named_as_theirs(pytester: pytest.Pytester, learner) -> None:
    """k-means runs the learner's own knn.py: the report says so, so a failure there is looked for there
    (blind round 6: DETR failed through the learner's boxes.py and nothing named it)."""
    learner(copy=["classical/kmeans", "classical/knn"])
    report = pytester.path / "report.json"
    result = pytester.runpytest("--canon-item=classical/kmeans", "--impl=practice", "-q", "-p", "no:randomly",
                                f"--canon-report=json:{report}")
    assert result.ret == 0, result.stdout.str()[-2000:]
    (item,) = json.loads(report.read_text())["items"]
    assert item["fallback"] == [] and item["built_on"] == ["classical/knn.py (#4 classical/knn)"]
    result.stdout.fnmatch_lines(["*also runs your files: classical/knn.py (#4 classical/knn) (a failure may start there)*"])


def test_a_module_two_dependencies_share_is_listed_once(pytester: pytest.Pytester, learner) -> None:
    """DPO builds on #29 and #30, which both live in ``transformer/blocks.py``: the list of modules
    that came from the reference names that module once, with both items (it listed it twice)."""
    from pytest_mlcanon import catalog

    learner(copy=["posttrain/dpo"])
    report = pytester.path / "report.json"
    pytester.runpytest("--canon-item=55", "--impl=practice", "-q", "-p", "no:cacheprovider",
                       "-k", "batch_of_one", f"--canon-report=json:{report}")
    (item,) = json.loads(report.read_text())["items"]
    modules = [entry.split(" (")[0] for entry in item["fallback"]]
    assert len(modules) == len(set(modules)), item["fallback"]
    expected = {f"{module}.py" for module in catalog.modules_built_on(catalog.get(55))}
    assert set(modules) == expected and "transformer/blocks.py" in expected
    assert ("transformer/blocks.py (missing; #29 transformer/encoder_block and #30 transformer/decoder_block, "
            "which this item builds on)") in item["fallback"]


def test_a_grading_job_checks_exactly_its_items() -> None:
    from pytest_mlcanon.grade.batch import _ini
    from pytest_mlcanon.grade.config import GradeConfig

    assert "mlcanon_whole_module = false" in _ini(GradeConfig(items="26")).splitlines()


def test_a_grading_job_gathers_evidence_and_scores_nothing(pytester: pytest.Pytester, learner) -> None:
    learner(copy=["detection/boxes"])
    result = pytester.runpytest("--canon-item=18", "--canon-gather-only", "-q", "-p", "no:cacheprovider",
                                "--canon-report=json:r.json")
    assert result.ret == 0 and result.parseoutcomes()["passed"] > 0  # the tests ran
    assert "mlcanon rubric" not in result.stdout.str() and not (pytester.path / "r.json").exists()
