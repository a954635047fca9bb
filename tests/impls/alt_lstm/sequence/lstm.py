"""Alternative correct LSTM with BPTT (item #23), written differently from the reference.

The gate pre-activations are reshaped to ``(B, 4, H)`` and split along axis 1 instead of sliced; the
sigmoid is the tanh identity ``sigmoid(z) = (1 + tanh(z / 2)) / 2`` (overflow-free, no branches); the
forward keeps ``(B, T, H)`` buffers per gate instead of a list of step dicts; and the backward stores
``dgates`` for every step in a ``(B, T, 4*H)`` buffer and forms the weight gradients with one einsum
each after the loop.

Shape letters: ``B`` batch, ``T`` time, ``D`` input width, ``H`` hidden width.
"""

from __future__ import annotations

import math

import numpy as np


def _sig(z: np.ndarray) -> np.ndarray:
    return 0.5 + 0.5 * np.tanh(0.5 * z)


def init_lstm_params(
    input_size: int, hidden_size: int, seed: int = 0, forget_bias: float = 0.0
) -> dict[str, np.ndarray]:
    """``Wx (D, 4*H)``, ``Wh (H, 4*H)`` from ``U(-1/sqrt(H), 1/sqrt(H))``; ``b (4*H,)`` zero but the forget block."""
    for name, value in (("input_size", input_size), ("hidden_size", hidden_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    try:
        fb = float(forget_bias)
    except (TypeError, ValueError):
        raise ValueError(f"forget_bias must be a real number, got {forget_bias!r}") from None
    if not math.isfinite(fb):
        raise ValueError(f"forget_bias must be finite, got {forget_bias!r}")
    gen = np.random.default_rng(seed)
    k = 1.0 / math.sqrt(hidden_size)
    Wx = gen.uniform(-k, k, size=(input_size, 4 * hidden_size))    # (D, 4*H)
    Wh = gen.uniform(-k, k, size=(hidden_size, 4 * hidden_size))   # (H, 4*H)
    blocks = np.zeros((4, hidden_size))                            # (4, H)
    blocks[1] = fb
    return {"Wx": Wx, "Wh": Wh, "b": blocks.reshape(-1)}


def _unpack(params: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not isinstance(params, dict):
        raise ValueError("params must be a dict")
    try:
        Wx, Wh, b = (np.asarray(params[k], dtype=np.float64) for k in ("Wx", "Wh", "b"))
    except KeyError as err:
        raise ValueError(f"params is missing key {err}") from None
    H = Wh.shape[0] if Wh.ndim == 2 else -1
    if H <= 0 or Wh.shape != (H, 4 * H) or Wx.ndim != 2 or Wx.shape[1] != 4 * H or b.shape != (4 * H,):
        raise ValueError(f"params shapes are inconsistent: Wx {Wx.shape}, Wh {Wh.shape}, b {b.shape}")
    return Wx, Wh, b


def _expect(name: str, arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(arr, dtype=np.float64)
    if arr.shape != shape:
        raise ValueError(f"{name} has shape {arr.shape}, expected {shape}")
    return arr


def _cell(x_t, h_prev, c_prev, Wx, Wh, b):  # noqa: ANN001, ANN202
    H = Wh.shape[0]
    z = (np.einsum("bd,dk->bk", x_t, Wx) + np.einsum("bj,jk->bk", h_prev, Wh) + b).reshape(-1, 4, H)   # (B, 4, H)
    i, f, o = _sig(z[:, 0]), _sig(z[:, 1]), _sig(z[:, 3])
    g = np.tanh(z[:, 2])
    c = f * c_prev + i * g
    return o * np.tanh(c), c, (i, f, g, o)


def lstm_step(x_t, h_prev, c_prev, params):  # noqa: ANN001, ANN201
    """One step; returns ``h (B, H)``, ``c (B, H)`` and a dict of the gates."""
    Wx, Wh, b = _unpack(params)
    x_t = np.asarray(x_t, dtype=np.float64)
    if x_t.ndim != 2 or x_t.shape[1] != Wx.shape[0]:
        raise ValueError(f"x_t has shape {x_t.shape}, expected (B, {Wx.shape[0]})")
    shape = (x_t.shape[0], Wh.shape[0])
    h_prev, c_prev = _expect("h_prev", h_prev, shape), _expect("c_prev", c_prev, shape)
    h, c, (i, f, g, o) = _cell(x_t, h_prev, c_prev, Wx, Wh, b)
    return h, c, {"i": i, "f": f, "g": g, "o": o}


def lstm_forward(x, h0, c0, params):  # noqa: ANN001, ANN201
    """``(B, T, D)`` -> ``hs (B, T, H)``, ``(h_T, c_T)``, cache."""
    Wx, Wh, b = _unpack(params)
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 3 or x.shape[2] != Wx.shape[0]:
        raise ValueError(f"x has shape {x.shape}, expected (B, T, {Wx.shape[0]})")
    B, T, _ = x.shape
    H = Wh.shape[0]
    h0, c0 = _expect("h0", h0, (B, H)), _expect("c0", c0, (B, H))
    buf = {k: np.zeros((B, T, H)) for k in ("h", "c", "i", "f", "g", "o")}
    h, c = h0, c0
    for t in range(T):
        h, c, gates = _cell(x[:, t], h, c, Wx, Wh, b)
        buf["h"][:, t], buf["c"][:, t] = h, c
        for name, value in zip("ifgo", gates):
            buf[name][:, t] = value
    return buf["h"].copy(), (h, c), {"x": x, "h0": h0, "c0": c0, "buf": buf, "W": (Wx, Wh)}


def lstm_backward(dhs, cache, dh_T=None, dc_T=None):  # noqa: ANN001, ANN201
    """BPTT through the buffers; returns grads of ``x``, ``h0``, ``c0``, ``Wx``, ``Wh``, ``b``."""
    x, buf, (Wx, Wh) = cache["x"], cache["buf"], cache["W"]
    B, T, H = buf["h"].shape
    dhs = _expect("dhs", dhs, (B, T, H))
    dh_carry = np.zeros((B, H)) if dh_T is None else _expect("dh_T", dh_T, (B, H)).copy()
    dc_carry = np.zeros((B, H)) if dc_T is None else _expect("dc_T", dc_T, (B, H)).copy()
    c_prev_all = np.concatenate([cache["c0"][:, None], buf["c"][:, :-1]], axis=1)   # (B, T, H)
    h_prev_all = np.concatenate([cache["h0"][:, None], buf["h"][:, :-1]], axis=1)   # (B, T, H)
    dz = np.zeros((B, T, 4, H))                                                     # (B, T, 4, H)
    for t in range(T - 1, -1, -1):
        i, f, g, o = (buf[k][:, t] for k in "ifgo")
        tc = np.tanh(buf["c"][:, t])
        dh = dhs[:, t] + dh_carry
        dc = dc_carry + dh * o * (1.0 - tc * tc)
        dz[:, t, 0] = dc * g * i * (1.0 - i)
        dz[:, t, 1] = dc * c_prev_all[:, t] * f * (1.0 - f)
        dz[:, t, 2] = dc * i * (1.0 - g * g)
        dz[:, t, 3] = dh * tc * o * (1.0 - o)
        dh_carry = np.einsum("bk,jk->bj", dz[:, t].reshape(B, 4 * H), Wh)
        dc_carry = dc * f
    dzf = dz.reshape(B, T, 4 * H)   # (B, T, 4*H)
    return {
        "x": np.einsum("btk,dk->btd", dzf, Wx),
        "h0": dh_carry,
        "c0": dc_carry,
        "Wx": np.einsum("btd,btk->dk", x, dzf),
        "Wh": np.einsum("btj,btk->jk", h_prev_all, dzf),
        "b": dzf.sum(axis=(0, 1)),
    }
