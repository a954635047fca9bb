"""Reference tests for canon #8, the Gaussian mixture model fitted by EM."""

from __future__ import annotations

import math

import numpy as np
import pytest

from canon_refs.classical import gmm
from pytest_mlcanon.testing import (
    assert_close,
    call_leaves_inputs_unchanged,
    optional_module,
    rng,
    strict_numpy,
)

pytestmark = pytest.mark.canon("classical/gmm")

TRUE_MEANS = np.array([[-2.0, 0.0], [3.0, 1.0]])
TRUE_WEIGHTS = np.array([0.35, 0.65])


def _two_gaussians(n: int = 600, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two well-separated 2-D Gaussians with different shapes; returns ``(X, true component)``.

    The component sizes are fixed (210 and 390 of 600) and the spreads small (standard deviations
    0.2 to 0.45), so the thresholds below sit about 4 standard errors from the true values (C8).
    """
    g = rng(seed)
    z = g.permutation(np.repeat([0, 1], [round(n * TRUE_WEIGHTS[0]), n - round(n * TRUE_WEIGHTS[0])]))
    chol = 0.5 * np.array([[[0.8, 0.0], [0.3, 0.5]], [[0.6, 0.0], [-0.2, 0.9]]])
    noise = g.normal(size=(n, 2))
    X = TRUE_MEANS[z] + np.einsum("nij,nj->ni", chol[z], noise)
    return X, z


def _scipy_free_logpdf(X: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """Textbook density with inv/det, fine for the well-conditioned cases used here."""
    d = mean.size
    diff = X - mean
    maha = np.einsum("ni,ij,nj->n", diff, np.linalg.inv(cov), diff)
    return -0.5 * (d * np.log(2 * np.pi) + np.log(np.linalg.det(cov)) + maha)


def _random_params(K: int = 3, d: int = 2, seed: int = 0):
    g = rng(seed)
    weights = g.random(K) + 0.2
    weights /= weights.sum()
    means = g.normal(size=(K, d)) * 2
    A = g.normal(size=(K, d, d))
    covs = A @ A.transpose(0, 2, 1) + 0.5 * np.eye(d)
    return weights, means, covs


def test_standard_normal_log_density_at_zero():
    out = gmm.log_gaussian_pdf(np.array([[0.0]]), np.array([0.0]), np.array([[1.0]]))
    assert out.shape == (1,)
    assert_close(out, np.array([-0.9189385332046727]), what="log_gaussian_pdf(0 | 0, 1)")
    assert_close(out, np.array([-0.5 * math.log(2 * math.pi)]), what="log_gaussian_pdf(0 | 0, 1)")


def test_log_density_matches_textbook_formula():
    g = rng(1)
    X = g.normal(size=(20, 3))
    A = g.normal(size=(3, 3))
    cov = A @ A.T + 0.3 * np.eye(3)
    mean = g.normal(size=3)
    got = call_leaves_inputs_unchanged(gmm.log_gaussian_pdf, X, mean, cov)
    expected = _scipy_free_logpdf(X, mean, cov)
    # a Cholesky solve and inv/det agree to a few ulps of the Mahalanobis term times cond(cov)
    assert_close(got, expected, magnitude=float(np.abs(expected).max()), cond=np.linalg.cond(cov),
                 what="log_gaussian_pdf(X, mean, cov)")


def test_log_density_matches_scipy_when_installed():
    stats = optional_module("scipy.stats")
    g = rng(2)
    X = g.normal(size=(15, 4))
    A = g.normal(size=(4, 4))
    cov = A @ A.T + 0.2 * np.eye(4)
    mean = g.normal(size=4)
    ref = stats.multivariate_normal(mean=mean, cov=cov).logpdf(X)
    assert_close(gmm.log_gaussian_pdf(X, mean, cov), ref, magnitude=float(np.abs(ref).max()), cond=np.linalg.cond(cov),
                 what="log_gaussian_pdf(X, mean, cov)")


@pytest.mark.numerics_probe
def test_log_density_of_a_tiny_covariance_in_high_dimension():
    d = 150
    cov = 1e-3 * np.eye(d)  # det = 1e-450 underflows to 0.0
    out = gmm.log_gaussian_pdf(np.zeros((1, d)), np.zeros(d), cov)
    expected = -0.5 * (d * math.log(2 * math.pi) + d * math.log(1e-3))
    assert np.isfinite(out[0])
    assert_close(out, np.array([expected]), cond=d, what="log_gaussian_pdf(0 | 0, 1e-3 I_150)")


def test_e_step_responsibilities_and_log_likelihood():
    weights, means, covs = _random_params()
    X = rng(3).normal(size=(30, 2)) * 2
    resp, ll = call_leaves_inputs_unchanged(gmm.e_step, X, weights, means, covs)
    assert resp.shape == (30, 3)
    assert_close(resp.sum(axis=1), np.ones(30), what="e_step(...).resp.sum(1)")
    log_dens = np.stack([np.log(w) + _scipy_free_logpdf(X, m, c) for w, m, c in zip(weights, means, covs)], axis=1)
    dens = np.exp(log_dens)
    # a responsibility is a softmax of log densities of size L: off by about eps * L (C8)
    size, cond = float(np.abs(log_dens).max()), float(max(np.linalg.cond(c) for c in covs))
    assert_close(resp, dens / dens.sum(axis=1, keepdims=True), magnitude=size, cond=cond, what="e_step(...).resp")
    assert isinstance(ll, float)
    assert_close(ll, np.mean(np.log(dens.sum(axis=1))), magnitude=size, cond=cond, what="e_step(...).log_likelihood")


def test_m_step_closed_form():
    g = rng(4)
    X = g.normal(size=(40, 2))
    resp = g.random((40, 3))
    resp /= resp.sum(axis=1, keepdims=True)
    weights, means, covs = call_leaves_inputs_unchanged(gmm.m_step, X, resp, reg_covar=1e-3)
    assert weights.shape == (3,) and means.shape == (3, 2) and covs.shape == (3, 2, 2)
    Nk = resp.sum(axis=0)
    # weighted sums over n = 40 points of size <= 3 (squares <= 9); a 10-eps guard on N_k is invisible
    assert_close(weights, Nk / 40, cond=40, what="m_step(...).weights")
    for k in range(3):
        mu = resp[:, k] @ X / Nk[k]
        diff = X - mu
        cov = (resp[:, k, None] * diff).T @ diff / Nk[k] + 1e-3 * np.eye(2)
        assert_close(means[k], mu, magnitude=3.0, cond=40, what=f"m_step(...).means[{k}]")
        assert_close(covs[k], cov, magnitude=9.0, cond=40, what=f"m_step(...).covs[{k}]")


def test_log_likelihood_history_is_non_decreasing():
    X, _ = _two_gaussians(seed=5)
    for init in ("kmeans", "random"):
        model = gmm.GaussianMixture(2, n_iter=200, tol=0.0, init=init).fit(X)
        hist = np.asarray(model.log_likelihood_history_)
        # tol = 0: "a change below tol" never happens, so all 200 E-steps run; a `<=` reading of the rule
        # may stop at an exact fixed point (two equal entries), which is accepted too
        if model.converged_:
            assert hist[-1] == hist[-2], f"converged_ with tol = 0 but the last change is {hist[-1] - hist[-2]}"
        else:
            assert hist.size == 200
        # EM never lowers the likelihood; at a fixed point successive values differ by rounding only
        # (a few ulps of a mean log-likelihood of size ~3), far below the 1e-9 slack
        assert np.all(np.diff(hist) >= -1e-9)
        model3 = gmm.GaussianMixture(3, n_iter=100, tol=1e-10, init=init, seed=1).fit(X)
        assert np.all(np.diff(model3.log_likelihood_history_) >= -1e-9)
        proba = model3.predict_proba(X)
        assert_close(proba.sum(axis=1), np.ones(X.shape[0]), what="predict_proba(X).sum(1)")


def test_two_separated_gaussians_are_recovered():
    X, z = _two_gaussians(n=600, seed=0)
    model = gmm.GaussianMixture(2).fit(X)
    assert model.converged_
    order = np.argsort(model.means_[:, 0])
    np.testing.assert_allclose(model.means_[order], TRUE_MEANS, atol=0.1)
    np.testing.assert_allclose(model.weights_[order], TRUE_WEIGHTS, atol=0.05)
    assert abs(model.weights_.sum() - 1.0) <= 1e-12
    pred = model.predict(X)
    assert pred.dtype == np.int64 and pred.shape == (600,)
    assert np.mean(order[z] == pred) >= 0.99
    assert model.covariances_.shape == (2, 2, 2)
    # converged at tol 1e-6: one more M-step (or none) moves the mean log-likelihood by < 1e-4
    assert abs(model.score(X) - model.log_likelihood_history_[-1]) <= 1e-4


def test_random_init_also_recovers_the_gaussians():
    # Any random start may land in a local optimum for one seed; the best of three restarts (by
    # likelihood, as sklearn's n_init does) must find the two Gaussians.
    X, _ = _two_gaussians(n=600, seed=1)
    fits = [gmm.GaussianMixture(2, init="random", seed=seed).fit(X) for seed in (3, 4, 5)]
    model = max(fits, key=lambda m: m.score(X))
    order = np.argsort(model.means_[:, 0])
    np.testing.assert_allclose(model.means_[order], TRUE_MEANS, atol=0.1)
    np.testing.assert_allclose(model.weights_[order], TRUE_WEIGHTS, atol=0.05)


def test_single_component_is_the_sample_mean_and_covariance():
    X, _ = _two_gaussians(n=200, seed=6)
    reg = 1e-4
    model = call_leaves_inputs_unchanged(gmm.GaussianMixture(1, reg_covar=reg).fit, X)
    size = float(np.abs(X).max())
    assert_close(model.weights_, np.array([1.0]), cond=200, what="GaussianMixture(1).weights_")
    assert_close(model.means_[0], X.mean(axis=0), magnitude=size, cond=200, what="GaussianMixture(1).means_")
    assert_close(model.covariances_[0], np.cov(X.T, ddof=0) + reg * np.eye(2), magnitude=size**2, cond=200,
                 what="GaussianMixture(1).covariances_ (ML, ddof 0)")


def test_same_seed_same_result():
    X, _ = _two_gaussians(n=300, seed=7)
    a = gmm.GaussianMixture(3, seed=4, init="random").fit(X)
    b = gmm.GaussianMixture(3, seed=4, init="random").fit(X)
    np.testing.assert_array_equal(a.means_, b.means_)
    assert a.log_likelihood_history_ == b.log_likelihood_history_


@pytest.mark.numerics_probe
def test_far_away_point_gets_finite_one_hot_responsibilities():
    means = np.array([[0.0, 0.0], [3.0, 0.0]])
    covs = np.stack([np.eye(2), np.eye(2)])
    X = np.array([[1e4, 0.0], [-1e4, 0.0], [1.5, 1e4]])  # the last one is equidistant
    with strict_numpy():
        resp, ll = gmm.e_step(X, np.array([0.5, 0.5]), means, covs)
    assert np.all(np.isfinite(resp)) and np.isfinite(ll)
    # log densities near -5e7 carry an absolute rounding error of about eps * 5e7 = 1e-8; a softmax of
    # them is off by that much (C8), so every responsibility is compared at that magnitude
    assert_close(resp, np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]]), magnitude=5e7, cond=10,
                 what="e_step(far points).resp")
    X, _ = _two_gaussians(n=200, seed=8)
    model = gmm.GaussianMixture(2).fit(X)
    with strict_numpy():
        proba = model.predict_proba(np.array([[1e4, 1e4], [-1e4, 3.0]]))
    assert np.all(np.isfinite(proba))
    assert_close(np.sort(proba, axis=1), np.array([[0.0, 1.0], [0.0, 1.0]]), magnitude=1e8, cond=10,
                 what="predict_proba(far points)")


@pytest.mark.edge_case
def test_zero_variance_axis_is_regularised():
    g = rng(9)
    X = np.column_stack([np.r_[g.normal(-3, 0.5, 100), g.normal(3, 0.5, 100)], np.full(200, 2.0)])
    model = gmm.GaussianMixture(2, reg_covar=1e-6).fit(X)
    assert np.all(np.isfinite(model.means_)) and np.all(np.isfinite(model.covariances_))
    assert np.all(np.isfinite(model.log_likelihood_history_))
    # the constant axis's ML variance is 0 up to the rounding of its squares (size 2.0^2 = 4: a one-pass
    # E[x^2] - mean^2 is off by an ulp of 4, the two-pass form by ~eps^2), far below reg_covar
    assert_close(model.covariances_[:, 1, 1], np.full(2, 1e-6), magnitude=4.0,
                 what="covariances_[:, 1, 1] (reg_covar only)")
    np.testing.assert_allclose(np.sort(model.means_[:, 0]), [-3.0, 3.0], atol=0.2)


@pytest.mark.edge_case
def test_as_many_components_as_points():
    X = np.array([[0.0, 0.0], [5.0, 5.0], [10.0, 0.0]])
    model = gmm.GaussianMixture(3, reg_covar=1e-3).fit(X)
    assert np.all(np.isfinite(model.covariances_)) and np.all(np.isfinite(model.means_))
    # each point owns one component up to exp(-25 / 1e-3)-small leaks; 1e-6 is loose
    np.testing.assert_allclose(np.sort(model.weights_), [1 / 3] * 3, atol=1e-6)


@pytest.mark.edge_case
def test_empty_component_in_m_step_stays_finite():
    X = rng(10).normal(size=(10, 2))
    resp = np.zeros((10, 2))
    resp[:, 0] = 1.0
    weights, means, covs = gmm.m_step(X, resp, reg_covar=1e-6)
    assert np.all(np.isfinite(means)) and np.all(np.isfinite(covs))
    assert_close(weights, np.array([1.0, 0.0]), what="m_step(empty component).weights")
    assert_close(covs[1], 1e-6 * np.eye(2), magnitude=1e-6, what="m_step(empty component).covs[1]")
    resp_next, ll = gmm.e_step(X, weights, means, covs)
    assert np.all(np.isfinite(resp_next)) and np.isfinite(ll)


# ---- input checks (contract: the exception type only) -------------------------------------------


@pytest.mark.contract
@pytest.mark.parametrize(("mean", "cov"), [(np.zeros(2), np.array([[1.0, 2.0], [2.0, 1.0]])), (np.zeros(2), np.zeros((2, 2))),
                                           (np.zeros(2), np.eye(3)), (np.zeros(3), np.eye(2))],
                         ids=["indefinite", "singular", "cov-shape", "mean-shape"])
def test_bad_gaussian_parameters_raise(mean, cov):
    with pytest.raises(ValueError):
        gmm.log_gaussian_pdf(np.zeros((2, 2)), mean, cov)


@pytest.mark.contract
def test_e_step_rejects_a_non_positive_definite_covariance():
    bad_covs = np.stack([np.eye(2), -np.eye(2)])
    with pytest.raises(ValueError):
        gmm.e_step(np.zeros((3, 2)), np.array([0.5, 0.5]), np.zeros((2, 2)), bad_covs)


@pytest.mark.contract
@pytest.mark.parametrize(
    "kwargs",
    [{"n_components": 0}, {"n_components": 2, "reg_covar": -1e-6}, {"n_components": 2, "n_iter": 0},
     {"n_components": 2, "tol": -1.0}, {"n_components": 2, "init": "kmeans++"}],
    ids=["n_components", "reg_covar", "n_iter", "tol", "init"],
)
def test_invalid_hyperparameters_raise(kwargs):
    with pytest.raises(ValueError):
        gmm.GaussianMixture(**kwargs)


@pytest.mark.contract
def test_invalid_data_raises():
    X = rng(11).normal(size=(5, 2))
    bad = X.copy()
    bad[0, 0] = np.nan
    for K, data in ((6, X), (2, X[:, 0]), (2, bad)):
        with pytest.raises(ValueError):
            gmm.GaussianMixture(K).fit(data)
    with pytest.raises(ValueError):
        gmm.m_step(X, np.full((5, 2), 0.5), reg_covar=-1.0)
    with pytest.raises(ValueError):
        gmm.m_step(X, np.full((4, 2), 0.5))
    weights, means, covs = _random_params(K=2)
    with pytest.raises(ValueError):
        gmm.e_step(X, weights, means[:, :1], covs)
    with pytest.raises(ValueError):
        gmm.e_step(X, np.array([0.7, 0.7]), means, covs)
    model = gmm.GaussianMixture(2).fit(X)
    with pytest.raises(ValueError):
        model.predict(np.zeros((3, 4)))


@pytest.mark.contract
def test_use_before_fit_raises():
    model = gmm.GaussianMixture(2)
    for method in (model.predict, model.predict_proba, model.score):
        with pytest.raises(RuntimeError):
            method(np.zeros((3, 2)))
