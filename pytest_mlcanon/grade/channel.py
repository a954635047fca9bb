"""The result channel from a grading child to the parent, and the value codec it carries.

The child writes length-prefixed JSON frames (``{"kind": ..., ...}``) to a pipe; the parent reads
them with hard caps on the size of one frame and of everything a job may send. Values (tensors,
arrays, floats, dataclasses) travel as tagged JSON whose array data are raw little-endian bytes in
base64: never pickle, so whatever a hostile child writes into the pipe, the parent only ever parses
JSON and calls ``numpy.frombuffer`` on a whitelisted dtype.

The channel is *not* trusted: learner code runs in the same process as the writer and can find the
pipe. Nothing the parent decides rests on a frame's claim alone (see ``assess``): a frame is
evidence to check, never a verdict to believe.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
import struct
import sys
from dataclasses import dataclass
from typing import Any

HEADER = struct.Struct("!I")
MAX_FRAME = 8 * 1024 * 1024
MAX_TOTAL = 64 * 1024 * 1024
TAG = "$"
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
MAX_DEPTH = 12
MAX_ITEMS = 4096
MAX_ELEMENTS = 2_000_000
MAX_RANK = 8


class ChannelError(ValueError):
    """The child sent something that is not a well-formed frame of this protocol."""


class CodecError(ValueError):
    """A value cannot be encoded, or an encoded value is malformed."""


# -- the child's end -----------------------------------------------------------------------------------


class ChannelWriter:
    """Writes frames to the pipe's write end; a closed pipe only sets ``broken`` (the parent is gone)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.broken = False

    def send(self, kind: str, **payload: Any) -> None:
        body = json.dumps({"kind": kind, **payload}, separators=(",", ":"), default=str).encode("utf-8")
        if len(body) > MAX_FRAME:
            body = json.dumps({"kind": "oversize", "of": kind, "size": len(body)}).encode("utf-8")
        data = memoryview(HEADER.pack(len(body)) + body)
        while data and not self.broken:
            try:
                written = os.write(self.fd, data)
            except InterruptedError:
                continue
            except OSError:
                self.broken = True
                return
            data = data[written:]


# -- the parent's end ----------------------------------------------------------------------------------


class FrameReader:
    """Parses frames out of whatever the pipe delivers, enforcing the size caps."""

    def __init__(self, fd: int, max_frame: int = MAX_FRAME, max_total: int = MAX_TOTAL) -> None:
        self.fd = fd
        self.max_frame = max_frame
        self.max_total = max_total
        self.total = 0
        self.eof = False
        self.error = ""
        self._buffer = bytearray()

    def read(self) -> list[dict[str, Any]]:
        """Read what is available (call when the fd is readable) and return the complete frames.

        After a protocol error the reader keeps draining the pipe (so the child never blocks on a
        full pipe) but returns no more frames; ``error`` says what went wrong.
        """
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return []
        except OSError as exc:
            self.eof = True
            self.error = self.error or f"the result pipe failed: {exc.strerror}"
            return []
        if not chunk:
            self.eof = True
            if self._buffer and not self.error:
                self.error = f"the result channel ended inside a frame ({len(self._buffer)} stray bytes)"
            return []
        self.total += len(chunk)
        if self.error:
            return []
        if self.total > self.max_total:
            self.error = f"the child sent more than {self.max_total // (1 << 20)} MB of results"
            return []
        self._buffer += chunk
        frames: list[dict[str, Any]] = []
        while len(self._buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._buffer)
            if size > self.max_frame:
                self.error = f"a result frame of {size} bytes exceeds the {self.max_frame} byte cap"
                return frames
            if len(self._buffer) < HEADER.size + size:
                break
            body = bytes(self._buffer[HEADER.size:HEADER.size + size])
            del self._buffer[:HEADER.size + size]
            try:
                frame = json.loads(body.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                self.error = "a result frame is not valid JSON"
                return frames
            if not isinstance(frame, dict) or not isinstance(frame.get("kind"), str):
                self.error = "a result frame has no kind"
                return frames
            frames.append(frame)
        return frames


# -- values ----------------------------------------------------------------------------------------------


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
class Raised:
    """The call raised instead of returning."""

    type: str
    message: str


@dataclass(frozen=True)
class Opaque:
    """A value the codec does not carry (a module, a generator...): only its type name."""

    type: str


def encode(value: Any, depth: int = 0) -> Any:
    """Encode plain data (and dataclasses, named tuples) as tagged JSON; raises CodecError otherwise."""
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if abs(value) >= 1 << 63:
            raise CodecError("integer out of range")
        return value
    if isinstance(value, float):
        return {TAG: "float", "hex": value.hex()}
    torch = sys.modules.get("torch")
    np = sys.modules.get("numpy")
    if torch is not None and isinstance(value, torch.Tensor):
        return _encode_tensor(value)
    if torch is not None and isinstance(value, torch.dtype):
        return {TAG: "dtype", "name": str(value).removeprefix("torch.")}
    if np is not None and isinstance(value, np.ndarray):
        return _encode_array("ndarray", value)
    if np is not None and isinstance(value, np.generic):
        return _encode_array("npscalar", np.asarray(value))
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return _record(type(value).__name__, {f: getattr(value, f) for f in value._fields}, depth)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _record(type(value).__name__, {f.name: getattr(value, f.name) for f in dataclasses.fields(value)},
                       depth)
    if isinstance(value, (tuple, list)):
        if len(value) > MAX_ITEMS:
            raise CodecError("sequence too long")
        return {TAG: "tuple" if isinstance(value, tuple) else "list", "items": [encode(v, depth + 1) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        if len(value) > MAX_ITEMS:
            raise CodecError("mapping too large")
        return {TAG: "dict", "items": [[k, encode(v, depth + 1)] for k, v in value.items()]}
    raise CodecError(f"cannot encode a {type(value).__name__}")


def encode_result(value: Any) -> Any:
    """Like ``encode``, but anything unencodable becomes an ``opaque`` marker naming its type."""
    try:
        return encode(value)
    except CodecError:
        return {TAG: "opaque", "type": type(value).__name__}


def encode_raised(exc: BaseException) -> dict[str, Any]:
    return {TAG: "raised", "type": type(exc).__name__, "message": str(exc)[:300]}


def _record(name: str, fields: dict[str, Any], depth: int) -> dict[str, Any]:
    return {TAG: "record", "type": name, "fields": {k: encode(v, depth + 1) for k, v in fields.items()}}


def _encode_tensor(tensor: Any) -> dict[str, Any]:
    import torch

    if tensor.layout != torch.strided or tensor.is_complex() or tensor.is_quantized:
        raise CodecError(f"cannot encode a {tensor.layout} / {tensor.dtype} tensor")
    name = str(tensor.dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise CodecError(f"cannot encode dtype {name}")
    data = tensor.detach().cpu()
    array = data.float().numpy() if name == "bfloat16" else data.numpy()
    encoded = _encode_array("tensor", array)
    encoded["dtype"] = name
    encoded["requires_grad"] = bool(tensor.requires_grad)
    return encoded


def _encode_array(kind: str, array: Any) -> dict[str, Any]:
    import numpy as np

    name = array.dtype.name
    if name not in DTYPES:
        raise CodecError(f"cannot encode dtype {name}")
    if array.size > MAX_ELEMENTS or array.ndim > MAX_RANK:
        raise CodecError("array too large")
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return {TAG: kind, "dtype": name, "shape": list(array.shape), "data": base64.b64encode(little.tobytes()).decode()}


def decode(data: Any, *, to_torch: bool = False, depth: int = 0) -> Any:
    """Decode a tagged value. With ``to_torch`` (in the child) tensors become torch tensors; in the
    parent they become ``Array`` objects. Every malformed input raises CodecError."""
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply")
    if data is None or isinstance(data, (bool, str)):
        return data
    if isinstance(data, int):
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
        values = _decode_array(data)
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
        items = _items(data)
        decoded = [decode(v, to_torch=to_torch, depth=depth + 1) for v in items]
        return tuple(decoded) if tag == "tuple" else decoded
    if tag == "dict":
        pairs = _items(data)
        out: dict[str, Any] = {}
        for pair in pairs:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                raise CodecError("malformed mapping entry")
            out[pair[0]] = decode(pair[1], to_torch=to_torch, depth=depth + 1)
        return out
    if tag == "record" and not to_torch:
        fields = data.get("fields")
        if not isinstance(fields, dict) or len(fields) > MAX_ITEMS:
            raise CodecError("malformed record")
        return Record(str(data.get("type", "?"))[:100],
                      {str(k): decode(v, depth=depth + 1) for k, v in fields.items()})
    if tag == "raised" and not to_torch:
        return Raised(str(data.get("type", "?"))[:100], str(data.get("message", ""))[:300])
    if tag == "opaque" and not to_torch:
        return Opaque(str(data.get("type", "?"))[:100])
    raise CodecError(f"unknown tag {tag!r}")


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


def _decode_array(data: dict[str, Any]) -> Any:
    import numpy as np

    dtype, shape, raw = data.get("dtype"), data.get("shape"), data.get("data")
    if dtype not in DTYPES:
        raise CodecError(f"unknown dtype {dtype!r}")
    if not (isinstance(shape, list) and len(shape) <= MAX_RANK
            and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_ELEMENTS for n in shape)):
        raise CodecError("malformed shape")
    count = math.prod(shape)
    if count > MAX_ELEMENTS or not isinstance(raw, str):
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
