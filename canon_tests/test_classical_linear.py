"""Reference tests for canon #1, linear regression (normal equations + GD)."""

from __future__ import annotations

import numpy as np
import pytest

from canon_refs.classical import linear_regression as lr_mod
from pytest_mlcanon.testing import assert_grad_matches, rng

pytestmark = pytest.mark.canon("classical/linear_regression")


def _noisy_data(n: int = 60, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    g = rng(seed)
    X = g.normal(size=(n, d))
    y = X @ g.normal(size=d) + 0.7 + 0.3 * g.normal(size=n)
    return X, y


def _lstsq_with_ones(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    A = np.hstack([X, np.ones((X.shape[0], 1))])
    return np.linalg.lstsq(A, y, rcond=None)[0]


def test_noise_free_recovers_weights_and_intercept():
    g = rng(1)
    X = g.normal(size=(50, 3))
    w_true, b_true = np.array([1.5, -2.0, 0.25]), -0.75
    y = X @ w_true + b_true
    w, b = lr_mod.normal_equations(X, y)
    np.testing.assert_allclose(w, w_true, atol=1e-10, rtol=0)
    assert abs(b - b_true) <= 1e-10
    model = lr_mod.LinearRegression().fit(X, y)
    np.testing.assert_allclose(model.coef_, w_true, atol=1e-10, rtol=0)
    assert abs(model.intercept_ - b_true) <= 1e-10
    np.testing.assert_allclose(model.predict(X), y, atol=1e-10, rtol=0)


def test_noisy_ols_equals_lstsq_on_augmented_design():
    X, y = _noisy_data()
    sol = _lstsq_with_ones(X, y)
    w, b = lr_mod.normal_equations(X, y)
    np.testing.assert_allclose(w, sol[:-1], atol=1e-10, rtol=0)
    assert abs(b - sol[-1]) <= 1e-10
    assert isinstance(b, float)
    assert w.shape == (3,) and w.dtype == np.float64


def test_ridge_equals_closed_form_with_unpenalised_intercept():
    X, y = _noisy_data(n=40, d=4, seed=2)
    n, d = X.shape
    l2 = 0.3
    x_mean, y_mean = X.mean(axis=0), y.mean()
    Xc, yc = X - x_mean, y - y_mean
    w_expected = np.linalg.solve(Xc.T @ Xc + n * l2 * np.eye(d), Xc.T @ yc)
    b_expected = y_mean - x_mean @ w_expected
    w, b = lr_mod.normal_equations(X, y, l2=l2)
    np.testing.assert_allclose(w, w_expected, atol=1e-10, rtol=0)
    assert abs(b - b_expected) <= 1e-10
    model = lr_mod.LinearRegression(l2=l2).fit(X, y)
    np.testing.assert_allclose(model.coef_, w_expected, atol=1e-10, rtol=0)
    # the ridge solution is a stationary point of the objective (gradient zero, intercept included)
    _, grad_w, grad_b = lr_mod.mse_loss_and_grad(w, b, X, y, l2=l2)
    np.testing.assert_allclose(grad_w, 0.0, atol=1e-10)
    assert abs(grad_b) <= 1e-10


def test_ridge_without_intercept_equals_closed_form():
    X, y = _noisy_data(n=40, d=4, seed=3)
    n, d = X.shape
    l2 = 0.5
    w_expected = np.linalg.solve(X.T @ X + n * l2 * np.eye(d), X.T @ y)
    w, b = lr_mod.normal_equations(X, y, l2=l2, fit_intercept=False)
    np.testing.assert_allclose(w, w_expected, atol=1e-10, rtol=0)
    assert b == 0.0


def test_ridge_matches_sklearn_when_installed():
    linear_model = pytest.importorskip("sklearn.linear_model")
    X, y = _noisy_data(n=40, d=4, seed=2)
    l2 = 0.3
    ref = linear_model.Ridge(alpha=X.shape[0] * l2).fit(X, y)
    w, b = lr_mod.normal_equations(X, y, l2=l2)
    np.testing.assert_allclose(w, ref.coef_, atol=1e-10, rtol=0)
    assert abs(b - ref.intercept_) <= 1e-10


@pytest.mark.parametrize("l2", [0.0, 0.05])
def test_gradient_descent_matches_normal_equations(l2):
    X, y = _noisy_data(n=80, d=3, seed=4)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    gd = lr_mod.LinearRegression(method="gd", lr=0.1, n_iter=5000, l2=l2).fit(X, y)
    ne = lr_mod.LinearRegression(method="normal", l2=l2).fit(X, y)
    np.testing.assert_allclose(gd.coef_, ne.coef_, atol=1e-6, rtol=0)
    assert abs(gd.intercept_ - ne.intercept_) <= 1e-6
    hist = np.asarray(gd.loss_history_)
    assert hist.shape == (5000,)
    assert np.all(np.diff(hist) <= 1e-12 * np.abs(hist[:-1]))
    assert hist[-1] < hist[0]
    assert ne.loss_history_ == []


def test_gradient_descent_without_intercept_keeps_it_zero():
    X, y = _noisy_data(n=50, d=2, seed=5)
    model = lr_mod.LinearRegression(method="gd", fit_intercept=False, n_iter=2000).fit(X, y)
    assert model.intercept_ == 0.0
    w_expected = np.linalg.lstsq(X, y, rcond=None)[0]
    np.testing.assert_allclose(model.coef_, w_expected, atol=1e-6)


def test_loss_value_closed_form():
    X = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    y = np.array([1.0, 0.0, 2.0])
    w, b = np.array([0.5, -1.0]), 0.25
    r = X @ w + b - y
    expected = (r @ r) / (2 * 3) + 0.5 * 0.2 * (w @ w)
    loss, _, _ = lr_mod.mse_loss_and_grad(w, b, X, y, l2=0.2)
    assert abs(loss - expected) <= 1e-12
    assert isinstance(loss, float)


@pytest.mark.parametrize("l2", [0.0, 0.7])
def test_mse_gradient_matches_finite_differences(l2):
    X, y = _noisy_data(n=20, d=4, seed=6)
    g = rng(7)
    w = g.normal(size=4)
    b = np.array([0.3])
    _, grad_w, grad_b = lr_mod.mse_loss_and_grad(w, float(b[0]), X, y, l2=l2)
    assert grad_w.shape == (4,)
    assert_grad_matches(lambda: lr_mod.mse_loss_and_grad(w, float(b[0]), X, y, l2=l2)[0], w, grad_w)
    assert_grad_matches(
        lambda: lr_mod.mse_loss_and_grad(w, float(b[0]), X, y, l2=l2)[0], b, np.array([grad_b])
    )


@pytest.mark.edge_case
def test_rank_deficient_duplicated_column_matches_lstsq_predictions():
    for seed in range(5):
        g = rng(seed)
        base = g.normal(size=(30, 3))
        X = np.hstack([base, base[:, :1]])
        y = base @ np.array([1.0, -1.0, 2.0]) + 0.1 * g.normal(size=30)
        model = lr_mod.LinearRegression().fit(X, y)
        assert np.all(np.isfinite(model.coef_))
        sol = _lstsq_with_ones(X, y)
        expected = np.hstack([X, np.ones((30, 1))]) @ sol
        np.testing.assert_allclose(model.predict(X), expected, atol=1e-8, rtol=0)


@pytest.mark.edge_case
def test_single_sample_single_feature_without_intercept():
    model = lr_mod.LinearRegression(fit_intercept=False).fit(np.array([[2.0]]), np.array([3.0]))
    np.testing.assert_allclose(model.coef_, [1.5], atol=1e-12, rtol=0)
    assert model.intercept_ == 0.0
    np.testing.assert_allclose(model.predict(np.array([[4.0]])), [6.0], atol=1e-12, rtol=0)


@pytest.mark.edge_case
def test_fit_intercept_false_leaves_intercept_zero():
    X, y = _noisy_data(seed=8)
    model = lr_mod.LinearRegression(fit_intercept=False).fit(X, y + 10.0)
    assert model.intercept_ == 0.0
    np.testing.assert_allclose(model.coef_, np.linalg.lstsq(X, y + 10.0, rcond=None)[0], atol=1e-10)


@pytest.mark.numerics_probe
def test_badly_scaled_columns_match_lstsq():
    g = rng(9)
    n = 50
    X = g.normal(size=(n, 3)) * np.array([1e-3, 1.0, 1e3])
    y = X @ np.array([2e3, -1.0, 3e-3]) + 0.5 + g.normal(size=n)
    sol = _lstsq_with_ones(X, y)
    model = lr_mod.LinearRegression().fit(X, y)
    np.testing.assert_allclose(model.coef_, sol[:-1], rtol=1e-6, atol=0)
    np.testing.assert_allclose(model.intercept_, sol[-1], rtol=1e-6, atol=0)
    np.testing.assert_allclose(model.predict(X), np.hstack([X, np.ones((n, 1))]) @ sol, rtol=1e-6, atol=0)


def test_predict_before_fit_raises_runtime_error():
    with pytest.raises(RuntimeError):
        lr_mod.LinearRegression().predict(np.zeros((2, 3)))


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"l2": -0.1}, "l2"),
        ({"lr": 0.0}, "lr"),
        ({"lr": -1.0}, "lr"),
        ({"n_iter": 0}, "n_iter"),
        ({"method": "sgd"}, "method"),
    ],
)
def test_invalid_hyperparameters_raise_in_init(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        lr_mod.LinearRegression(**kwargs)


def test_invalid_data_raises():
    X, y = _noisy_data(n=10, d=2)
    with pytest.raises(ValueError, match="X"):
        lr_mod.normal_equations(X[:, 0], y)
    with pytest.raises(ValueError, match="y"):
        lr_mod.normal_equations(X, y[:, None])
    with pytest.raises(ValueError, match="y"):
        lr_mod.normal_equations(X, y[:-1])
    bad_X = X.copy()
    bad_X[0, 0] = np.nan
    with pytest.raises(ValueError, match="X"):
        lr_mod.normal_equations(bad_X, y)
    bad_y = y.copy()
    bad_y[1] = np.inf
    with pytest.raises(ValueError, match="y"):
        lr_mod.normal_equations(X, bad_y)
    with pytest.raises(ValueError, match="l2"):
        lr_mod.normal_equations(X, y, l2=-1.0)
    with pytest.raises(ValueError, match="w"):
        lr_mod.mse_loss_and_grad(np.zeros(3), 0.0, X, y)
    with pytest.raises(ValueError, match="l2"):
        lr_mod.mse_loss_and_grad(np.zeros(2), 0.0, X, y, l2=-1.0)


def test_predict_with_wrong_width_raises():
    X, y = _noisy_data(n=10, d=2)
    model = lr_mod.LinearRegression().fit(X, y)
    with pytest.raises(ValueError, match="X"):
        model.predict(np.zeros((3, 5)))


def test_failed_fit_leaves_fitted_state_untouched():
    X, y = _noisy_data(n=10, d=2)
    model = lr_mod.LinearRegression().fit(X, y)
    coef, intercept = model.coef_.copy(), model.intercept_
    X_before = X.copy()
    with pytest.raises(ValueError, match="y"):
        model.fit(X, y[:-1])
    np.testing.assert_array_equal(model.coef_, coef)
    assert model.intercept_ == intercept
    np.testing.assert_array_equal(X, X_before)
