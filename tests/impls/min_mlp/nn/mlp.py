"""A multilayer perceptron with a hand-written backward pass, in NumPy (canon item ...

Plan: forward caches each layer's input a_l and pre-activation h_l; backward walks the layers in
reverse, dW_l = a_l^T dh_l, db_l = sum_n dh_l, da_l = dh_l W_l^T, times the activation derivative.
The loss works from logits with log-sum-exp instead of softmax-then-log, because log(0) blows up for
confident wrong predictions. He init for ReLU, Xavier for tanh. Tests: finite-difference gradient
check of every parameter, an XOR-style toy problem trains to low loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np


def relu(x: np.ndarray) -> np.ndarray:
    """``max(x, 0)`` element-wise, float64."""
    return np.maximum(np.asarray(x, dtype=np.float64), 0.0)


def relu_grad(x: np.ndarray) -> np.ndarray:
    """1.0 where ``x > 0`` else 0.0 (0 at the kink), float64."""
    return (np.asarray(x) > 0).astype(np.float64)


def softmax_cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean CE of integer labels under ``softmax(logits)`` and ``dlogits = (p - onehot) / n``."""
    z = np.asarray(logits, dtype=np.float64)  # (n, K)
    y = np.asarray(y)
    n = z.shape[0]
    s = z - z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(s).sum(axis=1, keepdims=True))  # (n, 1)
    logp = s - lse  # (n, K)
    loss = float(-logp[np.arange(n), y].mean())
    d = np.exp(logp)  # (n, K)
    d[np.arange(n), y] -= 1.0
    return loss, d / n


class MLP:
    """Fully connected network, activation between layers, none after the last."""

    def __init__(
        self, layer_sizes: Sequence[int], activation: Literal["relu", "tanh"] = "relu", seed: int = 0
    ) -> None:
        rng = np.random.default_rng(seed)
        self.layer_sizes = list(layer_sizes)
        self.activation = activation
        self.n_layers = len(self.layer_sizes) - 1
        self.params: dict[str, np.ndarray] = {}
        for l, (fi, fo) in enumerate(zip(self.layer_sizes[:-1], self.layer_sizes[1:])):
            std = np.sqrt(2.0 / fi) if activation == "relu" else np.sqrt(2.0 / (fi + fo))
            self.params[f"W{l}"] = rng.normal(0.0, std, size=(fi, fo))
            self.params[f"b{l}"] = np.zeros(fo)
        self._cache: list[tuple[np.ndarray, np.ndarray]] | None = None

    def _act(self, h: np.ndarray) -> np.ndarray:
        return relu(h) if self.activation == "relu" else np.tanh(h)

    def _act_grad(self, h: np.ndarray) -> np.ndarray:
        return relu_grad(h) if self.activation == "relu" else 1.0 - np.tanh(h) ** 2

    def forward(self, X: np.ndarray) -> np.ndarray:
        """Logits ``(n, d_L)``; caches ``(a_l, h_l)`` of every layer."""
        a = np.asarray(X, dtype=np.float64)  # (n, d0)
        cache = []
        for l in range(self.n_layers):
            h = a @ self.params[f"W{l}"] + self.params[f"b{l}"]  # (n, d_{l+1})
            cache.append((a, h))
            a = self._act(h) if l < self.n_layers - 1 else h
        self._cache = cache
        return a

    def backward(self, dout: np.ndarray) -> dict[str, np.ndarray]:
        """Gradients w.r.t. every parameter given ``dout = dL/dlogits``."""
        dh = np.asarray(dout, dtype=np.float64)  # (n, d_L)
        grads: dict[str, np.ndarray] = {}
        for l in reversed(range(self.n_layers)):
            a, _ = self._cache[l]
            grads[f"W{l}"] = a.T @ dh  # (d_l, d_{l+1})
            grads[f"b{l}"] = dh.sum(axis=0)  # (d_{l+1},)
            if l > 0:
                da = dh @ self.params[f"W{l}"].T  # (n, d_l)
                dh = da * self._act_grad(self._cache[l - 1][1])
        return {k: grads[k] for k in self.params}

    def loss_and_grads(self, X: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        """Forward, mean softmax cross-entropy, backward."""
        loss, dlogits = softmax_cross_entropy(self.forward(X), y)
        return loss, self.backward(dlogits)


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
    """Plain SGD on the mean softmax cross-entropy; returns the loss of each step before its update."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    rng = np.random.default_rng(seed)
    n = X.shape[0]
    losses = []
    for _ in range(steps):
        if batch_size is None:
            Xb, yb = X, y
        else:
            idx = rng.choice(n, size=batch_size, replace=False)
            Xb, yb = X[idx], y[idx]
        loss, grads = model.loss_and_grads(Xb, yb)
        losses.append(loss)
        for k, g in grads.items():
            model.params[k] -= lr * g
    return losses
