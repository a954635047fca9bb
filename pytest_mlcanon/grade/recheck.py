"""The seeded re-check: the learner's functions on inputs nobody has seen before this run.

In the zygote, which runs only trusted code (the references and their tests), ``Recorder`` wraps the
public functions of each item's modules while the reference tests run, and keeps a few calls per
function whose arguments are plain data (tensors, arrays, numbers, strings, dtypes and containers of
these). ``Recorder.cases`` then perturbs each call with this run's seed (floating values scaled by
1 +- 2 %; masks, integers and booleans kept), runs the reference on the perturbed inputs twice under
different global seeds, and keeps the call as a case when the reference accepts it and answers the
same both times. A case is the encoded inputs plus the expected outputs (and the post-call value of
any argument the reference changes in place).

The child gets only the inputs; ``replay`` calls the learner's function on them and sends back what
it returned. The parent compares (``compare``). A submission cannot forge this: the expected
outputs never enter its process, and the inputs are new on every run, so answers hard-coded for the
public examples do not fit them.

Not re-checked: calls taking a seed, generator or model (not plain data), items whose outputs are
only defined up to a permutation, a sign or a sampling order (``IMPLEMENTATION_DEFINED``), and the
items a teacher lists in ``[recheck] skip``.
"""

from __future__ import annotations

import functools
import inspect
import json
import random
import sys
from collections.abc import Callable
from typing import Any

import pytest

from pytest_mlcanon import catalog
from pytest_mlcanon.grade.channel import (
    DTYPES,
    ChannelWriter,
    CodecError,
    decode,
    encode,
    encode_raised,
    encode_result,
)
from pytest_mlcanon.redirect import REF_PACKAGE
from pytest_mlcanon.run import ITEM_PROPERTY

PER_FUNCTION = 3
PER_ITEM = 12
MAX_ELEMENTS = 100_000
SCALE = 0.02
RANDOM_PARAMETERS = frozenset({"seed", "rng", "generator", "random_state", "key"})
IMPLEMENTATION_DEFINED = {
    "classical/kmeans": "cluster labels are defined up to a permutation",
    "classical/pca": "components are defined up to their sign",
    "classical/gmm": "components are defined up to a permutation",
    "retrieval/ann": "approximate search may return other neighbours",
    "multimodal/detr": "optimal matchings may tie",
    "transformer/generation": "sampling order is the implementer's choice",
    "capstone/agent": "training runs are the implementer's choice",
}


def reason_not_rechecked(slug: str) -> str:
    """Why an item is never re-checked, or '' when it is."""
    if slug.startswith("rl/"):
        return "episodes and policies are sampled in the implementer's order"
    return IMPLEMENTATION_DEFINED.get(slug, "")


class Recorder:
    """Calibration plugin for the zygote's reference run: expected test ids and re-check cases."""

    def __init__(self, items: tuple[catalog.Item, ...], skip: frozenset[str] = frozenset()) -> None:
        self.items = {item.slug: item for item in items}
        self.skip = skip
        self.nodeids: dict[str, list[str]] = {item.slug: [] for item in items}
        self.probes: dict[str, list[str]] = {item.slug: [] for item in items}
        self.contract: dict[str, list[str]] = {item.slug: [] for item in items}
        self.failed: dict[str, list[str]] = {item.slug: [] for item in items}
        self.calls: list[tuple[str, str, str, Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []
        self._keys: dict[tuple[str, str], set[str]] = {}
        self._originals: list[tuple[Any, str, Any]] = []
        self._active = False

    # -- hooks -------------------------------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        for slug, item in self.items.items():
            if slug in self.skip or reason_not_rechecked(slug):
                continue
            for module_path in item.modules:
                module = sys.modules.get(f"{REF_PACKAGE}.{module_path.replace('/', '.')}")
                if module is not None:
                    self._wrap_module(slug, module_path, module)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for node in session.items:
            slug = dict(node.user_properties).get(ITEM_PROPERTY)
            if isinstance(slug, str) and slug in self.nodeids:
                self.nodeids[slug].append(node.nodeid)
                if node.get_closest_marker("numerics_probe") is not None:
                    self.probes[slug].append(node.nodeid)
                if node.get_closest_marker("contract") is not None:
                    self.contract[slug].append(node.nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        slug = dict(report.user_properties).get(ITEM_PROPERTY)
        if report.failed and isinstance(slug, str) and slug in self.failed:
            self.failed[slug].append(report.nodeid)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        for module, name, original in self._originals:
            setattr(module, name, original)
        self._originals.clear()

    # -- recording -----------------------------------------------------------------------------------------
    def _wrap_module(self, slug: str, module_path: str, module: Any) -> None:
        for name, fn in vars(module).copy().items():
            if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != module.__name__:
                continue
            self._originals.append((module, name, fn))
            setattr(module, name, self._wrapper(slug, module_path, name, fn))

    def _wrapper(self, slug: str, module_path: str, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            if self._active:
                return fn(*args, **kwargs)
            self._active = True
            try:
                self._maybe_keep(slug, module_path, name, fn, args, kwargs)
                return fn(*args, **kwargs)
            finally:
                self._active = False

        return recorded

    def _maybe_keep(self, slug: str, module_path: str, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> None:
        seen = self._keys.setdefault((slug, name), set())
        if len(seen) >= PER_FUNCTION or sum(1 for c in self.calls if c[0] == slug) >= PER_ITEM:
            return
        if not _plain((args, kwargs)) or _takes_randomness(fn, args, kwargs):
            return
        key = _signature_key((args, kwargs))
        if key in seen:
            return
        seen.add(key)
        self.calls.append((slug, module_path, name, fn, _copy(args), _copy(kwargs)))

    # -- cases ---------------------------------------------------------------------------------------------
    def cases(self, seed: int) -> dict[str, list[dict[str, Any]]]:
        """Perturb every kept call with ``seed`` and keep those the reference answers deterministically."""
        import numpy as np

        out: dict[str, list[dict[str, Any]]] = {slug: [] for slug in self.items}
        for index, (slug, module_path, name, fn, args, kwargs) in enumerate(self.calls):
            rng = np.random.default_rng([seed, index])
            try:
                enc_args, enc_kwargs = encode(_perturb(args, rng)), encode(_perturb(kwargs, rng))
            except CodecError:
                continue
            case = _expected(fn, enc_args, enc_kwargs)
            if case is not None:
                out[slug].append({"item": slug, "module": module_path, "function": name, "args": enc_args,
                                  "kwargs": enc_kwargs, **case})
        return out


def _expected(fn: Callable[..., Any], enc_args: Any, enc_kwargs: Any) -> dict[str, Any] | None:
    """Run the reference twice under different global seeds; None when it refuses or varies."""
    answers = []
    for global_seed in (11, 23):
        args, kwargs = decode(enc_args, to_torch=True), decode(enc_kwargs, to_torch=True)
        seed_everything(global_seed)
        try:
            result = fn(*args, **kwargs)
            expected = encode(result)
        except Exception:  # noqa: BLE001 - the reference rejects the perturbed call: not a case
            return None
        answers.append({"expected": expected, "mutated": _mutated(enc_args, enc_kwargs, args, kwargs)})
    if json.dumps(answers[0], sort_keys=True) != json.dumps(answers[1], sort_keys=True):
        return None
    return answers[0]


def _mutated(enc_args: Any, enc_kwargs: Any, args: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Encoded post-call values of the arguments the call changed in place (by position or name)."""
    changed: dict[str, Any] = {}
    for index, (before, after) in enumerate(zip(enc_args["items"], args)):
        now = encode_result(after)
        if now != before:
            changed[str(index)] = now
    for name, before in enc_kwargs["items"]:
        now = encode_result(kwargs[name])
        if now != before:
            changed[name] = now
    return changed


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - reset the legacy global RNG a submission might use
    torch.manual_seed(seed)


def _plain(value: Any, depth: int = 0) -> bool:
    """True for plain data the codec carries and a learner cannot smuggle state through."""
    if depth > 6:
        return False
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    torch = sys.modules.get("torch")
    np = sys.modules.get("numpy")
    if torch is not None and isinstance(value, torch.Tensor):
        return (value.layout == torch.strided and str(value.dtype).removeprefix("torch.") in DTYPES
                and value.numel() <= MAX_ELEMENTS and value.device.type == "cpu")
    if torch is not None and isinstance(value, torch.dtype):
        return True
    if np is not None and isinstance(value, (np.ndarray, np.generic)):
        return value.dtype.name in DTYPES and np.size(value) <= MAX_ELEMENTS
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        return len(value) <= 64 and all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return len(value) <= 64 and all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def _takes_randomness(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return True
    return any(name in RANDOM_PARAMETERS and value is not None for name, value in bound.arguments.items())


def _signature_key(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{type(value).__name__}{tuple(shape)}{getattr(value, 'dtype', '')}"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_signature_key(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_signature_key(v)}" for k, v in value.items()) + "}"
    return type(value).__name__


def _copy(value: Any) -> Any:
    torch = sys.modules.get("torch")
    np = sys.modules.get("numpy")
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad and value.is_floating_point())
    if np is not None and isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def _perturb(value: Any, rng: Any) -> Any:
    """Scale floating values by ``1 + SCALE * U(-1, 1)``; keep masks, integers, booleans and +-1, 0."""
    import numpy as np

    torch = sys.modules.get("torch")
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if value in (0.0, 1.0, -1.0) or value != value or abs(value) == float("inf"):
            return value
        return float(value * (1.0 + SCALE * rng.uniform(-1.0, 1.0)))
    if torch is not None and isinstance(value, torch.Tensor):
        if not value.is_floating_point():
            return value
        scaled = _scale(value.detach().double().numpy(), rng)
        return torch.from_numpy(scaled).to(value.dtype).requires_grad_(value.requires_grad)
    if isinstance(value, np.ndarray):
        return _scale(value, rng).astype(value.dtype) if value.dtype.kind == "f" else value
    if isinstance(value, tuple):
        return tuple(_perturb(v, rng) for v in value)
    if isinstance(value, list):
        return [_perturb(v, rng) for v in value]
    if isinstance(value, dict):
        return {k: _perturb(v, rng) for k, v in value.items()}
    return value


def _scale(array: Any, rng: Any) -> Any:
    import numpy as np

    values = np.asarray(array, dtype=np.float64)
    finite = values[np.isfinite(values)]
    if finite.size == 0 or np.isin(finite, (0.0, 1.0)).all() or ((finite == 0) | (finite <= -1e4)).all():
        return values.copy()  # a 0/1 mask or an additive mask: its meaning is in the exact values
    noise = 1.0 + SCALE * rng.uniform(-1.0, 1.0, size=values.shape)
    return np.where(np.isfinite(values), values * noise, values)


# -- the child's side -------------------------------------------------------------------------------------


def child_cases(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the child may see of the cases: the inputs and which arguments to send back, no answers."""
    return [{"item": c["item"], "module": c["module"], "function": c["function"], "args": c["args"],
             "kwargs": c["kwargs"], "mutated": sorted(c["mutated"])} for c in cases]


def replay(cases: list[dict[str, Any]], channel: ChannelWriter) -> None:
    """Call the learner's functions on each case's inputs and send back what they returned."""
    import importlib

    modules: dict[str, Any] = {}
    for index, case in enumerate(cases):
        name = f"{REF_PACKAGE}.{case['module'].replace('/', '.')}"
        channel.send("start", test=f"recheck::{case['function']}[{index}]")
        if name not in modules:
            try:
                modules[name] = importlib.import_module(name)
            except BaseException as exc:  # noqa: BLE001 - learner code may raise anything at import
                modules[name] = exc
        module = modules[name]
        args, kwargs = decode(case["args"], to_torch=True), decode(case["kwargs"], to_torch=True)
        if isinstance(module, BaseException):
            result = encode_raised(module)
        else:
            fn = getattr(module, case["function"], None)
            try:
                result = encode_result(fn(*args, **kwargs)) if callable(fn) else encode_raised(
                    AttributeError(f"module has no function {case['function']!r}"))
            except BaseException as exc:  # noqa: BLE001 - even SystemExit is only a wrong answer here
                result = encode_raised(exc)
        mutated = {key: encode_result(args[int(key)] if key.isdigit() else kwargs.get(key))
                   for key in case["mutated"]}
        channel.send("recheck", index=index, result=result, mutated=mutated)
