"""Reference tests for canon #1, linear regression (normal equations + GD)."""

from __future__ import annotations

import numpy as np
import pytest

from canon_refs.classical import linear_regression as lr_mod
from pytest_mlcanon.testing import (
    assert_close,
    assert_grad_matches,
    call_leaves_inputs_unchanged,
    optional_module,
    rng,
)

pytestmark = pytest.mark.canon("classical/linear_regression")


def _noisy_data(n: int = 60, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    g = rng(seed)
    X = g.normal(size=(n, d))
    y = X @ g.normal(size=d) + 0.7 + 0.3 * g.normal(size=n)
    return X, y


def _lstsq_with_ones(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    A = np.hstack([X, np.ones((X.shape[0], 1))])
    return np.linalg.lstsq(A, y, rcond=None)[0]


def _gram_cond(X: np.ndarray, l2: float = 0.0, centre: bool = True) -> float:
    """The condition number of the (ridge) normal equations: a solve, by LU, QR or SVD, is off by a
    few ulps of the solution times this (forming the Gram matrix squares cond(X))."""
    Xc = X - X.mean(axis=0) if centre else X
    return float(np.linalg.cond(Xc.T @ Xc + X.shape[0] * l2 * np.eye(X.shape[1])))


def test_noise_free_recovers_weights_and_intercept():
    g = rng(1)
    X = g.normal(size=(50, 3))
    w_true, b_true = np.array([1.5, -2.0, 0.25]), -0.75
    y = X @ w_true + b_true
    w, b = call_leaves_inputs_unchanged(lr_mod.normal_equations, X, y)
    cond = _gram_cond(X)
    assert_close(w, w_true, magnitude=2.0, cond=cond, what="normal_equations(X, y).w")
    assert_close(b, b_true, magnitude=2.0, cond=cond, what="normal_equations(X, y).b")
    model = call_leaves_inputs_unchanged(lr_mod.LinearRegression().fit, X, y)
    assert_close(model.coef_, w_true, magnitude=2.0, cond=cond, what="LinearRegression().fit(X, y).coef_")
    assert_close(model.intercept_, b_true, magnitude=2.0, cond=cond, what="LinearRegression().fit(X, y).intercept_")
    pred = call_leaves_inputs_unchanged(model.predict, X)
    assert_close(pred, y, magnitude=float(np.abs(y).max()), cond=cond, what="LinearRegression.predict(X)")


def test_noisy_ols_equals_lstsq_on_augmented_design():
    X, y = _noisy_data()
    sol = _lstsq_with_ones(X, y)
    w, b = lr_mod.normal_equations(X, y)
    cond = _gram_cond(X)
    assert_close(w, sol[:-1], magnitude=float(np.abs(sol).max()), cond=cond, what="normal_equations(X, y).w")
    assert_close(b, sol[-1], magnitude=float(np.abs(sol).max()), cond=cond, what="normal_equations(X, y).b")
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
    cond, size = _gram_cond(X, l2), float(np.abs(w_expected).max() + abs(b_expected))
    assert_close(w, w_expected, magnitude=size, cond=cond, what="normal_equations(X, y, l2).w")
    assert_close(b, b_expected, magnitude=size, cond=cond, what="normal_equations(X, y, l2).b")
    model = lr_mod.LinearRegression(l2=l2).fit(X, y)
    assert_close(model.coef_, w_expected, magnitude=size, cond=cond, what="LinearRegression(l2).coef_")
    # the ridge solution is a stationary point of the objective (gradient zero, intercept included);
    # the gradient is a mean of residual * feature products of size |y| * |X|
    _, grad_w, grad_b = lr_mod.mse_loss_and_grad(w, b, X, y, l2=l2)
    scale = float(np.abs(y).max() * np.abs(X).max())
    assert_close(grad_w, np.zeros(d), magnitude=scale, cond=cond, what="mse_loss_and_grad(...).dL/dw at the optimum")
    assert_close(grad_b, 0.0, magnitude=scale, cond=cond, what="mse_loss_and_grad(...).dL/db at the optimum")


def test_ridge_without_intercept_equals_closed_form():
    X, y = _noisy_data(n=40, d=4, seed=3)
    n, d = X.shape
    l2 = 0.5
    w_expected = np.linalg.solve(X.T @ X + n * l2 * np.eye(d), X.T @ y)
    w, b = lr_mod.normal_equations(X, y, l2=l2, fit_intercept=False)
    assert_close(w, w_expected, magnitude=float(np.abs(w_expected).max()), cond=_gram_cond(X, l2, centre=False),
                 what="normal_equations(X, y, l2, fit_intercept=False).w")
    assert b == 0.0


def test_ridge_matches_sklearn_when_installed():
    linear_model = optional_module("sklearn.linear_model")
    X, y = _noisy_data(n=40, d=4, seed=2)
    l2 = 0.3
    ref = linear_model.Ridge(alpha=X.shape[0] * l2).fit(X, y)
    w, b = lr_mod.normal_equations(X, y, l2=l2)
    size = float(np.abs(ref.coef_).max() + abs(ref.intercept_))
    assert_close(w, ref.coef_, magnitude=size, cond=_gram_cond(X, l2), what="normal_equations(X, y, l2).w")
    assert_close(b, ref.intercept_, magnitude=size, cond=_gram_cond(X, l2), what="normal_equations(X, y, l2).b")


@pytest.mark.parametrize("l2", [0.0, 0.05])
def test_gradient_descent_matches_normal_equations(l2):
    X, y = _noisy_data(n=80, d=3, seed=4)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    gd = lr_mod.LinearRegression(method="gd", lr=0.1, n_iter=5000, l2=l2).fit(X, y)
    ne = lr_mod.LinearRegression(method="normal", l2=l2).fit(X, y)
    # Training threshold: on standardised X the Hessian's eigenvalues lie in [0.5, 1.5], so 5000 steps
    # of lr 0.1 contract the error by (1 - 0.05)^5000 < 1e-100 from any start: 1e-6 is all slack.
    np.testing.assert_allclose(gd.coef_, ne.coef_, atol=1e-6, rtol=0)
    assert abs(gd.intercept_ - ne.intercept_) <= 1e-6
    hist = np.asarray(gd.loss_history_)
    assert hist.shape == (5000,)
    assert np.all(np.diff(hist) <= 1e-12 * np.abs(hist[:-1]))
    assert hist[-1] < hist[0]
    assert ne.loss_history_ == []
    # the stub: measured before each update from w = 0, so the first entry is the objective at w = 0 with the
    # intercept's start, b = 0 (mean(y^2) / 2) or b = mean(y) when GD runs on centred data (var(y) / 2)
    starts = {"b = 0": 0.5 * float(np.mean(y**2)), "b = mean(y)": 0.5 * float(np.var(y))}
    first = min(starts, key=lambda start: abs(hist[0] - starts[start]))
    assert_close(hist[0], starts[first], what=f"loss_history_[0] (before the first update, w = 0, {first})")


def test_gradient_descent_without_intercept_keeps_it_zero():
    X, y = _noisy_data(n=50, d=2, seed=5)
    model = lr_mod.LinearRegression(method="gd", fit_intercept=False, n_iter=2000).fit(X, y)
    assert model.intercept_ == 0.0
    w_expected = np.linalg.lstsq(X, y, rcond=None)[0]
    # training threshold: 2000 steps of lr 0.1 on a Hessian with eigenvalues near 1 converge far below 1e-6
    np.testing.assert_allclose(model.coef_, w_expected, atol=1e-6)


def test_loss_value_closed_form():
    X = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    y = np.array([1.0, 0.0, 2.0])
    w, b = np.array([0.5, -1.0]), 0.25
    r = X @ w + b - y
    expected = (r @ r) / (2 * 3) + 0.5 * 0.2 * (w @ w)
    loss, _, _ = lr_mod.mse_loss_and_grad(w, b, X, y, l2=0.2)
    assert_close(loss, expected, magnitude=2.0, what="mse_loss_and_grad(...).L")  # residuals of size <= 2
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
        # Predictions are unique even though w is not. A min-norm solve is off by ~eps * cond of the
        # non-singular part (~10); inv() or solve() of the numerically singular Gram matrix (cond ~1e16)
        # either raises or returns weights of size ~1e15 whose predictions are far off. 1e-8 sits between.
        np.testing.assert_allclose(model.predict(X), expected, atol=1e-8, rtol=0)


@pytest.mark.edge_case
def test_single_sample_single_feature_without_intercept():
    model = lr_mod.LinearRegression(fit_intercept=False).fit(np.array([[2.0]]), np.array([3.0]))
    assert_close(model.coef_, np.array([1.5]), what="LinearRegression(fit_intercept=False).coef_")
    assert model.intercept_ == 0.0
    assert_close(model.predict(np.array([[4.0]])), np.array([6.0]), what="LinearRegression.predict")


@pytest.mark.edge_case
def test_fit_intercept_false_leaves_intercept_zero():
    X, y = _noisy_data(seed=8)
    model = lr_mod.LinearRegression(fit_intercept=False).fit(X, y + 10.0)
    assert model.intercept_ == 0.0
    sol = np.linalg.lstsq(X, y + 10.0, rcond=None)[0]
    assert_close(model.coef_, sol, magnitude=float(np.abs(sol).max()), cond=_gram_cond(X, centre=False),
                 what="LinearRegression(fit_intercept=False).coef_")


@pytest.mark.numerics_probe
def test_badly_scaled_columns_match_lstsq():
    g = rng(9)
    n = 50
    X = g.normal(size=(n, 3)) * np.array([1e-3, 1.0, 1e3])
    y = X @ np.array([2e3, -1.0, 3e-3]) + 0.5 + g.normal(size=n)
    sol = _lstsq_with_ones(X, y)
    model = lr_mod.LinearRegression().fit(X, y)
    # cond(Gram) is 1e12 here, but only through column scaling, which LU with partial pivoting, QR and
    # SVD solves all undo to ~1e-12 relative; a method that squares a *true* ill-conditioning does not.
    np.testing.assert_allclose(model.coef_, sol[:-1], rtol=1e-6, atol=0)
    np.testing.assert_allclose(model.intercept_, sol[-1], rtol=1e-6, atol=0)
    np.testing.assert_allclose(model.predict(X), np.hstack([X, np.ones((n, 1))]) @ sol, rtol=1e-6, atol=0)




# ---- input checks (contract: the exception type only) -------------------------------------------


@pytest.mark.contract
def test_predict_before_fit_raises_runtime_error():
    with pytest.raises(RuntimeError):
        lr_mod.LinearRegression().predict(np.zeros((2, 3)))


@pytest.mark.contract
@pytest.mark.parametrize(
    "kwargs", [{"l2": -0.1}, {"lr": 0.0}, {"lr": -1.0}, {"n_iter": 0}, {"method": "sgd"}],
    ids=["l2", "lr0", "lr-1", "n_iter", "method"],
)
def test_invalid_hyperparameters_raise_in_init(kwargs):
    with pytest.raises(ValueError):
        lr_mod.LinearRegression(**kwargs)


def _bad_designs() -> list[tuple[str, np.ndarray, np.ndarray]]:
    X, y = _noisy_data(n=10, d=2)
    bad_X, bad_y = X.copy(), y.copy()
    bad_X[0, 0] = np.nan
    bad_y[1] = np.inf
    return [("X 1-D", X[:, 0], y), ("y 2-D", X, y[:, None]), ("y short", X, y[:-1]), ("X nan", bad_X, y),
            ("y inf", X, bad_y)]


@pytest.mark.contract
@pytest.mark.parametrize(("X", "y"), [(X, y) for _, X, y in _bad_designs()], ids=[n for n, _, _ in _bad_designs()])
def test_invalid_data_raises(X, y):
    with pytest.raises(ValueError):
        lr_mod.normal_equations(X, y)


@pytest.mark.contract
def test_invalid_loss_arguments_raise():
    X, y = _noisy_data(n=10, d=2)
    with pytest.raises(ValueError):
        lr_mod.normal_equations(X, y, l2=-1.0)
    with pytest.raises(ValueError):
        lr_mod.mse_loss_and_grad(np.zeros(3), 0.0, X, y)
    with pytest.raises(ValueError):
        lr_mod.mse_loss_and_grad(np.zeros(2), 0.0, X, y, l2=-1.0)


@pytest.mark.contract
def test_predict_with_wrong_width_raises():
    X, y = _noisy_data(n=10, d=2)
    model = lr_mod.LinearRegression().fit(X, y)
    with pytest.raises(ValueError):
        model.predict(np.zeros((3, 5)))


@pytest.mark.contract
def test_failed_fit_leaves_fitted_state_untouched():
    X, y = _noisy_data(n=10, d=2)
    model = lr_mod.LinearRegression().fit(X, y)
    coef, intercept = model.coef_.copy(), model.intercept_
    with pytest.raises(ValueError):
        model.fit(X, y[:-1])
    np.testing.assert_array_equal(model.coef_, coef)
    assert model.intercept_ == intercept
