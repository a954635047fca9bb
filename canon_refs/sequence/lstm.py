"""An LSTM cell unrolled over time, with backpropagation through time, in NumPy (canon item #23).

What it implements: ``init_lstm_params`` (torch's ``U(-1/sqrt(H), 1/sqrt(H))`` weights, zero bias plus
an optional forget-gate bias), ``lstm_step`` with the four gates in torch's block order
``[i, f, g, o]`` computed by one fused matmul, ``c = f * c_prev + i * g`` and ``h = o * tanh(c)``,
``lstm_forward`` over ``T`` steps, and ``lstm_backward`` that walks the steps in reverse given
``dhs = dL/dh_t`` for every ``t`` plus optional gradients ``dh_T``, ``dc_T`` of the final state.

The subtle point: the cell state is a highway. Its gradient has two sources at every step, the
future through ``c_{t+1} = f_{t+1} * c_t + ...`` (``dc_next * f``) and this step's output through
``h_t = o * tanh(c_t)`` (``dh * o * (1 - tanh(c_t)**2)``); going back one step multiplies it by
``f`` only, with no squashing derivative and no weight matrix, which is why an LSTM with open forget
gates keeps gradients alive where the tanh RNN (#22) loses 10x per step. Both final-state gradients
enter at ``t = T - 1``: ``dh_T`` adds to ``dhs[:, -1]`` (``h_T`` *is* ``hs[:, -1]``), ``dc_T`` seeds
``dc_next``.

Shape letters: ``B`` batch, ``T`` time steps, ``D`` input width, ``H`` hidden width; ``4*H`` is the
width of the stacked gate pre-activations.

Trade-off: the gates use a two-branch sigmoid that exponentiates only ``-|z| <= 0`` rather than
``1 / (1 + exp(-z))``, because ``exp(-z)`` overflows float64 for ``z < -709.78`` (inputs of -1e4
reach that). The four gates share one ``(D, 4*H)`` matmul instead of four ``(D, H)`` ones, in the
``[i, f, g, o]`` order of torch so weights copy over without permuting. ``forget_bias = 1``
(Jozefowicz et al. 2015) is the knob worth knowing: over 20 steps the highway keeps
``sigmoid(1)**20 = 2e-3`` of the gradient instead of ``0.5**20 = 1e-6``.

What to test: outputs and ``(h_n, c_n)`` against ``torch.nn.LSTM(batch_first=True)`` in float64 with
copied weights (atol 1e-12); every gradient, with and without ``dh_T``/``dc_T``, against torch
autograd and finite differences; ``forget_bias = 1`` sets exactly ``b[H:2H] = 1``; the highway check
``dc0 = sigmoid(10)**20 * dc_T``; finite outputs and gradients at inputs of +-1e4 without a floating
point warning; a ValueError naming each bad argument.
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
    _check_init_args(input_size, hidden_size, forget_bias)
    H = hidden_size
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(H)
    Wx = rng.uniform(-bound, bound, size=(input_size, 4 * H))           # (D, 4*H)
    Wh = rng.uniform(-bound, bound, size=(H, 4 * H))                    # (H, 4*H)
    b = np.zeros(4 * H)                                                 # (4*H,)
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
        The sigmoid is stable: gate pre-activations of ``+-1e4`` give gates of exactly 1 and 0, and
        finite outputs and gradients, with no NumPy floating-point warning (checked under
        ``np.errstate(over="raise", invalid="raise", divide="raise")``; ``1 / (1 + np.exp(-z))``
        overflows ``exp`` there).

    Raises:
        ValueError: ``params`` missing a key or mis-shaped; ``x_t`` not ``(B, D)``; ``h_prev`` or
            ``c_prev`` not ``(B, H)``.
    """
    Wx, Wh, b = _check_params(params)
    x_t = _check_input(x_t, "x_t", 2, Wx.shape[0])                      # (B, D)
    h_prev = _check_state(h_prev, "h_prev", x_t.shape[0], Wh.shape[0])  # (B, H)
    c_prev = _check_state(c_prev, "c_prev", x_t.shape[0], Wh.shape[0])  # (B, H)
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
    x = _check_input(x, "x", 3, D)                                      # (B, T, D)
    B, T, _ = x.shape
    h0 = _check_state(h0, "h0", B, H)                                   # (B, H)
    c0 = _check_state(c0, "c0", B, H)                                   # (B, H)
    hs = np.empty((B, T, H))                                            # (B, T, H)
    h, c = h0, c0                                                       # (B, H), (B, H)
    steps = []
    for t in range(T):
        h, c, step = _step(x[:, t], h, c, Wx, Wh, b)
        hs[:, t] = h                                                    # (B, H)
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
    dhs = _check_upstream(dhs, cache)                                   # (B, T, H)
    steps, (B, T, D, H), Wx, Wh = cache["steps"], cache["shape"], cache["Wx"], cache["Wh"]
    dh_next = _final_grad("dh_T", dh_T, B, H)                           # (B, H)
    dc_next = _final_grad("dc_T", dc_T, B, H)                           # (B, H)
    dx = np.zeros((B, T, D))                                            # (B, T, D)
    dWx = np.zeros_like(Wx)                                             # (D, 4*H)
    dWh = np.zeros_like(Wh)                                             # (H, 4*H)
    db = np.zeros(4 * H)                                                # (4*H,)
    for t in reversed(range(T)):
        s = steps[t]
        i, f, g, o, tanh_c = s["i"], s["f"], s["g"], s["o"], s["tanh_c"]
        dh = dhs[:, t] + dh_next                                        # (B, H)
        dc = dc_next + dh * o * (1.0 - tanh_c**2)                       # (B, H)  future + this step's output
        di = dc * g * i * (1.0 - i)                                     # (B, H)
        df = dc * s["c_prev"] * f * (1.0 - f)                           # (B, H)
        dg = dc * i * (1.0 - g**2)                                      # (B, H)
        do = dh * tanh_c * o * (1.0 - o)                                # (B, H)
        dgates = np.concatenate([di, df, dg, do], axis=1)               # (B, 4*H)
        dWx += s["x_t"].T @ dgates                                      # (D, 4*H)
        dWh += s["h_prev"].T @ dgates                                   # (H, 4*H)
        db += np.sum(dgates, axis=0)                                    # (4*H,)
        dx[:, t] = dgates @ Wx.T                                        # (B, D)
        dh_next = dgates @ Wh.T                                         # (B, H)
        dc_next = dc * f                                                # (B, H)  the highway: only f, no weights
    return {"x": dx, "h0": dh_next, "c0": dc_next, "Wx": dWx, "Wh": dWh, "b": db}


def _step(
    x_t: np.ndarray, h_prev: np.ndarray, c_prev: np.ndarray, Wx: np.ndarray, Wh: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, dict]:
    """The unchecked step shared by ``lstm_step`` and ``lstm_forward``."""
    H = Wh.shape[0]
    gates = x_t @ Wx + h_prev @ Wh + b                                  # (B, 4*H)
    i = _sigmoid(gates[:, :H])                                          # (B, H)
    f = _sigmoid(gates[:, H : 2 * H])                                   # (B, H)
    g = np.tanh(gates[:, 2 * H : 3 * H])                                # (B, H)
    o = _sigmoid(gates[:, 3 * H :])                                     # (B, H)
    c = f * c_prev + i * g                                              # (B, H)
    tanh_c = np.tanh(c)                                                 # (B, H)
    h = o * tanh_c                                                      # (B, H)
    cache = {"x_t": x_t, "h_prev": h_prev, "c_prev": c_prev, "i": i, "f": f, "g": g, "o": o, "tanh_c": tanh_c}
    return h, c, cache


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-z))`` without overflow: only ``exp(-|z|)``, which lies in ``(0, 1]``, is formed."""
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _final_grad(name: str, value: np.ndarray | None, B: int, H: int) -> np.ndarray:
    """``value`` as float64 ``(B, H)``, zeros when ``None``, or ValueError naming ``name``."""
    if value is None:
        return np.zeros((B, H))                                         # (B, H)
    arr = np.asarray(value, dtype=np.float64)                           # (...,)  checked below
    if arr.shape != (B, H):
        raise ValueError(f"{name} must have shape ({B}, {H}), got {arr.shape}")
    return arr


def _check_params(params: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(Wx, Wh, b)`` as float64 after checking keys and shapes, or ValueError naming ``params``."""
    if not isinstance(params, dict) or any(k not in params for k in _PARAM_KEYS):
        raise ValueError(f"params must be a dict with keys {_PARAM_KEYS}")
    Wx = np.asarray(params["Wx"], dtype=np.float64)                     # (...,)  checked below
    Wh = np.asarray(params["Wh"], dtype=np.float64)                     # (...,)  checked below
    b = np.asarray(params["b"], dtype=np.float64)                       # (...,)  checked below
    if Wh.ndim != 2 or Wh.shape[1] != 4 * Wh.shape[0] or Wh.shape[0] == 0:
        raise ValueError(f"params['Wh'] must have shape (H, 4*H), got {Wh.shape}")
    H = Wh.shape[0]
    if Wx.ndim != 2 or Wx.shape[1] != 4 * H:
        raise ValueError(f"params['Wx'] must have shape (D, {4 * H}), got {Wx.shape}")
    if b.shape != (4 * H,):
        raise ValueError(f"params['b'] must have shape ({4 * H},), got {b.shape}")
    return Wx, Wh, b


def _check_init_args(input_size: int, hidden_size: int, forget_bias: float) -> None:
    if not (_is_int(input_size) and input_size >= 1):
        raise ValueError(f"input_size must be an integer >= 1, got {input_size!r}")
    if not (_is_int(hidden_size) and hidden_size >= 1):
        raise ValueError(f"hidden_size must be an integer >= 1, got {hidden_size!r}")
    if isinstance(forget_bias, bool) or not isinstance(forget_bias, (int, float, np.floating, np.integer)) \
            or not np.isfinite(forget_bias):
        raise ValueError(f"forget_bias must be a finite number, got {forget_bias!r}")


def _check_input(x: np.ndarray, name: str, ndim: int, D: int) -> np.ndarray:
    """``x`` as float64 with ``ndim`` axes and a last axis of width ``D``."""
    x = np.asarray(x, dtype=np.float64)                                 # (...,)  checked below
    if x.ndim != ndim or x.shape[-1] != D:
        raise ValueError(f"{name} must have {ndim} axes and width {D}, got shape {x.shape}")
    return x


def _check_state(state: np.ndarray, name: str, B: int, H: int) -> np.ndarray:
    state = np.asarray(state, dtype=np.float64)                         # (...,)  checked below
    if state.shape != (B, H):
        raise ValueError(f"{name} must have shape ({B}, {H}), got {state.shape}")
    return state


def _check_upstream(dhs: np.ndarray, cache: dict) -> np.ndarray:
    if not isinstance(cache, dict) or not {"steps", "shape", "Wx", "Wh"} <= cache.keys():
        raise ValueError("cache must be the cache returned by lstm_forward")
    B, T, _, H = cache["shape"]
    dhs = np.asarray(dhs, dtype=np.float64)                             # (...,)  checked below
    if dhs.shape != (B, T, H):
        raise ValueError(f"dhs must have shape {(B, T, H)}, got {dhs.shape}")
    return dhs


def _is_int(value: object) -> bool:
    """True for Python and NumPy integers, False for bools and everything else."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
