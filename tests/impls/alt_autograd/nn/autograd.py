"""Alternative correct autograd engine (canon #12): micrograd-style ``_backward`` closures instead of
stored local derivatives, and Kahn's algorithm (in-degree counting) instead of a DFS for the
topological order. Scalars only, shape ``()``. Still iterative, so a 10 000-deep chain is fine.
Test: every nn/autograd reference test must pass.
"""

from __future__ import annotations

import math
from collections import deque
from numbers import Real


class Value:
    """Scalar graph node with ``data`` and ``grad``."""

    def __init__(self, data, _children=(), _op=""):
        if not isinstance(data, Real) or isinstance(data, Value):
            raise TypeError(f"Value data must be a real number, not {type(data).__name__}")
        self.data = float(data)
        self.grad = 0.0
        self._children = tuple(_children)
        self._op = _op
        self._backward = lambda: None

    @staticmethod
    def _lift(x):
        if isinstance(x, Value):
            return x
        if isinstance(x, Real):
            return Value(x)
        return None

    def __add__(self, other):
        other = Value._lift(other)
        if other is None:
            return NotImplemented
        out = Value(self.data + other.data, (self, other), "+")

        def _backward():
            self.grad += out.grad
            other.grad += out.grad

        out._backward = _backward
        return out

    def __mul__(self, other):
        other = Value._lift(other)
        if other is None:
            return NotImplemented
        out = Value(self.data * other.data, (self, other), "*")

        def _backward():
            self.grad += other.data * out.grad
            other.grad += self.data * out.grad

        out._backward = _backward
        return out

    def __pow__(self, k):
        if isinstance(k, Value):
            raise TypeError("Value ** Value is not supported: the exponent must be int or float")
        if not isinstance(k, Real):
            return NotImplemented
        if self.data < 0 and float(k) != int(k):
            raise ValueError("negative base with a fractional exponent")
        out = Value(self.data**k, (self,), "**")

        def _backward():
            self.grad += k * self.data ** (k - 1) * out.grad

        out._backward = _backward
        return out

    def _unary(self, value, local, op):
        out = Value(value, (self,), op)

        def _backward():
            self.grad += local * out.grad

        out._backward = _backward
        return out

    def exp(self):
        """e**x."""
        e = math.exp(self.data)
        return self._unary(e, e, "exp")

    def log(self):
        """ln x; ValueError for x <= 0."""
        if not self.data > 0:
            raise ValueError(f"cannot take the log of {self.data}")
        return self._unary(math.log(self.data), 1.0 / self.data, "log")

    def tanh(self):
        """tanh written with exp of a non-positive argument: (1 - e^{-2|x|}) / (1 + e^{-2|x|})."""
        e = math.exp(-2.0 * abs(self.data))
        t = math.copysign((1.0 - e) / (1.0 + e), self.data)
        return self._unary(t, 1.0 - t * t, "tanh")

    def relu(self):
        """max(x, 0) with gradient 0 at 0."""
        return self._unary(self.data if self.data > 0 else 0.0, float(self.data > 0), "relu")

    def sigmoid(self):
        """Logistic function through tanh: s = (1 + tanh(x / 2)) / 2, which never overflows."""
        s = 0.5 * (1.0 + math.tanh(0.5 * self.data))
        return self._unary(s, s * (1.0 - s), "sigmoid")

    def __neg__(self):
        return self * -1

    def __radd__(self, other):
        return self + other

    def __rmul__(self, other):
        return self * other

    def __sub__(self, other):
        other = Value._lift(other)
        return NotImplemented if other is None else self + (-other)

    def __rsub__(self, other):
        other = Value._lift(other)
        return NotImplemented if other is None else other + (-self)

    def __truediv__(self, other):
        other = Value._lift(other)
        return NotImplemented if other is None else self * other**-1

    def __rtruediv__(self, other):
        other = Value._lift(other)
        return NotImplemented if other is None else other * self**-1

    def backward(self):
        """Reset interior grads, seed 1, run the closures in reverse topological order."""
        order = topological_order(self)
        for node in order:
            if node._children:
                node.grad = 0.0
        self.grad += 1.0
        for node in reversed(order):
            node._backward()

    def zero_grad(self):
        """grad = 0 on every node of the graph."""
        for node in topological_order(self):
            node.grad = 0.0


def topological_order(root):
    """Kahn's algorithm from the root: a node is released once every consumer has been released;
    reversing that release order puts every node after its inputs."""
    consumers = {id(root): 0}
    nodes = {id(root): root}
    queue = deque([root])
    while queue:  # count, for every node, how many edges lead into it from its consumers
        node = queue.popleft()
        for child in node._children:
            if id(child) not in nodes:
                nodes[id(child)] = child
                consumers[id(child)] = 0
                queue.append(child)
            consumers[id(child)] += 1
    released = []
    ready = deque([root])
    while ready:
        node = ready.popleft()
        released.append(node)
        for child in node._children:
            consumers[id(child)] -= 1
            if consumers[id(child)] == 0:
                ready.append(child)
    return released[::-1]
