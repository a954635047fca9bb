"""Alternative correct GMM (canon #8): eigendecomposition densities, logaddexp E-step, per-component M-step.

``log_gaussian_pdf`` uses ``eigh(cov)`` instead of a Cholesky factor: ``log det = sum log lambda`` and
the Mahalanobis term is the squared projection on the eigenvectors scaled by ``1/sqrt(lambda)``. A
non-positive eigenvalue is reported as a non-positive-definite ``cov``. The E-step normalises with
``np.logaddexp.reduce`` and the M-step loops over components. Shapes: ``X (n, d)``, ``resp (n, K)``,
``means (K, d)``, ``covs (K, d, d)``. Test: it must pass every test of the item.
"""

from __future__ import annotations

import numpy as np

from canon_refs.classical.kmeans import kmeans


def _X(X):
    X = np.asarray(X, dtype=np.float64)  # (...,)
    if X.ndim != 2 or not np.isfinite(X).all():
        raise ValueError("X must be a finite 2-D array")
    return X


def log_gaussian_pdf(X, mean, cov):
    X = _X(X)
    d = X.shape[1]
    mean = np.asarray(mean, dtype=np.float64)  # (...,)
    cov = np.asarray(cov, dtype=np.float64)  # (...,)
    if mean.shape != (d,):
        raise ValueError("mean has the wrong shape")
    if cov.shape != (d, d) or not np.allclose(cov, cov.T):
        raise ValueError("cov must be a symmetric (d, d) matrix")
    lam, V = np.linalg.eigh(cov)  # (d,), (d, d)
    if lam.min() <= 1e-12 * max(lam.max(), 1e-300):
        raise ValueError("cov is not positive definite")
    proj = (X - mean) @ V / np.sqrt(lam)  # (n, d)
    return -0.5 * (d * np.log(2 * np.pi) + np.log(lam).sum() + np.einsum("nd,nd->n", proj, proj))  # (n,)


def e_step(X, weights, means, covs):
    X = _X(X)
    weights = np.asarray(weights, dtype=np.float64)  # (...,)
    means = np.asarray(means, dtype=np.float64)  # (...,)
    covs = np.asarray(covs, dtype=np.float64)  # (...,)
    K, d = weights.size, X.shape[1]
    if np.any(weights < 0) or abs(weights.sum() - 1) > 1e-6:
        raise ValueError("weights must be a probability vector")
    if means.shape != (K, d):
        raise ValueError("means has the wrong shape")
    if covs.shape != (K, d, d):
        raise ValueError("covs has the wrong shape")
    with np.errstate(divide="ignore"):
        lw = np.log(weights)  # (K,)
    lp = np.column_stack([log_gaussian_pdf(X, m, c) for m, c in zip(means, covs)]) + lw  # (n, K)
    lse = np.logaddexp.reduce(lp, axis=1)  # (n,)
    resp = np.exp(lp - lp.max(axis=1, keepdims=True))  # (n, K)
    resp /= resp.sum(axis=1, keepdims=True)
    return resp, float(lse.mean())


def m_step(X, resp, reg_covar=1e-6):
    X = _X(X)
    resp = np.asarray(resp, dtype=np.float64)  # (...,)
    if resp.ndim != 2 or resp.shape[0] != X.shape[0] or np.any(resp < 0):
        raise ValueError("resp must be a non-negative (n, K) array")
    if not reg_covar >= 0:
        raise ValueError("reg_covar must be >= 0")
    n, d = X.shape
    K = resp.shape[1]
    weights, means, covs = np.empty(K), np.empty((K, d)), np.empty((K, d, d))  # (K,), (K, d), (K, d, d)
    for k in range(K):
        r = resp[:, k]
        nk = r.sum() + 10 * np.finfo(float).eps
        weights[k] = nk
        means[k] = r @ X / nk
        diff = X - means[k]  # (n, d)
        covs[k] = (diff.T * r) @ diff / nk + reg_covar * np.eye(d)
    return weights / weights.sum(), means, covs


class GaussianMixture:
    def __init__(self, n_components, n_iter=100, tol=1e-6, reg_covar=1e-6, seed=0, init="kmeans"):
        if n_components < 1:
            raise ValueError("n_components must be >= 1")
        if n_iter < 1:
            raise ValueError("n_iter must be >= 1")
        if not tol >= 0:
            raise ValueError("tol must be >= 0")
        if not reg_covar >= 0:
            raise ValueError("reg_covar must be >= 0")
        if init not in ("kmeans", "random"):
            raise ValueError("init must be 'kmeans' or 'random'")
        self.n_components, self.n_iter, self.tol, self.reg_covar, self.seed, self.init = (
            n_components, n_iter, tol, reg_covar, seed, init)

    def fit(self, X):
        X = _X(X)
        n, d = X.shape
        K = self.n_components
        if K > n:
            raise ValueError("n_components exceeds the number of samples")
        if self.init == "kmeans":
            resp = np.zeros((n, K))  # (n, K)
            resp[np.arange(n), kmeans(X, K, seed=self.seed).labels] = 1.0
        else:
            g = np.random.default_rng(self.seed)
            centres = X[g.permutation(n)[:K]]  # (K, d)
            d2 = ((X[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)  # (n, K)
            resp = np.zeros((n, K))  # (n, K)
            resp[np.arange(n), d2.argmin(axis=1)] = 1.0
        params = m_step(X, resp, self.reg_covar)
        hist, self.converged_ = [], False
        for _ in range(self.n_iter):
            resp, ll = e_step(X, *params)
            hist.append(ll)
            if len(hist) >= 2 and abs(hist[-1] - hist[-2]) < self.tol:
                self.converged_ = True
                break
            params = m_step(X, resp, self.reg_covar)
        self.weights_, self.means_, self.covariances_ = params
        self.log_likelihood_history_ = hist
        return self

    def _ready(self, X):
        if not hasattr(self, "means_"):
            raise RuntimeError("fit first")
        X = _X(X)
        if X.shape[1] != self.means_.shape[1]:
            raise ValueError("X has the wrong width")
        return X

    def predict_proba(self, X):
        return e_step(self._ready(X), self.weights_, self.means_, self.covariances_)[0]

    def predict(self, X):
        return self.predict_proba(X).argmax(axis=1).astype(np.int64)  # (n,)

    def score(self, X):
        return e_step(self._ready(X), self.weights_, self.means_, self.covariances_)[1]
