"""An LSTM cell unrolled over time, with backpropagation through time, in NumPy ...

Plan: one fused matmul per step gives all four gate pre-activations in torch order [i, f, g, o];
sigmoid on i, f, o (the stable two-branch form instead of 1/(1+exp(-z)), because exp overflows for
large negative z), tanh on g. BPTT carries dh and dc backwards: dc picks up dh * o * (1 - tanh(c)^2),
then the gate derivatives are stacked back into one (B, 4H) array for the weight gradients. Tests:
finite-difference gradients of x, h0, c0 and every parameter, agreement with torch.nn.LSTM.
"""

from __future__ import annotations

import numpy as np


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """Stable logistic: ``exp`` only sees non-positive arguments."""
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def init_lstm_params(
    input_size: int, hidden_size: int, seed: int = 0, forget_bias: float = 0.0
) -> dict[str, np.ndarray]:
    """``{"Wx": (D, 4H), "Wh": (H, 4H), "b": (4H,)}``; weights ``U(-1/sqrt(H), 1/sqrt(H))``."""
    rng = np.random.default_rng(seed)
    H = hidden_size
    k = 1.0 / np.sqrt(H)
    b = np.zeros(4 * H)
    b[H : 2 * H] = forget_bias
    return {
        "Wx": rng.uniform(-k, k, size=(input_size, 4 * H)),
        "Wh": rng.uniform(-k, k, size=(H, 4 * H)),
        "b": b,
    }


def lstm_step(
    x_t: np.ndarray, h_prev: np.ndarray, c_prev: np.ndarray, params: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, dict]:
    """One LSTM step; returns ``(h, c, step_cache)``."""
    x_t = np.asarray(x_t, dtype=np.float64)
    h_prev = np.asarray(h_prev, dtype=np.float64)
    c_prev = np.asarray(c_prev, dtype=np.float64)
    H = h_prev.shape[1]
    a = x_t @ params["Wx"] + h_prev @ params["Wh"] + params["b"]  # (B, 4H)
    i = _sigmoid(a[:, :H])
    f = _sigmoid(a[:, H : 2 * H])
    g = np.tanh(a[:, 2 * H : 3 * H])
    o = _sigmoid(a[:, 3 * H :])
    c = f * c_prev + i * g  # (B, H)
    tc = np.tanh(c)
    h = o * tc  # (B, H)
    step = {"x": x_t, "h_prev": h_prev, "c_prev": c_prev, "i": i, "f": f, "g": g, "o": o, "tc": tc}
    return h, c, step


def lstm_forward(
    x: np.ndarray, h0: np.ndarray, c0: np.ndarray, params: dict[str, np.ndarray]
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], dict]:
    """Unroll over ``x (B, T, D)``; returns ``(hs (B, T, H), (h_T, c_T), cache)``."""
    x = np.asarray(x, dtype=np.float64)
    B, T, _ = x.shape
    h = np.asarray(h0, dtype=np.float64)
    c = np.asarray(c0, dtype=np.float64)
    hs = np.empty((B, T, h.shape[1]))
    steps = []
    for t in range(T):
        h, c, st = lstm_step(x[:, t], h, c, params)
        hs[:, t] = h
        steps.append(st)
    return hs, (h, c), {"steps": steps, "params": params, "x_shape": x.shape}


def lstm_backward(
    dhs: np.ndarray, cache: dict, dh_T: np.ndarray | None = None, dc_T: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """BPTT: gradients w.r.t. ``x``, ``h0``, ``c0``, ``Wx``, ``Wh``, ``b``."""
    p, steps = cache["params"], cache["steps"]
    dhs = np.asarray(dhs, dtype=np.float64)
    B, T, _ = cache["x_shape"]
    H = dhs.shape[2]
    dx = np.zeros(cache["x_shape"])
    dWx = np.zeros_like(p["Wx"])
    dWh = np.zeros_like(p["Wh"])
    db = np.zeros_like(p["b"])
    dh = np.zeros((B, H)) if dh_T is None else np.array(dh_T, dtype=np.float64)
    dc = np.zeros((B, H)) if dc_T is None else np.array(dc_T, dtype=np.float64)
    for t in reversed(range(T)):
        s = steps[t]
        dh = dh + dhs[:, t]
        do = dh * s["tc"]
        dc = dc + dh * s["o"] * (1.0 - s["tc"] ** 2)
        di = dc * s["g"]
        dg = dc * s["i"]
        df = dc * s["c_prev"]
        da = np.concatenate([
            di * s["i"] * (1.0 - s["i"]),
            df * s["f"] * (1.0 - s["f"]),
            dg * (1.0 - s["g"] ** 2),
            do * s["o"] * (1.0 - s["o"]),
        ], axis=1)  # (B, 4H)
        dWx += s["x"].T @ da
        dWh += s["h_prev"].T @ da
        db += da.sum(axis=0)
        dx[:, t] = da @ p["Wx"].T
        dh = da @ p["Wh"].T
        dc = dc * s["f"]
    return {"x": dx, "h0": dh, "c0": dc, "Wx": dWx, "Wh": dWh, "b": db}
