"""Reference tests for the evaluation harness with bootstrap CIs (#59, ``evaluation/harness``)."""

from __future__ import annotations

import time
from statistics import NormalDist

import numpy as np
import pytest

from canon_refs.evaluation import harness
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged, strict_numpy
from pytest_mlcanon.testing import rng as make_rng

pytestmark = pytest.mark.canon("evaluation/harness")


def _row_score(row: dict, name: str) -> float:
    """A per-example score, stored under ``row["scores"][name]`` (the reference) or ``row[name]``."""
    scores = row.get("scores")
    if isinstance(scores, dict) and name in scores:
        return float(scores[name])
    return float(row[name])


# ---- normalize_answer / exact_match ---------------------------------------------------------


def test_exact_match_normalises_case_punctuation_and_articles() -> None:
    assert harness.exact_match("The Cat!", "cat") == 1.0
    assert harness.exact_match("  an   Apple, pie ", "apple pie") == 1.0
    assert harness.exact_match("a dog", "the cat") == 0.0
    assert harness.exact_match("theatre", "atre") == 0.0  # articles are whole words only
    assert isinstance(harness.exact_match("x", "x"), float)


def test_normalize_answer_spec_rules() -> None:
    assert harness.normalize_answer("The  QUICK, brown fox!") == "quick brown fox"
    assert harness.normalize_answer("An answer\tof\n\nA kind") == "answer of kind"
    assert harness.normalize_answer("Paris.") == "paris"
    assert harness.normalize_answer("...") == ""


# ---- bootstrap_ci ---------------------------------------------------------------------------


@pytest.mark.edge_case
def test_constant_values_give_degenerate_interval() -> None:
    assert harness.bootstrap_ci(np.full(40, 3.0)) == (3.0, 3.0, 3.0)
    point, low, high = harness.bootstrap_ci(np.full(37, 0.1), n_resamples=500)
    assert_close([point, low, high], [0.1, 0.1, 0.1], cond=37, what="bootstrap_ci(37 x 0.1)")  # a mean of 37 copies


@pytest.mark.edge_case
def test_single_value_and_single_resample() -> None:
    assert harness.bootstrap_ci(np.array([2.5])) == (2.5, 2.5, 2.5)
    point, low, high = harness.bootstrap_ci(np.arange(5.0), n_resamples=1)
    assert point == 2.0 and low == high


def test_point_inside_interval_and_returns_floats() -> None:
    x = make_rng(1).normal(0.3, 1.0, size=150)
    out = call_leaves_inputs_unchanged(harness.bootstrap_ci, x)
    assert len(out) == 3 and all(isinstance(v, float) for v in out)
    point, low, high = out
    assert_close(point, float(np.mean(x)), magnitude=3.0, cond=150, what="bootstrap_ci(x) point")
    assert low <= point <= high
    assert low < high


def test_same_seed_identical_other_seed_differs() -> None:
    x = make_rng(2).random(80)
    assert harness.bootstrap_ci(x, seed=5) == harness.bootstrap_ci(x, seed=5)
    assert harness.bootstrap_ci(x, seed=5)[1:] != harness.bootstrap_ci(x, seed=6)[1:]


def test_interval_is_a_percentile_interval_of_the_resampled_means() -> None:
    # The 95% interval of a mean is close to mean +- 1.96 * s / sqrt(n), and lower levels nest inside.
    x = make_rng(3).normal(1.0, 2.0, size=500)
    point, low, high = harness.bootstrap_ci(x, n_resamples=4000, seed=1)
    se = float(np.std(x, ddof=1)) / np.sqrt(x.size)
    assert (high - low) / (2 * 1.959964 * se) == pytest.approx(1.0, abs=0.1)
    assert (low + high) / 2 == pytest.approx(point, abs=0.25 * se)
    _, low80, high80 = harness.bootstrap_ci(x, n_resamples=4000, confidence=0.8, seed=1)
    assert low <= low80 <= point <= high80 <= high
    assert (high80 - low80) / (high - low) == pytest.approx(1.2816 / 1.96, abs=0.06)


def test_statistic_gets_the_resample_matrix_in_one_call() -> None:
    x = make_rng(4).random(64)
    calls: list[tuple[int, ...]] = []

    def recording_mean(a: np.ndarray, axis: int | None = None) -> np.ndarray:
        calls.append(np.shape(a))
        return np.mean(a, axis=axis)

    out = harness.bootstrap_ci(x, recording_mean, n_resamples=300, seed=0)
    assert (300, 64) in calls, f"statistic never saw the (R, n) matrix; shapes seen: {calls[:5]}"
    assert len(calls) <= 3, f"statistic called {len(calls)} times: apply it once with axis=1"
    assert out == harness.bootstrap_ci(x, np.mean, n_resamples=300, seed=0)


def test_statistic_without_axis_falls_back_row_by_row() -> None:
    x = make_rng(5).exponential(size=101)
    with_axis = harness.bootstrap_ci(x, np.median, n_resamples=400, seed=2)
    without_axis = harness.bootstrap_ci(x, lambda v: float(np.median(v)), n_resamples=400, seed=2)
    assert_close(np.array(without_axis), np.array(with_axis), what="bootstrap_ci(x, median without axis)")
    assert with_axis[0] == float(np.median(x))
    assert with_axis[1] <= with_axis[0] <= with_axis[2]


def test_vectorised_speed_n10000_r2000() -> None:
    # The reference takes ~0.3 s; a Python loop over the 20 M draws takes 10+ s. The 3 s bound only
    # catches that loop, not a reasonable implementation on a loaded machine.
    x = make_rng(6).random(10_000)
    best = np.inf
    for _ in range(3):  # best of three: the CI machine is shared
        wall, cpu = time.perf_counter(), time.process_time()
        _, low, high = harness.bootstrap_ci(x, n_resamples=2000, seed=0)
        best = min(best, time.perf_counter() - wall, time.process_time() - cpu)  # CPU: a loaded host's wait
        if best < 3.0:
            break
    assert best < 3.0, f"bootstrap of n = 10 000, R = 2000 took {best:.2f} s: draw one (R, n) matrix"
    assert low < float(np.mean(x)) < high


def test_coverage_of_bernoulli_mean() -> None:
    # Verified on seeds 0-4: coverage 0.947, 0.947, 0.933, 0.953, 0.963 (nominal 0.95).
    g = make_rng(0)
    covered = 0
    for _ in range(300):
        x = (g.random(200) < 0.7).astype(np.float64)
        _, low, high = harness.bootstrap_ci(x, seed=int(g.integers(2**31)))
        covered += low <= 0.7 <= high
    assert 0.90 <= covered / 300 <= 0.99, f"95% intervals covered 0.7 in {covered}/300 runs"


def test_width_shrinks_like_one_over_sqrt_n() -> None:
    # Verified on seeds 0-4: width(400) / width(1600) = 1.95, 1.76, 1.98, 2.11, 1.99.
    x = make_rng(0).normal(size=1600)
    _, low_small, high_small = harness.bootstrap_ci(x[:400], seed=0)
    _, low_big, high_big = harness.bootstrap_ci(x, seed=0)
    ratio = (high_small - low_small) / (high_big - low_big)
    assert 1.6 <= ratio <= 2.4, f"4x the data should halve the width; ratio {ratio:.3f}"


@pytest.mark.numerics_probe
def test_large_offset_and_extreme_wilson_stay_finite() -> None:
    x = 1e12 + make_rng(7).normal(size=200)
    with strict_numpy():
        point, low, high = harness.bootstrap_ci(x, n_resamples=500)
        lo0, hi0 = harness.wilson_interval(0, 10**9)
        lo1, hi1 = harness.wilson_interval(10**9, 10**9, confidence=1 - 1e-12)
    assert low <= point <= high and high - low > 0
    assert 0.0 <= lo0 <= 1e-12 and 0.0 < hi0 < 1e-8
    assert 0.0 < lo1 < 1.0 and hi1 == pytest.approx(1.0, abs=1e-15) and hi1 <= 1.0


# ---- paired_bootstrap -----------------------------------------------------------------------


@pytest.mark.edge_case
def test_paired_identical_systems() -> None:
    a = make_rng(8).random(120)
    out = call_leaves_inputs_unchanged(harness.paired_bootstrap, a, a.copy())
    assert set(out) >= {"diff", "low", "high", "p_value"}
    assert out["diff"] == 0.0
    assert (out["low"], out["high"]) == (0.0, 0.0)
    assert out["p_value"] == 1.0


def _correlated_systems(seed: int, shift: float, n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    g = make_rng(seed)
    difficulty = g.normal(size=n)  # shared by both systems: the source of the correlation
    return difficulty + 0.3 * g.normal(size=n) + shift, difficulty + 0.3 * g.normal(size=n)


def test_paired_narrower_than_unpaired_for_correlated_systems() -> None:
    # Verified on seeds 0-4: paired / unpaired width = 0.26, 0.33, 0.29, 0.28, 0.28; low > 0, p <= 0.002.
    a, b = _correlated_systems(0, shift=0.1)
    out = harness.paired_bootstrap(a, b, seed=0)
    assert_close(out["diff"], float(np.mean(a - b)), magnitude=4.0, cond=300, what="paired_bootstrap(a, b)['diff']")
    assert out["low"] <= out["diff"] <= out["high"]
    g = make_rng(100)
    ia, ib = g.integers(0, a.size, size=(2, 2000, a.size))
    unpaired = np.quantile(a[ia].mean(axis=1) - b[ib].mean(axis=1), [0.025, 0.975])
    ratio = (out["high"] - out["low"]) / (unpaired[1] - unpaired[0])
    assert ratio < 0.5, f"paired interval should be much narrower than unpaired; width ratio {ratio:.2f}"
    assert out["low"] > 0 and out["p_value"] <= 0.01


def test_paired_p_value_matches_normal_theory_and_is_symmetric() -> None:
    # A modest true difference, two-sided p ~ 0.68 here; a one-sided p would be half of it. Verified on
    # data seeds 0-9 x bootstrap seeds 0-4: |bootstrap p - normal-theory p| <= 0.035.
    a, b = _correlated_systems(11, shift=0.02)
    out = harness.paired_bootstrap(a, b, n_resamples=4000, seed=3)
    d = a - b
    z = float(np.mean(d)) / (float(np.std(d, ddof=1)) / np.sqrt(d.size))
    expected = 2.0 * (1.0 - NormalDist().cdf(abs(z)))
    assert 0.05 < expected < 0.9
    assert out["p_value"] == pytest.approx(expected, abs=0.06)
    swapped = harness.paired_bootstrap(b, a, n_resamples=4000, seed=3)
    assert_close(swapped["diff"], -out["diff"], magnitude=4.0, cond=300, what="paired_bootstrap(b, a)['diff']")
    # the same resamples, negated: the same share on the far side of 0
    assert_close(swapped["p_value"], out["p_value"], what="paired_bootstrap(b, a)['p_value']")
    # Mirrored bounds up to the quantile rule: an interpolated quantile mirrors exactly, an order
    # statistic (sorted[int(q * R)]) may move by one of 4000 resamples, far below 2 % of the width.
    width = out["high"] - out["low"]
    assert (swapped["low"], swapped["high"]) == pytest.approx((-out["high"], -out["low"]), abs=0.02 * width)


# ---- wilson_interval ------------------------------------------------------------------------


def test_wilson_quoted_values() -> None:
    # closed forms quoted to 16-17 digits, computed through a square root and a division (cond ~ 4);
    # z itself is the normal quantile, which NormalDist and scipy give to a few ulps
    tol = {"cond": 8}
    got = call_leaves_inputs_unchanged(harness.wilson_interval, 7, 10)
    assert_close(got, (0.39677814746114537, 0.8922087325936989), **tol, what="wilson_interval(7, 10)")
    assert_close(harness.wilson_interval(0, 10), (0.0, 0.2775327998628892), magnitude=1.0, **tol,
                 what="wilson_interval(0, 10)")
    assert_close(harness.wilson_interval(10, 10), (1 - 0.2775327998628892, 1.0), **tol, what="wilson_interval(10, 10)")


def test_wilson_confidence_and_symmetry() -> None:
    low90, high90 = harness.wilson_interval(30, 100, confidence=0.90)
    low95, high95 = harness.wilson_interval(30, 100)
    assert low95 < low90 < 0.3 < high90 < high95
    flipped = harness.wilson_interval(70, 100)
    assert_close(flipped, (1 - high95, 1 - low95), cond=8, what="wilson_interval(70, 100)")


# ---- evaluate -------------------------------------------------------------------------------

_DATASET = [
    {"id": "q1", "input": "capital of France?", "target": "Paris"},
    {"id": "q2", "input": "2 + 2?", "target": "four"},
    {"id": "q3", "input": "colour of the sky?", "target": "blue"},
    {"id": "q4", "input": "crash me", "target": "anything"},
    {"id": "q5", "input": "largest planet?", "target": "Jupiter"},
    {"id": "q6", "input": "author of Hamlet?", "target": "Shakespeare"},
]
_ANSWERS = {"capital of France?": "paris.", "2 + 2?": "The four", "colour of the sky?": "green",
            "largest planet?": "Jupiter!", "author of Hamlet?": "Marlowe"}


def _predict(text: str) -> str:
    if text == "crash me":
        raise RuntimeError("model server timed out")
    return _ANSWERS[text]


def test_evaluate_rows_metrics_and_errors() -> None:
    report = harness.evaluate(_predict, _DATASET, n_resamples=500)
    assert report.n == 6
    assert set(report.metrics) == {"exact_match"}
    assert_close(report.metrics["exact_match"], 3 / 6, what="evaluate(...).metrics['exact_match']")
    assert len(report.per_example) == 6
    assert [row["id"] for row in report.per_example] == [r["id"] for r in _DATASET]
    by_id = {row["id"]: row for row in report.per_example}
    assert by_id["q1"]["prediction"] == "paris."
    assert [_row_score(by_id[q], "exact_match") for q in ("q1", "q2", "q3", "q5", "q6")] == [1, 1, 0, 1, 0]
    crashed = by_id["q4"]
    assert "model server timed out" in str(crashed["error"])
    assert _row_score(crashed, "exact_match") == 0.0
    assert not by_id["q1"].get("error")
    low, high = report.ci["exact_match"]
    assert 0.0 <= low <= report.metrics["exact_match"] <= high <= 1.0 and low < high


def test_evaluate_reports_a_ci_for_every_metric() -> None:
    metrics = {"em": harness.exact_match, "length": lambda p, t: float(len(p))}
    report = harness.evaluate(_predict, _DATASET, metrics, n_resamples=300, seed=4)
    assert set(report.metrics) == set(report.ci) == {"em", "length"}
    lengths = [len(_ANSWERS[r["input"]]) if r["id"] != "q4" else 0 for r in _DATASET]
    assert_close(report.metrics["length"], float(np.mean(lengths)), cond=6, what="evaluate(...).metrics['length']")
    for name in ("em", "length"):
        low, high = report.ci[name]
        assert low <= report.metrics[name] <= high
    assert report.ci == harness.evaluate(_predict, _DATASET, metrics, n_resamples=300, seed=4).ci


# ---- input checks (contract: the exception type only) -------------------------------------------


@pytest.mark.contract
def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError):
        harness.bootstrap_ci(np.array([]))
    for bad in (0.0, 1.0, 1.5, -0.2):
        with pytest.raises(ValueError):
            harness.bootstrap_ci(np.ones(5), confidence=bad)
    with pytest.raises(ValueError):
        harness.bootstrap_ci(np.ones(5), n_resamples=0)
    with pytest.raises(ValueError):
        harness.paired_bootstrap(np.ones(5), np.ones(6))
    with pytest.raises(ValueError):
        harness.paired_bootstrap(np.ones(5), np.ones(5), confidence=1.0)
    with pytest.raises(ValueError):
        harness.paired_bootstrap(np.ones(5), np.ones(5), n_resamples=0)
    for successes, n, confidence in ((11, 10, 0.95), (-1, 10, 0.95), (0, 0, 0.95), (3, 10, 0.0)):
        with pytest.raises(ValueError):
            harness.wilson_interval(successes, n, confidence=confidence)


@pytest.mark.contract
def test_evaluate_validates_rows_before_predicting() -> None:
    calls: list[str] = []

    def spy(text: str) -> str:
        calls.append(text)
        return text

    rows = [{"id": "a", "input": "x", "target": "x"}, {"id": "b", "input": "y"}]
    with pytest.raises(ValueError):
        harness.evaluate(spy, rows)
    assert calls == []
