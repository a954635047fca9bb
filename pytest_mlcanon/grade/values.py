"""The value codec of the re-check: the inputs the verifier sends a job and the answers the job sends back.

Values travel as tagged JSON whose array data are raw little-endian bytes in base64: never pickle
from a job, so whatever a hostile child writes, the parent only ever parses JSON and calls
``numpy.frombuffer`` on a whitelisted dtype, after checking the sizes.

Answers (``encode_result``, in the child) are plain data of exact types: ``torch.Tensor`` and
``nn.Parameter`` (no other subclass: a subclass's ``__torch_function__`` could answer differently
to each reader), ``numpy.ndarray`` and numpy scalars, Python numbers, strings, containers of these,
dataclasses and named tuples (as ``Record``), and an ``nn.Module`` as its parameters, their
``requires_grad`` and its training flag (``Module``). A tensor's size is checked before any element
is read. Anything else is an ``Opaque`` marker naming its type, which matches only an expected
value of that very type.

Inputs (``encode``, in the verifier) may also carry *recipes*, decoded in the child only
(``decode(..., to_torch=True)`` gives ``Recipe`` objects that ``replay`` materialises):

* ``instance``: an object of one of the item's own classes: the learner's class is built with the
  recorded constructor arguments and, for an ``nn.Module``, given the verifier's parameters by name;
* ``object``: a dataclass instance (the item's own, or a test helper's) rebuilt from its fields;
* ``pickled``: a model of a trusted class (a test helper's, or ``torch.nn``'s), pickled by the
  verifier;
* ``step``: the result of an earlier step of the same case (the ``cache`` a forward pass returned,
  handed to the backward pass).

The parent never decodes a recipe: ``decode`` rejects them there.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import sys
from dataclasses import dataclass
from typing import Any

TAG = "$"
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
MAX_DEPTH = 12
MAX_ITEMS = 4096
MAX_ELEMENTS = 2_000_000
MAX_RANK = 8
RECIPES = ("instance", "object", "pickled", "step")


class CodecError(ValueError):
    """A value cannot be encoded, or an encoded value is malformed."""


@dataclass(frozen=True)
class Array:
    """A decoded tensor or array on the parent's side (numpy only; the parent never imports torch)."""

    kind: str  # "tensor", "ndarray" or "npscalar"
    dtype: str
    values: Any  # numpy.ndarray
    requires_grad: bool = False


@dataclass(frozen=True)
class Record:
    """A decoded dataclass or named tuple: its type name and its fields."""

    type: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class Module:
    """A decoded ``nn.Module``: its class name, training flag, parameters and their ``requires_grad``."""

    type: str
    training: bool
    parameters: dict[str, Array]


@dataclass(frozen=True)
class Raised:
    """The call raised instead of returning."""

    type: str
    message: str


@dataclass(frozen=True)
class Opaque:
    """A value the codec does not carry (a module, a generator...): only its type name."""

    type: str


@dataclass(frozen=True)
class Ignored:
    """A part of an answer that is the implementer's own state (a ``cache`` for a backward pass): never compared."""


@dataclass(frozen=True)
class Unverifiable:
    """The case could not be set up on this submission (its module's parameters are named otherwise
    than the reference's): the answer proves nothing either way."""

    why: str


@dataclass(frozen=True)
class Recipe:
    """In the child: a value to build before the call (see the module docstring)."""

    tag: str
    data: dict[str, Any]


def map_leaves(value: Any, leaf: Any) -> Any:
    """``value`` with every element that is not a plain tuple, list or dict replaced by ``leaf(element)``."""
    if type(value) is tuple:
        return tuple(map_leaves(v, leaf) for v in value)
    if type(value) is list:
        return [map_leaves(v, leaf) for v in value]
    if type(value) is dict:
        return {k: map_leaves(v, leaf) for k, v in value.items()}
    return leaf(value)


# -- encoding ---------------------------------------------------------------------------------------------


def encode(value: Any, depth: int = 0) -> Any:
    """Encode plain data (and dataclasses, named tuples, modules) as tagged JSON; raises CodecError
    for anything else."""
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if abs(value) >= 1 << 63:
            raise CodecError("integer out of range")
        return value
    if isinstance(value, float):
        return {TAG: "float", "hex": float(value).hex()}
    torch = sys.modules.get("torch")
    np = sys.modules.get("numpy")
    if isinstance(value, Recipe):
        return {TAG: value.tag, **value.data}
    if torch is not None and isinstance(value, torch.Tensor):
        return _encode_tensor(value)
    if torch is not None and isinstance(value, torch.dtype):
        return {TAG: "dtype", "name": str(value).removeprefix("torch.")}
    if torch is not None and isinstance(value, torch.nn.Module):
        return _encode_module(value, depth)
    if np is not None and type(value) is np.ndarray:
        return _encode_array("ndarray", value)
    if np is not None and isinstance(value, np.generic) and type(value).__module__ == "numpy":
        return _encode_array("npscalar", np.asarray(value))
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return _record(type(value).__name__, {f: getattr(value, f) for f in value._fields}, depth)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _record(type(value).__name__, {f.name: getattr(value, f.name) for f in dataclasses.fields(value)},
                       depth)
    if type(value) in (tuple, list):
        if len(value) > MAX_ITEMS:
            raise CodecError("sequence too long")
        return {TAG: "tuple" if isinstance(value, tuple) else "list", "items": [encode(v, depth + 1) for v in value]}
    if type(value) is dict and all(type(k) is str for k in value):
        if len(value) > MAX_ITEMS:
            raise CodecError("mapping too large")
        return {TAG: "dict", "items": [[k, encode(v, depth + 1)] for k, v in value.items()]}
    raise CodecError(f"cannot encode a {type(value).__name__}")


def encode_result(value: Any) -> Any:
    """Like ``encode``, but anything unencodable becomes an ``opaque`` marker naming its type."""
    try:
        return encode(value)
    except CodecError:
        return {TAG: "opaque", "type": type(value).__name__[:100]}
    except Exception as exc:  # noqa: BLE001 - a hostile value may raise anything while being read
        return encode_raised(exc)


def encode_raised(exc: BaseException) -> dict[str, Any]:
    return {TAG: "raised", "type": type(exc).__name__[:100], "message": str(exc)[:300]}


IGNORED = {TAG: "ignored"}


def encode_unverifiable(why: str) -> dict[str, Any]:
    return {TAG: "unverifiable", "why": why[:300]}


def _record(name: str, fields: dict[str, Any], depth: int) -> dict[str, Any]:
    return {TAG: "record", "type": name, "fields": {k: encode(v, depth + 1) for k, v in fields.items()}}


def _encode_module(module: Any, depth: int) -> dict[str, Any]:
    params = dict(module.named_parameters())
    if len(params) > MAX_ITEMS:
        raise CodecError("module has too many parameters")
    return {TAG: "module", "type": type(module).__name__, "training": bool(module.training),
            "parameters": {name: _encode_tensor(p) for name, p in params.items()}}


def _encode_tensor(tensor: Any) -> dict[str, Any]:
    import torch

    if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
        raise CodecError(f"cannot encode a {type(tensor).__name__} (a tensor subclass)")
    if tensor.layout != torch.strided or tensor.is_complex() or tensor.is_quantized or tensor.device.type != "cpu":
        raise CodecError(f"cannot encode a {tensor.layout} / {tensor.dtype} / {tensor.device} tensor")
    name = str(tensor.dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise CodecError(f"cannot encode dtype {name}")
    shape = tuple(int(n) for n in tensor.shape)
    if len(shape) > MAX_RANK or math.prod(shape) > MAX_ELEMENTS:
        raise CodecError("tensor too large")
    _check_extent(shape, tuple(int(s) for s in tensor.stride()), int(tensor.storage_offset()),
                  tensor.untyped_storage().nbytes() // max(tensor.element_size(), 1))
    data = tensor.detach().resolve_neg().resolve_conj()
    array = data.float().numpy() if name == "bfloat16" else data.numpy()
    encoded = _encode_array("tensor", array)
    encoded["dtype"] = name
    encoded["requires_grad"] = bool(tensor.requires_grad)
    return encoded


def _check_extent(shape: tuple[int, ...], strides: tuple[int, ...], offset: int, elements: int) -> None:
    """Every element the view addresses lies in its storage (checked before any read)."""
    if any(s < 0 for s in strides) or offset < 0:
        raise CodecError("a view with negative strides or offset")
    if math.prod(shape) and offset + sum((n - 1) * s for n, s in zip(shape, strides)) >= elements:
        raise CodecError("a view reaching past its storage")


def _encode_array(kind: str, array: Any) -> dict[str, Any]:
    import numpy as np

    name = array.dtype.name
    if name not in DTYPES:
        raise CodecError(f"cannot encode dtype {name}")
    if array.size > MAX_ELEMENTS or array.ndim > MAX_RANK:
        raise CodecError("array too large")
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return {TAG: kind, "dtype": name, "shape": list(array.shape), "data": base64.b64encode(little.tobytes()).decode()}


# -- decoding ---------------------------------------------------------------------------------------------


def decode(data: Any, *, to_torch: bool = False, depth: int = 0) -> Any:
    """Decode a tagged value. With ``to_torch`` (in the child) tensors become torch tensors and recipes
    ``Recipe`` objects; in the parent tensors become ``Array`` objects and recipes are refused. Every
    malformed input raises CodecError."""
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply")
    if data is None or isinstance(data, (bool, str, int)):
        return data
    if isinstance(data, float):  # only in hand-written frames; the codec always tags floats
        return data
    if isinstance(data, list):
        raise CodecError("untagged list")
    if not isinstance(data, dict):
        raise CodecError(f"unexpected {type(data).__name__}")
    tag = data.get(TAG)
    if tag == "float":
        return _float(data.get("hex"))
    if tag in ("tensor", "ndarray", "npscalar"):
        values = decode_array(data)
        if to_torch and tag == "tensor":
            return _to_tensor(values, str(data["dtype"]), bool(data.get("requires_grad", False)))
        if to_torch:
            return values if tag == "ndarray" else values[()]
        return Array(tag, str(data["dtype"]), values, bool(data.get("requires_grad", False)))
    if tag == "dtype":
        name = data.get("name")
        if name not in DTYPES:
            raise CodecError(f"unknown dtype {name!r}")
        if to_torch:
            import torch

            return getattr(torch, str(name))
        return Opaque(f"dtype:{name}")
    if tag in ("tuple", "list"):
        decoded = [decode(v, to_torch=to_torch, depth=depth + 1) for v in _items(data)]
        return tuple(decoded) if tag == "tuple" else decoded
    if tag == "dict":
        out: dict[str, Any] = {}
        for pair in _items(data):
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                raise CodecError("malformed mapping entry")
            out[pair[0]] = decode(pair[1], to_torch=to_torch, depth=depth + 1)
        return out
    if tag in RECIPES and to_torch:
        return Recipe(str(tag), {k: v for k, v in data.items() if k != TAG})
    if not to_torch:
        return _decode_answer(tag, data, depth)
    raise CodecError(f"unknown tag {tag!r}")


def _decode_answer(tag: Any, data: dict[str, Any], depth: int) -> Any:
    """The tags only an answer carries (decoded in the parent)."""
    if tag == "record":
        fields = data.get("fields")
        if not isinstance(fields, dict) or len(fields) > MAX_ITEMS:
            raise CodecError("malformed record")
        return Record(str(data.get("type", "?"))[:100], {str(k): decode(v, depth=depth + 1) for k, v in fields.items()})
    if tag == "module":
        params = data.get("parameters")
        if not isinstance(params, dict) or len(params) > MAX_ITEMS:
            raise CodecError("malformed module")
        decoded = {str(k): decode(v, depth=depth + 1) for k, v in params.items()}
        if not all(isinstance(v, Array) for v in decoded.values()):
            raise CodecError("a module parameter that is not a tensor")
        return Module(str(data.get("type", "?"))[:100], bool(data.get("training")), decoded)
    if tag == "raised":
        return Raised(str(data.get("type", "?"))[:100], str(data.get("message", ""))[:300])
    if tag == "opaque":
        return Opaque(str(data.get("type", "?"))[:100])
    if tag == "unverifiable":
        return Unverifiable(str(data.get("why", ""))[:300])
    if tag == "ignored":
        return Ignored()
    raise CodecError(f"unknown tag {str(tag)[:40]!r}")


def _items(data: dict[str, Any]) -> list[Any]:
    items = data.get("items")
    if not isinstance(items, list) or len(items) > MAX_ITEMS:
        raise CodecError("malformed sequence")
    return items


def _float(text: Any) -> float:
    if not isinstance(text, str) or len(text) > 40:
        raise CodecError("malformed float")
    try:
        return float.fromhex(text)
    except ValueError as exc:
        raise CodecError("malformed float") from exc


def decode_array(data: dict[str, Any]) -> Any:
    import numpy as np

    dtype, shape, raw = data.get("dtype"), data.get("shape"), data.get("data")
    if dtype not in DTYPES:
        raise CodecError(f"unknown dtype {dtype!r}")
    if not (isinstance(shape, list) and len(shape) <= MAX_RANK
            and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_ELEMENTS for n in shape)):
        raise CodecError("malformed shape")
    count = math.prod(shape)
    if count > MAX_ELEMENTS or not isinstance(raw, str) or len(raw) > 4 * (8 * count + 2) // 3 + 4:
        raise CodecError("malformed array")
    storage = np.dtype("float32" if dtype == "bfloat16" else str(dtype)).newbyteorder("<")
    try:
        buffer = base64.b64decode(raw, validate=True)
    except ValueError as exc:
        raise CodecError("malformed array data") from exc
    if len(buffer) != count * storage.itemsize:
        raise CodecError("array data do not match the shape")
    return np.frombuffer(buffer, dtype=storage).reshape(shape).astype(storage.newbyteorder("="))


def _to_tensor(values: Any, dtype: str, requires_grad: bool) -> Any:
    import torch

    tensor = torch.from_numpy(values.copy()).to(getattr(torch, dtype))
    if requires_grad and tensor.is_floating_point():
        tensor.requires_grad_(True)
    return tensor
