"""A fully connected network in NumPy with the backward pass written by hand.

Plan: an MLP is a stack of affine maps h = a W + b with a non-linearity between them and none after
the last one. ``forward`` walks the layers and keeps, for each one, its input a and its output
after the activation; ``backward`` walks them in reverse with the chain rule: dh = da * act'(h),
dW = a^T dh, db = sum of dh over the batch, and the input gradient dh W^T goes to the layer below.
The loss is softmax cross-entropy, whose gradient with respect to the logits is the famous
(softmax - onehot) / n, so the two pieces meet at the logits and nothing else is special-cased.

Subtle point: softmax cross-entropy is computed from log-probabilities built by subtracting the row
maximum and taking a log-sum-exp, instead of taking the log of a softmax, because at logits of
+-1e4 exp overflows and log(0) is -inf; shifted, the largest term is exp(0) = 1 and both the loss
and the gradient stay finite. The mean over the batch is where the 1/n in the gradient comes from.

Shapes: X (n, d_0); layer l maps (n, d_in) -> (n, d_out) with W (d_in, d_out) and b (d_out,);
logits (n, K) with K = layer_sizes[-1]; labels y (n,).

Trade-off: tanh' is computed from the cached activation as 1 - a^2 rather than from the
pre-activation, because the forward pass already has a and that saves one tanh per layer per step.
Initialisation is He normal (variance 2 / fan_in) for relu and Xavier normal (2 / (fan_in + fan_out))
for tanh, so activations keep their scale at depth.

What I would test: finite differences on every parameter of a small 5-4-3 network in float64, the
same forward and gradients as torch autograd, logits of +-1e4, XOR with tanh, the three-arm spiral,
plain SGD for one step, and a batch of a single row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np


def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0) elementwise; same shape as ``x``."""
    return np.maximum(x, 0.0)


def relu_grad(x: np.ndarray) -> np.ndarray:
    """Derivative of relu as float64: 1.0 where x > 0 else 0.0 (the kink at 0 gets 0)."""
    return (np.asarray(x) > 0).astype(np.float64)                      # (...,)


def _labels(y: np.ndarray, n: int, n_classes: int) -> np.ndarray:
    """y as int64 (n,) with every label in [0, n_classes), or ValueError naming y."""
    lab = np.asarray(y)                                                # (n,)
    if lab.ndim != 1 or lab.shape[0] != n:
        raise ValueError(f"y must have shape ({n},), got {lab.shape}")
    if lab.dtype.kind == "f" and np.isfinite(lab).all() and (lab == np.round(lab)).all():
        lab = lab.astype(np.int64)
    if lab.dtype.kind not in "iu":
        raise ValueError(f"y must hold integer labels, got dtype {lab.dtype}")
    if lab.size and (lab.min() < 0 or lab.max() >= n_classes):
        raise ValueError(f"y must lie in [0, {n_classes}), got labels from {lab.min()} to {lab.max()}")
    return lab.astype(np.int64)


def softmax_cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy of integer labels y (n,) under logits (n, K), and dloss/dlogits (n, K).

    The gradient is (softmax(logits) - onehot(y)) / n. Computed in float64 from max-shifted logits.
    Raises ValueError when logits is not 2-D or a label is outside [0, K).
    """
    z = np.asarray(logits, dtype=np.float64)                           # (n, K)
    if z.ndim != 2:
        raise ValueError(f"logits must be 2-D (n, K), got shape {z.shape}")
    n, K = z.shape
    lab = _labels(y, n, K)
    shifted = z - z.max(axis=1, keepdims=True)                         # (n, K)
    log_norm = np.log(np.exp(shifted).sum(axis=1, keepdims=True))      # (n, 1)
    log_p = shifted - log_norm
    rows = np.arange(n)                                                # (n,)
    loss = -float(log_p[rows, lab].mean())
    grad = np.exp(log_p)
    grad[rows, lab] -= 1.0
    return loss, grad / n


class MLP:
    """Dense network ``layer_sizes[0] -> ... -> layer_sizes[-1]`` with relu or tanh between layers.

    ``params`` holds "W0" (d_0, d_1), "b0" (d_1,), ..., "W{L-1}", "b{L-1}" in that order; a layer
    computes h = a @ W + b. Raises ValueError for fewer than two sizes, a size < 1, or an unknown
    activation.
    """

    def __init__(self, layer_sizes: Sequence[int], activation: Literal["relu", "tanh"] = "relu",
                 seed: int = 0) -> None:
        """Draw weights (He normal for relu, Xavier normal for tanh) from ``seed``; biases start at 0."""
        sizes = list(layer_sizes)
        if len(sizes) < 2 or any(isinstance(s, bool) or int(s) != s or s < 1 for s in sizes):
            raise ValueError(f"layer_sizes needs at least two sizes, each >= 1, got {sizes}")
        if activation not in ("relu", "tanh"):
            raise ValueError(f"activation must be 'relu' or 'tanh', got {activation!r}")
        self.layer_sizes = [int(s) for s in sizes]
        self.activation = activation
        rng = np.random.default_rng(seed)
        self.params: dict[str, np.ndarray] = {}
        for layer, (fan_in, fan_out) in enumerate(zip(self.layer_sizes[:-1], self.layer_sizes[1:])):
            var = 2.0 / fan_in if activation == "relu" else 2.0 / (fan_in + fan_out)
            W = np.sqrt(var) * rng.standard_normal((fan_in, fan_out))  # (d_in, d_out)
            b = np.zeros(fan_out)                                      # (d_out,)
            self.params[f"W{layer}"], self.params[f"b{layer}"] = W, b
        self._trace: list[tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def n_layers(self) -> int:
        """Number of affine layers L."""
        return len(self.layer_sizes) - 1

    def _act(self, h: np.ndarray) -> np.ndarray:
        return relu(h) if self.activation == "relu" else np.tanh(h)

    def _act_grad(self, out: np.ndarray) -> np.ndarray:
        """Derivative of the activation written in terms of its output a = act(h)."""
        return relu_grad(out) if self.activation == "relu" else 1.0 - out * out

    def forward(self, X: np.ndarray) -> np.ndarray:
        """Logits (n, d_L) for inputs X (n, d_0); keeps what ``backward`` needs.

        Raises ValueError when X is not 2-D with d_0 columns (the previous cache is kept then).
        """
        a = np.asarray(X, dtype=np.float64)                            # (n, d_0)
        if a.ndim != 2 or a.shape[1] != self.layer_sizes[0]:
            raise ValueError(f"X must have shape (n, {self.layer_sizes[0]}), got {a.shape}")
        trace = []
        for layer in range(self.n_layers):
            W, b = self.params[f"W{layer}"], self.params[f"b{layer}"]
            h = np.einsum("ni,io->no", a, W) + b                       # (n, d_out)
            out = h if layer == self.n_layers - 1 else self._act(h)
            trace.append((a, out))
            a = out
        self._trace = trace
        return a

    def backward(self, dout: np.ndarray) -> dict[str, np.ndarray]:
        """Gradients of a scalar loss given dloss/dlogits ``dout`` (n, d_L) from the last forward.

        Returns a dict with the keys and shapes of ``params``. Raises RuntimeError before any
        forward and ValueError when dout's shape differs from the last output.
        """
        if self._trace is None:
            raise RuntimeError("backward called before forward")
        logits = self._trace[-1][1]
        g = np.asarray(dout, dtype=np.float64)                         # (n, K)
        if g.shape != logits.shape:
            raise ValueError(f"dout must have the logits' shape {logits.shape}, got {g.shape}")
        grads: dict[str, np.ndarray] = {}
        for layer in reversed(range(self.n_layers)):
            a_in, out = self._trace[layer]
            dh = g if layer == self.n_layers - 1 else g * self._act_grad(out)
            dW = np.einsum("ni,no->io", a_in, dh)                      # (d_in, d_out)
            db = dh.sum(axis=0)                                        # (d_out,)
            g = dh @ self.params[f"W{layer}"].T                        # (n, d_in)
            grads[f"W{layer}"], grads[f"b{layer}"] = dW, db
        return {key: grads[key] for key in self.params}

    def loss_and_grads(self, X: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        """Mean softmax cross-entropy of labels y (n,) and its gradient for every parameter.

        Inputs are checked before the forward pass, so a bad call leaves the cache untouched.
        """
        a = np.asarray(X, dtype=np.float64)                            # (n, d_0)
        if a.ndim != 2 or a.shape[1] != self.layer_sizes[0]:
            raise ValueError(f"X must have shape (n, {self.layer_sizes[0]}), got {a.shape}")
        _labels(y, a.shape[0], self.layer_sizes[-1])
        logits = self.forward(a)                                       # (n, K)
        loss, dlogits = softmax_cross_entropy(logits, y)
        return loss, self.backward(dlogits)


def train_mlp(model: MLP, X: np.ndarray, y: np.ndarray, *, lr: float = 0.1, steps: int = 500,
              batch_size: int | None = None, seed: int = 0) -> list[float]:
    """Plain SGD: ``steps`` updates p -= lr * grad on the full batch or on seeded minibatches.

    X (n, d_0), y (n,). Returns the loss of each step, measured before its update. Raises ValueError
    (before touching the model) for lr <= 0, steps < 0, batch_size outside [1, n] or bad data.
    """
    if not (np.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be finite and > 0, got {lr}")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    data = np.asarray(X, dtype=np.float64)                             # (n, d_0)
    if data.ndim != 2 or data.shape[1] != model.layer_sizes[0]:
        raise ValueError(f"X must have shape (n, {model.layer_sizes[0]}), got {data.shape}")
    n = data.shape[0]
    labels = _labels(y, n, model.layer_sizes[-1])
    if batch_size is not None and not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be in [1, {n}], got {batch_size}")
    rng = np.random.default_rng(seed)
    history: list[float] = []
    for _ in range(steps):
        if batch_size is None:
            xb, yb = data, labels
        else:
            pick = rng.choice(n, size=batch_size, replace=False)       # (m,)
            xb, yb = data[pick], labels[pick]
        loss, grads = model.loss_and_grads(xb, yb)
        for key, grad in grads.items():
            model.params[key] -= lr * grad
        history.append(loss)
    return history
