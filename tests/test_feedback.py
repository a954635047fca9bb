"""Feedback in the learner's terms (issue 17.5): input summaries, the learner's own names, value checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pytest_mlcanon import testing
from pytest_mlcanon.feedback import learner_names, summarize, summarize_call


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
