"""Reference tests for the NumPy MLP with a hand-written backward pass (#11, ``nn/mlp``)."""

from __future__ import annotations

import numpy as np
import pytest

from canon_refs.nn import mlp
from pytest_mlcanon.testing import (
    assert_close,
    assert_grad_matches,
    call_leaves_inputs_unchanged,
    strict_numpy,
)
from pytest_mlcanon.testing import rng as make_rng

pytestmark = pytest.mark.canon("nn/mlp")

XOR_X = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
XOR_Y = np.array([0, 1, 1, 0])


def _spiral(
    n_per_arm: int = 100, arms: int = 3, noise: float = 0.2, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The three-arm spiral of CS231n: radius 0 -> 1, angle swept over 4 rad per arm plus noise."""
    g = make_rng(seed)
    radius = np.tile(np.linspace(0.0, 1.0, n_per_arm), arms)
    angle = np.concatenate([np.linspace(4.0 * j, 4.0 * (j + 1), n_per_arm) for j in range(arms)])
    angle = angle + noise * g.standard_normal(angle.size)
    X = np.stack([radius * np.sin(angle), radius * np.cos(angle)], axis=1)
    return X, np.repeat(np.arange(arms), n_per_arm)


def _torch_forward(model: mlp.MLP, X: np.ndarray, activation: str):  # noqa: ANN202  (torch imported lazily)
    """The same network composed from torch float64 ops on copies of ``model.params`` (only the
    documented ``params`` attribute is read; the test passes the activation it built the model with)."""
    import torch

    params = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in model.params.items()}
    act = torch.relu if activation == "relu" else torch.tanh
    a = torch.tensor(X, dtype=torch.float64)
    n_layers = len(params) // 2
    for layer in range(n_layers):
        a = a @ params[f"W{layer}"] + params[f"b{layer}"]
        if layer < n_layers - 1:
            a = act(a)
    return a, params


def _data(n: int, sizes: list[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    g = make_rng(seed)
    return g.standard_normal((n, sizes[0])), g.integers(0, sizes[-1], n)


def _fixed_case(
    sizes: list[int], n: int, activation: str, seed: int
) -> tuple[mlp.MLP, np.ndarray, np.ndarray]:
    """A model whose weights and biases are overwritten with N(0, 1) draws of the test's own
    generator, so the case does not depend on how an implementation draws its init.

    The finite-difference cases (5-4-3; n = 6 with seed 5, n = 1 with seed 7) have no gradient entry
    of magnitude in (0, 3e-3) and no hidden pre-activation within 0.01 of the relu kink, so the
    central difference (round-off about 1e-10) stays inside the 1e-6 relative tolerance by a factor
    of 50 or more (measured max rel err 1.7e-8 and 1.2e-8).
    """
    model = mlp.MLP(sizes, activation=activation, seed=0)
    g = make_rng(seed)
    for value in model.params.values():
        value[...] = g.standard_normal(value.shape)
    return model, g.standard_normal((n, sizes[0])), g.integers(0, sizes[-1], n)


def test_relu_and_relu_grad_values() -> None:
    # exact: max(x, 0) and a 0/1 mask involve no rounding
    x = np.array([[-2.0, 0.0, 3.0], [1e-300, -1e-300, 7.5]])
    np.testing.assert_array_equal(call_leaves_inputs_unchanged(mlp.relu, x), [[0.0, 0.0, 3.0], [1e-300, 0.0, 7.5]])
    np.testing.assert_array_equal(mlp.relu_grad(x), [[0.0, 0.0, 1.0], [1.0, 0.0, 1.0]])
    assert mlp.relu_grad(x).dtype == np.float64


def test_backward_through_a_relu_at_exactly_zero_matches_torch() -> None:
    # A zero input row with zero first-layer biases puts every hidden pre-activation of that row at
    # exactly 0: the stub's relu'(0) = 0 (torch's too) must hold inside backward, not only in relu_grad.
    import torch

    sizes = [3, 4, 2]
    model = mlp.MLP(sizes, activation="relu", seed=0)
    g = make_rng(21)
    for key, value in model.params.items():
        value[...] = 0.0 if key == "b0" else g.standard_normal(value.shape)
    X = np.vstack([np.zeros(3), g.standard_normal((2, 3))])
    dout = g.standard_normal((3, 2))
    model.forward(X)
    grads = model.backward(dout)
    logits_t, params_t = _torch_forward(model, X, "relu")
    logits_t.backward(torch.tensor(dout))
    for key, p in params_t.items():
        assert_close(grads[key], p.grad.numpy(), magnitude=float(np.abs(p.grad.numpy()).max()) + 1.0, cond=8,
                     what=f"MLP.backward(dout)[{key!r}] with pre-activations at exactly 0")


def test_softmax_cross_entropy_closed_form() -> None:
    loss, dlogits = call_leaves_inputs_unchanged(mlp.softmax_cross_entropy, np.zeros((2, 4)), np.array([1, 3]))
    assert_close(loss, np.log(4.0), what="softmax_cross_entropy(0, y).loss")
    expected = (np.full((2, 4), 0.25) - np.eye(4)[[1, 3]]) / 2
    assert_close(dlogits, expected, what="softmax_cross_entropy(0, y).dlogits")


def test_softmax_cross_entropy_matches_torch() -> None:
    import torch
    import torch.nn.functional as F

    g = make_rng(1)
    logits, y = 3.0 * g.standard_normal((7, 5)), g.integers(0, 5, 7)
    loss, dlogits = mlp.softmax_cross_entropy(logits, y)
    z = torch.tensor(logits, requires_grad=True)
    ref = F.cross_entropy(z, torch.tensor(y))
    ref.backward()
    size = float(np.abs(logits).max())  # a softmax of logits of size L is off by about eps * L (C8)
    assert_close(loss, ref.item(), magnitude=size, what="softmax_cross_entropy(...).loss")
    assert_close(dlogits, z.grad.numpy(), magnitude=size, what="softmax_cross_entropy(...).dlogits")


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_gradients_match_finite_differences(activation: str) -> None:
    model, X, y = _fixed_case([5, 4, 3], 6, activation, seed=5)
    _, grads = model.loss_and_grads(X, y)
    assert set(grads) == {"W0", "b0", "W1", "b1"}

    def loss() -> float:
        return mlp.softmax_cross_entropy(model.forward(X), y)[0]

    for key, value in model.params.items():
        assert grads[key].shape == value.shape
        assert_grad_matches(loss, value, grads[key])


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_forward_and_gradients_match_torch_autograd(activation: str) -> None:
    import torch
    import torch.nn.functional as F

    sizes = [4, 6, 5, 3]
    model = mlp.MLP(sizes, activation=activation, seed=3)
    X, y = _data(9, sizes, seed=4)
    loss, grads = call_leaves_inputs_unchanged(model.loss_and_grads, X, y)
    logits_t, params_t = _torch_forward(model, X, activation)
    loss_t = F.cross_entropy(logits_t, torch.tensor(y))
    loss_t.backward()
    logits = call_leaves_inputs_unchanged(model.forward, X)
    # three float64 layers of width <= 6: a few ulps of each layer's output, times the widths summed
    size = float(np.abs(logits).max()) + 1.0
    assert_close(logits, logits_t.detach().numpy(), magnitude=size, cond=16, what="MLP.forward(X)")
    assert_close(loss, loss_t.item(), magnitude=size, cond=16, what="MLP.loss_and_grads(X, y).loss")
    for key, p in params_t.items():
        assert_close(grads[key], p.grad.numpy(), magnitude=float(np.abs(p.grad.numpy()).max()) + 1.0, cond=16,
                     what=f"MLP.loss_and_grads(X, y).grads[{key!r}]")


def test_backward_of_an_arbitrary_upstream_gradient_matches_torch() -> None:
    sizes = [3, 7, 2]
    model = mlp.MLP(sizes, activation="tanh", seed=5)
    X, _ = _data(8, sizes, seed=6)
    dout = make_rng(7).standard_normal((8, 2))
    model.forward(X)
    grads = call_leaves_inputs_unchanged(model.backward, dout)
    import torch

    logits_t, params_t = _torch_forward(model, X, "tanh")
    logits_t.backward(torch.tensor(dout))
    for key, p in params_t.items():
        assert_close(grads[key], p.grad.numpy(), magnitude=float(np.abs(p.grad.numpy()).max()) + 1.0, cond=16,
                     what=f"MLP.backward(dout)[{key!r}]")


@pytest.mark.numerics_probe
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_softmax_cross_entropy_extreme_logits(dtype: type) -> None:
    logits = np.array([[1e4, -1e4, 0.0], [1e4, -1e4, 0.0]], dtype=dtype)
    y = np.array([1, 0])
    with strict_numpy():
        loss, dlogits = mlp.softmax_cross_entropy(logits, y)
    assert np.isfinite(loss) and np.isfinite(dlogits).all()
    # float32 logits are upcast (stated), so every value is float64 at the logits' size 1e4 (C8)
    tol = {"dtype": np.float64, "magnitude": 1e4}
    assert_close(loss, 1e4, **tol, what="softmax_cross_entropy(extreme).loss")  # row 0 costs 2e4, row 1 costs 0
    assert_close(dlogits, np.array([[0.5, -0.5, 0.0], [0.0, 0.0, 0.0]]), **tol, what="softmax_cross_entropy(extreme).dlogits")
    assert_close(dlogits.sum(axis=1), np.zeros(2), **tol, what="dlogits.sum(1)")


@pytest.mark.numerics_probe
def test_training_step_with_extreme_logits_stays_finite() -> None:
    model = mlp.MLP([2, 3], seed=0)
    model.params["W0"][:] = [[1e4, -1e4, 0.0], [0.0, 0.0, 0.0]]
    with strict_numpy():
        loss, grads = model.loss_and_grads(np.array([[1.0, 0.0]]), np.array([1]))
    assert_close(loss, 2e4, what="loss at logits [1e4, -1e4, 0], label 1")
    assert all(np.isfinite(g).all() for g in grads.values())


def test_xor_is_learned() -> None:
    model = mlp.MLP([2, 8, 2], activation="tanh", seed=0)
    losses = mlp.train_mlp(model, XOR_X, XOR_Y, lr=0.5, steps=2000)
    assert len(losses) == 2000
    accuracy = np.mean(np.argmax(model.forward(XOR_X), axis=1) == XOR_Y)
    assert accuracy == 1.0
    assert losses[-1] < 0.1 * losses[0]


def test_three_arm_spiral_reaches_95_percent() -> None:
    # Five seeds of data and init reach 0.9933 at step 3000 with lr 1.0 (threshold 0.95).
    X, y = _spiral(seed=0)
    model = mlp.MLP([2, 64, 3], activation="relu", seed=0)
    mlp.train_mlp(model, X, y, lr=1.0, steps=3000)
    accuracy = np.mean(np.argmax(model.forward(X), axis=1) == y)
    assert accuracy >= 0.95, f"spiral training accuracy {accuracy:.3f} < 0.95"


def test_train_mlp_step_is_plain_sgd() -> None:
    sizes = [3, 5, 4]
    model = mlp.MLP(sizes, seed=8)
    X, y = _data(10, sizes, seed=9)
    before = {k: v.copy() for k, v in model.params.items()}
    loss0, grads0 = model.loss_and_grads(X, y)
    losses = call_leaves_inputs_unchanged(mlp.train_mlp, model, X, y, lr=0.3, steps=1)
    assert len(losses) == 1
    assert_close(losses[0], loss0, what="train_mlp(..., steps=1) loss")
    for key in before:
        expected = before[key] - 0.3 * grads0[key]
        assert_close(model.params[key], expected, magnitude=float(np.abs(expected).max()) + 1.0,
                     what=f"params[{key!r}] after one SGD step")


def test_train_mlp_minibatches_are_seeded() -> None:
    sizes = [3, 5, 4]
    X, y = _data(20, sizes, seed=10)
    runs = []
    for _ in range(2):
        model = mlp.MLP(sizes, seed=11)
        runs.append(mlp.train_mlp(model, X, y, lr=0.2, steps=15, batch_size=4, seed=12))
    assert len(runs[0]) == 15
    assert runs[0] == runs[1]
    full = mlp.train_mlp(mlp.MLP(sizes, seed=11), X, y, lr=0.2, steps=15)
    assert runs[0] != full


@pytest.mark.parametrize(("activation", "var"), [("relu", 2.0 / 2000), ("tanh", 2.0 / 2500)])
def test_init_scale_and_param_layout(activation: str, var: float) -> None:
    model = mlp.MLP([2000, 500, 3], activation=activation, seed=0)
    assert set(model.params) == {"W0", "b0", "W1", "b1"}
    assert model.params["W0"].shape == (2000, 500) and model.params["b0"].shape == (500,)
    assert model.params["W1"].shape == (500, 3) and model.params["b1"].shape == (3,)
    np.testing.assert_array_equal(model.params["b0"], 0.0)
    W = model.params["W0"]
    n, std = W.size, np.sqrt(var)
    assert abs(W.mean()) <= 4 * std / np.sqrt(n)
    assert abs(W.std() / std - 1.0) <= 4 / np.sqrt(2 * n)  # SE of a sample std is std / sqrt(2n)


@pytest.mark.edge_case
def test_batch_of_one() -> None:
    model, X, y = _fixed_case([5, 4, 3], 1, "tanh", seed=7)
    logits = model.forward(X)
    assert logits.shape == (1, 3)
    loss, grads = model.loss_and_grads(X, y)
    assert all(grads[k].shape == v.shape for k, v in model.params.items())

    def f() -> float:
        return mlp.softmax_cross_entropy(model.forward(X), y)[0]

    for key, value in model.params.items():
        assert_grad_matches(f, value, grads[key])


# ---- input checks (contract: the exception type only) -------------------------------------------


@pytest.mark.contract
def test_failed_call_leaves_cache_and_params_untouched() -> None:
    sizes = [3, 4, 2]
    model = mlp.MLP(sizes, seed=15)
    X, _ = _data(5, sizes, seed=16)
    dout = make_rng(17).standard_normal((5, 2))
    model.forward(X)
    expected = model.backward(dout)
    with pytest.raises(ValueError):
        model.loss_and_grads(X[:2] + 1.0, np.array([0, 2]))
    again = model.backward(dout)
    for key in expected:
        np.testing.assert_array_equal(again[key], expected[key])
    before = {k: v.copy() for k, v in model.params.items()}
    with pytest.raises(ValueError):
        mlp.train_mlp(model, X, np.zeros(5, dtype=np.int64), lr=-1.0)
    for key in before:
        np.testing.assert_array_equal(model.params[key], before[key])


@pytest.mark.contract
@pytest.mark.parametrize("sizes", [[3], [], [3, 0], [2, -1, 2]])
def test_bad_layer_sizes_raise(sizes: list[int]) -> None:
    with pytest.raises(ValueError):
        mlp.MLP(sizes)


@pytest.mark.contract
def test_unknown_activation_raises() -> None:
    with pytest.raises(ValueError):
        mlp.MLP([2, 2], activation="sigmoid")  # type: ignore[arg-type]


@pytest.mark.contract
def test_wrong_input_width_raises() -> None:
    model = mlp.MLP([3, 4, 2])
    with pytest.raises(ValueError):
        model.forward(np.zeros((5, 4)))


@pytest.mark.contract
def test_labels_out_of_range_raise() -> None:
    with pytest.raises(ValueError):
        mlp.softmax_cross_entropy(np.zeros((2, 3)), np.array([0, 3]))
    with pytest.raises(ValueError):
        mlp.softmax_cross_entropy(np.zeros((2, 3)), np.array([-1, 0]))
    with pytest.raises(ValueError):
        mlp.MLP([3, 2]).loss_and_grads(np.zeros((2, 3)), np.array([0, 2]))


@pytest.mark.contract
def test_dout_shape_mismatch_raises() -> None:
    model = mlp.MLP([3, 4, 2])
    model.forward(np.zeros((5, 3)))
    with pytest.raises(ValueError):
        model.backward(np.zeros((5, 3)))


@pytest.mark.contract
def test_backward_before_forward_raises() -> None:
    with pytest.raises(RuntimeError):
        mlp.MLP([3, 2]).backward(np.zeros((1, 2)))


@pytest.mark.contract
def test_bad_training_hyperparameters_raise() -> None:
    model = mlp.MLP([2, 2])
    X, y = np.zeros((3, 2)), np.array([0, 1, 0])
    with pytest.raises(ValueError):
        mlp.train_mlp(model, X, y, lr=0.0)
    with pytest.raises(ValueError):
        mlp.train_mlp(model, X, y, batch_size=4)
