"""The tolerance helper every canon test compares values with (``pytest_mlcanon.testing``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pytest_mlcanon import testing
from pytest_mlcanon.testing import (
    assert_close,
    assert_grad_matches,
    eps,
    numeric_grad,
    returns_within,
    tolerance,
)


def test_tolerance_scales_with_dtype_magnitude_and_condition() -> None:
    assert eps(torch.float32) == 2.0**-23 and eps(np.float64) == 2.0**-52 and eps(torch.float16) == 2.0**-10
    base = tolerance(torch.float32, 1.0)
    assert tolerance(torch.float32, 1e4).atol == pytest.approx(1e4 * base.atol)
    assert tolerance(torch.float32, 1.0, cond=10).rtol == pytest.approx(10 * base.rtol)
    assert tolerance(np.float64, 0.0).atol > 0.0  # a comparison with zeros is never exact


def test_never_tighter_than_the_spacing_of_the_values() -> None:
    """A textbook-stable float32 softmax at |x| = 1e4 passes once the logits' magnitude is named."""
    x = torch.tensor([1e4, 0.0, -1e4, 1e4 - 3.0])
    stable = torch.exp(x - torch.logsumexp(x, 0))
    want = torch.softmax(x.double(), 0)
    assert_close(stable, want, magnitude=1e4)
    assert np.spacing(np.float32(1e4)) > 1e-4  # why the magnitude matters


def test_a_float64_check_admits_guard_terms_but_not_mistakes() -> None:
    """float64 is compared no tighter than float32's spacing: an eps guard of 1e-8 under a norm or a
    float32 step passes; a mistake that moves the value by 1e-5 does not."""
    x = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    exact = torch.nn.functional.normalize(x, dim=-1)
    assert_close(x / (x.norm(dim=-1, keepdim=True) + 1e-8), exact)
    assert_close(x.float().double() / x.norm(dim=-1, keepdim=True), exact)
    assert tolerance(np.float64, 1.0).rtol == 2.0**-23 == tolerance(np.float64, 1.0, ulps=1).rtol
    with pytest.raises(AssertionError):
        assert_close(exact * (1 + 1e-5), exact)


def test_a_wrong_value_is_caught_and_described() -> None:
    with pytest.raises(AssertionError, match=r"margin at index \(1,\): got 2\.0, expected 2\.1 .*largest difference"):
        assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.1]), what="margin")
    with pytest.raises(AssertionError, match="shape"):
        assert_close(torch.zeros(2, 1), torch.zeros(2))
    with pytest.raises(AssertionError):
        assert_close(torch.tensor([float("nan")]), torch.tensor([1.0]))
    with pytest.raises(AssertionError):
        assert_close(torch.tensor([float("inf")]), torch.tensor([-float("inf")]))
    with pytest.raises(AssertionError):  # float32 spacing is 1.2e-7 at 1: a 1e-4 error is not rounding
        assert_close(torch.tensor([1.0 + 1e-4]), torch.tensor([1.0], dtype=torch.float64))


def test_matching_special_values_and_empty_arrays_pass() -> None:
    assert_close(torch.tensor([float("nan"), float("inf")]), torch.tensor([float("nan"), float("inf")]))
    assert_close(np.zeros(0), np.zeros(0))
    assert_close(0.1 + 0.2, 0.3)


def test_an_in_place_change_of_an_input_is_caught() -> None:
    from pytest_mlcanon.testing import call_leaves_inputs_unchanged

    def normalise_in_place(x: torch.Tensor, *, rows: list[np.ndarray]) -> torch.Tensor:
        rows[0] -= rows[0].mean()
        return x

    def pure(x: torch.Tensor, *, rows: list[np.ndarray]) -> torch.Tensor:
        return x - x.mean()

    x = torch.randn(3)
    assert torch.equal(call_leaves_inputs_unchanged(pure, x, rows=[np.ones(2)]), x - x.mean())
    with pytest.raises(AssertionError, match="normalise_in_place modified its argument 'rows' in place"):
        call_leaves_inputs_unchanged(normalise_in_place, x, rows=[np.arange(3.0)])


def test_a_key_added_to_a_cache_dict_is_no_modification() -> None:
    from pytest_mlcanon.testing import call_leaves_inputs_unchanged

    def backward(dy: np.ndarray, cache: dict) -> np.ndarray:
        cache["seen"] = True  # its own bookkeeping: no array of the caller changes
        return dy * cache["x"]

    def backward_in_place(dy: np.ndarray, cache: dict) -> np.ndarray:
        cache["x"] *= dy
        return cache["x"]

    cache = {"x": np.arange(3.0)}
    np.testing.assert_array_equal(call_leaves_inputs_unchanged(backward, np.ones(3), cache), np.arange(3.0))
    with pytest.raises(AssertionError, match="modified its argument 1"):
        call_leaves_inputs_unchanged(backward_in_place, np.full(3, 2.0), {"x": np.arange(3.0)})


def test_a_scalar_tensor_argument_is_compared_too() -> None:
    from pytest_mlcanon.testing import bitwise_equal, call_leaves_inputs_unchanged

    assert bitwise_equal(torch.tensor(1.5), torch.tensor(1.5))
    assert not bitwise_equal(torch.tensor(1.5), torch.tensor(2.5))

    def bump(scale: torch.Tensor) -> None:
        scale.add_(1.0)

    with pytest.raises(AssertionError, match="modified its argument 0"):
        call_leaves_inputs_unchanged(bump, torch.tensor(1.5))


def test_an_endless_loop_fails_instead_of_hanging() -> None:
    """A loop that a missing argument check never ends (a step of 0) fails the test; the failure is not
    swallowed by ``except Exception`` nor mistaken for the ValueError a contract test expects."""
    import signal

    before = signal.getsignal(signal.SIGPROF)
    with pytest.raises(pytest.fail.Exception, match="chunk_text.*did not return"):
        with pytest.raises(ValueError), returns_within(0.2, "chunk_text(step 0)"):
            start, chunks = 0, []
            while start < 2:
                try:
                    chunks.append(start)
                    chunks.clear()
                except Exception:  # noqa: BLE001 - the loop a learner might write
                    pass
    assert signal.getsignal(signal.SIGPROF) == before and signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)
    with returns_within(0.2, "a quick call"):
        assert sum(range(1000)) == 499500


def test_finite_differences_reach_an_array_of_any_layout() -> None:
    # blind round 34: weights kept as a transposed view (not C-contiguous) got an all-zero numeric gradient,
    # so a correct MLP failed its gradient check: the probe nudged a reshaped copy, not the array
    weights = (np.arange(6.0).reshape(3, 2) + 1.0).T
    assert not weights.flags.c_contiguous
    before = weights.copy()
    numeric = numeric_grad(lambda: float((weights**2).sum()), weights)
    np.testing.assert_allclose(numeric, 2 * weights, rtol=1e-6)
    np.testing.assert_array_equal(weights, before)  # every entry restored
    assert_grad_matches(lambda: float((weights**3).sum()), weights, 3 * weights**2)
    with pytest.raises(AssertionError, match="analytic gradient off"):
        assert_grad_matches(lambda: float((weights**3).sum()), weights, 2 * weights**2)


def test_an_optional_library_that_is_missing_or_broken_skips_the_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchvision built for another torch raises RuntimeError at import ('operator torchvision::nms does not
    exist'): importorskip let that fail the learner's item (blind trial); optional_module skips, naming it."""
    (tmp_path / "broken_lib.py").write_text("raise RuntimeError('operator broken_lib::nms does not exist')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match=r"could not import broken_lib: RuntimeError: operator"):
        testing.optional_module("broken_lib")
    with pytest.raises(pytest.skip.Exception, match="could not import no_such_lib_anywhere: ModuleNotFoundError"):
        testing.optional_module("no_such_lib_anywhere")
    assert testing.optional_module("json").dumps([1]) == "[1]"
