"""Reference tests for the tanh RNN cell with BPTT (#22, ``sequence/rnn``)."""

from __future__ import annotations

import numpy as np
import pytest

from canon_refs.sequence import rnn
from pytest_mlcanon.testing import (
    assert_close,
    assert_grad_matches,
    call_leaves_inputs_unchanged,
    strict_numpy,
)
from pytest_mlcanon.testing import rng as make_rng

pytestmark = pytest.mark.canon("sequence/rnn")


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """float64 states and gradients against a trusted value: a few ulps of the largest entry, times the
    terms a step sums (D + H <= 9) and the steps a gradient travels (T <= 7)."""
    assert_close(got, want, magnitude=float(np.abs(want).max()) + 1.0, cond=64, what=what)

GRAD_KEYS = {"x", "h0", "Wxh", "Whh", "bh"}


def _case(B: int, T: int, D: int, H: int, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """Parameters, inputs, initial state and a loss weight ``G`` drawn from the test's own generator,
    so the case does not depend on how an implementation draws its init."""
    g = make_rng(seed)
    params = {
        "Wxh": 0.6 * g.standard_normal((D, H)),
        "Whh": 0.6 * g.standard_normal((H, H)),
        "bh": 0.3 * g.standard_normal(H),
    }
    x = g.standard_normal((B, T, D))
    h0 = 0.5 * g.standard_normal((B, H))
    G = g.standard_normal((B, T, H))
    return params, x, h0, G


def _torch_rnn(params: dict[str, np.ndarray], x: np.ndarray, h0: np.ndarray):  # noqa: ANN202  (torch imported lazily)
    """``torch.nn.RNN`` in float64 with the weights of ``params``; returns ``(module, x, h0, out, h_n)``."""
    import torch

    D, H = params["Wxh"].shape
    module = torch.nn.RNN(D, H, nonlinearity="tanh", batch_first=True).double()
    with torch.no_grad():
        module.weight_ih_l0.copy_(torch.from_numpy(params["Wxh"].T.copy()))
        module.weight_hh_l0.copy_(torch.from_numpy(params["Whh"].T.copy()))
        module.bias_ih_l0.copy_(torch.from_numpy(params["bh"]))
        module.bias_hh_l0.zero_()
    x_t = torch.tensor(x, requires_grad=True)
    h0_t = torch.tensor(h0, requires_grad=True)
    out, h_n = module(x_t, h0_t.unsqueeze(0))
    return module, x_t, h0_t, out, h_n


def test_init_shapes_and_torch_bounds() -> None:
    params = rnn.init_rnn_params(5, 16, seed=3)
    assert set(params) == {"Wxh", "Whh", "bh"}
    assert params["Wxh"].shape == (5, 16) and params["Whh"].shape == (16, 16) and params["bh"].shape == (16,)
    bound = 1.0 / np.sqrt(16)
    for key, value in params.items():
        assert value.dtype == np.float64, key
        assert np.abs(value).max() <= bound, key
    everything = np.concatenate([v.ravel() for v in params.values()])
    # U(-b, b) over 352 draws: the extremes reach past 0.9 b and the mean is within 4 standard errors of 0.
    assert everything.max() > 0.9 * bound and everything.min() < -0.9 * bound
    assert abs(everything.mean()) < 4 * bound / np.sqrt(3 * everything.size)
    again = rnn.init_rnn_params(5, 16, seed=3)
    other = rnn.init_rnn_params(5, 16, seed=4)
    for key in params:
        np.testing.assert_array_equal(params[key], again[key])
    assert not np.array_equal(params["Whh"], other["Whh"])


def test_step_closed_form() -> None:
    params = {"Wxh": np.array([[0.5, -1.0]]), "Whh": np.array([[-1.0, 0.0], [2.0, 0.5]]), "bh": np.array([0.25, 0.1])}
    x_t = np.array([[2.0]])
    h_prev = np.array([[0.5, -0.2]])
    # pre = [1 - 0.5 - 0.4 + 0.25, -2 + 0 - 0.1 + 0.1] = [0.35, -2.0]
    h = rnn.rnn_step(x_t, h_prev, params)
    _close(h, np.tanh([[0.35, -2.0]]), "rnn: rnn_step(x_t, h_prev, params)")


def test_forward_matches_torch_rnn() -> None:
    pytest.importorskip("torch")
    params, x, h0, _ = _case(3, 7, 4, 5, seed=1)
    hs, _ = call_leaves_inputs_unchanged(rnn.rnn_forward, x, h0, params)
    *_, out, h_n = _torch_rnn(params, x, h0)
    assert hs.shape == (3, 7, 5) and hs.dtype == np.float64
    _close(hs, out.detach().numpy(), "rnn: hs")
    _close(hs[:, -1], h_n[0].detach().numpy(), "rnn: hs[:, -1]")


def test_forward_with_default_init_matches_torch_rnn() -> None:
    pytest.importorskip("torch")
    params = rnn.init_rnn_params(3, 4, seed=0)
    _, x, h0, _ = _case(2, 6, 3, 4, seed=2)
    hs, _ = rnn.rnn_forward(x, h0, params)
    *_, out, _ = _torch_rnn(params, x, h0)
    _close(hs, out.detach().numpy(), "rnn: hs")


def test_gradients_match_torch_autograd() -> None:
    pytest.importorskip("torch")
    params, x, h0, G = _case(3, 6, 4, 5, seed=3)
    hs, cache = rnn.rnn_forward(x, h0, params)
    grads = call_leaves_inputs_unchanged(rnn.rnn_backward, G, cache)
    assert set(grads) == GRAD_KEYS
    import torch

    module, x_t, h0_t, out, _ = _torch_rnn(params, x, h0)
    (out * torch.from_numpy(G)).sum().backward()
    expected = {
        "x": x_t.grad.numpy(),
        "h0": h0_t.grad.numpy(),
        "Wxh": module.weight_ih_l0.grad.numpy().T,
        "Whh": module.weight_hh_l0.grad.numpy().T,
        "bh": module.bias_ih_l0.grad.numpy(),
    }
    for key, want in expected.items():
        assert grads[key].shape == want.shape, key
        _close(grads[key], want, f"rnn_backward(...)[{key!r}]")
    # bias_hh receives the same gradient as bias_ih: bh stands for their sum.
    _close(module.bias_hh_l0.grad.numpy(), grads["bh"], "rnn: module.bias_hh_l0.grad.numpy()")


def test_gradients_match_finite_differences() -> None:
    """``L = sum(hs * G)`` on a 2 x 4 x 3 -> 4 case. Seed 4 has no gradient entry below 6e-3 in
    magnitude, so the central difference (round-off about 1e-10) stays inside 1e-6 relative by two
    orders of magnitude (measured max rel err 8e-9; under 6e-8 on seeds 5, 8, 13, 21, 34, 55)."""
    params, x, h0, G = _case(2, 4, 3, 4, seed=4)
    _, cache = rnn.rnn_forward(x, h0, params)
    grads = rnn.rnn_backward(G, cache)

    def loss() -> float:
        hs, _ = rnn.rnn_forward(x, h0, params)
        return float(np.sum(hs * G))

    for key, value in [("x", x), ("h0", h0), *params.items()]:
        assert grads[key].shape == value.shape, key
        assert_grad_matches(loss, value, grads[key])


def test_gradient_reaches_early_steps_through_the_recurrence() -> None:
    """Upstream gradient only at the last step must still reach ``x[:, 0]`` and ``h0`` (no truncation)."""
    params, x, h0, G = _case(2, 5, 3, 4, seed=5)
    dhs = np.zeros_like(G)
    dhs[:, -1] = G[:, -1]
    _, cache = rnn.rnn_forward(x, h0, params)
    grads = rnn.rnn_backward(dhs, cache)
    assert np.linalg.norm(grads["x"][:, 0]) > 1e-3
    assert np.linalg.norm(grads["h0"]) > 1e-3

    def loss() -> float:
        hs, _ = rnn.rnn_forward(x, h0, params)
        return float(np.sum(hs * dhs))

    assert_grad_matches(loss, x, grads["x"])  # measured max rel err 4e-9


@pytest.mark.edge_case
def test_single_step_equals_rnn_step() -> None:
    params, x, h0, G = _case(3, 1, 4, 5, seed=6)
    hs, cache = rnn.rnn_forward(x, h0, params)
    h1 = rnn.rnn_step(x[:, 0], h0, params)
    assert hs.shape == (3, 1, 5)
    _close(hs[:, 0], h1, "rnn: hs[:, 0]")
    grads = rnn.rnn_backward(G, cache)
    dpre = G[:, 0] * (1.0 - h1**2)
    _close(grads["Wxh"], x[:, 0].T @ dpre, "rnn: grads['Wxh']")
    _close(grads["Whh"], h0.T @ dpre, "rnn: grads['Whh']")
    _close(grads["h0"], dpre @ params["Whh"].T, "rnn: grads['h0']")


@pytest.mark.edge_case
def test_batch_of_one_matches_the_batched_rows() -> None:
    params, x, h0, G = _case(3, 4, 2, 3, seed=7)
    hs, cache = rnn.rnn_forward(x, h0, params)
    grads = rnn.rnn_backward(G, cache)
    hs1, cache1 = rnn.rnn_forward(x[1:2], h0[1:2], params)
    _close(hs1, hs[1:2], "rnn: hs1")
    grads1 = rnn.rnn_backward(G[1:2], cache1)
    _close(grads1["x"], grads["x"][1:2], "rnn: grads1['x']")
    _close(grads1["h0"], grads["h0"][1:2], "rnn: grads1['h0']")


def test_vanishing_gradient_with_small_recurrent_weight() -> None:
    """``Whh = 0.1 I``: each step back multiplies the gradient by ``0.1 * (1 - h**2) <= 0.1``."""
    params, x, h0, G = _case(4, 10, 3, 5, seed=8)
    params["Whh"] = 0.1 * np.eye(5)
    dhs = np.zeros_like(G)
    dhs[:, -1] = G[:, -1]
    _, cache = rnn.rnn_forward(x, h0, params)
    dx = rnn.rnn_backward(dhs, cache)["x"]
    first, last = np.linalg.norm(dx[:, 0]), np.linalg.norm(dx[:, -1])
    assert last > 0.1
    assert first < 1e-3 * last
    # Nine steps back at <= 0.1 each: the ratio is below 1e-9 (measured 3e-12; at most 2e-10 on seeds 13, 21, 34, 55).
    assert first < 1e-9 * last


@pytest.mark.numerics_probe
def test_saturated_inputs_stay_finite() -> None:
    params, _, h0, G = _case(2, 5, 3, 4, seed=9)
    x = np.where(make_rng(10).random((2, 5, 3)) < 0.5, -1e4, 1e4)
    with strict_numpy():
        hs, cache = rnn.rnn_forward(x, h0, params)
        grads = rnn.rnn_backward(G, cache)
    assert np.isfinite(hs).all() and np.abs(hs).max() <= 1.0
    assert np.abs(hs).min() > 1.0 - 1e-12  # saturated: tanh of a pre-activation beyond ~19 rounds to +-1
    for key, value in grads.items():
        assert np.isfinite(value).all(), key
    # Saturated tanh has zero slope: nothing flows back into the weights or the inputs.
    assert np.abs(grads["Wxh"]).max() < 1e-10 and np.abs(grads["x"]).max() < 1e-10


def _bad_params(kind: str, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    bad = dict(params)
    if kind == "missing":
        del bad["Whh"]
    elif kind == "Whh_shape":
        bad["Whh"] = np.zeros((4, 3))
    else:
        bad["bh"] = np.zeros(5)
    return bad


@pytest.mark.contract
@pytest.mark.parametrize("kind", ["missing", "Whh_shape", "bh_shape"])
def test_bad_params_raise(kind: str) -> None:
    params, x, h0, _ = _case(2, 3, 3, 4, seed=11)
    bad = _bad_params(kind, params)
    with pytest.raises(ValueError):
        rnn.rnn_forward(x, h0, bad)
    with pytest.raises(ValueError):
        rnn.rnn_step(x[:, 0], h0, bad)


@pytest.mark.contract
def test_bad_shapes_raise() -> None:
    params, x, h0, G = _case(2, 3, 3, 4, seed=12)
    with pytest.raises(ValueError):
        rnn.rnn_forward(x[:, 0], h0, params)  # 2-D
    with pytest.raises(ValueError):
        rnn.rnn_forward(x[..., :2], h0, params)  # width != D
    with pytest.raises(ValueError):
        rnn.rnn_forward(x, h0[:1], params)
    with pytest.raises(ValueError):
        rnn.rnn_forward(x, h0[:, :3], params)
    with pytest.raises(ValueError):
        rnn.rnn_step(x[:, 0, :2], h0, params)
    with pytest.raises(ValueError):
        rnn.rnn_step(x[:, 0], h0[:, :3], params)
    _, cache = rnn.rnn_forward(x, h0, params)
    with pytest.raises(ValueError):
        rnn.rnn_backward(G[:, :2], cache)
    with pytest.raises(ValueError):
        rnn.rnn_backward(G[..., :3], cache)


@pytest.mark.contract
@pytest.mark.parametrize(("input_size", "hidden_size"), [(0, 4), (3, 0), (3, 2.5)])
def test_bad_sizes_raise(input_size: int, hidden_size: int) -> None:
    with pytest.raises(ValueError):
        rnn.init_rnn_params(input_size, hidden_size)
