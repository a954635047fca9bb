"""Alternative evaluation harness (#59): the same contract, written differently.

Differences from the reference: resamples are drawn with ``rng.choice(x, size=(R, n))`` (values, not
indices) and the bounds come from ``np.percentile``; the paired bootstrap resamples the per-example
differences ``d = a - b`` (the same indices for both systems, in one gather); Wilson uses the
``(2s + z^2 +- z sqrt(z^2 + 4 s (n - s) / n)) / (2 (n + z^2))`` form; ``axis`` support is detected by
trying the call; per-example scores are stored flat in each row instead of under ``"scores"``.
Shape letters: ``n`` examples, ``R`` resamples. Test: the reference tests must all pass.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

_PUNCT = frozenset(string.punctuation)
_ARTICLES = frozenset({"a", "an", "the"})


def normalize_answer(s: str) -> str:
    """Lowercase, drop punctuation and articles, collapse whitespace."""
    kept = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(w for w in kept.split() if w not in _ARTICLES)


def exact_match(prediction: str, target: str) -> float:
    """1.0 when equal after normalisation."""
    return float(normalize_answer(prediction) == normalize_answer(target))


def _vector(values: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64).reshape(-1)   # (n,)
    if x.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} has non-finite entries")
    return x                                               # (n,)


def _validate(n_resamples: int, confidence: float) -> None:
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence={confidence} must be strictly between 0 and 1")
    if int(n_resamples) != n_resamples or n_resamples < 1:
        raise ValueError(f"n_resamples={n_resamples} must be a positive integer")


def _bounds(stats: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = 50.0 * (1.0 - confidence)
    lo_hi = np.percentile(stats, [tail, 100.0 - tail])     # (2,)
    return float(lo_hi[0]), float(lo_hi[1])


def bootstrap_ci(values, statistic=np.mean, *, n_resamples=2000, confidence=0.95, seed=0):
    """Percentile bootstrap; one (R, n) draw of values."""
    x = _vector(values, "values")                          # (n,)
    _validate(n_resamples, confidence)
    rng = np.random.default_rng(seed)
    boot = rng.choice(x, size=(int(n_resamples), x.size), replace=True)   # (R, n)
    try:
        stats = np.asarray(statistic(boot, axis=1), dtype=np.float64)     # (R,)
    except TypeError:
        stats = np.array([statistic(row) for row in boot], dtype=np.float64)   # (R,)
    return (float(statistic(x)), *_bounds(stats, confidence))


def paired_bootstrap(scores_a, scores_b, *, n_resamples=2000, confidence=0.95, seed=0):
    """Bootstrap of mean(a - b), resampling examples (so both systems share indices)."""
    a = _vector(scores_a, "scores_a")                      # (n,)
    b = _vector(scores_b, "scores_b")                      # (n,)
    if a.size != b.size:
        raise ValueError(f"scores_a has {a.size} entries but scores_b has {b.size}")
    _validate(n_resamples, confidence)
    d = a - b
    rng = np.random.default_rng(seed)
    boot = rng.choice(d, size=(int(n_resamples), d.size), replace=True).mean(axis=1)   # (R,)
    diff = float(d.mean())
    low, high = _bounds(boot, confidence)
    if diff == 0.0:
        p = 1.0
    elif diff > 0.0:
        p = min(1.0, 2.0 * np.count_nonzero(boot < 0.0) / boot.size)
    else:
        p = min(1.0, 2.0 * np.count_nonzero(boot > 0.0) / boot.size)
    return {"diff": diff, "low": low, "high": high, "p_value": float(p)}


def wilson_interval(successes, n, confidence=0.95):
    """Wilson score interval, root form."""
    if n < 1:
        raise ValueError(f"n={n} must be >= 1")
    if successes < 0 or successes > n:
        raise ValueError(f"successes={successes} must lie in [0, n]")
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence={confidence} must be strictly between 0 and 1")
    z = NormalDist().inv_cdf((1.0 + confidence) / 2.0)
    z2 = z * z
    root = z * math.sqrt(z2 + 4.0 * successes * (n - successes) / n)
    denom = 2.0 * (n + z2)
    return max(0.0, (2.0 * successes + z2 - root) / denom), min(1.0, (2.0 * successes + z2 + root) / denom)


@dataclass
class EvalReport:
    """Scores, intervals and rows."""

    n: int
    metrics: dict
    ci: dict
    per_example: list


def evaluate(predict_fn, dataset, metrics=None, *, n_resamples=2000, confidence=0.95, seed=0):
    """Score every row; failures are recorded and scored 0."""
    for row in dataset:
        for key in ("id", "input", "target"):
            if key not in row:
                raise ValueError(f"dataset row {row!r} lacks {key!r}")
    _validate(n_resamples, confidence)
    metric_fns = {"exact_match": exact_match} if metrics is None else dict(metrics)
    rows = []
    for row in dataset:
        out = {"id": row["id"], "input": row["input"], "target": row["target"], "prediction": None, "error": None}
        try:
            out["prediction"] = predict_fn(row["input"])
        except Exception as exc:  # noqa: BLE001
            out["error"] = repr(exc)
        for name, fn in metric_fns.items():
            out[name] = 0.0 if out["error"] else float(fn(out["prediction"], row["target"]))
        rows.append(out)
    report = EvalReport(n=len(rows), metrics={}, ci={}, per_example=rows)
    for name in metric_fns:
        point, low, high = bootstrap_ci([r[name] for r in rows], n_resamples=n_resamples,
                                        confidence=confidence, seed=seed)
        report.metrics[name] = point
        report.ci[name] = (low, high)
    return report
