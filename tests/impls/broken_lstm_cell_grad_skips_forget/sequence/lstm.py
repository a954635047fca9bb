"""LSTM with ONE classic mistake (broken variant of item #23): the cell-state gradient is passed to the
previous step unchanged, dc_prev = dc, instead of dc * f (the forget gate is forgotten on the
highway). Caught by test_gradients_match_torch_autograd, test_gradients_match_finite_differences and
test_single_step_equals_lstm_step (dc0 = f * dc_T).
"""

from __future__ import annotations

import numpy as np

_PARAM_KEYS = ("Wx", "Wh", "b")


def init_lstm_params(
    input_size: int, hidden_size: int, seed: int = 0, forget_bias: float = 0.0
) -> dict[str, np.ndarray]:
    """Parameters of one LSTM cell, gate blocks in torch order ``[i, f, g, o]``.

    Args:
        input_size: ``D``, an integer ``>= 1``. hidden_size: ``H``, an integer ``>= 1``.
        seed: seeds ``np.random.default_rng``. forget_bias: finite value added to the forget block.

    Returns:
        ``{"Wx": (D, 4*H), "Wh": (H, 4*H), "b": (4*H,)}``, float64. ``Wx``, ``Wh`` ``~ U(-1/sqrt(H),
        1/sqrt(H))`` as ``torch.nn.LSTM``; ``b`` is zero except ``b[H:2H] = forget_bias``. ``b`` plays the
        role of torch's ``bias_ih + bias_hh``.

    Raises:
        ValueError: ``input_size`` or ``hidden_size`` not an integer ``>= 1``; ``forget_bias`` not finite.

    Source: Hochreiter & Schmidhuber 1997; Gers et al. 2000 (forget gate); Jozefowicz et al. 2015.
    """
    if not (_is_int(input_size) and input_size >= 1):
        raise ValueError(f"input_size must be an integer >= 1, got {input_size!r}")
    if not (_is_int(hidden_size) and hidden_size >= 1):
        raise ValueError(f"hidden_size must be an integer >= 1, got {hidden_size!r}")
    if isinstance(forget_bias, bool) or not isinstance(forget_bias, (int, float, np.floating, np.integer)) \
            or not np.isfinite(forget_bias):
        raise ValueError(f"forget_bias must be a finite number, got {forget_bias!r}")
    H = hidden_size
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(H)
    Wx = rng.uniform(-bound, bound, size=(input_size, 4 * H))   # (D, 4*H)
    Wh = rng.uniform(-bound, bound, size=(H, 4 * H))            # (H, 4*H)
    b = np.zeros(4 * H)                                         # (4*H,)
    b[H : 2 * H] += forget_bias
    return {"Wx": Wx, "Wh": Wh, "b": b}


def lstm_step(
    x_t: np.ndarray, h_prev: np.ndarray, c_prev: np.ndarray, params: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, dict]:
    """One step: gates ``[i, f, g, o] = x_t @ Wx + h_prev @ Wh + b``, ``c = f c_prev + i g``, ``h = o tanh(c)``.

    Args:
        x_t: ``(B, D)``. h_prev: ``(B, H)``. c_prev: ``(B, H)``. params: as ``init_lstm_params``.

    Returns:
        ``(h, c, step_cache)``: ``h`` and ``c`` ``(B, H)`` float64, and the step's inputs and gate
        activations (an opaque dict, consumed by ``lstm_backward`` through ``lstm_forward``'s cache).

    Raises:
        ValueError: ``params`` missing a key or mis-shaped; ``x_t`` not ``(B, D)``; ``h_prev`` or
            ``c_prev`` not ``(B, H)``.
    """
    Wx, Wh, b = _check_params(params)
    D, H = Wx.shape[0], Wh.shape[0]
    x_t = np.asarray(x_t, dtype=np.float64)         # (...,)  checked below
    if x_t.ndim != 2 or x_t.shape[1] != D:
        raise ValueError(f"x_t must have shape (B, {D}), got {x_t.shape}")
    B = x_t.shape[0]
    h_prev = np.asarray(h_prev, dtype=np.float64)   # (...,)  checked below
    if h_prev.shape != (B, H):
        raise ValueError(f"h_prev must have shape ({B}, {H}), got {h_prev.shape}")
    c_prev = np.asarray(c_prev, dtype=np.float64)   # (...,)  checked below
    if c_prev.shape != (B, H):
        raise ValueError(f"c_prev must have shape ({B}, {H}), got {c_prev.shape}")
    return _step(x_t, h_prev, c_prev, Wx, Wh, b)


def lstm_forward(
    x: np.ndarray, h0: np.ndarray, c0: np.ndarray, params: dict[str, np.ndarray]
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], dict]:
    """Run the cell over a batch of sequences.

    Args:
        x: ``(B, T, D)``. h0, c0: ``(B, H)`` initial hidden and cell states. params: as ``init_lstm_params``.

    Returns:
        ``(hs, (h_T, c_T), cache)``: ``hs`` ``(B, T, H)`` float64 with ``hs[:, t]`` the state after
        reading ``x[:, t]``; the final states ``(B, H)`` (``h_T == hs[:, -1]``); an opaque cache for
        ``lstm_backward`` holding references to ``params``.

    Raises:
        ValueError: ``params`` missing a key or mis-shaped; ``x`` not 3-D or its width not ``D``;
            ``h0`` or ``c0`` not ``(B, H)``.
    """
    Wx, Wh, b = _check_params(params)
    D, H = Wx.shape[0], Wh.shape[0]
    x = np.asarray(x, dtype=np.float64)             # (...,)  checked below
    if x.ndim != 3 or x.shape[2] != D:
        raise ValueError(f"x must have shape (B, T, {D}), got {x.shape}")
    B, T, _ = x.shape
    h0 = np.asarray(h0, dtype=np.float64)           # (...,)  checked below
    if h0.shape != (B, H):
        raise ValueError(f"h0 must have shape ({B}, {H}), got {h0.shape}")
    c0 = np.asarray(c0, dtype=np.float64)           # (...,)  checked below
    if c0.shape != (B, H):
        raise ValueError(f"c0 must have shape ({B}, {H}), got {c0.shape}")
    hs = np.empty((B, T, H))                        # (B, T, H)
    h, c = h0, c0                                   # (B, H), (B, H)
    steps = []
    for t in range(T):
        h, c, step = _step(x[:, t], h, c, Wx, Wh, b)
        hs[:, t] = h                                # (B, H)
        steps.append(step)
    cache = {"steps": steps, "shape": (B, T, D, H), "Wx": Wx, "Wh": Wh}
    return hs, (h, c), cache


def lstm_backward(
    dhs: np.ndarray, cache: dict, dh_T: np.ndarray | None = None, dc_T: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Backpropagation through time.

    Args:
        dhs: ``(B, T, H)`` upstream ``dL/dh_t`` for every step. cache: the third output of
            ``lstm_forward``. dh_T, dc_T: ``(B, H)`` gradients of the final states, or ``None`` (zero).

    Returns:
        ``{"x": (B, T, D), "h0": (B, H), "c0": (B, H), "Wx": (D, 4*H), "Wh": (H, 4*H), "b": (4*H,)}``, float64.

    Raises:
        ValueError: ``dhs`` not ``(B, T, H)``; ``dh_T`` or ``dc_T`` not ``(B, H)``; ``cache`` not a
            cache of ``lstm_forward``.

    Source: Graves 2012, "Supervised Sequence Labelling with RNNs", section 4.6 (without peepholes).
    """
    if not isinstance(cache, dict) or not {"steps", "shape", "Wx", "Wh"} <= cache.keys():
        raise ValueError("cache must be the cache returned by lstm_forward")
    steps, (B, T, D, H), Wx, Wh = cache["steps"], cache["shape"], cache["Wx"], cache["Wh"]
    dhs = np.asarray(dhs, dtype=np.float64)                 # (...,)  checked below
    if dhs.shape != (B, T, H):
        raise ValueError(f"dhs must have shape {(B, T, H)}, got {dhs.shape}")
    dh_next = _final_grad("dh_T", dh_T, B, H)               # (B, H)
    dc_next = _final_grad("dc_T", dc_T, B, H)               # (B, H)
    dx = np.zeros((B, T, D))                                # (B, T, D)
    dWx = np.zeros_like(Wx)                                 # (D, 4*H)
    dWh = np.zeros_like(Wh)                                 # (H, 4*H)
    db = np.zeros(4 * H)                                    # (4*H,)
    for t in reversed(range(T)):
        s = steps[t]
        i, f, g, o, tanh_c = s["i"], s["f"], s["g"], s["o"], s["tanh_c"]
        dh = dhs[:, t] + dh_next                            # (B, H)
        dc = dc_next + dh * o * (1.0 - tanh_c**2)           # (B, H)  future + this step's output
        di = dc * g * i * (1.0 - i)                         # (B, H)
        df = dc * s["c_prev"] * f * (1.0 - f)               # (B, H)
        dg = dc * i * (1.0 - g**2)                          # (B, H)
        do = dh * tanh_c * o * (1.0 - o)                    # (B, H)
        dgates = np.concatenate([di, df, dg, do], axis=1)   # (B, 4*H)
        dWx += s["x_t"].T @ dgates                          # (D, 4*H)
        dWh += s["h_prev"].T @ dgates                       # (H, 4*H)
        db += np.sum(dgates, axis=0)                        # (4*H,)
        dx[:, t] = dgates @ Wx.T                            # (B, D)
        dh_next = dgates @ Wh.T                             # (B, H)
        dc_next = dc                                        # (B, H)  the highway
    return {"x": dx, "h0": dh_next, "c0": dc_next, "Wx": dWx, "Wh": dWh, "b": db}


def _step(
    x_t: np.ndarray, h_prev: np.ndarray, c_prev: np.ndarray, Wx: np.ndarray, Wh: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, dict]:
    """The unchecked step shared by ``lstm_step`` and ``lstm_forward``."""
    H = Wh.shape[0]
    gates = x_t @ Wx + h_prev @ Wh + b              # (B, 4*H)
    i = _sigmoid(gates[:, :H])                      # (B, H)
    f = _sigmoid(gates[:, H : 2 * H])               # (B, H)
    g = np.tanh(gates[:, 2 * H : 3 * H])            # (B, H)
    o = _sigmoid(gates[:, 3 * H :])                 # (B, H)
    c = f * c_prev + i * g                          # (B, H)
    tanh_c = np.tanh(c)                             # (B, H)
    h = o * tanh_c                                  # (B, H)
    cache = {"x_t": x_t, "h_prev": h_prev, "c_prev": c_prev, "i": i, "f": f, "g": g, "o": o, "tanh_c": tanh_c}
    return h, c, cache


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-z))`` without overflow: only ``exp(-|z|)``, which lies in ``(0, 1]``, is formed."""
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _final_grad(name: str, value: np.ndarray | None, B: int, H: int) -> np.ndarray:
    """``value`` as float64 ``(B, H)``, zeros when ``None``, or ValueError naming ``name``."""
    if value is None:
        return np.zeros((B, H))                       # (B, H)
    arr = np.asarray(value, dtype=np.float64)         # (...,)  checked below
    if arr.shape != (B, H):
        raise ValueError(f"{name} must have shape ({B}, {H}), got {arr.shape}")
    return arr


def _check_params(params: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(Wx, Wh, b)`` as float64 after checking keys and shapes, or ValueError naming ``params``."""
    if not isinstance(params, dict) or any(k not in params for k in _PARAM_KEYS):
        raise ValueError(f"params must be a dict with keys {_PARAM_KEYS}")
    Wx = np.asarray(params["Wx"], dtype=np.float64)   # (...,)  checked below
    Wh = np.asarray(params["Wh"], dtype=np.float64)   # (...,)  checked below
    b = np.asarray(params["b"], dtype=np.float64)     # (...,)  checked below
    if Wh.ndim != 2 or Wh.shape[1] != 4 * Wh.shape[0] or Wh.shape[0] == 0:
        raise ValueError(f"params['Wh'] must have shape (H, 4*H), got {Wh.shape}")
    H = Wh.shape[0]
    if Wx.ndim != 2 or Wx.shape[1] != 4 * H:
        raise ValueError(f"params['Wx'] must have shape (D, {4 * H}), got {Wx.shape}")
    if b.shape != (4 * H,):
        raise ValueError(f"params['b'] must have shape ({4 * H},), got {b.shape}")
    return Wx, Wh, b


def _is_int(value: object) -> bool:
    """True for Python and NumPy integers, False for bools and everything else."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
