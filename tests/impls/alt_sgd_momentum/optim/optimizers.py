"""Alternative correct optimizers (canon #9 and #10): state dictionaries and a hypot-based clip.

SGD keeps its momentum in a dict keyed by parameter index, created lazily on the first step as a
copy of the gradient (as torch does), instead of a zero buffer. The clip measures the global norm
with ``np.hypot.reduce`` over every entry, which never overflows, instead of scaling by the largest
entry. Adam uses the interpolation form ``m += (1 - b1)(g - m)`` and torch's split denominator
``sqrt(v)/sqrt(1 - b2^t) + eps`` with step size ``lr/(1 - b1^t)``. Shapes: every parameter, its
gradient and its buffers share one shape ``(...,)``; ``P`` parameters. Test: passes the items' tests.
"""

from __future__ import annotations

import numpy as np


def _grads(grads, params):
    grads = [np.asarray(g, dtype=p.dtype) for g, p in zip(grads, params)] if len(grads) == len(params) else None  # list[P]
    if grads is None or any(g.shape != p.shape for g, p in zip(grads, params)):
        raise ValueError("grads must match params in number and shapes")
    return grads


class SGD:
    def __init__(self, params, lr, momentum=0.0, nesterov=False, weight_decay=0.0):
        if not lr > 0:
            raise ValueError("lr must be > 0")
        if not 0 <= momentum < 1:
            raise ValueError("momentum must be in [0, 1)")
        if nesterov and not momentum:
            raise ValueError("nesterov needs momentum")
        if not weight_decay >= 0:
            raise ValueError("weight_decay must be >= 0")
        if not params:
            raise ValueError("params is empty")
        self.params, self.lr, self.momentum, self.nesterov, self.weight_decay = list(params), lr, momentum, nesterov, weight_decay
        self.state = {}

    def step(self, grads):
        grads = _grads(list(grads), self.params)
        if not self.lr > 0:
            raise ValueError("lr must be > 0")
        for i, (p, g) in enumerate(zip(self.params, grads)):
            d = g + self.weight_decay * p if self.weight_decay else g
            if self.momentum:
                buf = self.state.get(i)
                if buf is None:
                    buf = self.state[i] = np.array(d, copy=True)  # (...,)
                else:
                    np.multiply(buf, self.momentum, out=buf)
                    np.add(buf, d, out=buf)
                d = d + self.momentum * buf if self.nesterov else buf
            np.subtract(p, self.lr * d, out=p)


def clip_grad_norm(grads, max_norm):
    if not (np.isfinite(max_norm) and max_norm > 0):
        raise ValueError("max_norm must be finite and > 0")
    grads = list(grads)
    if not all(isinstance(g, np.ndarray) and np.isfinite(g).all() for g in grads):
        raise ValueError("grads must be finite arrays")
    flat = np.concatenate([g.ravel() for g in grads]) if grads else np.zeros(0)  # (N,)
    total = float(np.hypot.reduce(flat)) if flat.size else 0.0
    if total > max_norm:
        for g in grads:
            g *= max_norm / total
    return total


class Adam:
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        if not lr > 0:
            raise ValueError("lr must be > 0")
        if not all(0 <= b < 1 for b in betas):
            raise ValueError("betas must be in [0, 1)")
        if not eps > 0:
            raise ValueError("eps must be > 0")
        if not weight_decay >= 0:
            raise ValueError("weight_decay must be >= 0")
        self.params, self.lr, self.betas, self.eps, self.weight_decay = list(params), lr, betas, eps, weight_decay
        self.t = 0
        self.state = [(np.zeros_like(p), np.zeros_like(p)) for p in self.params]  # list[P]

    def _grad(self, p, g):
        return g + self.weight_decay * p if self.weight_decay else g

    def step(self, grads):
        grads = _grads(list(grads), self.params)
        if not self.lr > 0:
            raise ValueError("lr must be > 0")
        b1, b2 = self.betas
        self.t += 1
        step_size = self.lr / (1 - b1**self.t)
        root_bc2 = np.sqrt(1 - b2**self.t)
        for p, g, (m, v) in zip(self.params, grads, self.state):
            g = self._grad(p, g)
            m += (1 - b1) * (g - m)
            v *= b2
            v += (1 - b2) * np.square(g)
            p -= step_size * m / (np.sqrt(v) / root_bc2 + self.eps)


class AdamW(Adam):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)

    def _grad(self, p, g):
        p *= 1 - self.lr * self.weight_decay
        return g
