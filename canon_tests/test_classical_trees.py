"""Reference tests for canon #6, the CART decision tree with the Gini impurity."""

from __future__ import annotations

import numpy as np
import pytest

from canon_refs.classical import decision_tree as dt
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged, optional_module, rng

pytestmark = pytest.mark.canon("classical/decision_tree")


def _rectangles(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Noise-free labels that are a union of axis-aligned rectangles in [0, 1]^2 (three classes)."""
    X = rng(seed).random((n, 2))
    y = np.zeros(n, dtype=np.int64)
    y[(X[:, 0] > 0.5) & (X[:, 1] > 0.3)] = 1
    y[(X[:, 0] <= 0.25) & (X[:, 1] > 0.7)] = 2
    y[(X[:, 0] > 0.8) & (X[:, 1] <= 0.3)] = 2
    return X, y


def _noisy(n: int = 200, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    g = rng(seed)
    X = g.normal(size=(n, d))
    y = ((X[:, 0] + 0.5 * X[:, 1] + 0.8 * g.normal(size=n)) > 0).astype(np.int64)
    return X, y


def _leaves(node) -> list:
    if node.feature is None:
        return [node]
    return _leaves(node.left) + _leaves(node.right)


def _leaf_of(node, x: np.ndarray):
    while node.feature is not None:
        node = node.left if x[node.feature] <= node.threshold else node.right
    return node


def _brute_force_best_split(X: np.ndarray, y: np.ndarray, min_samples_leaf: int = 1):
    """O(n^2 d) scan with the same threshold and tie rules, for cross-checking."""

    def g(labels):
        p = np.bincount(labels) / labels.size
        return 1.0 - np.sum(p * p)

    n, d = X.shape
    parent = g(y)
    best = None
    for j in range(d):
        values = np.unique(X[:, j])
        for lo, hi in zip(values[:-1], values[1:]):
            t = (lo + hi) / 2
            left = X[:, j] <= t
            nl, nr = left.sum(), (~left).sum()
            if nl < min_samples_leaf or nr < min_samples_leaf:
                continue
            dec = parent - nl / n * g(y[left]) - nr / n * g(y[~left])
            if best is None or dec > best[2] + 1e-12:
                best = (j, t, dec)
    return best if best is not None and best[2] > 1e-12 else None


def test_gini_closed_form_values():
    assert_close(dt.gini(np.array([0, 0, 1, 1])), 0.5, what="gini([0, 0, 1, 1])")
    assert_close(dt.gini(np.array([0, 1, 2])), 0.6666666666666667, what="gini([0, 1, 2])")
    assert_close(dt.gini(np.array([3, 3, 3])), 0.0, magnitude=1.0, what="gini([3, 3, 3])")
    assert_close(dt.gini(np.array([1])), 0.0, magnitude=1.0, what="gini([1])")
    assert isinstance(dt.gini(np.array([0, 1])), float)
    assert_close(dt.gini(np.array([0, 0, 0, 2])), 1 - (0.75**2 + 0.25**2), what="gini([0, 0, 0, 2])")


def test_best_split_closed_form():
    X, y = np.array([[1.0], [2.0], [3.0], [4.0]]), np.array([0, 0, 1, 1])
    feature, threshold, decrease = call_leaves_inputs_unchanged(dt.best_split, X, y)
    assert (feature, threshold) == (0, 2.5)  # the midpoint of 2 and 3 is exact in any evaluation order
    assert_close(decrease, 0.5, what="best_split(...).decrease")
    # the stub's (int, float, float): a NumPy integer from argmax is an int too
    assert isinstance(feature, (int, np.integer)) and isinstance(threshold, float) and isinstance(decrease, float)


def test_best_split_picks_the_informative_feature():
    X = np.array([[5.0, 1.0], [3.0, 2.0], [4.0, 3.0], [1.0, 4.0]])
    y = np.array([1, 1, 0, 0])
    feature, threshold, decrease = dt.best_split(X, y)
    assert (feature, threshold) == (1, 2.5)
    assert_close(decrease, 0.5, what="best_split(...).decrease")


def test_best_split_ties_go_to_lowest_feature_then_lowest_threshold():
    X = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]])
    assert dt.best_split(X, np.array([0, 0, 1, 1]))[:2] == (0, 2.5)
    # cuts at 1.5 and 3.5 both decrease the impurity by 1/6
    feature, threshold, decrease = dt.best_split(X[:, ::-1], np.array([0, 1, 1, 0]))
    assert (feature, threshold) == (0, 1.5)
    assert_close(decrease, 1 / 6, what="best_split(...).decrease")


def test_best_split_matches_brute_force():
    for seed in range(5):
        g = rng(seed)
        X = np.round(g.normal(size=(40, 3)), 1)  # rounded: repeated values
        y = g.integers(0, 3, size=40)
        for leaf in (1, 5):
            ours = dt.best_split(X, y, min_samples_leaf=leaf)
            ref = _brute_force_best_split(X, y, leaf)
            assert ours[0] == ref[0]
            # a midpoint is within an ulp however it is computed; a decrease is a few roundings
            assert_close(ours[1], ref[1], magnitude=float(np.abs(X).max()), what="best_split(...).threshold")
            assert_close(ours[2], ref[2], magnitude=1.0, what="best_split(...).decrease")


def test_best_split_returns_none_without_a_useful_cut():
    assert dt.best_split(np.array([[1.0], [2.0], [3.0]]), np.array([1, 1, 1])) is None  # pure
    assert dt.best_split(np.array([[2.0], [2.0], [2.0]]), np.array([0, 1, 0])) is None  # constant feature
    assert dt.best_split(np.array([[1.0], [2.0], [3.0]]), np.array([0, 1, 0]), min_samples_leaf=2) is None
    assert (
        dt.best_split(np.array([[1.0], [2.0], [3.0], [4.0]]), np.array([0, 1, 1, 0]), min_samples_leaf=2)
        is None
    )


def test_best_split_respects_min_samples_leaf():
    X = np.array([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]])
    y = np.array([0, 1, 1, 1, 1, 1])
    assert dt.best_split(X, y)[:2] == (0, 1.5)
    assert dt.best_split(X, y, min_samples_leaf=2)[:2] == (0, 2.5)


def test_rectangles_are_fitted_perfectly():
    X, y = _rectangles()
    tree = call_leaves_inputs_unchanged(dt.DecisionTreeClassifier().fit, X, y)
    pred = call_leaves_inputs_unchanged(tree.predict, X)
    assert pred.dtype == np.int64 and pred.shape == y.shape
    assert np.mean(pred == y) == 1.0
    leaves = _leaves(tree.root_)
    assert tree.n_leaves_ == len(leaves)
    # pure leaves: one class holds every count (counts may be int64 or float64)
    assert all(np.count_nonzero(leaf.value) == 1 for leaf in leaves)


def test_depth_one_root_equals_best_split():
    X, y = _noisy(seed=1)
    tree = dt.DecisionTreeClassifier(max_depth=1).fit(X, y)
    feature, threshold, _ = dt.best_split(X, y)
    assert (tree.root_.feature, tree.root_.threshold) == (feature, threshold)
    assert tree.depth_ == 1 and tree.n_leaves_ == 2
    np.testing.assert_array_equal(tree.root_.value, np.bincount(y))
    left = X[:, feature] <= threshold
    np.testing.assert_array_equal(tree.root_.left.value, np.bincount(y[left], minlength=2))
    np.testing.assert_array_equal(tree.root_.right.value, np.bincount(y[~left], minlength=2))


def test_predict_proba_equals_leaf_frequencies():
    X, y = _noisy(seed=2)
    tree = dt.DecisionTreeClassifier(max_depth=3).fit(X, y)
    Xq = rng(3).normal(size=(50, 3))
    proba = tree.predict_proba(Xq)
    assert proba.shape == (50, 2)
    assert_close(proba.sum(axis=1), np.ones(50), what="predict_proba(X).sum(1)")
    expected = np.array([_leaf_of(tree.root_, x).value / _leaf_of(tree.root_, x).value.sum() for x in Xq])
    assert_close(proba, expected, magnitude=1.0, what="predict_proba(X)")
    np.testing.assert_array_equal(tree.predict(Xq), np.argmax(expected, axis=1))


def test_every_leaf_holds_min_samples_leaf():
    X, y = _noisy(n=300, seed=4)
    for leaf in (1, 7, 20):
        tree = dt.DecisionTreeClassifier(min_samples_leaf=leaf).fit(X, y)
        sizes = [int(node.value.sum()) for node in _leaves(tree.root_)]
        assert min(sizes) >= leaf
        assert sum(sizes) == 300


def test_min_samples_split_and_max_depth_stop_growth():
    X, y = _noisy(n=300, seed=5)
    full = dt.DecisionTreeClassifier().fit(X, y)
    shallow = dt.DecisionTreeClassifier(max_depth=2).fit(X, y)
    assert shallow.depth_ == 2 and shallow.n_leaves_ <= 4
    assert full.depth_ > 2
    stubby = dt.DecisionTreeClassifier(min_samples_split=100).fit(X, y)
    assert stubby.n_leaves_ < full.n_leaves_
    for node in _leaves(stubby.root_):
        assert node.value.sum() >= 1


def test_matches_sklearn_training_accuracy_when_installed():
    tree_mod = optional_module("sklearn.tree")
    X, y = _noisy(n=200, seed=6)
    for depth in (2, 4, None):
        ours = dt.DecisionTreeClassifier(max_depth=depth).fit(X, y)
        ref = tree_mod.DecisionTreeClassifier(criterion="gini", max_depth=depth, random_state=0).fit(X, y)
        assert np.mean(ours.predict(X) == y) == np.mean(ref.predict(X) == y)


@pytest.mark.edge_case
def test_constant_labels_give_a_single_leaf():
    X = rng(7).normal(size=(20, 3))
    tree = dt.DecisionTreeClassifier().fit(X, np.full(20, 2))
    assert tree.depth_ == 0 and tree.n_leaves_ == 1
    assert tree.root_.feature is None and tree.root_.left is None and tree.root_.right is None
    np.testing.assert_array_equal(tree.root_.value, [0, 0, 20])
    np.testing.assert_array_equal(tree.predict(X), np.full(20, 2))
    assert_close(tree.predict_proba(X[:2]), np.array([[0.0, 0.0, 1.0]] * 2), what="predict_proba")


@pytest.mark.edge_case
def test_duplicated_rows_with_conflicting_labels_take_the_majority():
    X = np.array([[1.0, 1.0]] * 5 + [[2.0, 0.0]] * 2)
    y = np.array([0, 1, 1, 0, 1, 0, 0])
    tree = dt.DecisionTreeClassifier().fit(X, y)
    np.testing.assert_array_equal(tree.predict(np.array([[1.0, 1.0], [2.0, 0.0]])), [1, 0])
    assert_close(tree.predict_proba(np.array([[1.0, 1.0]])), np.array([[0.4, 0.6]]), what="predict_proba")
    assert tree.n_leaves_ == 2


@pytest.mark.edge_case
def test_max_depth_zero_and_single_sample():
    X, y = _noisy(n=30, seed=8)
    stump = dt.DecisionTreeClassifier(max_depth=0).fit(X, y)
    assert stump.depth_ == 0 and stump.n_leaves_ == 1
    assert_close(stump.predict_proba(X[:1]), np.array([np.bincount(y) / 30]), what="predict_proba")
    one = dt.DecisionTreeClassifier().fit(np.array([[0.5]]), np.array([1]))
    np.testing.assert_array_equal(one.predict(np.array([[-3.0], [3.0]])), [1, 1])


@pytest.mark.numerics_probe
def test_adjacent_float_values_are_still_separated():
    lo = 1.0
    hi = np.nextafter(1.0, 2.0)
    X = np.array([[lo], [lo], [hi], [hi]])
    y = np.array([0, 0, 1, 1])
    feature, threshold, _ = dt.best_split(X, y)
    assert lo <= threshold < hi
    tree = dt.DecisionTreeClassifier().fit(X, y)
    np.testing.assert_array_equal(tree.predict(X), y)


@pytest.mark.numerics_probe
def test_huge_feature_values_give_a_finite_threshold():
    X = np.array([[1.5e308], [1.6e308], [1.7e308], [1.75e308]])
    y = np.array([0, 0, 1, 1])
    # the stated result (a finite midpoint), not how it is reached: an overflowing (lo + hi) / 2 caught and
    # redone as lo/2 + hi/2 is as right as halving first (blind round 32); a returned inf still fails
    with np.errstate(over="ignore", invalid="ignore"):
        _, threshold, decrease = dt.best_split(X, y)
    assert np.isfinite(threshold) and 1.6e308 < threshold < 1.7e308
    assert_close(decrease, 0.5, what="best_split(huge X).decrease")


# ---- input checks (contract: the exception type only) -------------------------------------------


@pytest.mark.contract
def test_predict_before_fit_raises():
    with pytest.raises(RuntimeError):
        dt.DecisionTreeClassifier().predict(np.zeros((2, 2)))
    with pytest.raises(RuntimeError):
        dt.DecisionTreeClassifier().predict_proba(np.zeros((2, 2)))


@pytest.mark.contract
@pytest.mark.parametrize("kwargs", [{"max_depth": -1}, {"min_samples_split": 1}, {"min_samples_leaf": 0}],
                         ids=["max_depth", "min_samples_split", "min_samples_leaf"])
def test_invalid_hyperparameters_raise(kwargs):
    with pytest.raises(ValueError):
        dt.DecisionTreeClassifier(**kwargs)


@pytest.mark.contract
@pytest.mark.parametrize("y", [np.array([], dtype=np.int64), np.array([0, -1]), np.array([0.5, 1.0])],
                         ids=["empty", "negative", "fractional"])
def test_gini_rejects_bad_labels(y):
    with pytest.raises(ValueError):
        dt.gini(y)


@pytest.mark.contract
def test_invalid_data_raises():
    X, y = _noisy(n=10, seed=9)
    with pytest.raises(ValueError):
        dt.DecisionTreeClassifier().fit(X, np.r_[y[:-1], -2])
    with pytest.raises(ValueError):
        dt.DecisionTreeClassifier().fit(X, y.astype(np.float64) + 0.5)
    with pytest.raises(ValueError):
        dt.best_split(X, y[:-1])
    with pytest.raises(ValueError):
        dt.best_split(X[:, 0], y)
    with pytest.raises(ValueError):
        dt.best_split(X, y, min_samples_leaf=0)
    tree = dt.DecisionTreeClassifier().fit(X, y)
    with pytest.raises(ValueError):
        tree.predict(np.zeros((2, 5)))
