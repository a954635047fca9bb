"""Reference tests for canon #12, the scalar autograd engine (checked against torch float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from canon_refs.nn import autograd
from pytest_mlcanon.testing import assert_close, assert_grad_matches

pytestmark = pytest.mark.canon("nn/autograd")

# Tolerances: every value below is float64 arithmetic on numbers of size <= ~1e3; assert_close's few
# ulps of the compared size (times the operation count where a chain is long) hold for any order of
# evaluation; the quoted micrograd values are rounded to 16-17 significant digits.


def _t(v: float) -> torch.Tensor:
    return torch.tensor(float(v), dtype=torch.float64, requires_grad=True)


def _micrograd_sanity(V, relu):
    x = V(-4.0)
    z = 2 * x + 2 + x
    q = relu(z) + z * x
    h = relu(z * z)
    y = h + q + q * x
    return x, y


def _micrograd_long(V, relu):
    a = V(-4.0)
    b = V(2.0)
    c = a + b
    d = a * b + b**3
    c = c + c + 1
    c = c + 1 + c + (-a)
    d = d + d * 2 + relu(b + a)
    d = d + 3 * d + relu(b - a)
    e = c - d
    f = e**2
    g = f / 2.0
    g = g + 10.0 / f
    return a, b, g


def test_sanity_expression_matches_known_values_and_torch():
    x, y = _micrograd_sanity(autograd.Value, lambda v: v.relu())
    y.backward()
    assert_close(y.data, -20.0, magnitude=100.0, what="sanity expression: y.data")
    assert_close(x.grad, 46.0, magnitude=100.0, what="sanity expression: x.grad")
    xt, yt = _micrograd_sanity(_t, torch.relu)
    yt.backward()
    assert_close(y.data, yt.item(), magnitude=100.0, what="sanity expression: y.data vs torch")
    assert_close(x.grad, xt.grad.item(), magnitude=100.0, what="sanity expression: x.grad vs torch")


def test_long_expression_matches_known_values_and_torch():
    a, b, g = _micrograd_long(autograd.Value, lambda v: v.relu())
    g.backward()
    _assert_long_expression(g, a, b)
    at, bt, gt = _micrograd_long(_t, torch.relu)
    gt.backward()
    tol = {"magnitude": 1e3, "cond": 64}
    assert_close(g.data, gt.item(), **tol, what="long expression: g.data vs torch")
    assert_close(a.grad, at.grad.item(), **tol, what="long expression: a.grad vs torch")
    assert_close(b.grad, bt.grad.item(), **tol, what="long expression: b.grad vs torch")


def _assert_long_expression(g: autograd.Value, a: autograd.Value, b: autograd.Value) -> None:
    # intermediate values reach ~1e3 and f = e**2 ~ 5e4 before the division: a few dozen roundings
    tol = {"magnitude": 1e3, "cond": 64}
    assert_close(g.data, 24.70408163265306, **tol, what="long expression: g.data")
    assert_close(a.grad, 138.83381924198252, **tol, what="long expression: a.grad")
    assert_close(b.grad, 645.5772594752186, **tol, what="long expression: b.grad")


def test_in_place_operators_build_the_same_graph():
    # The seed's version of the long expression uses +=; Python turns it into __add__.
    a = autograd.Value(-4.0)
    b = autograd.Value(2.0)
    c = a + b
    d = a * b + b**3
    c += c + 1
    c += 1 + c + (-a)
    d += d * 2 + (b + a).relu()
    d += 3 * d + (b - a).relu()
    g = (c - d) ** 2 / 2.0
    g += 10.0 / ((c - d) ** 2)
    g.backward()
    _assert_long_expression(g, a, b)


UNARY = {
    "exp": (lambda v: v.exp(), torch.exp, 0.7),
    "log": (lambda v: v.log(), torch.log, 1.3),
    "tanh": (lambda v: v.tanh(), torch.tanh, -0.4),
    "sigmoid": (lambda v: v.sigmoid(), torch.sigmoid, 0.9),
    "sigmoid_neg": (lambda v: v.sigmoid(), torch.sigmoid, -2.5),
    "relu_pos": (lambda v: v.relu(), torch.relu, 1.5),
    "relu_neg": (lambda v: v.relu(), torch.relu, -1.5),
    "neg": (lambda v: -v, lambda t: -t, 2.0),
    "pow_int": (lambda v: v**3, lambda t: t**3, -1.5),
    "pow_float": (lambda v: v**0.5, lambda t: t**0.5, 2.0),
    "pow_negative": (lambda v: v**-2, lambda t: t**-2, 1.7),
    "radd": (lambda v: 3 + v, lambda t: 3 + t, 0.5),
    "rsub": (lambda v: 3 - v, lambda t: 3 - t, 0.5),
    "sub": (lambda v: v - 3, lambda t: t - 3, 0.5),
    "rmul": (lambda v: 2.5 * v, lambda t: 2.5 * t, 0.5),
    "div": (lambda v: v / 4, lambda t: t / 4, 0.5),
    "rdiv": (lambda v: 4 / v, lambda t: 4 / t, 0.5),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_each_operation_matches_torch(name):
    fn, torch_fn, x0 = UNARY[name]
    x = autograd.Value(x0)
    y = fn(x)
    assert isinstance(y, autograd.Value)
    y.backward()
    xt = _t(x0)
    yt = torch_fn(xt)
    yt.backward()
    assert x.data == x0  # the operand is not modified
    assert_close(y.data, yt.item(), magnitude=max(abs(yt.item()), 1.0), cond=4, what=f"{name}: value")
    assert_close(x.grad, xt.grad.item(), magnitude=max(abs(xt.grad.item()), 1.0), cond=4, what=f"{name}: grad")


@pytest.mark.parametrize("op", ["+", "-", "*", "/"])
def test_binary_operations_match_torch(op):
    f = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}[
        op
    ]
    a, b = autograd.Value(1.25), autograd.Value(-0.8)
    out = f(a, b)
    out.backward()
    at, bt = _t(1.25), _t(-0.8)
    ot = f(at, bt)
    ot.backward()
    assert (a.data, b.data) == (1.25, -0.8)  # the operands are not modified
    assert_close(out.data, ot.item(), magnitude=2.0, what=f"a {op} b: value")
    assert_close([a.grad, b.grad], [at.grad.item(), bt.grad.item()], magnitude=2.0, what=f"a {op} b: grads")


def test_node_used_twice_accumulates():
    a = autograd.Value(3.0)
    (a * a).backward()
    assert_close(a.grad, 6.0, what="d(a * a)/da")
    b = autograd.Value(3.0)
    (b + b).backward()
    assert_close(b.grad, 2.0, what="d(b + b)/db")


def test_diamond_graph_accumulates():
    def build(V):
        a = V(1.5)
        left = a * 2
        right = a + 3
        top = (left * right).tanh() + left.exp() * right
        return a, top

    a, top = build(autograd.Value)
    top.backward()
    at, tt = build(_t)
    tt.backward()
    assert_close(top.data, tt.item(), magnitude=abs(tt.item()), cond=8, what="diamond graph: value")
    assert_close(a.grad, at.grad.item(), magnitude=abs(at.grad.item()), cond=8, what="diamond graph: grad")


def test_chain_of_ten_thousand_additions():
    x = autograd.Value(0.5)
    total = x
    for _ in range(10_000):
        total = total + x
    total.backward()
    # sums of halves and ones up to 1e4 are exact in float64
    assert_close(total.data, 10_001 * 0.5, what="chain of 10 000 additions: value")
    assert_close(x.grad, 10_001.0, what="chain of 10 000 additions: grad")
    total.zero_grad()
    assert x.grad == 0.0
    deep = autograd.Value(1.0)
    y = deep
    for _ in range(10_000):
        y = y * 1.0001
    y.backward()
    assert_close(deep.grad, 1.0001**10_000, cond=10_000, what="chain of 10 000 products: grad")


def test_topological_order_puts_inputs_first():
    a = autograd.Value(0.5)
    b = autograd.Value(-2.0)
    c = a * b
    d = c + a
    e = d.tanh()
    f = e * c
    inputs = {id(c): (a, b), id(d): (c, a), id(e): (d,), id(f): (e, c)}
    order = autograd.topological_order(f)
    assert len(order) == 6
    assert order[-1] is f
    position = {id(node): i for i, node in enumerate(order)}
    assert set(position) == {id(v) for v in (a, b, c, d, e, f)}, "every node exactly once"
    for node_id, parents in inputs.items():
        for parent in parents:
            assert position[id(parent)] < position[node_id]


def test_backward_twice_doubles_leaf_grads_only():
    x = autograd.Value(0.3)
    w = autograd.Value(-1.2)
    hidden = (x * w).tanh()
    out = hidden * hidden + x
    out.backward()
    first = (x.grad, w.grad, hidden.grad, out.grad)
    out.backward()
    assert_close([x.grad, w.grad], [2 * first[0], 2 * first[1]], magnitude=4.0, what="leaf grads after two backward calls")
    assert_close(hidden.grad, first[2], magnitude=4.0, what="interior grad after two backward calls")
    assert out.grad == 1.0
    out.zero_grad()
    assert (x.grad, w.grad, hidden.grad, out.grad) == (0.0, 0.0, 0.0, 0.0)
    out.backward()
    assert_close([x.grad, w.grad], list(first[:2]), magnitude=4.0, what="leaf grads after zero_grad")


def test_finite_differences_through_every_operation():
    def build(p):
        x, y, z = (autograd.Value(float(v)) for v in p)
        a = (x * y).tanh() + (z**2 + 1.0).log()
        b = a.sigmoid() / (1.0 + y.exp())
        c = (b - x) ** 3 + 2.0 / (z * z + 0.5) - (x * 0.3).relu()
        return (x, y, z), c * (-y).sigmoid() + (x**0.5 if x.data > 0 else x)

    p = np.array([0.7, -0.4, 1.3])
    leaves, out = build(p)
    out.backward()
    analytic = np.array([v.grad for v in leaves])
    assert_grad_matches(lambda: build(p)[1].data, p, analytic)


@pytest.mark.edge_case
def test_relu_gradient_at_zero_is_zero():
    x = autograd.Value(0.0)
    y = x.relu()
    y.backward()
    assert y.data == 0.0
    assert x.grad == 0.0


@pytest.mark.edge_case
def test_leaf_and_constant_data_types():
    v = autograd.Value(3)
    assert isinstance(v.data, float) and v.data == 3.0 and v.grad == 0.0
    assert autograd.topological_order(v) == [v]
    y = v * 2
    y.backward()
    assert v.grad == 2.0


@pytest.mark.numerics_probe
def test_sigmoid_saturates_without_overflow():
    hi = autograd.Value(1000.0)
    lo = autograd.Value(-1000.0)
    s_hi, s_lo = hi.sigmoid(), lo.sigmoid()
    assert_close(s_hi.data, 1.0, what="sigmoid(1000)")
    assert_close(s_lo.data, 0.0, magnitude=1.0, what="sigmoid(-1000)")
    (s_hi + s_lo).backward()
    assert math.isfinite(hi.grad) and math.isfinite(lo.grad)
    assert_close([hi.grad, lo.grad], [0.0, 0.0], magnitude=1.0, what="sigmoid'(+-1000)")


@pytest.mark.numerics_probe
def test_tanh_saturates():
    x = autograd.Value(-400.0)
    y = x.tanh()
    y.backward()
    assert_close(y.data, -1.0, what="tanh(-400)")
    assert_close(x.grad, 0.0, magnitude=1.0, what="tanh'(-400)")


# ---- input checks (contract: the exception type only) -------------------------------------------


@pytest.mark.contract
@pytest.mark.parametrize("bad", [0.0, -2.0])
def test_log_of_non_positive_raises(bad):
    with pytest.raises(ValueError):
        autograd.Value(bad).log()


@pytest.mark.contract
def test_value_power_value_raises_type_error():
    with pytest.raises(TypeError):
        autograd.Value(2.0) ** autograd.Value(3.0)


@pytest.mark.contract
@pytest.mark.parametrize("bad", ["3", None, [1.0]])
def test_non_numeric_data_raises_type_error(bad):
    with pytest.raises(TypeError):
        autograd.Value(bad)
