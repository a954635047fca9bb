"""Canon #12: a scalar reverse-mode autograd engine in pure Python (micrograd-sized).

Plan: every Value stores its inputs and the local derivative towards each of them, computed at
creation; backward takes an iterative topological order (explicit stack instead of recursion,
because deep graphs hit the recursion limit) and applies the chain rule root-first with +=, so a
node used twice accumulates both paths. Tests: compare gradients with finite differences and with
torch on a small expression, a 10k-deep chain, x*x gives 2x.
"""

from __future__ import annotations

import math
from numbers import Real


def _wrap(x: object) -> Value:
    return x if isinstance(x, Value) else Value(x)


class Value:
    """A scalar node of the computation graph (``data``, ``grad``)."""
    __slots__ = ("data", "grad", "_prev", "_local_grads", "_op")

    def __init__(self, data: float, _children: tuple[Value, ...] = (), _op: str = "") -> None:
        self.data = float(data)
        self.grad = 0.0
        self._prev = tuple(_children)
        self._local_grads: tuple[float, ...] = ()
        self._op = _op

    @staticmethod
    def _node(data: float, children: tuple[Value, ...], local: tuple[float, ...], op: str) -> Value:
        out = Value(data, children, op)
        out._local_grads = local
        return out

    def __repr__(self) -> str:
        return f"Value(data={self.data}, grad={self.grad})"

    def __add__(self, other: object) -> Value:
        other = _wrap(other)
        return Value._node(self.data + other.data, (self, other), (1.0, 1.0), "+")

    def __mul__(self, other: object) -> Value:
        other = _wrap(other)
        return Value._node(self.data * other.data, (self, other), (other.data, self.data), "*")

    def __pow__(self, exponent: object) -> Value:
        if isinstance(exponent, Value):
            raise TypeError("only int/float exponents are supported")
        n = float(exponent)
        out = math.pow(self.data, n)  # ValueError for a negative base and a fractional n
        local = n * math.pow(self.data, n - 1) if n != 0 else 0.0
        return Value._node(out, (self,), (local,), f"**{exponent}")

    def __neg__(self) -> Value:
        return self * -1.0

    def __radd__(self, other: object) -> Value:
        return self + other

    def __rmul__(self, other: object) -> Value:
        return self * other

    def __sub__(self, other: object) -> Value:
        return self + (-_wrap(other))

    def __rsub__(self, other: object) -> Value:
        return _wrap(other) + (-self)

    def __truediv__(self, other: object) -> Value:
        return self * _wrap(other) ** -1

    def __rtruediv__(self, other: object) -> Value:
        return _wrap(other) * self**-1

    def exp(self) -> Value:
        """``e**x``; local derivative ``e**x`` (math.exp raises OverflowError above ~709)."""
        e = math.exp(self.data)
        return Value._node(e, (self,), (e,), "exp")

    def log(self) -> Value:
        """Natural log; local derivative ``1 / x`` (math.log raises ValueError for x <= 0)."""
        return Value._node(math.log(self.data), (self,), (1.0 / self.data,), "log")

    def tanh(self) -> Value:
        """``tanh(x)``; local derivative ``1 - tanh(x)**2``."""
        t = math.tanh(self.data)
        return Value._node(t, (self,), (1.0 - t * t,), "tanh")

    def relu(self) -> Value:
        """``max(x, 0)``; derivative 1 for x > 0, else 0."""
        x = self.data
        return Value._node(x if x > 0 else 0.0, (self,), (1.0 if x > 0 else 0.0,), "relu")

    def sigmoid(self) -> Value:
        """Logistic function; ``exp`` only sees non-positive arguments so it never overflows."""
        x = self.data
        if x >= 0:
            s = 1.0 / (1.0 + math.exp(-x))
        else:
            e = math.exp(x)
            s = e / (1.0 + e)
        return Value._node(s, (self,), (s * (1.0 - s),), "sigmoid")

    def backward(self) -> None:
        """Accumulate ``d self / d node`` into every node's ``grad`` (leaves accumulate, as torch)."""
        order = topological_order(self)
        for node in order:
            if node._prev:
                node.grad = 0.0
        self.grad += 1.0
        for node in reversed(order):
            for child, local in zip(node._prev, node._local_grads):
                child.grad += local * node.grad

    def zero_grad(self) -> None:
        """Set ``grad = 0.0`` on this node and every node it was computed from."""
        for node in topological_order(self):
            node.grad = 0.0


def topological_order(root: Value) -> list[Value]:
    """Every node reachable from ``root`` once, inputs before users; iterative post-order DFS."""
    order: list[Value] = []
    seen: set[int] = set()
    stack: list[tuple[Value, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for child in node._prev:
            if id(child) not in seen:
                stack.append((child, False))
    return order
