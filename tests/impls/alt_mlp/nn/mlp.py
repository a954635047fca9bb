"""Alternative NumPy MLP (item #11): einsum layers, logaddexp loss, tanh derivative from h.

Written differently from the reference on purpose: every product is an ``np.einsum``; the
log-partition is ``np.logaddexp.reduce`` instead of an explicit max shift (stable as well: it never
exponentiates a positive number); the loss gradient is built from a one-hot matrix; the tanh
derivative is ``1 / cosh(h)^2`` computed from the pre-activation instead of ``1 - a^2``; weights are
drawn as ``std * standard_normal``. Shapes: ``n`` rows, ``d_in``/``d_out`` layer widths, ``K``
classes. It must pass every test of ``nn/mlp``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np


def relu(x: np.ndarray) -> np.ndarray:
    """Element-wise ``max(x, 0)``, float64."""
    x = np.asarray(x, dtype=np.float64)                                        # (...,)
    return np.where(x > 0, x, 0.0)                                             # (...,)


def relu_grad(x: np.ndarray) -> np.ndarray:
    """1.0 where ``x > 0`` else 0.0, float64."""
    return np.where(np.asarray(x) > 0, 1.0, 0.0)                               # (...,)


def _labels(y, n, K):
    y = np.asarray(y)                                                          # (...,)
    if y.ndim != 1 or y.shape[0] != n or y.dtype.kind not in "iu":
        raise ValueError(f"y must be an integer array of shape ({n},)")
    if n and (y.min() < 0 or y.max() > K - 1):
        raise ValueError(f"y has labels outside [0, {K - 1}]")
    return y.astype(np.int64)                                                  # (n,)


def softmax_cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean CE loss and ``(n, K)`` gradient ``(softmax - onehot) / n``."""
    z = np.asarray(logits, dtype=np.float64)                                   # (...,)
    if z.ndim != 2 or not np.isfinite(z).all():
        raise ValueError("logits must be a finite 2-D array")
    n, K = z.shape
    y = _labels(y, n, K)                                                       # (n,)
    onehot = np.eye(K)[y]                                                      # (n, K)
    log_z = np.logaddexp.reduce(z, axis=1, keepdims=True)                      # (n, 1)
    logp = z - log_z                                                           # (n, K)
    loss = -np.einsum("nk,nk->", onehot, logp) / n                             # ()
    return float(loss), (np.exp(logp) - onehot) / n


class MLP:
    """MLP with ``params`` W0, b0, ...; see the reference for the contract."""

    def __init__(
        self, layer_sizes: Sequence[int], activation: Literal["relu", "tanh"] = "relu", seed: int = 0
    ) -> None:
        sizes = [s for s in layer_sizes]
        ok = len(sizes) >= 2 and all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in sizes)
        if not ok or min(sizes) < 1:
            raise ValueError(f"bad layer_sizes {layer_sizes!r}")
        if activation not in ("relu", "tanh"):
            raise ValueError(f"bad activation {activation!r}")
        self.layer_sizes = [int(s) for s in sizes]
        self.activation = activation
        g = np.random.default_rng(seed)
        self.params = {}
        for i in range(len(sizes) - 1):
            fi, fo = sizes[i], sizes[i + 1]
            std = np.sqrt(2.0 / fi) if activation == "relu" else np.sqrt(2.0 / (fi + fo))
            self.params[f"W{i}"] = std * g.standard_normal((fi, fo))           # (d_in, d_out)
            self.params[f"b{i}"] = np.zeros((fo,))                             # (d_out,)
        self._trace = None

    def _X(self, X):
        X = np.asarray(X, dtype=np.float64)                                    # (...,)
        if X.ndim != 2 or X.shape[1] != self.layer_sizes[0]:
            raise ValueError(f"X must be (n, {self.layer_sizes[0]})")
        return X

    def forward(self, X: np.ndarray) -> np.ndarray:
        """``(n, d0) -> (n, d_L)`` logits; records (input, pre-activation) per layer."""
        a = self._X(X)                                                         # (n, d0)
        trace = []
        L = len(self.layer_sizes) - 1
        for i in range(L):
            h = np.einsum("ni,io->no", a, self.params[f"W{i}"]) + self.params[f"b{i}"]   # (n, d_out)
            trace.append((a, h))
            a = h if i == L - 1 else (relu(h) if self.activation == "relu" else np.tanh(h))   # (n, d_out)
        self._trace = trace
        return a

    def backward(self, dout: np.ndarray) -> dict[str, np.ndarray]:
        """Gradients shaped like ``params`` from ``dout (n, d_L)``."""
        if self._trace is None:
            raise RuntimeError("forward must run before backward")
        g = np.asarray(dout, dtype=np.float64)                                 # (...,)
        if g.shape != self._trace[-1][1].shape:
            raise ValueError("dout shape does not match the forward output")
        out = {}
        for i in range(len(self._trace) - 1, -1, -1):
            a, h = self._trace[i]
            if i < len(self._trace) - 1:
                g = g * (relu_grad(h) if self.activation == "relu" else 1.0 / np.cosh(h) ** 2)
            out[f"W{i}"] = np.einsum("ni,no->io", a, g)                        # (d_in, d_out)
            out[f"b{i}"] = np.einsum("no->o", g)                               # (d_out,)
            g = np.einsum("no,io->ni", g, self.params[f"W{i}"])                # (n, d_in)
        return {k: out[k] for k in self.params}

    def loss_and_grads(self, X: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        """Mean CE loss and its parameter gradients."""
        X = self._X(X)                                                         # (n, d0)
        _labels(y, X.shape[0], self.layer_sizes[-1])
        loss, d = softmax_cross_entropy(self.forward(X), y)
        return loss, self.backward(d)


def train_mlp(
    model: MLP,
    X: np.ndarray,
    y: np.ndarray,
    *,
    lr: float = 0.1,
    steps: int = 500,
    batch_size: int | None = None,
    seed: int = 0,
) -> list[float]:
    """Plain SGD; returns the loss of each step."""
    if not lr > 0 or not np.isfinite(lr):
        raise ValueError("lr must be a positive finite number")
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError("steps must be >= 1")
    X = model._X(X)                                                            # (n, d0)
    n = X.shape[0]
    y = _labels(y, n, model.layer_sizes[-1])                                   # (n,)
    if batch_size is not None and not (isinstance(batch_size, (int, np.integer)) and 0 < batch_size <= n):
        raise ValueError(f"batch_size must be in [1, {n}]")
    g = np.random.default_rng(seed)
    hist = []
    for _ in range(steps):
        if batch_size is None:
            xb, yb = X, y
        else:
            sel = g.permutation(n)[:batch_size]                                # (batch_size,)
            xb, yb = X[sel], y[sel]
        loss, grads = model.loss_and_grads(xb, yb)
        for name in model.params:
            model.params[name] -= lr * grads[name]
        hist.append(loss)
    return hist
