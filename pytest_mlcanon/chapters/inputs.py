"""Random inputs for the executable rows and problems of the chapters.

An input is declared in the data files as a table, for example::

    {name = "x", shape = ["B", "T", "D"]}                      # float32, standard normal
    {name = "tokens", shape = ["B", "T"], kind = "index", high = "V"}
    {name = "n_heads", value = "H"}                            # a Python int

Sizes are integers or expressions over named dimensions (``"H*d"``, ``"T-1"``), bound per case.
The values are drawn once in NumPy from a seeded generator; :func:`to_torch` gives PyTorch the same
numbers, so the NumPy and PyTorch columns of a row, or a learner's answer and the intended
operation, always see identical data.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_mlcanon.chapters import DataError

# kind -> what the values are. Float kinds are float32, as interview code runs in float32.
KINDS = {
    "float": "standard normal",
    "positive": "uniform in [0.5, 2)",
    "unit": "uniform in [0, 1)",
    "large": "normal with standard deviation 1e4 (logits that overflow a naive exp)",
    "tiny": "normal with standard deviation 1e-8",
    "signed": "normal with standard deviation 3 (fractions of both signs)",
    "sym": "a symmetric matrix (last two sizes equal)",
    "wellcond": "a well-conditioned square matrix: normal plus n times the identity",
    "index": "int64 in [0, high)",
    "bool": "random booleans",
    "mask": "booleans with the first position of every row True (no empty row)",
    "int": "a Python int, the value of `value`",
}
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


@dataclass(frozen=True)
class Arg:
    """One declared input."""

    name: str
    shape: tuple[str | int, ...] = ()
    kind: str = "float"
    high: str | int | None = None
    value: str | int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any], where: str) -> Arg:
        if not isinstance(raw.get("name"), str):
            raise DataError(f"{where}: an input without a name")
        kind = str(raw.get("kind", "int" if "value" in raw else "float"))
        if kind not in KINDS:
            raise DataError(f"{where}: input {raw['name']!r} has unknown kind {kind!r}")
        if kind == "index" and raw.get("high") is None:
            raise DataError(f"{where}: index input {raw['name']!r} needs `high`")
        if kind == "int" and raw.get("value") is None:
            raise DataError(f"{where}: int input {raw['name']!r} needs `value`")
        return cls(raw["name"], tuple(raw.get("shape", ())), kind, raw.get("high"), raw.get("value"))

    def describe(self) -> str:
        """``x: (B, T, D) float32`` or ``n_heads: int = H``: how the input is shown to a learner."""
        if self.kind == "int":
            return f"{self.name}: int = {self.value}"
        dims = ", ".join(str(d) for d in self.shape)
        dims = f"({dims},)" if len(self.shape) == 1 else f"({dims})"
        dtype = {"index": "int64", "bool": "bool", "mask": "bool"}.get(self.kind, "float32")
        note = f" in [0, {self.high})" if self.kind == "index" else ""
        if self.kind not in ("float", "index", "bool"):
            note = f", {KINDS[self.kind]}"
        return f"{self.name}: {dims} {dtype}{note}"


def size(expr: str | int, dims: Mapping[str, int]) -> int:
    """The value of a size expression (an int, a dimension name, or ``+ - * //`` over them)."""
    if isinstance(expr, int):
        return expr
    try:
        tree = ast.parse(str(expr), mode="eval").body
    except SyntaxError:
        raise DataError(f"bad size expression {expr!r}") from None
    return _eval(tree, dims, str(expr))


def _eval(node: ast.AST, dims: Mapping[str, int], text: str) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in dims:
            raise DataError(f"size expression {text!r} names {node.id!r}, which the case does not bind")
        return int(dims[node.id])
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return int(_OPS[type(node.op)](_eval(node.left, dims, text), _eval(node.right, dims, text)))
    raise DataError(f"bad size expression {text!r}: use integers, names and + - * //")


def make(args: tuple[Arg, ...], dims: Mapping[str, int], rng: np.random.Generator) -> dict[str, Any]:
    """Draw every input for the sizes ``dims``: NumPy arrays, and Python ints for ``int`` inputs."""
    return {arg.name: _draw(arg, dims, rng) for arg in args}


def _draw(arg: Arg, dims: Mapping[str, int], rng: np.random.Generator) -> Any:
    if arg.kind == "int":
        return size(arg.value if arg.value is not None else 0, dims)
    shape = tuple(size(d, dims) for d in arg.shape)
    if arg.kind == "index":
        return rng.integers(0, size(arg.high if arg.high is not None else 1, dims), size=shape, dtype=np.int64)
    if arg.kind in ("bool", "mask"):
        values = rng.random(shape) < 0.5
        if arg.kind == "mask" and values.ndim:
            values[..., 0] = True
        return values
    if arg.kind in ("sym", "wellcond"):
        n = shape[-1]
        a = rng.standard_normal(shape)
        a = (a + np.swapaxes(a, -1, -2)) / 2 if arg.kind == "sym" else a + n * np.eye(n)
        return a.astype(np.float32)
    scale = {"float": 1.0, "large": 1e4, "tiny": 1e-8, "signed": 3.0}
    if arg.kind in scale:
        return (rng.standard_normal(shape) * scale[arg.kind]).astype(np.float32)
    low, high = (0.5, 2.0) if arg.kind == "positive" else (0.0, 1.0)
    return rng.uniform(low, high, size=shape).astype(np.float32)


def to_torch(values: Mapping[str, Any]) -> dict[str, Any]:
    """The same inputs as PyTorch tensors (copies: the NumPy side keeps its arrays)."""
    import torch

    return {name: torch.from_numpy(np.array(v, copy=True)) if isinstance(v, np.ndarray) else v
            for name, v in values.items()}
