"""Canon #12: a scalar reverse-mode autograd engine in pure Python (micrograd-sized).

Every ``Value`` holds a float, the ``Value`` objects it was computed from, and the local derivative
of itself with respect to each of them. ``backward`` orders the graph so that every node comes after
its inputs, seeds the output with ``d out / d out = 1`` and walks the order in reverse, adding
``local_derivative * node.grad`` into each input: the chain rule, once per edge.

The subtle point is that gradients are *added*, never assigned. A value used twice (``a * a``, or
the two arms of a diamond ``(a + 1) * (a * 2)``) receives one contribution per use, so ``a * a``
gives ``2a`` and assignment would give ``a``. The same ``+=`` makes leaf gradients accumulate across
calls as in torch: each ``backward`` first resets the interior (non-leaf) nodes to zero, so calling it
twice without ``zero_grad`` doubles the leaf gradients and nothing else.

Shapes: none to track; every ``Value`` is a scalar, shape ``()``. A tensor engine runs the same
graph with arrays such as ``(B, T, d)`` and adds a sum over broadcast axes to each local rule.

Trade-off: the topological order is built with an explicit stack instead of a recursive DFS. The
recursive version is four lines shorter, but CPython's default recursion limit is 1000 frames, so a
chain of 10 000 additions (an unrolled RNN, a long running sum) raises ``RecursionError``; the
iterative walk costs one extra list and handles any depth. ``sigmoid`` is evaluated on whichever
side avoids ``exp`` of a large positive number, because ``math.exp(1000)`` raises OverflowError
rather than returning inf.

What to test: the two micrograd expressions against their known values and against torch, nodes
used twice, diamonds, a 10 000-deep chain, finite differences through every operation, ``relu``'s
gradient at 0, and ``sigmoid(+-1000)``.
"""

from __future__ import annotations

import math
from numbers import Real


def _as_value(other: object) -> Value | None:
    """Wrap an int/float as a constant leaf; None for anything else (the operator then defers)."""
    if isinstance(other, Value):
        return other
    if isinstance(other, Real):
        return Value(other)
    return None


class Value:
    """A scalar node of the computation graph.

    Attributes:
        data: the float value.
        grad: ``d root / d self`` after ``root.backward()`` (0.0 before).

    Operators: ``+ - * /`` with a ``Value`` or an int/float on either side, unary ``-``, and ``**``
    with an int/float exponent. Methods ``exp``, ``log``, ``tanh``, ``relu``, ``sigmoid``.

    Raises:
        TypeError: ``data`` is not a real number; ``Value ** Value``.
        ValueError: ``log`` of a value <= 0; a negative base with a non-integer exponent.

    Source: the micrograd design (Karpathy, 2020), with iterative ordering and torch's accumulation.
    """

    def __init__(self, data: float, _children: tuple[Value, ...] = (), _op: str = "") -> None:
        _check_real(data)
        self.data = float(data)
        self.grad = 0.0
        self._prev = tuple(_children)
        self._local_grads: tuple[float, ...] = (0.0,) * len(self._prev)
        self._op = _op

    @staticmethod
    def _node(data: float, children: tuple[Value, ...], local_grads: tuple[float, ...], op: str) -> Value:
        out = Value(data, children, op)
        out._local_grads = local_grads
        return out

    def __repr__(self) -> str:
        return f"Value(data={self.data!r}, grad={self.grad!r})"

    # -- arithmetic ------------------------------------------------------------------------------

    def __add__(self, other: object) -> Value:
        o = _as_value(other)
        if o is None:
            return NotImplemented
        return Value._node(self.data + o.data, (self, o), (1.0, 1.0), "+")

    def __mul__(self, other: object) -> Value:
        o = _as_value(other)
        if o is None:
            return NotImplemented
        return Value._node(self.data * o.data, (self, o), (o.data, self.data), "*")

    def __pow__(self, exponent: object) -> Value:
        if not isinstance(exponent, (Real, Value)):
            return NotImplemented
        k = _check_exponent(self.data, exponent)
        return Value._node(self.data**k, (self,), (k * self.data ** (k - 1.0),), f"**{k:g}")

    def __neg__(self) -> Value:
        return self * -1.0

    def __radd__(self, other: object) -> Value:
        return self + other

    def __rmul__(self, other: object) -> Value:
        return self * other

    def __sub__(self, other: object) -> Value:
        o = _as_value(other)
        if o is None:
            return NotImplemented
        return self + (-o)

    def __rsub__(self, other: object) -> Value:
        o = _as_value(other)
        if o is None:
            return NotImplemented
        return o + (-self)

    def __truediv__(self, other: object) -> Value:
        o = _as_value(other)
        if o is None:
            return NotImplemented
        return self * o**-1

    def __rtruediv__(self, other: object) -> Value:
        o = _as_value(other)
        if o is None:
            return NotImplemented
        return o * self**-1

    # -- elementary functions -------------------------------------------------------------------

    def exp(self) -> Value:
        """``e**x``; local derivative ``e**x``. Raises OverflowError above x ~ 709 (float64 max)."""
        e = math.exp(self.data)
        return Value._node(e, (self,), (e,), "exp")

    def log(self) -> Value:
        """Natural log; local derivative ``1 / x``.

        Raises:
            ValueError: ``x <= 0``.
        """
        _check_positive(self.data)
        return Value._node(math.log(self.data), (self,), (1.0 / self.data,), "log")

    def tanh(self) -> Value:
        """``tanh(x)``; local derivative ``1 - tanh(x)**2``; ``tanh(-400) == -1.0`` with gradient 0."""
        t = math.tanh(self.data)
        return Value._node(t, (self,), (1.0 - t * t,), "tanh")

    def relu(self) -> Value:
        """``max(x, 0)``; local derivative 1 for ``x > 0`` and 0 otherwise (0 at exactly 0, as torch)."""
        return Value._node(max(self.data, 0.0), (self,), (1.0 if self.data > 0 else 0.0,), "relu")

    def sigmoid(self) -> Value:
        """``1 / (1 + e**-x)``; local derivative ``s * (1 - s)``.

        ``sigmoid(1000) == 1.0`` and ``sigmoid(-1000) == 0.0`` with no OverflowError.
        """
        if self.data >= 0:
            s = 1.0 / (1.0 + math.exp(-self.data))
        else:
            e = math.exp(self.data)
            s = e / (1.0 + e)
        return Value._node(s, (self,), (s * (1.0 - s),), "sigmoid")

    # -- backpropagation ------------------------------------------------------------------------

    def backward(self) -> None:
        """Accumulate ``d self / d node`` into ``node.grad`` for every node of the graph.

        Interior nodes (those with inputs) are reset to 0 first; leaves keep what they had, so a
        second call without :meth:`zero_grad` doubles the leaf gradients, as in torch. The root is
        seeded with ``+= 1.0``. Iterative: no recursion, any depth.
        """
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
    """Every node reachable from ``root``, each once, every node after all of its inputs.

    Works for graphs deeper than Python's recursion limit (a chain of 10 000 operations). ``root``
    is last.

    Raises:
        TypeError: ``root`` is not a ``Value``.
    """
    _check_root(root)
    order: list[Value] = []
    visited: set[int] = set()
    stack: list[tuple[Value, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        for child in node._prev:
            if id(child) not in visited:
                stack.append((child, False))
    return order


def _check_real(data: object) -> None:
    if isinstance(data, Value) or not isinstance(data, Real):
        raise TypeError(f"data must be an int or float, got {type(data).__name__}")


def _check_exponent(base: float, exponent: object) -> float:
    """The exponent as a float: TypeError for a ``Value``, ValueError for a negative base's fraction."""
    if isinstance(exponent, Value):
        raise TypeError("exponent must be an int or float, not a Value (Value ** Value is unsupported)")
    k = float(exponent)  # type: ignore[arg-type]
    if base < 0 and not k.is_integer():
        raise ValueError(f"a negative base ({base}) needs an integer exponent, got {k}")
    return k


def _check_positive(x: float) -> None:
    if x <= 0:
        raise ValueError(f"log needs a positive value, got {x}")


def _check_root(root: object) -> None:
    if not isinstance(root, Value):
        raise TypeError(f"root must be a Value, got {type(root).__name__}")
