"""Feedback in the learner's terms (issue 17.5): input summaries, the learner's own names, value checks."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from pytest_mlcanon import testing
from pytest_mlcanon.feedback import learner_names, summarize, summarize_call

REFS = Path(__file__).resolve().parents[1] / "canon_refs"


def test_a_summary_names_shape_dtype_and_the_special_values() -> None:
    mask = torch.ones(2, 4, 4, dtype=torch.bool)
    mask[1, 2] = False
    assert summarize(mask) == "(2, 4, 4) bool, 1 all-masked row"
    assert summarize(torch.tensor([1e4, float("nan"), -float("inf"), 1.0])) == \
        "(4,) float32, 1 NaN, 1 -inf, |x| up to 1e+04"
    assert summarize(torch.zeros(3, dtype=torch.float16)) == "(3,) float16"
    assert summarize(np.zeros((0, 3))) == "(0, 3) float64, empty"
    assert summarize(0.5) == "0.5" and summarize(object()) == "object"


def test_a_call_summary_leaves_out_self_and_long_argument_lists() -> None:
    args = {"self": object(), "q": torch.zeros(2, 3), **{f"a{i}": i for i in range(7)}}
    assert summarize_call("forward", args) == ("forward(q: (2, 3) float32, a0: 0, a1: 1, a2: 2, a3: 3, a4: 4, "
                                               "... 2 more)")


def test_the_learners_objects_are_named_as_theirs_not_the_references() -> None:
    served = {"posttrain/dpo": "practice/posttrain/dpo.py"}
    text = ("TypeError: canon_refs.posttrain.dpo.DPOOutput.__init__() got an unexpected keyword; "
            "module 'mlbook.posttrain.dpo' has no attribute 'x'; canon_refs.transformer.attention.softmax")
    assert learner_names(text, served) == (
        "TypeError: practice/posttrain/dpo.py:DPOOutput.__init__() got an unexpected keyword; "
        "module 'practice/posttrain/dpo.py' has no attribute 'x'; canon_refs.transformer.attention.softmax")


def test_a_failed_value_check_keeps_the_value_it_was_given() -> None:
    got = torch.tensor([1.0, 2.0, 3.5])
    with pytest.raises(AssertionError) as info:
        testing.assert_close(got, torch.tensor([1.0, 2.0, 3.0]))
    assert isinstance(info.value, testing.ValueMismatch) and info.value.actual is got
    assert "at index (2,): got 3.5, expected 3.0" in str(info.value)
    with pytest.raises(testing.ValueMismatch) as shape:
        testing.assert_close(got, torch.zeros(2))
    assert shape.value.actual is got


@pytest.mark.parametrize(("test", "miss"), [
    # words that only look like a topic: "half" of a stride, "error" of a quantiser, "deterministic" policies
    ("test_first_anchor_is_centred_at_half_stride", "failed test_first_anchor_is_centred_at_half_stride"),
    ("test_rotate_half_layout", "failed test_rotate_half_layout"),
    ("test_lambda_zero_is_one_step_td", "failed test_lambda_zero_is_one_step_td"),  # lambda = 0, not zeros
    ("test_dequantization_error_within_half_a_step", "failed test_dequantization_error_within_half_a_step"),
    ("test_one_hot_stochastic_policy_equals_deterministic", "disagrees with the reference computation"),
    # validation tests are validation, whatever else they mention
    ("test_masked_sequence_logprob_errors", "input validation"),
    ("test_causal_mask_invalid_sizes", "input validation"),
    ("test_mask_to_bias_invalid", "input validation"),
    # the phrase states what the check saw, never a guessed cause
    ("test_float16_bias_on_negative_scores_does_not_overflow", "half precision: not finite or not close to float32"),
    ("test_rows_sum_to_one_and_shift_invariance", "not shift-invariant (adding a constant"),
    ("test_training_10kb_to_512_ids_is_fast", "too slow for the test's time limit"),
    ("test_causal_padding_mask_empty_sequence", "edge case: empty input"),
    ("test_resampler_ignores_masked_visual_tokens", "masked entries leak into the result"),
])
def test_each_miss_phrase_matches_the_check_that_failed(test: str, miss: str) -> None:
    from pytest_mlcanon.misslog import miss_for_test

    phrase = miss_for_test(f"canon_tests/test_x.py::{test}")
    assert phrase.startswith(miss), phrase
    assert "subtract the max" not in phrase and "upcast" not in phrase and "vectorise" not in phrase


# -- the scenarios of 17.5, replayed ------------------------------------------------------------------------

GOOD_ATTENTION = (Path(__file__).resolve().parents[1] / "examples" / "learners" / "good" / "transformer"
                  / "attention.py").read_text()


def test_a_wrong_value_is_reported_at_the_learners_line_with_its_input(pytester: pytest.Pytester, learner) -> None:
    scaled_by_dk = GOOD_ATTENTION.replace("step = 1.0 / math.sqrt(q.shape[-1]) if scale", "step = 1.0 / q.shape[-1] if scale")
    assert scaled_by_dk != GOOD_ATTENTION
    learner(files={"transformer/attention": scaled_by_dk})
    produced = {n for n, text in enumerate(scaled_by_dk.splitlines(), 1)
                if text.lstrip().startswith(("weights = stable_softmax", "out = ", "return out"))}
    result = pytester.runpytest("--canon-item=transformer/attention", "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    findings = re.findall(r"practice/transformer/attention\.py:(\d+): COR001 (test_\w+) failed: "
                          r"scaled_dot_product_attention\(q: \((?:\d+, )*\d+\) float64, k: .*?\) gave a wrong value: "
                          r".* at index \([\d, ]+\): got [-\d.e]+, expected [-\d.e]+ \(.*largest difference", out)
    assert {"test_two_key_closed_form_float64", "test_default_scale_is_inverse_sqrt_dk_and_explicit_scale_is_used"
            } <= {name for _, name in findings}
    assert {int(line) for line, _ in findings} <= produced
    result.stdout.fnmatch_lines(["*mlcanon: where the wrong value came from*",
                                 "scaled_dot_product_attention(q: (1, 2) float64, *",
                                 "produced it at practice/transformer/attention.py:*"])
    assert "canon_tests/test_transformer_attention.py:" in out
    assert "site-packages" not in out and str(REFS.parent) not in out.replace(str(pytester.path), "")
    assert "pytest_mlcanon.testing.ValueMismatch" not in out


def test_a_wrong_return_is_placed_at_the_learners_return_in_a_file_without_shape_comments(
        pytester: pytest.Pytester, learner) -> None:
    """No line of the learner's file is annotated: the ``return`` that produced the wrong value is still
    the place the report names (a fresh-user trial saw the test file's decorator line instead)."""
    good = (Path(__file__).resolve().parents[1] / "examples" / "learners" / "good" / "detection" / "boxes.py").read_text()
    bare = "\n".join(re.sub(r"\s+# \(.*$", "", line) for line in good.splitlines()) + "\n"
    wrong = bare.replace("return (inter / union.clamp_min(tiny)).to(boxes1.dtype)",
                         "return (0.9 * inter / union.clamp_min(tiny)).to(boxes1.dtype)")
    assert wrong != bare and "# (" not in wrong.split('"""')[-1]
    learner(files={"detection/boxes": wrong})
    line = next(n for n, text in enumerate(wrong.splitlines(), 1) if "0.9 * inter" in text)
    result = pytester.runpytest("--canon-item=detection/boxes", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    found = re.findall(r"practice/detection/boxes\.py:(\d+): COR001 \w+ failed: box_iou\(", result.stdout.str())
    assert found and set(found) == {str(line)}


def test_a_wrong_array_filled_in_a_loop_is_placed_at_the_line_that_wrote_it(pytester: pytest.Pytester, learner) -> None:
    """GAE fills a preallocated array step by step and returns it in a tuple: the report names the line
    that last wrote into it (``adv[..., t] = next_a``), not the allocation or the ``return``
    (a fresh-user trial saw ``adv = np.zeros(...)``)."""
    good = (Path(__file__).resolve().parent / "impls" / "min_gae" / "rl" / "gae.py").read_text()
    wrong = good.replace("next_a = delta + gamma * lam *", "next_a = delta + gamma *")
    assert wrong != good
    learner(files={"rl/gae": wrong})
    line = next(n for n, text in enumerate(wrong.splitlines(), 1) if text.strip() == "adv[..., t] = next_a")
    result = pytester.runpytest("--canon-item=rl/gae", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    found = re.findall(r"practice/rl/gae\.py:(\d+): COR001 \w+ failed: compute_gae\(", result.stdout.str())
    assert found and set(found) == {str(line)}, result.stdout.str()[-3000:]


def test_the_learners_own_classes_are_not_presented_as_the_references(pytester: pytest.Pytester, learner) -> None:
    raising = GOOD_ATTENTION.replace('        raise ValueError(f"scale must be finite and > 0, got {scale}")',
                                     '        raise ScaleError(f"scale must be finite and > 0, got {scale}")')
    raising += "\n\nclass ScaleError(Exception):\n    \"\"\"Not a ValueError: the contract test sees the wrong type.\"\"\"\n"
    assert raising.count("ScaleError") == 2
    learner(files={"transformer/attention": raising})
    result = pytester.runpytest("--canon-item=transformer/attention", "--canon-contract=required",
                                "-p", "no:cacheprovider", "-k", "scale")
    out = result.stdout.str()
    assert "practice/transformer/attention.py:ScaleError: scale must be finite" in out
    assert "canon_refs.transformer.attention.ScaleError" not in out


def test_an_import_error_names_the_learners_module_as_their_file(pytester: pytest.Pytester, learner) -> None:
    learner(files={"transformer/attention": '"""Reads itself."""\nfrom canon_refs.transformer import attention as me\n'
                                            "me.nothing\n"})
    result = pytester.runpytest("--canon-item=transformer/attention", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*error: AttributeError at practice/transformer/attention.py:3 while importing: "
                                 "*module 'practice/transformer/attention.py' has no attribute 'nothing'*"])


def test_a_wrong_optimizer_step_is_placed_at_its_update_not_at_a_validation_helper(
        pytester: pytest.Pytester, learner) -> None:
    """Adam without the first bias correction: the wrong parameter was written by ``Adam.step``'s
    ``p -= ...``; ``_check_params`` only handed the test's arrays back (blind round: the report blamed
    ``_check_params(params: list) gave a wrong value``)."""
    good = (REFS / "optim" / "optimizers.py").read_text()
    wrong = good.replace("correction1 = 1.0 - beta1**self.t", "correction1 = 1.0 - beta1")
    assert wrong != good
    learner(files={"optim/optimizers": wrong})
    line = next(n for n, text in enumerate(wrong.splitlines(), 1) if text.strip().startswith("p -= lr * m_hat"))
    result = pytester.runpytest("--canon-item=optim/adam", "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    found = re.findall(r"practice/optim/optimizers\.py:(\d+): COR001 \S+ failed: (\S+)\(", out)
    assert found and set(found) == {(str(line), "Adam.step")}, out[-3000:]
    assert "_check_params" not in out
