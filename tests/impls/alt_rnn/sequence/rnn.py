"""Alternative correct tanh RNN with BPTT (item #22), written differently from the reference.

The input projection ``x @ Wxh + bh`` is hoisted out of the time loop as one einsum over all steps
(only ``h @ Whh`` is sequential), and the backward collects ``dpre`` for every step in a
``(B, T, H)`` buffer first and forms the weight gradients afterwards with one einsum each, pairing
``dpre_t`` with the shifted states ``[h0, h_1, ..., h_{T-1}]``.

Shape letters: ``B`` batch, ``T`` time, ``D`` input width, ``H`` hidden width.
"""

from __future__ import annotations

import numpy as np


def init_rnn_params(input_size: int, hidden_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``Wxh (D, H)``, ``Whh (H, H)``, ``bh (H,)`` from ``U(-1/sqrt(H), 1/sqrt(H))``; ValueError on bad sizes."""
    for name, value in (("input_size", input_size), ("hidden_size", hidden_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    gen = np.random.default_rng(seed)
    scale = hidden_size ** -0.5
    flat = gen.uniform(-scale, scale, size=(input_size + hidden_size + 1) * hidden_size)   # ((D+H+1)*H,)
    stacked = flat.reshape(input_size + hidden_size + 1, hidden_size)                     # (D+H+1, H)
    return {
        "Wxh": stacked[:input_size].copy(),
        "Whh": stacked[input_size:-1].copy(),
        "bh": stacked[-1].copy(),
    }


def _weights(params: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    try:
        Wxh, Whh, bh = (np.asarray(params[k], dtype=np.float64) for k in ("Wxh", "Whh", "bh"))
    except (KeyError, TypeError) as err:
        raise ValueError(f"params is missing {err}") from None
    ok = Wxh.ndim == 2 and Whh.shape == (Wxh.shape[1],) * 2 and bh.shape == (Wxh.shape[1],)
    if not ok:
        raise ValueError(f"params shapes inconsistent: {Wxh.shape}, {Whh.shape}, {bh.shape}")
    return Wxh, Whh, bh


def rnn_step(x_t: np.ndarray, h_prev: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    """``tanh(x_t Wxh + h_prev Whh + bh)``: ``(B, D), (B, H) -> (B, H)``."""
    Wxh, Whh, bh = _weights(params)
    x_t, h_prev = np.asarray(x_t, dtype=np.float64), np.asarray(h_prev, dtype=np.float64)
    if x_t.ndim != 2 or x_t.shape[-1] != Wxh.shape[0]:
        raise ValueError(f"x_t has shape {x_t.shape}, expected (B, {Wxh.shape[0]})")
    if h_prev.shape != (x_t.shape[0], Whh.shape[0]):
        raise ValueError(f"h_prev has shape {h_prev.shape}, expected {(x_t.shape[0], Whh.shape[0])}")
    pre = np.einsum("bd,dh->bh", x_t, Wxh) + np.einsum("bk,kh->bh", h_prev, Whh) + bh   # (B, H)
    return np.tanh(pre)                                                                 # (B, H)


def rnn_forward(x: np.ndarray, h0: np.ndarray, params: dict[str, np.ndarray]) -> tuple[np.ndarray, dict]:
    """``(B, T, D), (B, H) -> hs (B, T, H), cache``."""
    Wxh, Whh, bh = _weights(params)
    x, h0 = np.asarray(x, dtype=np.float64), np.asarray(h0, dtype=np.float64)
    if x.ndim != 3 or x.shape[-1] != Wxh.shape[0]:
        raise ValueError(f"x has shape {x.shape}, expected (B, T, {Wxh.shape[0]})")
    if h0.shape != (x.shape[0], Whh.shape[0]):
        raise ValueError(f"h0 has shape {h0.shape}, expected {(x.shape[0], Whh.shape[0])}")
    drive = np.einsum("btd,dh->bth", x, Wxh) + bh   # (B, T, H)
    hs = np.zeros_like(drive)                       # (B, T, H)
    h = h0
    for t in range(x.shape[1]):
        h = np.tanh(drive[:, t] + h @ Whh)          # (B, H)
        hs[:, t] = h
    return hs, {"inputs": x, "start": h0, "states": hs, "weights": (Wxh, Whh)}


def rnn_backward(dhs: np.ndarray, cache: dict) -> dict[str, np.ndarray]:
    """BPTT: ``dhs (B, T, H)`` -> grads of ``x``, ``h0``, ``Wxh``, ``Whh``, ``bh``."""
    x, h0, hs = cache["inputs"], cache["start"], cache["states"]
    Wxh, Whh = cache["weights"]
    dhs = np.asarray(dhs, dtype=np.float64)
    if dhs.shape != hs.shape:
        raise ValueError(f"dhs has shape {dhs.shape}, expected {hs.shape}")
    dpres = np.empty_like(hs)                                                # (B, T, H)
    carry = np.zeros_like(h0)                                                # (B, H)
    for t in range(hs.shape[1] - 1, -1, -1):
        dpres[:, t] = (dhs[:, t] + carry) * (1.0 - hs[:, t] * hs[:, t])      # (B, H)
        carry = np.einsum("bh,kh->bk", dpres[:, t], Whh)                     # (B, H)
    prev = np.concatenate([h0[:, None, :], hs[:, :-1]], axis=1)              # (B, T, H)
    return {
        "x": np.einsum("bth,dh->btd", dpres, Wxh),
        "h0": carry,
        "Wxh": np.einsum("btd,bth->dh", x, dpres),
        "Whh": np.einsum("btk,bth->kh", prev, dpres),
        "bh": dpres.sum(axis=(0, 1)),
    }
