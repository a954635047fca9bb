"""Forbidden shortcuts seen by what runs, not by name: the detector around each re-check case in a job.

The catalog lists, per item, the library calls a learner may not use (``Item.forbidden``: a package
such as ``sklearn``, or a callable such as ``torch.nn.functional.scaled_dot_product_attention``).
The static scan reads names, which an alias hides (``from torch._C._nn import
scaled_dot_product_attention as f``, ``getattr(F, "scaled_" + "dot_product_attention")``,
``torch.ops.aten.scaled_dot_product_attention``). While a case runs, ``Detector`` watches:

* the operators torch dispatches (a ``TorchDispatchMode``): a forbidden torch callable is caught by
  its kernels (``aten::scaled_dot_product_attention``, the fused kernels it selects and the ops only
  its decomposition uses, ``FUSED_KERNELS``: under a Python dispatch mode a composite operator such
  as SDPA reaches the mode decomposed, as ``_safe_softmax`` and friends), whichever name reached
  them; under a forbidden ``torch`` (the NumPy items) any operator at all is;
* the functions called (a profile hook): a forbidden Python function by its code object, a
  forbidden builtin by identity (and the builtins of the same name in torch's own namespaces,
  ``torch.rms_norm`` for ``F.rms_norm``), an operator called as ``torch.ops.aten.<name>`` by its
  name, anything defined in a forbidden package by its file or module.

It runs in the job, beside learner code, so it is a tripwire like the audit hook (removing it is
blocked and reported), but it needs no cooperation from the code it watches: what it reports is what
ran. A hit is reported with the case's answer and flagged ``INT005`` by the parent.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import CodeType, ModuleType
from typing import Any

from pytest_mlcanon.grade.guard import resolve

#: The kernels a forbidden torch callable dispatches to besides its own name (by the callable's name).
FUSED_KERNELS: dict[str, tuple[str, ...]] = {
    "scaled_dot_product_attention": ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math",
                                     "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
                                     "_scaled_dot_product_cudnn_attention", "_fused_sdp_choice", "_safe_softmax",
                                     "_native_multi_head_attention"),
    "multi_head_attention_forward": ("_native_multi_head_attention", "_safe_softmax"),
    "MultiheadAttention": ("_native_multi_head_attention", "_safe_softmax"),
    "rms_norm": ("_fused_rms_norm",),
    "RMSNorm": ("_fused_rms_norm", "rms_norm"),
}
MAX_HITS = 8


class Detector:
    """What of ``forbidden`` (the item's catalog list) runs inside ``learner()`` during a ``case()``."""

    def __init__(self, forbidden: tuple[str, ...]) -> None:
        self.forbidden = forbidden
        self._hits: list[str] = []
        self._watched: _Watched | None = None

    @contextmanager
    def case(self) -> Iterator[list[str]]:
        """One case: yields the list its hits are added to (names from the catalog)."""
        self._hits, self._watched = [], _resolve(self.forbidden)
        try:
            yield self._hits
        finally:
            self._watched = None

    @contextmanager
    def learner(self) -> Iterator[None]:
        """Watch what runs inside (a learner's call); outside a ``case()``, or with nothing forbidden
        that this process has imported, a no-op."""
        watched, hits = self._watched, self._hits
        if watched is None or not watched.anything:
            yield
            return
        with _dispatch_mode(watched, hits):  # entered first: its own code must not count as a hit
            previous = sys.getprofile()
            sys.setprofile(_profiler(watched, hits))
            try:
                yield
            finally:
                sys.setprofile(previous)


class _Watched:
    def __init__(self) -> None:
        self.codes: dict[CodeType, str] = {}
        self.builtins: dict[int, str] = {}
        self.prefixes: list[tuple[str, str]] = []  # (file prefix, name)
        self.modules: list[tuple[str, str]] = []  # (module name prefix, name)
        self.kernels: dict[str, str] = {}
        self.any_torch = ""

    @property
    def anything(self) -> bool:
        return bool(self.codes or self.builtins or self.prefixes or self.modules or self.kernels or self.any_torch)


def _resolve(forbidden: tuple[str, ...]) -> _Watched:
    """Resolve the catalog's dotted names against what is imported now (never importing): a package
    not imported is not watched, so an item whose forbidden libraries nobody loaded runs unwatched."""
    watched = _Watched()
    for name in forbidden:
        if name == "torch":
            watched.any_torch = name
        target = resolve(name)
        if isinstance(target, ModuleType):
            folder = os.path.dirname(getattr(target, "__file__", "") or "")
            if folder:
                watched.prefixes.append((folder + os.sep, name))
            watched.modules.append((name, name))
            continue
        if "." not in name:
            continue  # a package nobody imported: nothing of it can run (importing it is the scan's to see)
        if name.startswith("torch."):  # the kernels it dispatches, whichever name reached them
            leaf = name.rsplit(".", 1)[-1]
            watched.kernels[leaf] = name
            for kernel in FUSED_KERNELS.get(leaf, ()):  # shared ones (SDPA's in MultiheadAttention) named once
                watched.kernels.setdefault(kernel, name)
            for twin in _torch_builtins(leaf):
                watched.builtins[id(twin)] = name
        if target is None:
            continue
        for code in _codes(target):
            watched.codes[code] = name
        if not hasattr(target, "__code__") and not isinstance(target, type) and callable(target):
            watched.builtins[id(target)] = name
    return watched


def _torch_builtins(leaf: str) -> list[Any]:
    """The builtins named ``leaf`` in torch's C namespaces (``torch.rms_norm`` is ``F.rms_norm``'s kernel)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    spaces = (torch, getattr(torch._C, "_nn", None), getattr(torch._C, "_VariableFunctions", None),
              getattr(torch._C, "_special", None), getattr(torch._C, "_linalg", None))
    return [found for space in spaces if space is not None
            and callable(found := getattr(space, leaf, None)) and not hasattr(found, "__code__")
            and not isinstance(found, type)]


def _operator_calls() -> tuple[CodeType, ...]:
    """The code of ``torch.ops.<namespace>.<op>(...)`` and ``...<op>.<overload>(...)`` calls."""
    ops = sys.modules.get("torch._ops")
    if ops is None:
        return ()
    return tuple(code for cls in (getattr(ops, "OpOverloadPacket", None), getattr(ops, "OpOverload", None))
                 if isinstance(code := getattr(vars(cls).get("__call__") if cls else None, "__code__", None), CodeType))


def _operator_name(frame: Any) -> str:
    op = frame.f_locals.get("self")
    return str(getattr(getattr(op, "_overloadpacket", op), "__name__", ""))


def _codes(target: Any) -> list[CodeType]:
    """The code objects a use of ``target`` runs: a function's; the ``__init__`` and ``forward`` a class
    defines itself (not inherited ones, which every module shares)."""
    candidates = [vars(target).get("__init__"), vars(target).get("forward")] if isinstance(target, type) else [target]
    found = []
    for candidate in candidates:
        code = getattr(getattr(candidate, "__func__", candidate), "__code__", None)
        if isinstance(code, CodeType):
            found.append(code)
    return found


def _profiler(watched: _Watched, hits: list[str]) -> Any:
    codes, builtins, prefixes, modules = watched.codes, watched.builtins, tuple(watched.prefixes), watched.modules
    kernels, operator_calls = watched.kernels, _operator_calls() if watched.kernels else ()

    def hook(frame: Any, event: str, arg: Any) -> None:
        if len(hits) >= MAX_HITS:
            return
        if event == "call":
            code = frame.f_code
            name = codes.get(code)
            if name is None and code in operator_calls:
                name = kernels.get(_operator_name(frame))
            if name is None and prefixes:
                name = next((n for prefix, n in prefixes if code.co_filename.startswith(prefix)), None)
            if name is not None and name not in hits:
                hits.append(name)
        elif event == "c_call":
            name = builtins.get(id(arg))
            if name is None and modules:
                owner = str(getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__module__)
                name = next((n for prefix, n in modules if owner == prefix or owner.startswith(prefix + ".")), None)
            if name is not None and name not in hits:
                hits.append(name)

    return hook


@contextmanager
def _dispatch_mode(watched: _Watched, hits: list[str]) -> Iterator[None]:
    if sys.modules.get("torch") is None or not (watched.kernels or watched.any_torch):
        yield
        return
    with kernel_mode()(watched.kernels, watched.any_torch, hits):
        yield


@functools.cache
def kernel_mode() -> type:
    """The dispatch mode class (made once: the zygote makes it, and runs it once, before forking)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Kernels(TorchDispatchMode):
        def __init__(self, kernels: dict[str, str], anything: str, hits: list[str]) -> None:
            super().__init__()
            self.kernels, self.anything, self.hits = kernels, anything, hits

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            name = self.kernels.get(func._overloadpacket.__name__) or self.anything
            if name and name not in self.hits and len(self.hits) < MAX_HITS:
                self.hits.append(name)
            return func(*args, **(kwargs or {}))

    return Kernels


def uses_dispatch(forbidden: tuple[str, ...]) -> bool:
    """Whether watching ``forbidden`` needs the dispatch mode (a torch callable, or torch itself)."""
    return any(name == "torch" or name.startswith("torch.") for name in forbidden)


def warm_up() -> None:
    """Run the dispatch mode once (its first use imports and compiles a good deal of torch)."""
    import torch

    with kernel_mode()({}, "", []):
        torch.zeros(2).sum()
