"""Import redirection: ``canon_refs.<area>.<module>`` resolves to the learner's file when it exists.

A meta-path finder placed first on ``sys.meta_path``:

* ``canon_refs.<area>.<module>``: the learner's ``<impl>/<area>/<module>.py`` if present and written,
  else the normal import of the reference (the finder declines and the next finder takes over). A
  file still exactly as ``mlcanon stubs`` wrote it (every function raises NotImplementedError) is not
  written: the items that build on it get the reference, as if the file were missing.
* ``mlbook``, ``mlbook.<area>``: empty alias packages; ``mlbook.<area>.<module>``: the very same
  module object as ``canon_refs.<area>.<module>``, so classes compare equal whichever name a
  learner imported them by.

Support modules that are not canon items (``canon_refs/rl/envs.py``) are never redirected.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_mlcanon.rubric.shape_instrument import Recorder

REF_PACKAGE = "canon_refs"
ALIAS_PACKAGE = "mlbook"
NEVER_REDIRECTED = frozenset({"rl/envs"})


def reference_dir() -> Path:
    """Directory of the installed ``canon_refs`` package, found without importing any item."""
    spec = importlib.util.find_spec(REF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the canon_refs package is not installed next to pytest_mlcanon")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def untouched_stub(path: Path) -> bool:
    """True for a file whose every function still only raises NotImplementedError (``stubs.unimplemented``),
    remembered per (path, size, modification time)."""
    try:
        stat = path.stat()
    except OSError:
        return False
    return _untouched_stub(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=512)
def _untouched_stub(path: str, size: int, mtime_ns: int) -> bool:
    from pytest_mlcanon import stubs  # stubs imports this module

    return stubs.unimplemented(Path(path))


class _AliasLoader(importlib.abc.Loader):
    """Loads ``mlbook.<area>.<module>`` as the module object of ``canon_refs.<area>.<module>``."""

    def __init__(self, target: str | None) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        if self.target is None:
            return None  # a plain empty package (mlbook, mlbook.<area>)
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        if self.target is not None:
            # importlib stamped the alias spec on the shared module object; give it back its own.
            target_spec = importlib.util.find_spec(self.target)
            module.__spec__ = target_spec
            module.__loader__ = target_spec.loader if target_spec else None


class _InstrumentingLoader(importlib.machinery.SourceFileLoader):
    """Loads a learner file with its shape comments instrumented (see ``rubric.shape_instrument``),
    recording into the finder's recorder.

    The code is compiled from source every time and never cached in ``__pycache__``, so an
    instrumented module cannot leak into an ordinary import later.
    """

    def __init__(self, fullname: str, path: str, recorder: Recorder) -> None:
        super().__init__(fullname, path)
        self.recorder = recorder

    def exec_module(self, module: ModuleType) -> None:
        from pytest_mlcanon.rubric import shape_instrument, source

        path = str(Path(self.path).resolve())
        try:
            parsed = source.load(Path(self.path))
        except source.SourceError:
            super().exec_module(module)  # let Python raise the real SyntaxError, with file and line
            return
        tree, runtime = shape_instrument.instrument(parsed, path, self.recorder)
        module.__dict__[shape_instrument.RUNTIME_NAME] = runtime
        exec(compile(tree, self.path, "exec", dont_inherit=True), module.__dict__)  # noqa: S102


class CanonFinder(importlib.abc.MetaPathFinder):
    """Resolve canon modules to ``impl_dir`` first, the installed reference second.

    The learner's files of the modules in ``instrument`` (``"posttrain/dpo"``: the items under
    test) are loaded with their shape comments checked at run time, into ``recorder`` (a
    ``shape_instrument.Recorder``, set with ``instrument``). The learner's other modules
    (another item's GPT that the DPO tests train) load plain: their checks would be thrown away,
    and they cost most where those modules run most. The references loaded as fallbacks are never
    instrumented (they are not the learner's work).
    """

    def __init__(self, impl_dir: Path, instrument: frozenset[str] = frozenset(),
                 recorder: Recorder | None = None) -> None:
        self.impl_dir = impl_dir.resolve()
        self.instrument = instrument
        self.recorder = recorder

    def learner_file(self, module: str) -> Path | None:
        """The learner's file for ``<area>/<module>``, or None when it falls back to the reference
        (missing, or an untouched stub)."""
        if module in NEVER_REDIRECTED:
            return None
        path = self.impl_dir / f"{module}.py"
        return path if path.is_file() and not untouched_stub(path) else None

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        parts = fullname.split(".")
        if parts[0] == REF_PACKAGE and len(parts) == 3:
            module = "/".join(parts[1:])
            learner = self.learner_file(module)
            if learner is None:
                return None
            recorder = self.recorder if module in self.instrument else None
            loader = _InstrumentingLoader(fullname, str(learner), recorder) if recorder is not None else None
            return importlib.util.spec_from_file_location(fullname, learner, loader=loader)
        if parts[0] == ALIAS_PACKAGE and len(parts) <= 3:
            is_package = len(parts) < 3
            target_name = None if is_package else ".".join([REF_PACKAGE, *parts[1:]])
            spec = importlib.machinery.ModuleSpec(fullname, _AliasLoader(target_name), is_package=is_package)
            if is_package:
                spec.submodule_search_locations = []
            return spec
        return None


def install(impl_dir: Path) -> CanonFinder:
    """Put a finder for ``impl_dir`` first on ``sys.meta_path`` and forget cached canon modules."""
    uninstall()
    _forget_canon_modules()
    finder = CanonFinder(impl_dir)
    sys.meta_path.insert(0, finder)
    return finder


def active_finder() -> CanonFinder | None:
    """The installed finder, if any."""
    return next((f for f in sys.meta_path if isinstance(f, CanonFinder)), None)


def uninstall() -> None:
    """Remove every CanonFinder and the canon modules they loaded."""
    had_finder = any(isinstance(f, CanonFinder) for f in sys.meta_path)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, CanonFinder)]
    if had_finder:
        _forget_canon_modules()


def _forget_canon_modules() -> None:
    """Drop the canon modules from ``sys.modules`` and from their area packages' attributes: ``from
    canon_refs.posttrain import dpo`` reads the attribute first, so one left behind would hand a
    later import the module of another run (the reference, or another learner's)."""
    prefixes = (f"{REF_PACKAGE}.", ALIAS_PACKAGE)  # a cheap test first: torch alone has ~2,000 modules
    canon = [name for name in list(sys.modules) if name.startswith(prefixes)]
    for name in canon:
        head = name.split(".", 1)[0]
        if (head == REF_PACKAGE and name.count(".") == 2) or head == ALIAS_PACKAGE:
            sys.modules.pop(name, None)
    for name in canon:
        package = sys.modules.get(name)
        if name.count(".") == 1 and package is not None and name.startswith(f"{REF_PACKAGE}."):
            for attribute, value in list(vars(package).items()):
                if isinstance(value, ModuleType) and str(getattr(value, "__name__", "")).startswith(f"{name}."):
                    delattr(package, attribute)
