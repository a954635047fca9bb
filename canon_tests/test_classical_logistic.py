"""Reference tests for canon #2 (logistic regression) and #3 (softmax regression)."""

from __future__ import annotations

import numpy as np
import pytest

from canon_refs.classical import logistic_regression as logreg
from canon_refs.classical import softmax_regression as softreg
from pytest_mlcanon.testing import (
    assert_close,
    assert_grad_matches,
    call_leaves_inputs_unchanged,
    rng,
    strict_numpy,
)


def _separable_2d(n_per_class: int = 50, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two clouds around (-2, -1) and (2, 1) with every point at least 1 away from the line x + y/2 = 0."""
    g = rng(seed)
    X0 = g.normal(size=(n_per_class, 2)) * 0.6 + np.array([-2.0, -1.0])
    X1 = g.normal(size=(n_per_class, 2)) * 0.6 + np.array([2.0, 1.0])
    X = np.vstack([X0, X1])
    y = np.repeat([0, 1], n_per_class)
    margin = (X @ np.array([1.0, 0.5])) * np.where(y == 1, 1.0, -1.0)
    keep = margin > 1.0
    return X[keep], y[keep]


def _overlapping_2class(n: int = 120, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    g = rng(seed)
    X = g.normal(size=(n, d))
    p = 1.0 / (1.0 + np.exp(-(X @ np.array([1.0, -2.0, 0.5])[:d] + 0.3)))
    y = (g.random(n) < p).astype(np.int64)
    return X, y


def _three_blobs(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    g = rng(seed)
    centres = np.array([[0.0, 3.0], [-3.0, -2.0], [3.0, -2.0]])
    y = np.repeat(np.arange(3), n // 3)
    X = centres[y] + g.normal(size=(n, 2))
    return X, y


def _newton_logistic(X: np.ndarray, y: np.ndarray, l2: float, n_steps: int = 30) -> np.ndarray:
    """Newton-Raphson on [w, b] for mean logistic loss + (l2/2)||w||^2 (b unpenalised)."""
    n, d = X.shape
    A = np.hstack([X, np.ones((n, 1))])
    penalty = np.diag(np.r_[np.full(d, l2), 0.0])
    theta = np.zeros(d + 1)
    for _ in range(n_steps):
        p = 1.0 / (1.0 + np.exp(-(A @ theta)))
        grad = A.T @ (p - y) / n + penalty @ theta
        hess = (A * (p * (1 - p))[:, None]).T @ A / n + penalty
        theta = theta - np.linalg.solve(hess, grad)
    return theta


class TestLogisticRegression:
    pytestmark = pytest.mark.canon("classical/logistic_regression")

    def test_sigmoid_closed_form_values(self):
        assert_close(float(logreg.sigmoid(0.0)), 0.5, what="sigmoid(0)")
        assert_close(float(logreg.sigmoid(0.5)), 0.6224593312018546, what="sigmoid(0.5)")
        z = np.array([[-1.0, 0.0], [2.0, 3.0]])
        out = call_leaves_inputs_unchanged(logreg.sigmoid, z)
        assert out.shape == (2, 2)
        # both forms are accurate to a few ulps for |z| <= 3 (the naive one fails only when exp overflows)
        assert_close(out, 1.0 / (1.0 + np.exp(-z)), magnitude=3.0, what="sigmoid(z)")
        assert_close(logreg.log_sigmoid(z), np.log(1.0 / (1.0 + np.exp(-z))), magnitude=3.0, what="log_sigmoid(z)")

    @pytest.mark.numerics_probe
    def test_sigmoid_saturates_exactly_without_overflow(self):
        # the stub: saturates to 0.0 and 1.0 with no overflow warning (strict_numpy raises on one)
        with strict_numpy():
            hi, lo = float(logreg.sigmoid(1000.0)), float(logreg.sigmoid(-1000.0))
            out = logreg.sigmoid(np.array([-1e4, 1e4]))
            ls = logreg.log_sigmoid(np.array([-1e4, 1e4]))
        assert_close(hi, 1.0, what="sigmoid(1000)")
        assert_close(lo, 0.0, magnitude=1.0, what="sigmoid(-1000)")
        assert_close(out, np.array([0.0, 1.0]), what="sigmoid([-1e4, 1e4])")
        assert_close(ls, np.array([-1e4, 0.0]), what="log_sigmoid([-1e4, 1e4])")

    def test_loss_at_zero_weights_is_ln2_for_any_labels(self):
        g = rng(1)
        X = g.normal(size=(17, 4))
        for y in (np.zeros(17, dtype=np.int64), np.ones(17, dtype=np.int64), g.integers(0, 2, size=17)):
            loss, _, _ = call_leaves_inputs_unchanged(logreg.logistic_loss_and_grad, np.zeros(4), 0.0, X, y)
            assert_close(loss, 0.6931471805599453, what="logistic_loss_and_grad(0, 0, X, y).L")
            assert isinstance(loss, float)

    @pytest.mark.numerics_probe
    def test_extreme_logit_loss_is_exact(self):
        X = np.array([[1.0]])
        with strict_numpy():
            loss0, gw0, gb0 = logreg.logistic_loss_and_grad(np.array([1e4]), 0.0, X, np.array([0]))
            loss1, gw1, gb1 = logreg.logistic_loss_and_grad(np.array([1e4]), 0.0, X, np.array([1]))
        # exact values at a few ulps of 1e4 (a log of an underflowed probability would be inf)
        assert_close(loss0, 1e4, what="logistic loss at logit 1e4, label 0")
        assert_close(loss1, 0.0, magnitude=1e4, what="logistic loss at logit 1e4, label 1")
        assert_close(gw0, np.array([1.0]), what="dL/dw at logit 1e4, label 0")
        assert_close(np.array([gb0, gb1]), np.array([1.0, 0.0]), what="dL/db at logit 1e4, labels 0 and 1")
        assert_close(gw1, np.array([0.0]), magnitude=1.0, what="dL/dw at logit 1e4, label 1")

    @pytest.mark.parametrize("l2", [0.0, 0.3])
    def test_gradient_matches_finite_differences(self, l2):
        X, y = _overlapping_2class(n=25, d=3, seed=2)
        g = rng(3)
        w = g.normal(size=3)
        b = np.array([-0.4])
        _, grad_w, grad_b = logreg.logistic_loss_and_grad(w, float(b[0]), X, y, l2=l2)
        assert grad_w.shape == (3,)
        assert_grad_matches(lambda: logreg.logistic_loss_and_grad(w, float(b[0]), X, y, l2=l2)[0], w, grad_w)
        assert_grad_matches(
            lambda: logreg.logistic_loss_and_grad(w, float(b[0]), X, y, l2=l2)[0], b, np.array([grad_b])
        )

    def test_separable_data_reaches_full_training_accuracy(self):
        X, y = _separable_2d(seed=0)
        model = logreg.LogisticRegression(n_iter=2000).fit(X, y)
        assert np.mean(model.predict(X) == y) == 1.0
        pred = model.predict(X)
        assert pred.dtype == np.int64 and pred.shape == y.shape
        assert len(model.loss_history_) == 2000
        assert model.loss_history_[-1] < 0.05
        # the stub: the objective *before* each update, so the first entry is that of w = 0, b = 0: ln 2
        assert_close(model.loss_history_[0], np.log(2.0), what="loss_history_[0] (before the first update, w = 0)")

    @pytest.mark.edge_case
    def test_predict_at_exactly_the_threshold_is_one(self):
        # The stub: labels are 1[p >= threshold]. Zero features with balanced labels keep w = 0 and b = 0
        # (both gradients are exactly 0), so every probability is exactly 0.5.
        model = logreg.LogisticRegression(n_iter=3).fit(np.zeros((2, 1)), np.array([0, 1]))
        assert model.predict(np.zeros((3, 1))).tolist() == [1, 1, 1]

    def test_l2_solution_matches_newton_raphson(self):
        X, y = _overlapping_2class(n=120, d=3, seed=4)
        theta = _newton_logistic(X, y, l2=0.1)
        model = logreg.LogisticRegression(l2=0.1, n_iter=3000).fit(X, y)
        # Training threshold: the l2 = 0.1 objective is strongly convex (curvature >= 0.1), so 3000 GD
        # steps of lr 0.1 from w = 0 contract the error by at least (1 - 0.01)^3000 ~ 1e-13.
        np.testing.assert_allclose(model.coef_, theta[:-1], atol=1e-5, rtol=0)
        assert abs(model.intercept_ - theta[-1]) <= 1e-5
        np.testing.assert_allclose(model.decision_function(X), X @ theta[:-1] + theta[-1], atol=1e-4)
        np.testing.assert_allclose(
            model.predict_proba(X), 1 / (1 + np.exp(-(X @ theta[:-1] + theta[-1]))), atol=1e-5
        )

    def test_label_flip_symmetry(self):
        X, y = _overlapping_2class(n=80, d=3, seed=5)
        p = logreg.LogisticRegression(n_iter=500).fit(X, y).predict_proba(X)
        q = logreg.LogisticRegression(n_iter=500).fit(X, 1 - y).predict_proba(X)
        # GD from w = 0 (stated) on flipped labels follows -w exactly up to rounding: 500 steps each
        # add a few ulps, far below 1e-8
        np.testing.assert_allclose(q, 1.0 - p, atol=1e-8, rtol=0)

    def test_threshold_moves_the_decision(self):
        X, y = _overlapping_2class(n=60, d=3, seed=6)
        model = logreg.LogisticRegression(n_iter=300).fit(X, y)
        p = model.predict_proba(X)
        np.testing.assert_array_equal(model.predict(X, threshold=0.8), (p >= 0.8).astype(np.int64))
        np.testing.assert_array_equal(model.predict(X), (p >= 0.5).astype(np.int64))

    def test_no_intercept_keeps_it_zero(self):
        X, y = _overlapping_2class(n=60, d=3, seed=7)
        model = logreg.LogisticRegression(fit_intercept=False, n_iter=200).fit(X, y)
        assert model.intercept_ == 0.0
        assert_close(model.decision_function(X), X @ model.coef_, magnitude=float(np.abs(X).sum(axis=1).max()
                     * np.abs(model.coef_).max()), what="decision_function(X)")

    @pytest.mark.edge_case
    def test_one_sample_per_class(self):
        X = np.array([[-1.0, 0.5], [1.0, -0.5]])
        y = np.array([0, 1])
        model = logreg.LogisticRegression(n_iter=500).fit(X, y)
        np.testing.assert_array_equal(model.predict(X), y)
        p = model.predict_proba(X)
        assert np.all(np.isfinite(p)) and p[0] < 0.5 < p[1]

    @pytest.mark.edge_case
    @pytest.mark.parametrize("label", [0, 1])
    def test_all_labels_equal(self, label):
        X = rng(8).normal(size=(20, 2))
        y = np.full(20, label)
        model = logreg.LogisticRegression(n_iter=200).fit(X, y)
        p = model.predict_proba(X)
        assert np.all(np.isfinite(p))
        assert np.all(np.isfinite(model.coef_)) and np.isfinite(model.intercept_)
        toward = p if label == 1 else 1.0 - p  # probability given to the only label seen
        assert np.all(toward > 0.5) and toward.mean() > 0.9
        assert model.loss_history_[-1] < model.loss_history_[0]

    @pytest.mark.contract
    def test_predict_before_fit_raises(self):
        model = logreg.LogisticRegression()
        for method in (model.predict, model.predict_proba, model.decision_function):
            with pytest.raises(RuntimeError):
                method(np.zeros((2, 2)))

    @pytest.mark.contract
    @pytest.mark.parametrize("kwargs", [{"lr": 0.0}, {"lr": -0.1}, {"l2": -1.0}, {"n_iter": 0}],
                             ids=["lr0", "lr-", "l2", "n_iter"])
    def test_invalid_hyperparameters_raise(self, kwargs):
        with pytest.raises(ValueError):
            logreg.LogisticRegression(**kwargs)

    @pytest.mark.contract
    def test_invalid_data_raises(self):
        X, y = _overlapping_2class(n=10, d=2, seed=9)
        model = logreg.LogisticRegression(n_iter=5)
        with pytest.raises(ValueError):
            model.fit(X, np.r_[y[:-1], 2])
        with pytest.raises(ValueError):
            model.fit(X, np.r_[y[:-1], -1])
        with pytest.raises(ValueError):
            model.fit(X, y[:-1])
        with pytest.raises(ValueError):
            model.fit(X[:, 0], y)
        bad = X.copy()
        bad[2, 1] = np.nan
        with pytest.raises(ValueError):
            model.fit(bad, y)
        with pytest.raises(ValueError):
            logreg.logistic_loss_and_grad(np.zeros(2), 0.0, X, y, l2=-0.5)
        with pytest.raises(ValueError):
            logreg.logistic_loss_and_grad(np.zeros(3), 0.0, X, y)
        fitted = logreg.LogisticRegression(n_iter=5).fit(X, y)
        for threshold in (0.0, 1.0, 1.5, -0.2):
            with pytest.raises(ValueError):
                fitted.predict(X, threshold=threshold)
        with pytest.raises(ValueError):
            fitted.predict_proba(np.zeros((3, 5)))

    @pytest.mark.contract
    def test_failed_fit_leaves_fitted_state_untouched(self):
        X, y = _overlapping_2class(n=10, d=2, seed=10)
        model = logreg.LogisticRegression(n_iter=20).fit(X, y)
        coef = model.coef_.copy()
        with pytest.raises(ValueError):
            model.fit(X, np.r_[y[:-1], 3])
        np.testing.assert_array_equal(model.coef_, coef)


class TestSoftmaxRegression:
    pytestmark = pytest.mark.canon("classical/softmax_regression")

    def test_softmax_and_cross_entropy_closed_form(self):
        z = np.array([1.0, 2.0, 3.0])
        expected = np.array([0.09003057317038046, 0.24472847105479764, 0.6652409557748218])
        assert_close(call_leaves_inputs_unchanged(softreg.softmax, z), expected, magnitude=3.0, what="softmax([1, 2, 3])")
        ce = softreg.cross_entropy([[1.0, 2.0, 3.0]], [2])
        assert isinstance(ce, float)
        assert_close(ce, 0.4076059644443804, magnitude=3.0, what="cross_entropy([[1, 2, 3]], [2])")
        assert_close(softreg.log_softmax(z), np.log(expected), magnitude=3.0, what="log_softmax([1, 2, 3])")

    def test_rows_sum_to_one_and_shift_invariance(self):
        z = rng(1).normal(size=(6, 5)) * 3
        p = softreg.softmax(z)
        # a softmax of logits of size L is off by about eps * L (C8), so compare at that magnitude
        assert_close(p.sum(axis=-1), np.ones(6), magnitude=float(np.abs(z).max()), what="softmax(z).sum(-1)")
        shifted = z + rng(2).normal(size=(6, 1)) * 50
        size = float(np.abs(shifted).max())
        assert_close(softreg.softmax(shifted), p, magnitude=size, what="softmax(z + c)")
        assert_close(softreg.log_softmax(shifted), softreg.log_softmax(z), magnitude=size, what="log_softmax(z + c)")

    def test_axis_argument(self):
        z = rng(3).normal(size=(4, 3, 5))
        p0 = softreg.softmax(z, axis=0)
        size = float(np.abs(z).max())
        assert_close(p0.sum(axis=0), np.ones((3, 5)), magnitude=size, what="softmax(z, axis=0).sum(0)")
        assert_close(p0, np.moveaxis(softreg.softmax(np.moveaxis(z, 0, -1)), -1, 0), magnitude=size,
                     what="softmax(z, axis=0)")
        assert_close(softreg.log_softmax(z, axis=1), np.log(softreg.softmax(z, axis=1)), magnitude=size,
                     what="log_softmax(z, axis=1)")

    @pytest.mark.numerics_probe
    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_extreme_logits(self, dtype):
        z = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, 1e4], [1e4, 1e4, -1e4]], dtype=dtype)
        with strict_numpy():
            p = softreg.softmax(z)
            lp = softreg.log_softmax(z)
            ce = softreg.cross_entropy(z, np.array([1, 2, 0]))
        assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))
        # Logits of size 1e4 in `dtype`: exp(z - logsumexp(z)) is off by about eps * 1e4 (float32:
        # ~1e-3), which is the scale of every comparison here (C8); NaN, inf and a wrong row still fail.
        tol = {"dtype": dtype, "magnitude": 1e4}
        assert_close(p.sum(axis=-1), np.ones(3), **tol, what="softmax(extreme z).sum(-1)")
        assert_close(p, np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.5, 0.5, 0.0]]), **tol, what="softmax(extreme z)")
        assert np.all(np.isfinite(lp))
        assert_close(lp[0], np.array([0.0, -2e4, -1e4]), **tol, what="log_softmax(extreme z)[0]")
        with np.errstate(divide="ignore"):
            assert np.isneginf(np.log(p[0, 1]))  # e^-2e4 underflows to 0: what log(softmax) would have produced
        assert np.isfinite(ce)
        assert_close(ce, (2e4 + 0.0 + np.log(2.0)) / 3, **tol, what="cross_entropy(extreme z, y)")

    @pytest.mark.numerics_probe
    def test_extreme_logits_gradient_is_finite(self):
        X = np.array([[1.0, 0.0], [0.0, 1.0]])
        W = np.array([[1e4, -1e4, 0.0], [0.0, 1e4, -1e4]])
        with strict_numpy():
            loss, dW, db = softreg.softmax_loss_and_grad(W, np.zeros(3), X, np.array([1, 0]))
        assert np.isfinite(loss) and np.all(np.isfinite(dW)) and np.all(np.isfinite(db))
        assert_close(loss, 1.5e4, what="softmax_loss_and_grad(extreme W).L")

    def test_cross_entropy_matches_torch(self):
        torch = pytest.importorskip("torch")
        g = rng(4)
        logits = g.normal(size=(9, 5)) * 4
        y = g.integers(0, 5, size=9)
        ref = torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.from_numpy(y)).item()
        assert_close(softreg.cross_entropy(logits, y), ref, magnitude=float(np.abs(logits).max()),
                     what="cross_entropy(logits, y)")

    def test_cross_entropy_matches_explicit_nll(self):
        g = rng(5)
        logits = g.normal(size=(7, 4))
        y = g.integers(0, 4, size=7)
        p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        expected = -np.mean(np.log(p[np.arange(7), y]))
        assert_close(softreg.cross_entropy(logits, y), expected, magnitude=float(np.abs(logits).max()),
                     what="cross_entropy(logits, y)")

    @pytest.mark.parametrize("l2", [0.0, 0.2])
    def test_gradient_matches_finite_differences_and_closed_form(self, l2):
        g = rng(6)
        n, d, K = 15, 3, 4
        X = g.normal(size=(n, d))
        y = g.integers(0, K, size=n)
        W = g.normal(size=(d, K))
        b = g.normal(size=K)
        loss, dW, db = softreg.softmax_loss_and_grad(W, b, X, y, l2=l2)
        assert dW.shape == (d, K) and db.shape == (K,)
        assert_grad_matches(lambda: softreg.softmax_loss_and_grad(W, b, X, y, l2=l2)[0], W, dW)
        assert_grad_matches(lambda: softreg.softmax_loss_and_grad(W, b, X, y, l2=l2)[0], b, db)
        logits = X @ W + b
        P = np.exp(logits - logits.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        Y = np.eye(K)[y]
        size = float(np.abs(logits).max() * np.abs(X).max())  # the softmax error times |x|, summed over n
        assert_close(dW, X.T @ (P - Y) / n + l2 * W, magnitude=size, cond=n, what="softmax_loss_and_grad(...).dW")
        assert_close(db, (P - Y).mean(axis=0), magnitude=float(np.abs(logits).max()), cond=n,
                     what="softmax_loss_and_grad(...).db")
        expected_loss = -np.mean(np.log(P[np.arange(n), y])) + 0.5 * l2 * np.sum(W * W)
        assert_close(loss, expected_loss, magnitude=float(np.abs(logits).max() + l2 * np.sum(W * W)),
                     what="softmax_loss_and_grad(...).L")

    def test_two_classes_reduce_to_a_sigmoid(self):
        X, y = _overlapping_2class(n=80, d=3, seed=7)
        model = softreg.SoftmaxRegression(n_iter=300).fit(X, y)
        z = X @ model.coef_ + model.intercept_
        assert z.shape == (80, 2)
        sig = 1.0 / (1.0 + np.exp(-(z[:, 1] - z[:, 0])))
        assert_close(model.predict_proba(X)[:, 1], sig, magnitude=float(np.abs(z).max()),
                     what="SoftmaxRegression(K=2).predict_proba(X)[:, 1]")

    def test_three_blobs_training_accuracy(self):
        X, y = _three_blobs(n=300, seed=0)
        model = softreg.SoftmaxRegression(n_iter=1000).fit(X, y)
        pred = model.predict(X)
        assert pred.dtype == np.int64 and pred.shape == (300,)
        assert np.mean(pred == y) >= 0.95
        assert model.coef_.shape == (2, 3) and model.intercept_.shape == (3,)
        proba = call_leaves_inputs_unchanged(model.predict_proba, X)
        assert_close(proba.sum(axis=1), np.ones(300), magnitude=float(np.abs(X @ model.coef_).max() + 1.0),
                     what="predict_proba(X).sum(1)")
        np.testing.assert_array_equal(pred, proba.argmax(axis=1))

    @pytest.mark.edge_case
    def test_class_absent_from_labels(self):
        X, y = _three_blobs(n=150, seed=1)
        keep = y != 1
        X, y = X[keep], y[keep]
        model = softreg.SoftmaxRegression(n_classes=4, n_iter=500).fit(X, y)
        proba = model.predict_proba(X)
        assert proba.shape == (X.shape[0], 4)
        assert np.all(np.isfinite(proba)) and np.all(np.isfinite(model.coef_))
        assert np.all(proba[:, 1] < 0.1) and np.all(proba[:, 3] < 0.1)  # started at 1/4
        assert set(np.unique(model.predict(X))) <= {0, 2}

    def test_no_intercept_keeps_it_zero(self):
        X, y = _three_blobs(n=60, seed=2)
        model = softreg.SoftmaxRegression(fit_intercept=False, n_iter=100).fit(X, y)
        np.testing.assert_array_equal(model.intercept_, np.zeros(3))

    @pytest.mark.contract
    def test_predict_before_fit_raises(self):
        model = softreg.SoftmaxRegression()
        with pytest.raises(RuntimeError):
            model.predict(np.zeros((2, 2)))
        with pytest.raises(RuntimeError):
            model.predict_proba(np.zeros((2, 2)))

    @pytest.mark.contract
    @pytest.mark.parametrize("kwargs", [{"lr": 0.0}, {"l2": -1.0}, {"n_iter": 0}, {"n_classes": 0}],
                             ids=["lr", "l2", "n_iter", "n_classes"])
    def test_invalid_hyperparameters_raise(self, kwargs):
        with pytest.raises(ValueError):
            softreg.SoftmaxRegression(**kwargs)

    @pytest.mark.contract
    def test_invalid_labels_and_shapes_raise(self):
        X, y = _three_blobs(n=30, seed=3)
        with pytest.raises(ValueError):
            softreg.SoftmaxRegression(n_iter=2).fit(X, np.r_[y[:-1], -1])
        with pytest.raises(ValueError):
            softreg.SoftmaxRegression(n_iter=2).fit(X, np.r_[y[:-1], 0.5])
        with pytest.raises(ValueError):
            softreg.SoftmaxRegression(n_classes=3, n_iter=2).fit(X, np.r_[y[:-1], 3])
        with pytest.raises(ValueError):
            softreg.SoftmaxRegression(n_iter=2).fit(X, y[:-1])
        bad = X.copy()
        bad[0, 0] = np.inf
        with pytest.raises(ValueError):
            softreg.SoftmaxRegression(n_iter=2).fit(bad, y)
        with pytest.raises(ValueError):
            softreg.cross_entropy(np.zeros((2, 3)), np.array([0, 3]))
        with pytest.raises(ValueError):
            softreg.cross_entropy(np.zeros((2, 3)), np.array([0.0, 1.5]))
        with pytest.raises(ValueError):
            softreg.cross_entropy(np.zeros(3), np.array([0]))
        W, b = np.zeros((2, 3)), np.zeros(3)
        with pytest.raises(ValueError):
            softreg.softmax_loss_and_grad(np.zeros((5, 3)), b, X, y)
        with pytest.raises(ValueError):
            softreg.softmax_loss_and_grad(W, np.zeros(4), X, y)
        with pytest.raises(ValueError):
            softreg.softmax_loss_and_grad(W, b, X, y, l2=-1.0)
        fitted = softreg.SoftmaxRegression(n_iter=2).fit(X, y)
        with pytest.raises(ValueError):
            fitted.predict(np.zeros((2, 7)))
