"""SGD with momentum, Adam, AdamW and the global gradient-norm clip, in NumPy (canon #9, #10).

Plan: every optimizer owns one state buffer per parameter and updates the parameters in place.
SGD follows torch (dampening 0): v = mu*v + g, step with v or, for Nesterov, g + mu*v. Adam keeps
bias-corrected first/second moments with eps outside the sqrt; AdamW decays the weights directly
(p *= 1 - lr*wd) instead of adding wd*p to the gradient, because coupled L2 gets rescaled by the
adaptive denominator. Tests: one step by hand, a quadratic converges, AdamW vs Adam with wd = 0.
"""

from __future__ import annotations

import math

import numpy as np


class SGD:
    """Stochastic gradient descent with optional (Nesterov) momentum and coupled weight decay."""

    def __init__(
        self,
        params: list[np.ndarray],
        lr: float,
        momentum: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
    ) -> None:
        """Store hyperparameters and one zero velocity buffer per parameter."""
        self.params = params
        self.lr = lr
        self.momentum = momentum
        self.nesterov = nesterov
        self.weight_decay = weight_decay
        self.velocity = [np.zeros_like(p) for p in params]

    def step(self, grads: list[np.ndarray]) -> None:
        """Apply one update in place."""
        for p, g, v in zip(self.params, grads, self.velocity):
            g = g + self.weight_decay * p if self.weight_decay else g
            if self.momentum:
                v *= self.momentum
                v += g
                g = g + self.momentum * v if self.nesterov else v
            p -= self.lr * g


def clip_grad_norm(grads: list[np.ndarray], max_norm: float) -> float:
    """Scale all gradients in place so that their global L2 norm is at most ``max_norm``."""
    norm = math.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64))) for g in grads))
    if norm > max_norm:
        scale = max_norm / norm
        for g in grads:
            g *= scale
    return norm


class Adam:
    """Adam with bias correction and coupled L2 weight decay (``g <- g + wd*p``)."""

    def __init__(
        self,
        params: list[np.ndarray],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        """Store hyperparameters and allocate zero moment buffers."""
        self.params = params
        self.lr = lr
        self.betas = betas
        self.eps = eps
        self.weight_decay = weight_decay
        self.t = 0
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]

    def _decay(self, p: np.ndarray, g: np.ndarray) -> np.ndarray:
        """Coupled L2: fold ``wd * p`` into the gradient."""
        return g + self.weight_decay * p if self.weight_decay else g

    def step(self, grads: list[np.ndarray]) -> None:
        """Apply one Adam update in place and increment ``t``."""
        b1, b2 = self.betas
        self.t += 1
        c1 = 1.0 - b1**self.t
        c2 = 1.0 - b2**self.t
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            g = self._decay(p, g)
            m *= b1
            m += (1.0 - b1) * g
            v *= b2
            v += (1.0 - b2) * g * g
            p -= self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p <- p*(1 - lr*wd)`` before the Adam update."""

    def __init__(
        self,
        params: list[np.ndarray],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        """See :class:`Adam`; only the default ``weight_decay`` differs."""
        super().__init__(params, lr, betas, eps, weight_decay)

    def _decay(self, p: np.ndarray, g: np.ndarray) -> np.ndarray:
        """Decoupled: shrink the parameter itself, leave the gradient alone."""
        p *= 1.0 - self.lr * self.weight_decay
        return g
