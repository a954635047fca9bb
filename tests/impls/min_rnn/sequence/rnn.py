"""A vanilla (Elman) tanh RNN cell unrolled over time, with backpropagation through ...

Plan: unroll h_t = tanh(x_t Wxh + h_{t-1} Whh + bh) and keep every state; BPTT walks time backwards
carrying dh (the upstream dL/dh_t plus what flows back from step t+1), multiplies by 1 - h_t^2 for
the tanh, and accumulates the weight gradients over all steps instead of per-step copies, because
the weights are shared. Tests: finite-difference check of every gradient, T = 1 equals one cell,
states stay in [-1, 1].
"""

from __future__ import annotations

import numpy as np


def init_rnn_params(input_size: int, hidden_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``{"Wxh": (D, H), "Whh": (H, H), "bh": (H,)}``, every entry ``~ U(-1/sqrt(H), 1/sqrt(H))``."""
    rng = np.random.default_rng(seed)
    k = 1.0 / np.sqrt(hidden_size)
    return {
        "Wxh": rng.uniform(-k, k, size=(input_size, hidden_size)),
        "Whh": rng.uniform(-k, k, size=(hidden_size, hidden_size)),
        "bh": rng.uniform(-k, k, size=hidden_size),
    }


def rnn_step(x_t: np.ndarray, h_prev: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    """``h_t = tanh(x_t @ Wxh + h_prev @ Whh + bh)``, ``(B, H)``."""
    return np.tanh(np.asarray(x_t, dtype=np.float64) @ params["Wxh"] + h_prev @ params["Whh"] + params["bh"])


def rnn_forward(
    x: np.ndarray, h0: np.ndarray, params: dict[str, np.ndarray]
) -> tuple[np.ndarray, dict]:
    """Unroll over ``x (B, T, D)``; ``hs[:, t]`` is the state after reading ``x[:, t]``."""
    x = np.asarray(x, dtype=np.float64)
    B, T, _ = x.shape
    h = np.asarray(h0, dtype=np.float64)  # (B, H)
    hs = np.empty((B, T, h.shape[1]))
    for t in range(T):
        h = rnn_step(x[:, t], h, params)
        hs[:, t] = h
    return hs, {"x": x, "h0": np.asarray(h0, dtype=np.float64), "hs": hs, "params": params}


def rnn_backward(dhs: np.ndarray, cache: dict) -> dict[str, np.ndarray]:
    """BPTT: gradients w.r.t. ``x``, ``h0`` and the three parameters."""
    x, h0, hs, p = cache["x"], cache["h0"], cache["hs"], cache["params"]
    dhs = np.asarray(dhs, dtype=np.float64)
    B, T, _ = x.shape
    dx = np.zeros_like(x)
    dWxh = np.zeros_like(p["Wxh"])
    dWhh = np.zeros_like(p["Whh"])
    dbh = np.zeros_like(p["bh"])
    dh_next = np.zeros_like(h0)  # (B, H) gradient flowing back from step t+1
    for t in reversed(range(T)):
        h_prev = hs[:, t - 1] if t > 0 else h0
        da = (dhs[:, t] + dh_next) * (1.0 - hs[:, t] ** 2)  # (B, H) through tanh
        dWxh += x[:, t].T @ da
        dWhh += h_prev.T @ da
        dbh += da.sum(axis=0)
        dx[:, t] = da @ p["Wxh"].T
        dh_next = da @ p["Whh"].T
    return {"x": dx, "h0": dh_next, "Wxh": dWxh, "Whh": dWhh, "bh": dbh}
