"""A multilayer perceptron with a hand-written backward pass, in NumPy (canon item #11).

What it implements: ``relu`` and its derivative, a stable ``softmax_cross_entropy`` that returns the
mean loss and its gradient ``(softmax - onehot) / n``, an ``MLP`` whose ``forward`` caches every
pre-activation ``h_l = a_l @ W_l + b_l`` and activation ``a_{l+1}``, whose ``backward`` applies the
chain rule layer by layer in reverse, and ``train_mlp``, plain (minibatch) SGD.

The subtle point: the ``1 / n`` of the mean loss lives in ``dlogits`` and nowhere else, so ``db`` is a
*sum* over the batch, not a mean (averaging again divides by ``n`` twice). The second one: the
activation derivative is taken at the right quantity: ``relu'(h)`` on the pre-activation, ``1 - a^2``
on the tanh *output*.

Shape letters: ``n`` batch rows, ``d_in`` / ``d_out`` the widths of one layer (``d_l``, ``d_{l+1}``),
``K`` classes (the last width), ``d0`` the input width.

Trade-off: the loss is computed from ``log_softmax = z - max(z) - log(sum(exp(z - max(z))))`` instead
of ``log(softmax(z))`` because at logits of +-1e4 ``exp`` overflows to inf (float64 overflows past
709.78) and ``softmax`` underflows to 0, whose log is -inf; after the max shift every exponent is
``<= 0`` and the loss stays finite (2e4 at worst). The gradient is returned by the same call rather
than recomputed because it reuses ``exp(log_softmax)``.

What to test: finite differences on every parameter of a 5-4-3 net; forward and gradients against
torch autograd with copied weights (atol 1e-10); finite loss and gradient at logits +-1e4; XOR and a
three-arm spiral learned to the thresholds; a batch of one; the He / Xavier init scales.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

_ACTIVATIONS = ("relu", "tanh")


def relu(x: np.ndarray) -> np.ndarray:
    """``max(x, 0)`` element-wise; float64 array of ``x``'s shape (any shape)."""
    return np.maximum(np.asarray(x, dtype=np.float64), 0.0)                       # (...,)


def relu_grad(x: np.ndarray) -> np.ndarray:
    """Derivative of ``relu``: ``1.0`` where ``x > 0``, else ``0.0`` (also at the kink); float64."""
    return (np.asarray(x) > 0).astype(np.float64)                                 # (...,)


def softmax_cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy of integer labels under ``softmax(logits)``, and its gradient.

    Args:
        logits: ``(n, K)`` array-like, converted to float64 (float32 input is upcast).
        y: ``(n,)`` integer labels in ``[0, K)``.

    Returns:
        ``(loss, dlogits)``: the mean loss as a Python float and ``(n, K)`` float64
        ``(softmax(logits) - onehot(y)) / n``.

    Raises:
        ValueError: ``logits`` not 2-D or not finite; ``y`` not ``(n,)``, not integer, or out of range.

    Source: the log-sum-exp trick; seed canon #11.
    """
    z = _check_logits(logits)                                                     # (n, K)
    n, K = z.shape
    y = _check_labels(y, n, K)                                                    # (n,)
    shifted = z - np.max(z, axis=1, keepdims=True)                                # (n, K)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))  # (n, K)
    rows = np.arange(n)                                                           # (n,)
    loss = -float(np.mean(log_probs[rows, y]))
    dlogits = np.exp(log_probs)                                                   # (n, K)
    dlogits[rows, y] -= 1.0
    return loss, dlogits / n


class MLP:
    """Fully connected network ``h_l = a_l @ W_l + b_l``, activation between layers, none after the last.

    Args:
        layer_sizes: widths ``[d0, d1, ..., d_L]``; at least two, each ``>= 1``.
        activation: ``"relu"`` (He normal init, ``N(0, 2 / fan_in)``) or ``"tanh"`` (Xavier normal,
            ``N(0, 2 / (fan_in + fan_out))``). Biases start at zero.
        seed: seeds ``np.random.default_rng`` for the weights.

    Attributes:
        params: ``"W0"`` ``(d0, d1)``, ``"b0"`` ``(d1,)``, ..., ``"W{L-1}"``, ``"b{L-1}"``, float64.

    Raises:
        ValueError: fewer than two sizes or a size ``< 1``; unknown ``activation``.

    Source: He et al. 2015 (init for ReLU), Glorot & Bengio 2010 (init for tanh); seed canon #11.
    """

    def __init__(
        self, layer_sizes: Sequence[int], activation: Literal["relu", "tanh"] = "relu", seed: int = 0
    ) -> None:
        sizes = _check_architecture(layer_sizes, activation)
        self.layer_sizes = sizes
        self.activation = activation
        self.n_layers = len(sizes) - 1
        rng = np.random.default_rng(seed)
        self.params: dict[str, np.ndarray] = {}
        for l, (fan_in, fan_out) in enumerate(zip(self.layer_sizes[:-1], self.layer_sizes[1:])):
            var = 2.0 / fan_in if activation == "relu" else 2.0 / (fan_in + fan_out)
            W = rng.normal(0.0, np.sqrt(var), size=(fan_in, fan_out))             # (d_in, d_out)
            b = np.zeros(fan_out)                                                 # (d_out,)
            self.params[f"W{l}"], self.params[f"b{l}"] = W, b
        self._cache: tuple[list[np.ndarray], list[np.ndarray]] | None = None

    def forward(self, X: np.ndarray) -> np.ndarray:
        """Logits of a batch; caches the inputs of every layer for ``backward``.

        Args:
            X: ``(n, d0)`` array-like, converted to float64.

        Returns:
            ``(n, d_L)`` float64 logits (no activation after the last layer).

        Raises:
            ValueError: ``X`` not 2-D or its width is not ``layer_sizes[0]``.
        """
        X = self._check_input(X)                                                  # (n, d0)
        inputs = [X]  # a_l, the input of layer l
        pre = []  # h_l, the pre-activation of layer l
        a = X                                                                     # (n, d0)
        for l in range(self.n_layers):
            h = a @ self.params[f"W{l}"] + self.params[f"b{l}"]                   # (n, d_out)
            pre.append(h)
            if l < self.n_layers - 1:
                a = relu(h) if self.activation == "relu" else np.tanh(h)          # (n, d_out)
                inputs.append(a)
        self._cache = (inputs, pre)
        return h                                                                  # (n, d_out)

    def backward(self, dout: np.ndarray) -> dict[str, np.ndarray]:
        """Gradients of a scalar loss w.r.t. every parameter, given ``dout = dL/dlogits``.

        Args:
            dout: ``(n, d_L)`` array-like, the same shape as the last ``forward`` output.

        Returns:
            Dict with the keys and shapes of ``params``: ``"W{l}"`` ``(d_l, d_{l+1})`` = ``a_l.T @ dh_l``,
            ``"b{l}"`` ``(d_{l+1},)`` = ``dh_l`` summed over the batch.

        Raises:
            RuntimeError: no ``forward`` ran before.
            ValueError: ``dout`` shape differs from the last forward output.
        """
        if self._cache is None:
            raise RuntimeError("backward called before forward: run forward(X) first")
        inputs, pre = self._cache
        dh = _check_dout(dout, pre[-1].shape)                                     # (n, d_L)
        grads: dict[str, np.ndarray] = {}
        for l in reversed(range(self.n_layers)):
            a_in = inputs[l]
            dW = a_in.T @ dh                                                      # (d_in, d_out)
            db = np.sum(dh, axis=0)                                               # (d_out,)
            grads[f"W{l}"], grads[f"b{l}"] = dW, db
            if l > 0:
                da = dh @ self.params[f"W{l}"].T                                  # (n, d_in)
                dh = da * self._activation_grad(pre[l - 1], inputs[l])            # (n, d_in)
        return {key: grads[key] for key in self.params}

    def loss_and_grads(self, X: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        """Forward, mean softmax cross-entropy, backward.

        Args:
            X: ``(n, d0)`` inputs. y: ``(n,)`` integer labels in ``[0, d_L)``.

        Returns:
            ``(loss, grads)``: the mean loss and a dict shaped like ``params``.

        Raises:
            ValueError: as ``forward``, or labels not 1-D of length ``n``, not integer, out of range
                (checked before ``forward`` touches the cache).
        """
        X = self._check_input(X)                                                  # (n, d0)
        _check_labels(y, X.shape[0], self.layer_sizes[-1])
        logits = self.forward(X)                                                  # (n, K)
        loss, dlogits = softmax_cross_entropy(logits, y)
        return loss, self.backward(dlogits)

    def _activation_grad(self, h: np.ndarray, a: np.ndarray) -> np.ndarray:
        """Derivative of the hidden activation: ``relu'(h)``, or ``1 - a^2`` from the tanh output ``a``."""
        if self.activation == "relu":
            return relu_grad(h)
        return 1.0 - a * a

    def _check_input(self, X: np.ndarray) -> np.ndarray:
        arr = np.asarray(X, dtype=np.float64)                                     # (...,)  checked below
        if arr.ndim != 2 or arr.shape[1] != self.layer_sizes[0]:
            raise ValueError(f"X must have shape (n, {self.layer_sizes[0]}), got {arr.shape}")
        return arr


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
    """Plain SGD on the mean softmax cross-entropy; updates ``model.params`` in place.

    Each step uses the full batch (``batch_size=None``) or ``batch_size`` rows drawn without
    replacement by ``np.random.default_rng(seed)``.

    Args:
        model: the network to train. X: ``(n, d0)`` inputs. y: ``(n,)`` integer labels.
        lr: learning rate, finite and ``> 0``. steps: number of updates, ``>= 1``.
        batch_size: ``None`` or ``1 <= batch_size <= n``. seed: seeds the minibatch draws.

    Returns:
        The loss of each step, before its update (``len == steps``).

    Raises:
        ValueError: invalid ``lr``, ``steps`` or ``batch_size``, or data rejected by ``loss_and_grads``.
    """
    _check_schedule(lr, steps)
    X = model._check_input(X)                                                     # (n, d0)
    n = X.shape[0]
    y = _check_labels(y, n, model.layer_sizes[-1])                                # (n,)
    _check_batch_size(batch_size, n)
    rng = np.random.default_rng(seed)
    losses: list[float] = []
    for _ in range(steps):
        if batch_size is None:
            loss, grads = model.loss_and_grads(X, y)
        else:
            idx = rng.choice(n, size=batch_size, replace=False)                   # (batch_size,)
            loss, grads = model.loss_and_grads(X[idx], y[idx])
        for key, grad in grads.items():
            model.params[key] -= lr * grad
        losses.append(loss)
    return losses


def _check_labels(y: np.ndarray, n: int, K: int) -> np.ndarray:
    """``y`` as int64 of shape ``(n,)`` with values in ``[0, K)``, or ValueError naming ``y``."""
    arr = np.asarray(y)                                                           # (...,)  checked below
    if arr.shape != (n,):
        raise ValueError(f"y must have shape ({n},), got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"y must hold integer class labels, got dtype {arr.dtype}")
    if n and (arr.min() < 0 or arr.max() >= K):
        raise ValueError(f"y must hold labels in [0, {K}), got range [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int64)                                                   # (n,)


def _check_logits(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)                                      # (...,)  checked below
    if z.ndim != 2:
        raise ValueError(f"logits must be 2-D (n, K), got shape {z.shape}")
    if not np.isfinite(z).all():
        raise ValueError("logits must be finite")
    return z                                                                      # (n, K)


def _check_architecture(layer_sizes: Sequence[int], activation: str) -> list[int]:
    sizes = list(layer_sizes)
    if len(sizes) < 2 or not all(_is_int(s) and s >= 1 for s in sizes):
        raise ValueError(f"layer_sizes must hold at least two integers >= 1, got {layer_sizes!r}")
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {_ACTIVATIONS}, got {activation!r}")
    return [int(s) for s in sizes]


def _check_dout(dout: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    dh = np.asarray(dout, dtype=np.float64)                                       # (...,)  checked below
    if dh.shape != shape:
        raise ValueError(f"dout must have the forward output's shape {shape}, got {dh.shape}")
    return dh                                                                     # (n, d_out)


def _check_schedule(lr: float, steps: int) -> None:
    if not (np.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")
    if not (_is_int(steps) and steps >= 1):
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")


def _check_batch_size(batch_size: int | None, n: int) -> None:
    if batch_size is not None and not (_is_int(batch_size) and 1 <= batch_size <= n):
        raise ValueError(f"batch_size must be None or an integer in [1, {n}], got {batch_size!r}")


def _is_int(value: object) -> bool:
    """True for Python and NumPy integers, False for bools and everything else."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
