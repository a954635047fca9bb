"""A vanilla (Elman) tanh RNN cell unrolled over time, with backpropagation through time, in NumPy
(canon item #22).

What it implements: ``init_rnn_params`` (torch's ``U(-1/sqrt(H), 1/sqrt(H))`` init), ``rnn_step``
``h_t = tanh(x_t @ Wxh + h_{t-1} @ Whh + bh)``, ``rnn_forward`` that runs the step over ``T`` time
steps and caches what the backward pass needs, and ``rnn_backward`` that walks the steps in reverse
given ``dhs = dL/dh_t`` for every ``t`` (the loss may read every hidden state, not only the last).

The subtle point: the gradient reaching ``h_t`` has two sources, the loss at step ``t`` (``dhs[:, t]``)
and the future through ``h_{t+1}`` (``dh_next``); forgetting ``dh_next`` silently truncates BPTT to
one step. Two smaller ones: the weight gradient of ``Whh`` at step ``t`` pairs ``dpre_t`` with the
*previous* state ``h_{t-1}`` (``h0`` at ``t = 0``), an off-by-one waiting to happen, and the tanh
derivative is ``1 - h_t**2`` on the *output*, not ``1 - pre**2`` on the pre-activation.

Shape letters: ``B`` batch, ``T`` time steps, ``D`` input width, ``H`` hidden width.

Trade-off: the forward caches the hidden states ``hs (B, T, H)`` rather than the pre-activations,
because ``tanh'(pre) = 1 - tanh(pre)**2 = 1 - h**2`` recovers the derivative from the outputs the
caller needs anyway, so one ``(B, T, H)`` buffer serves both instead of two. The backward multiplies
``dh`` by ``Whh.T`` and by ``1 - h**2 <= 1`` at every step, which is why gradients vanish: with
``Whh = 0.1 I`` the signal shrinks by at least 10x per step, 1e-9 after ten steps.

What to test: outputs against ``torch.nn.RNN(nonlinearity="tanh", batch_first=True)`` in float64
with copied weights (atol 1e-12); every gradient of ``L = sum(hs * G)`` against torch autograd and
finite differences; ``T = 1`` equals ``rnn_step``; the vanishing-gradient ratio with ``Whh = 0.1 I``;
saturated but finite outputs and gradients at inputs of +-1e4; a ValueError naming each bad argument.
"""

from __future__ import annotations

import numpy as np

_PARAM_KEYS = ("Wxh", "Whh", "bh")


def init_rnn_params(input_size: int, hidden_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Parameters of one tanh RNN cell, drawn like ``torch.nn.RNN``.

    Args:
        input_size: ``D``, an integer ``>= 1``. hidden_size: ``H``, an integer ``>= 1``.
        seed: seeds ``np.random.default_rng``.

    Returns:
        ``{"Wxh": (D, H), "Whh": (H, H), "bh": (H,)}``, float64, every entry ``~ U(-1/sqrt(H), 1/sqrt(H))``.
        ``bh`` plays the role of torch's ``bias_ih + bias_hh``.

    Raises:
        ValueError: ``input_size`` or ``hidden_size`` not an integer ``>= 1``.

    Source: Elman 1990; the init of ``torch.nn.RNN.reset_parameters``.
    """
    _check_sizes(input_size, hidden_size)
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(hidden_size)
    Wxh = rng.uniform(-bound, bound, size=(input_size, hidden_size))   # (D, H)
    Whh = rng.uniform(-bound, bound, size=(hidden_size, hidden_size))  # (H, H)
    bh = rng.uniform(-bound, bound, size=hidden_size)                  # (H,)
    return {"Wxh": Wxh, "Whh": Whh, "bh": bh}


def rnn_step(x_t: np.ndarray, h_prev: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    """One step ``h_t = tanh(x_t @ Wxh + h_prev @ Whh + bh)``.

    Args:
        x_t: ``(B, D)`` inputs of one time step. h_prev: ``(B, H)`` previous hidden state.
        params: as returned by ``init_rnn_params``.

    Returns:
        ``(B, H)`` float64 new hidden state, in ``[-1, 1]``.

    Raises:
        ValueError: ``params`` missing a key or mis-shaped; ``x_t`` not ``(B, D)``; ``h_prev`` not ``(B, H)``.
    """
    Wxh, Whh, bh = _check_params(params)
    x_t, h_prev = _check_step_inputs(x_t, h_prev, *Wxh.shape)          # (B, D), (B, H)
    return _step(x_t, h_prev, Wxh, Whh, bh)                            # (B, H)


def rnn_forward(
    x: np.ndarray, h0: np.ndarray, params: dict[str, np.ndarray]
) -> tuple[np.ndarray, dict]:
    """Run the cell over a batch of sequences.

    Args:
        x: ``(B, T, D)`` inputs. h0: ``(B, H)`` initial hidden state. params: as ``init_rnn_params``.

    Returns:
        ``(hs, cache)``: ``hs`` ``(B, T, H)`` float64 with ``hs[:, t] = h_{t+1}`` (the state after
        reading ``x[:, t]``), and an opaque cache for ``rnn_backward`` (it holds references to
        ``params``, so the backward sees the weights the forward used as long as they are not mutated).

    Raises:
        ValueError: ``params`` missing a key or mis-shaped; ``x`` not 3-D or its width not ``D``;
            ``h0`` not ``(B, H)``.
    """
    Wxh, Whh, bh = _check_params(params)
    x, h0 = _check_sequence(x, h0, *Wxh.shape)                         # (B, T, D), (B, H)
    B, T, _ = x.shape
    H = Wxh.shape[1]
    hs = np.empty((B, T, H))                                           # (B, T, H)
    h = h0                                                             # (B, H)
    for t in range(T):
        h = _step(x[:, t], h, Wxh, Whh, bh)                            # (B, H)
        hs[:, t] = h                                                   # (B, H)
    cache = {"x": x, "h0": h0, "hs": hs, "Wxh": Wxh, "Whh": Whh}
    return hs, cache


def rnn_backward(dhs: np.ndarray, cache: dict) -> dict[str, np.ndarray]:
    """Backpropagation through time.

    Args:
        dhs: ``(B, T, H)`` upstream gradient ``dL/dh_t`` for every step (zeros where the loss does not
            read a state). cache: the second output of ``rnn_forward``.

    Returns:
        ``{"x": (B, T, D), "h0": (B, H), "Wxh": (D, H), "Whh": (H, H), "bh": (H,)}``, float64.

    Raises:
        ValueError: ``dhs`` not ``(B, T, H)``; ``cache`` not a cache of ``rnn_forward``.

    Source: Werner 1990 (BPTT); Goodfellow et al., Deep Learning, section 10.2.2.
    """
    dhs = _check_upstream(dhs, cache)                                  # (B, T, H)
    x, h0, hs, Wxh, Whh = cache["x"], cache["h0"], cache["hs"], cache["Wxh"], cache["Whh"]
    B, T, H = hs.shape
    dx = np.zeros_like(x)                                              # (B, T, D)
    dWxh = np.zeros_like(Wxh)                                          # (D, H)
    dWhh = np.zeros_like(Whh)                                          # (H, H)
    dbh = np.zeros(H)                                                  # (H,)
    dh_next = np.zeros((B, H))                                         # (B, H)  gradient flowing in from step t + 1
    for t in reversed(range(T)):
        dh = dhs[:, t] + dh_next                                       # (B, H)
        dpre = dh * (1.0 - hs[:, t] ** 2)                              # (B, H)  tanh' from the output
        h_prev = hs[:, t - 1] if t > 0 else h0                         # (B, H)
        dWxh += x[:, t].T @ dpre                                       # (D, H)
        dWhh += h_prev.T @ dpre                                        # (H, H)
        dbh += np.sum(dpre, axis=0)                                    # (H,)
        dx[:, t] = dpre @ Wxh.T                                        # (B, D)
        dh_next = dpre @ Whh.T                                         # (B, H)
    return {"x": dx, "h0": dh_next, "Wxh": dWxh, "Whh": dWhh, "bh": dbh}


def _step(
    x_t: np.ndarray, h_prev: np.ndarray, Wxh: np.ndarray, Whh: np.ndarray, bh: np.ndarray
) -> np.ndarray:
    """The unchecked step shared by ``rnn_step`` and ``rnn_forward``."""
    pre = x_t @ Wxh + h_prev @ Whh + bh                                # (B, H)
    return np.tanh(pre)                                                # (B, H)


def _check_params(params: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(Wxh, Whh, bh)`` as float64 after checking keys and shapes, or ValueError naming ``params``."""
    if not isinstance(params, dict) or any(k not in params for k in _PARAM_KEYS):
        raise ValueError(f"params must be a dict with keys {_PARAM_KEYS}")
    Wxh = np.asarray(params["Wxh"], dtype=np.float64)                  # (...,)  checked below
    Whh = np.asarray(params["Whh"], dtype=np.float64)                  # (...,)  checked below
    bh = np.asarray(params["bh"], dtype=np.float64)                    # (...,)  checked below
    if Wxh.ndim != 2:
        raise ValueError(f"params['Wxh'] must be 2-D (D, H), got shape {Wxh.shape}")
    H = Wxh.shape[1]
    if Whh.shape != (H, H):
        raise ValueError(f"params['Whh'] must have shape ({H}, {H}), got {Whh.shape}")
    if bh.shape != (H,):
        raise ValueError(f"params['bh'] must have shape ({H},), got {bh.shape}")
    return Wxh, Whh, bh


def _check_sizes(input_size: int, hidden_size: int) -> None:
    if not (_is_int(input_size) and input_size >= 1):
        raise ValueError(f"input_size must be an integer >= 1, got {input_size!r}")
    if not (_is_int(hidden_size) and hidden_size >= 1):
        raise ValueError(f"hidden_size must be an integer >= 1, got {hidden_size!r}")


def _check_step_inputs(x_t: np.ndarray, h_prev: np.ndarray, D: int, H: int) -> tuple[np.ndarray, np.ndarray]:
    x_t = np.asarray(x_t, dtype=np.float64)                            # (...,)  checked below
    if x_t.ndim != 2 or x_t.shape[1] != D:
        raise ValueError(f"x_t must have shape (B, {D}), got {x_t.shape}")
    h_prev = np.asarray(h_prev, dtype=np.float64)                      # (...,)  checked below
    if h_prev.shape != (x_t.shape[0], H):
        raise ValueError(f"h_prev must have shape ({x_t.shape[0]}, {H}), got {h_prev.shape}")
    return x_t, h_prev


def _check_sequence(x: np.ndarray, h0: np.ndarray, D: int, H: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)                                # (...,)  checked below
    if x.ndim != 3 or x.shape[2] != D:
        raise ValueError(f"x must have shape (B, T, {D}), got {x.shape}")
    h0 = np.asarray(h0, dtype=np.float64)                              # (...,)  checked below
    if h0.shape != (x.shape[0], H):
        raise ValueError(f"h0 must have shape ({x.shape[0]}, {H}), got {h0.shape}")
    return x, h0


def _check_upstream(dhs: np.ndarray, cache: dict) -> np.ndarray:
    if not isinstance(cache, dict) or not {"x", "h0", "hs", "Wxh", "Whh"} <= cache.keys():
        raise ValueError("cache must be the cache returned by rnn_forward")
    dhs = np.asarray(dhs, dtype=np.float64)                            # (...,)  checked below
    if dhs.shape != cache["hs"].shape:
        raise ValueError(f"dhs must have the shape of hs {cache['hs'].shape}, got {dhs.shape}")
    return dhs


def _is_int(value: object) -> bool:
    """True for Python and NumPy integers, False for bools and everything else."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
