"""Alternative correct optimizers (canon #9 and #10): one functional update per optimizer.

The updates are pure functions that return new buffers, and the optimizer objects only copy the
results back into the caller's arrays with ``p[...] = new``. Adam folds both bias corrections into
one step size ``lr*sqrt(1 - b2^t)/(1 - b1^t)`` and an eps rescaled by ``sqrt(1 - b2^t)``, which is
algebraically the same update as ``lr*m_hat/(sqrt(v_hat) + eps)``. The clip sums squares with
``math.fsum`` after dividing by the largest entry. Shapes: parameters, gradients and buffers share
one shape ``(...,)``; ``P`` parameters. Test: passes the items' tests.
"""

from __future__ import annotations

import math

import numpy as np


def _validated(grads, params):
    grads = list(grads)
    if len(grads) != len(params):
        raise ValueError("grads: wrong number of arrays")
    out = [np.asarray(g, dtype=np.float64) for g in grads]  # list[P]
    for g, p in zip(out, params):
        if g.shape != p.shape:
            raise ValueError("grads: shape mismatch")
    return out


def _sgd_update(p, g, v, lr, mu, nesterov, wd):
    g = g + wd * p
    v_new = mu * v + g  # (...,)
    d = g + mu * v_new if nesterov else (v_new if mu else g)  # (...,)
    return p - lr * d, v_new


class SGD:
    def __init__(self, params, lr, momentum=0.0, nesterov=False, weight_decay=0.0):
        if lr <= 0 or not np.isfinite(lr):
            raise ValueError("lr must be positive")
        if momentum < 0 or momentum >= 1:
            raise ValueError("momentum must be in [0, 1)")
        if nesterov and momentum == 0:
            raise ValueError("nesterov requires momentum > 0")
        if weight_decay < 0:
            raise ValueError("weight_decay must be non-negative")
        self.params, self.lr, self.momentum, self.nesterov, self.weight_decay = params, lr, momentum, nesterov, weight_decay
        self.buffers = [np.zeros_like(p) for p in params]  # list[P]

    def step(self, grads):
        grads = _validated(grads, self.params)
        if self.lr <= 0:
            raise ValueError("lr must be positive")
        for i, (p, g) in enumerate(zip(self.params, grads)):
            if self.weight_decay == 0 and self.momentum == 0:
                p -= self.lr * g
                continue
            new_p, self.buffers[i] = _sgd_update(p, g, self.buffers[i], self.lr, self.momentum, self.nesterov, self.weight_decay)
            p[...] = new_p


def clip_grad_norm(grads, max_norm):
    if not (max_norm > 0 and math.isfinite(max_norm)):
        raise ValueError("max_norm must be a finite positive number")
    for g in grads:
        if not np.all(np.isfinite(g)):
            raise ValueError("grads contain non-finite values")
    peak = max([float(np.abs(g).max()) for g in grads if g.size] or [0.0])
    if peak == 0.0:
        return 0.0
    total = peak * math.sqrt(math.fsum(float(((g / peak) ** 2).sum()) for g in grads))
    if total > max_norm:
        for g in grads:
            g *= max_norm / total
    return total


class Adam:
    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        if not (lr > 0):
            raise ValueError("lr must be positive")
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError("betas must lie in [0, 1)")
        if not (eps > 0):
            raise ValueError("eps must be positive")
        if weight_decay < 0:
            raise ValueError("weight_decay must be non-negative")
        self.params, self.lr, self.betas, self.eps, self.weight_decay = params, lr, betas, eps, weight_decay
        self.t = 0
        self.moments = [(np.zeros_like(p), np.zeros_like(p)) for p in params]  # list[P]

    def step(self, grads):
        grads = _validated(grads, self.params)
        if not (self.lr > 0):
            raise ValueError("lr must be positive")
        b1, b2 = self.betas
        t = self.t + 1
        root = math.sqrt(1 - b2**t)
        alpha = self.lr * root / (1 - b1**t)
        for i, (p, g) in enumerate(zip(self.params, grads)):
            if self.decoupled:
                base = p * (1 - self.lr * self.weight_decay)  # (...,)
            else:
                base = p
                g = g + self.weight_decay * p
            m, v = self.moments[i]
            m = b1 * m + (1 - b1) * g  # (...,)
            v = b2 * v + (1 - b2) * g * g  # (...,)
            self.moments[i] = (m, v)
            p[...] = base - alpha * m / (np.sqrt(v) + self.eps * root)
        self.t = t


class AdamW(Adam):
    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)
