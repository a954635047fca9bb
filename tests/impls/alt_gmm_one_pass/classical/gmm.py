"""Alternative correct GMM (canon #8), written from the stub the way a candidate often does: log
densities through ``slogdet`` and ``solve`` instead of a Cholesky factor, covariances by the one-pass
``E[x x^T] - mu mu^T`` (rounding at the size of the squares, not of the deviations), a Dirichlet
random start and a zero-weight component kept at log weight -inf. Test: every classical/gmm reference
test must pass.
"""
from __future__ import annotations

import math

import numpy as np

from canon_refs.classical.kmeans import kmeans


def log_gaussian_pdf(X, mean, cov):
    """Log density via slogdet and solve."""
    X = np.asarray(X, dtype=np.float64)
    d = X.shape[1]
    sign, logdet = np.linalg.slogdet(cov)
    if sign <= 0:
        raise ValueError("cov is not positive definite")
    diff = X - mean
    maha = np.sum(diff * np.linalg.solve(cov, diff.T).T, axis=1)
    return -0.5 * (d * math.log(2 * math.pi) + logdet + maha)


def e_step(X, weights, means, covs):
    """E-step."""
    logp = np.stack([np.log(w) + log_gaussian_pdf(X, m, c) if w > 0 else np.full(len(X), -np.inf)
                     for w, m, c in zip(weights, means, covs)], axis=1)
    mx = logp.max(axis=1, keepdims=True)
    lse = mx + np.log(np.exp(logp - mx).sum(axis=1, keepdims=True))
    return np.exp(logp - lse), float(lse.mean())


def m_step(X, resp, reg_covar=1e-6):
    """M-step, one-pass covariance."""
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    Nk = resp.sum(axis=0)
    weights = Nk / n
    safe = np.where(Nk > 0, Nk, 1.0)
    means = resp.T @ X / safe[:, None]
    covs = np.empty((len(Nk), d, d))
    for k in range(len(Nk)):
        covs[k] = (resp[:, k, None] * X).T @ X / safe[k] - np.outer(means[k], means[k]) * (Nk[k] > 0)
        covs[k] += reg_covar * np.eye(d)
    return weights, means, covs


class GaussianMixture:
    """GMM."""

    def __init__(self, n_components, n_iter=100, tol=1e-6, reg_covar=1e-6, seed=0, init="kmeans"):
        self.n_components, self.n_iter, self.tol = n_components, n_iter, tol
        self.reg_covar, self.seed, self.init = reg_covar, seed, init

    def fit(self, X):
        X = np.asarray(X, dtype=np.float64)
        n, K = len(X), self.n_components
        if self.init == "kmeans":
            labels = kmeans(X, K, seed=self.seed).labels
            resp = np.eye(K)[labels]
        else:
            resp = np.random.default_rng(self.seed).dirichlet(np.ones(K), size=n)
        self.weights_, self.means_, self.covariances_ = m_step(X, resp, self.reg_covar)
        self.log_likelihood_history_, self.converged_ = [], False
        for _ in range(self.n_iter):
            resp, ll = e_step(X, self.weights_, self.means_, self.covariances_)
            self.log_likelihood_history_.append(ll)
            if len(self.log_likelihood_history_) > 1 and abs(ll - self.log_likelihood_history_[-2]) < self.tol:
                self.converged_ = True
                break
            self.weights_, self.means_, self.covariances_ = m_step(X, resp, self.reg_covar)
        return self

    def predict_proba(self, X):
        return e_step(np.asarray(X, dtype=np.float64), self.weights_, self.means_, self.covariances_)[0]

    def predict(self, X):
        return self.predict_proba(X).argmax(axis=1).astype(np.int64)

    def score(self, X):
        return e_step(np.asarray(X, dtype=np.float64), self.weights_, self.means_, self.covariances_)[1]
