"""Gaussian mixture model with full covariances, fitted by expectation-maximisation (canon #8).

The model is ``p(x) = sum_k w_k N(x | mu_k, Sigma_k)``. EM alternates

* E-step: responsibilities ``r_nk = w_k N(x_n | mu_k, Sigma_k) / p(x_n)``, computed in log space;
* M-step: ``N_k = sum_n r_nk``, ``w_k = N_k / n``, ``mu_k = sum_n r_nk x_n / N_k``,
  ``Sigma_k = sum_n r_nk (x_n - mu_k)(x_n - mu_k)^T / N_k + reg_covar * I`` (ML estimate, ddof 0),

and the mean log-likelihood never decreases from one iteration to the next. ``init="kmeans"`` turns
the labels of k-means (canon #5, imported absolutely) into one-hot responsibilities and runs one
M-step; ``init="random"`` takes ``K`` distinct data points as means, the data covariance for every
component and equal weights.

The subtle point is underflow. A point 40 standard deviations from every mean has density
``exp(-800)``, which is 0.0 in float64, so normalising densities gives ``0 / 0 = NaN``. Everything
here stays in log space: ``log_gaussian_pdf`` returns log densities and the E-step normalises with a
max-subtracted logsumexp, so a point 1e4 away still gets finite, one-hot responsibilities. They are
``exp(log_prob - max) / sum`` rather than ``exp(log_prob - logsumexp)``: at log densities near -5e7
the logsumexp carries a rounding error of about 1e-8, which the subtraction would pass on. The
second is a singular covariance (data with zero variance along an axis, or a component that owns
one point): ``reg_covar * I`` keeps every covariance positive definite.

Shape letters: ``n`` samples, ``d`` features, ``K`` components. ``X (n, d)``, log-prob matrix and
responsibilities ``(n, K)``, their logsumexp ``(n, 1)``, ``N_k (K,)``, ``weights (K,)``,
``means (K, d)``, centred data ``(n, d)``, ``covariances (K, d, d)``, Cholesky factor ``(d, d)``.

Trade-off: densities use a Cholesky factor ``Sigma = L L^T`` instead of ``inv`` and ``det``, because
``log det Sigma = 2 sum log diag L`` never under- or overflows (``det(1e-3 * I)`` in d = 150 is 1e-450,
which is 0.0 in float64, and its log is -inf, while ``2 sum log diag L`` is -1036.2), the Mahalanobis
term is a triangular solve with no explicit inverse, and a non-positive-definite matrix is reported
by the factorisation itself. The price is one O(d^3 / 3) factorisation per component per E-step.

What to test: the standard normal log density at 0 (``-0.5 ln 2 pi``), responsibilities summing to 1,
a non-decreasing log-likelihood history, recovery of two separated Gaussians, the closed form for
``K = 1``, a far-away point, and data with zero variance along one axis.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from canon_refs.classical.kmeans import kmeans

_INITS = ("kmeans", "random")
_LOG_2PI = math.log(2.0 * math.pi)


def log_gaussian_pdf(X: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """Log density of ``N(mean, cov)`` at every row of ``X``.

    ``log N(x) = -0.5 * (d log 2 pi + log det cov + (x - mean)^T cov^{-1} (x - mean))``, finite for
    every positive-definite ``cov``, also one whose determinant underflows (``1e-3 * I`` in d = 150).

    Args:
        X: ``(n, d)`` points. mean: ``(d,)``. cov: ``(d, d)`` symmetric positive definite.

    Returns:
        float64 ``(n,)`` log densities.

    Raises:
        ValueError: shape mismatches of ``X``, ``mean`` or ``cov``, non-finite inputs, a
            non-symmetric or non-positive-definite ``cov``.
    """
    X = _check_data(X)                                                      # (n, d)
    d = X.shape[1]
    mean, cov = _check_gaussian(mean, cov, d)                               # (d,), (d, d)
    L = _cholesky(cov)                                                      # (d, d)
    centred = X - mean                                                      # (n, d)
    z = np.linalg.solve(L, centred.T)                                       # (d, n)
    mahalanobis = np.sum(z * z, axis=0)                                     # (n,)
    log_det = 2.0 * np.sum(np.log(np.diag(L)))                              # ()
    return -0.5 * (d * _LOG_2PI + log_det + mahalanobis)                    # (n,)


def e_step(
    X: np.ndarray, weights: np.ndarray, means: np.ndarray, covs: np.ndarray
) -> tuple[np.ndarray, float]:
    """Responsibilities and mean log-likelihood under the mixture.

    Args:
        X: ``(n, d)``. weights: ``(K,)`` non-negative, summing to 1. means: ``(K, d)``.
        covs: ``(K, d, d)`` symmetric positive definite.

    Returns:
        ``(resp, mean_log_likelihood)``: float64 ``(n, K)`` rows summing to 1, and a float.

    Raises:
        ValueError: shape mismatches, negative weights or weights not summing to 1, a covariance
            that is not positive definite.
    """
    X, weights, means, covs = _check_params(X, weights, means, covs)
    K = weights.shape[0]
    tiny = np.finfo(np.float64).tiny
    log_w = np.log(np.maximum(weights, tiny))                               # (K,)  0 -> about -708
    log_pdfs = [log_gaussian_pdf(X, means[k], covs[k]) for k in range(K)]   # list[K]
    log_prob = np.stack(log_pdfs, axis=1) + log_w                           # (n, K)
    peak = log_prob.max(axis=1, keepdims=True)                              # (n, 1)
    summed = np.exp(log_prob - peak).sum(axis=1, keepdims=True)             # (n, 1)
    log_norm = peak + np.log(summed)                                        # (n, 1)
    resp = np.exp(log_prob - peak) / summed                                 # (n, K)
    return resp, float(log_norm.mean())


def m_step(
    X: np.ndarray, resp: np.ndarray, reg_covar: float = 1e-6
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Maximum-likelihood weights, means and covariances given responsibilities.

    Covariances are maximum likelihood (divided by ``N_k``, not ``N_k - 1``) plus ``reg_covar * I``. A
    component with no responsibility stays finite: weight 0, a finite mean and covariance
    ``reg_covar * I``.

    Args:
        X: ``(n, d)``. resp: ``(n, K)`` non-negative, rows summing to 1. reg_covar: >= 0, added to
        every covariance diagonal.

    Returns:
        ``(weights (K,), means (K, d), covs (K, d, d))``, float64.

    Raises:
        ValueError: ``resp`` of the wrong shape, negative, non-finite or with rows not summing to 1;
            ``reg_covar < 0``.
    """
    X = _check_data(X)                                                      # (n, d)
    d = X.shape[1]
    resp = _check_resp(resp, X.shape[0])                                    # (n, K)
    _check_reg_covar(reg_covar)
    Nk = resp.sum(axis=0) + 10 * np.finfo(np.float64).eps                   # (K,)  empty: 0 / 10eps
    weights = Nk / Nk.sum()                                                 # (K,)
    means = resp.T @ X / Nk[:, None]                                        # (K, d)
    centred = X[None, :, :] - means[:, None, :]                             # (K, n, d)
    scatter = np.einsum("nk,kni,knj->kij", resp, centred, centred)          # (K, d, d)
    covs = scatter / Nk[:, None, None]                                      # (K, d, d)
    covs = covs + reg_covar * np.eye(d)                                     # (K, d, d)
    return weights, means, covs


class GaussianMixture:
    """Full-covariance Gaussian mixture fitted by EM.

    Args:
        n_components: ``K >= 1`` (and ``<= n`` at fit time). n_iter: maximum EM iterations (>= 1).
        tol: stop when the mean log-likelihood changes by less than ``tol`` (>= 0).
        reg_covar: >= 0, added to every covariance diagonal. seed: seeds the initialisation.
        init: ``"kmeans"`` (canon #5's labels as responsibilities) or ``"random"`` (a random start
            drawn with ``np.random.default_rng(seed)``; the reference takes K distinct rows as means,
            equal weights and the data covariance; any random start is accepted).

    Attributes after ``fit``: ``weights_ (K,)``, ``means_ (K, d)``, ``covariances_ (K, d, d)``,
    ``log_likelihood_history_`` (the mean log-likelihood at each E-step: ``n_iter`` entries when it
    never converges), ``converged_`` (True when two successive entries differ by less than ``tol``).

    Raises ValueError in ``__init__`` for bad hyperparameters, in ``fit`` for bad data or
    ``n_components > n``; RuntimeError when used before ``fit``.
    """

    def __init__(
        self,
        n_components: int,
        n_iter: int = 100,
        tol: float = 1e-6,
        reg_covar: float = 1e-6,
        seed: int = 0,
        init: Literal["kmeans", "random"] = "kmeans",
    ) -> None:
        """Validate and store the hyperparameters (fail fast, C6)."""
        _check_hyperparameters(n_components, n_iter, tol, init)
        _check_reg_covar(reg_covar)
        self.n_components = int(n_components)
        self.n_iter = int(n_iter)
        self.tol = float(tol)
        self.reg_covar = float(reg_covar)
        self.seed = seed
        self.init = init

    def _initial_params(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Starting ``(weights (K,), means (K, d), covs (K, d, d))`` for ``X (n, d)``."""
        n, d = X.shape
        K = self.n_components
        if self.init == "kmeans":
            labels = kmeans(X, K, seed=self.seed).labels                    # (n,)
            one_hot = np.eye(K)[labels]                                     # (n, K)
            return m_step(X, one_hot, self.reg_covar)                       # (K,), (K, d), (K, d, d)
        rng = np.random.default_rng(self.seed)
        means = X[rng.choice(n, size=K, replace=False)]                     # (K, d)
        centred = X - X.mean(axis=0)                                        # (n, d)
        cov = centred.T @ centred / n + self.reg_covar * np.eye(d)          # (d, d)
        covs = np.repeat(cov[None, :, :], K, axis=0)                        # (K, d, d)
        weights = np.full(K, 1.0 / K)                                       # (K,)
        return weights, means, covs                                         # (K,), (K, d), (K, d, d)

    def fit(self, X: np.ndarray) -> GaussianMixture:
        """Run EM on ``X (n, d)`` until the log-likelihood gain is below ``tol`` or ``n_iter`` E-steps."""
        X = _check_data(X)                                                  # (n, d)
        _check_enough_points(self.n_components, X.shape[0])
        weights, means, covs = self._initial_params(X)
        history: list[float] = []
        converged = False
        for _ in range(self.n_iter):
            resp, log_likelihood = e_step(X, weights, means, covs)
            history.append(log_likelihood)
            if len(history) > 1 and abs(history[-1] - history[-2]) < self.tol:
                converged = True
                break
            weights, means, covs = m_step(X, resp, self.reg_covar)
        self.weights_ = weights
        self.means_ = means
        self.covariances_ = covs
        self.log_likelihood_history_ = history
        self.converged_ = converged
        return self

    def _check_fitted(self, X: np.ndarray) -> np.ndarray:
        """RuntimeError before ``fit``; ``X`` validated against the fitted width ``d``."""
        if not hasattr(self, "means_"):
            raise RuntimeError("GaussianMixture used before fit")
        return _check_data(X, width=self.means_.shape[1])                   # (n, d)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Responsibilities under the fitted mixture, float64 ``(n, K)``."""
        X = self._check_fitted(X)
        return e_step(X, self.weights_, self.means_, self.covariances_)[0]  # (n, K)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Most responsible component per row, int64 ``(n,)``."""
        return np.argmax(self.predict_proba(X), axis=1).astype(np.int64)    # (n,)

    def score(self, X: np.ndarray) -> float:
        """Mean log-likelihood of ``X (n, d)`` under the fitted mixture."""
        X = self._check_fitted(X)
        return e_step(X, self.weights_, self.means_, self.covariances_)[1]


def _check_data(X: np.ndarray, width: int | None = None) -> np.ndarray:
    """``X`` as finite float64 ``(n, d)`` with n >= 1 and ``d == width`` when given."""
    X = np.asarray(X, dtype=np.float64)                                     # (...,)  validated below
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X must be 2-D (n, d) with n, d >= 1, got shape {X.shape}")
    if width is not None and X.shape[1] != width:
        raise ValueError(f"X must have {width} columns, got {X.shape[1]}")
    if not np.isfinite(X).all():
        raise ValueError("X contains NaN or inf")
    return X


def _cholesky(cov: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of a symmetric positive-definite ``(d, d)`` matrix.

    Raises ValueError naming ``cov`` when the matrix is not symmetric or not positive definite.
    """
    if not np.allclose(cov, cov.T, rtol=1e-10, atol=1e-12):
        raise ValueError("cov must be symmetric")
    try:
        return np.linalg.cholesky(cov)                                      # (d, d)
    except np.linalg.LinAlgError as err:
        raise ValueError("cov must be positive definite (its Cholesky factorisation failed)") from err


def _check_params(
    X: np.ndarray, weights: np.ndarray, means: np.ndarray, covs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate mixture parameters against ``X (n, d)``.

    Expects ``weights (K,)`` non-negative summing to 1, ``means (K, d)``, ``covs (K, d, d)``.
    """
    X = _check_data(X)
    d = X.shape[1]
    weights = np.asarray(weights, dtype=np.float64)                         # (...,)
    means = np.asarray(means, dtype=np.float64)                             # (...,)
    covs = np.asarray(covs, dtype=np.float64)                               # (...,)
    if weights.ndim != 1 or weights.shape[0] < 1 or not np.isfinite(weights).all() or np.any(weights < 0):
        raise ValueError(f"weights must be a non-negative 1-D array, got shape {weights.shape}")
    if abs(float(weights.sum()) - 1.0) > 1e-6:
        raise ValueError(f"weights must sum to 1, got {float(weights.sum())}")
    K = weights.shape[0]
    if means.shape != (K, d):
        raise ValueError(f"means must have shape ({K}, {d}), got {means.shape}")
    if covs.shape != (K, d, d):
        raise ValueError(f"covs must have shape ({K}, {d}, {d}), got {covs.shape}")
    return X, weights, means, covs


def _check_gaussian(mean: np.ndarray, cov: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``mean`` finite ``(d,)`` and ``cov`` finite ``(d, d)``, as float64."""
    mean = np.asarray(mean, dtype=np.float64)                               # (...,)  checked below
    cov = np.asarray(cov, dtype=np.float64)                                 # (...,)  checked below
    if mean.shape != (d,) or not np.isfinite(mean).all():
        raise ValueError(f"mean must be finite with shape ({d},), got {mean.shape}")
    if cov.shape != (d, d) or not np.isfinite(cov).all():
        raise ValueError(f"cov must be finite with shape ({d}, {d}), got {cov.shape}")
    return mean, cov                                                        # (d,), (d, d)


def _check_resp(resp: np.ndarray, n: int) -> np.ndarray:
    """``resp`` as finite non-negative float64 ``(n, K)`` with rows summing to 1."""
    resp = np.asarray(resp, dtype=np.float64)                               # (...,)  validated below
    if resp.ndim != 2 or resp.shape[0] != n or resp.shape[1] < 1:
        raise ValueError(f"resp must have shape ({n}, K), got {resp.shape}")
    if not np.isfinite(resp).all() or np.any(resp < 0):
        raise ValueError("resp must be finite and non-negative")
    if np.max(np.abs(resp.sum(axis=1) - 1.0)) > 1e-6:
        raise ValueError("resp rows must sum to 1")
    return resp                                                             # (n, K)


def _check_reg_covar(reg_covar: float) -> None:
    if not math.isfinite(reg_covar) or reg_covar < 0:
        raise ValueError(f"reg_covar must be finite and >= 0, got {reg_covar}")


def _check_hyperparameters(n_components: int, n_iter: int, tol: float, init: str) -> None:
    if isinstance(n_components, bool) or int(n_components) != n_components or n_components < 1:
        raise ValueError(f"n_components must be an integer >= 1, got {n_components}")
    if int(n_iter) != n_iter or n_iter < 1:
        raise ValueError(f"n_iter must be an integer >= 1, got {n_iter}")
    if not math.isfinite(tol) or tol < 0:
        raise ValueError(f"tol must be finite and >= 0, got {tol}")
    if init not in _INITS:
        raise ValueError(f"init must be one of {_INITS}, got {init!r}")


def _check_enough_points(n_components: int, n: int) -> None:
    if n_components > n:
        raise ValueError(f"n_components must be <= n = {n}, got {n_components}")
