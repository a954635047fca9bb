"""Which directory holds the learner's implementation, and which of an item's files it provides.

Resolution order: ``--impl``, then the ``MLCANON_IMPL`` environment variable (or the seed's name for
it, ``MLBOOK_IMPL``), then discovery under the current directory (``practice/``, ``src/mlbook/``, ``mlbook/``, then any folder laid out like
the canon), and, when nothing there is, the same discovery at the learner repo's root (``state.find_root``), so
a run from a subfolder finds the repo's practice directory instead of none. ``--impl=canon_refs`` names the references themselves: that is how the project's own
suite and the self-check run; discovery never picks them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pytest_mlcanon import catalog
from pytest_mlcanon.redirect import REF_PACKAGE, reference_dir, untouched_stub
from pytest_mlcanon.state import find_root

ENV_VAR = "MLCANON_IMPL"
# The seed's sandbox spells it MLBOOK_IMPL (``MLBOOK_IMPL=practice``): honoured as an alias.
ENV_ALIASES = ("MLBOOK_IMPL",)
PREFERRED = ("practice", "src/mlbook", "mlbook")
SKIP_DIRS = frozenset({".git", ".venv", "venv", "env", "node_modules", "site-packages", "__pycache__", ".tox"})
DISCOVERY_DEPTH = 3


class ImplError(ValueError):
    """The learner directory could not be resolved; the message says what to do."""


@dataclass(frozen=True)
class Impl:
    """The resolved learner directory and how it was chosen."""

    path: Path
    source: str  # "--impl", "MLCANON_IMPL" (or an alias), "discovered" or "reference"

    @property
    def is_reference(self) -> bool:
        return self.source == "reference" or self.path == reference_dir()

    def file_for(self, module: str) -> Path | None:
        """The file implementing ``<area>/<module>`` here, or None when it is missing."""
        path = self.path / f"{module}.py"
        return path if path.is_file() else None

    def missing_modules(self, item: catalog.Item) -> tuple[str, ...]:
        """The item's modules this directory does not provide."""
        return tuple(m for m in item.modules if self.file_for(m) is None)

    def unwritten(self, module: str) -> str | None:
        """Why ``<area>/<module>`` comes from the reference (``"missing"``, ``"still a stub"``), or None
        when the learner's file is written."""
        path = self.file_for(module)
        if path is None:
            return "missing"
        return "still a stub" if untouched_stub(path) else None

    def files(self, item: catalog.Item) -> tuple[Path, ...]:
        """The item's files present here, in catalog order."""
        return tuple(p for m in item.modules if (p := self.file_for(m)) is not None)

    def served(self) -> dict[str, str]:
        """Each module this directory provides in place of the reference (a written file, not a stub),
        mapped to its file as the user sees it: ``{"posttrain/dpo": "practice/posttrain/dpo.py"}``."""
        if self.is_reference:
            return {}
        from pytest_mlcanon.layout import shown

        modules = {m for item in catalog.all_items() for m in item.modules}
        return {m: shown(path) for m in sorted(modules) if (path := self.file_for(m)) and not untouched_stub(path)}

    def describe(self) -> str:
        if self.is_reference:
            return f"reference implementations ({self.path})"
        how = f"from ${self.source}" if self.source in (ENV_VAR, *ENV_ALIASES) else f"from {self.source}"
        return f"{self.path} ({'discovered' if self.source == 'discovered' else how})"


def with_module_mates(items: tuple[catalog.Item, ...], impl: Impl) -> tuple[tuple[catalog.Item, ...], list[str]]:
    """The selection widened to every item living in a module the learner wrote for a selected item
    (``--canon-item=transformer/multihead`` also checks #28's cross-attention in the same file), and a
    note per item added or left out. A mate whose own functions and classes are still stubs is left
    out and named, with the command that checks it."""
    from pytest_mlcanon import stubs

    chosen = {item.number: item for item in items}
    notes: list[str] = []
    for item in items:
        for mate in catalog.module_mates(item):
            if mate.number in chosen:
                continue
            shared = [m for m in mate.modules if m in item.modules]
            files = [p for m in shared if (p := impl.file_for(m)) is not None and not untouched_stub(p)]
            if not files:
                continue
            where = ", ".join(f"{m}.py" for m in shared)
            own = mate.names
            if own and all(stubs.names_unwritten(p, own) for p in files):
                notes.append(f"{mate.label} also lives in {where} and is not written yet ({', '.join(own)}); "
                             f"check it with --canon-item={mate.slug} once it is")
                continue
            chosen[mate.number] = mate
            notes.append(f"also checked {mate.label}: it lives in {where} with {item.label}")
    return tuple(chosen[n] for n in sorted(chosen)), notes


def resolve(option: str | None, cwd: Path, environ: os._Environ[str] | dict[str, str] = os.environ) -> Impl:
    """Resolve the learner directory; raises ImplError with a one-line explanation."""
    if option:
        return _explicit(option, cwd, "--impl")
    named = [(var, environ[var]) for var in (ENV_VAR, *ENV_ALIASES) if environ.get(var)]
    if len({value for _, value in named}) > 1:
        listed = " and ".join(f"{var}={value}" for var, value in named)
        raise ImplError(f"{listed} name different learner directories: unset one (or pass --impl=PATH)")
    if named:
        return _explicit(named[0][1], cwd, named[0][0])
    root = find_root(cwd)
    found = discover(cwd)
    if found is None and root != cwd.resolve():
        found = discover(root)
    if found is None:
        where = cwd if root == cwd.resolve() else f"{cwd} or the repo root {root}"
        practice = os.path.relpath(root / "practice", cwd)
        raise ImplError(
            f"no learner directory found under {where}: create {practice}/<area>/<module>.py (e.g. "
            f"{practice}/posttrain/dpo.py; `mlcanon drill ITEM` writes its stub there), or pass --impl=PATH "
            "(--impl=canon_refs runs the references)"
        )
    return Impl(found, "discovered")


def _explicit(value: str, cwd: Path, source: str) -> Impl:
    if value == REF_PACKAGE:
        return Impl(reference_dir(), "reference")
    path = (cwd / value).expanduser().resolve()
    if not path.exists():
        raise ImplError(f"{source} path {value!r} does not exist (resolved to {path})")
    if not path.is_dir():
        raise ImplError(f"{source} path {value!r} is not a directory: point it at the folder holding <area>/<module>.py")
    if path == reference_dir():
        return Impl(path, "reference")
    if too_deep(path):
        raise ImplError(too_deep_message(f"{source} path", value, path, cwd,
                                         "--impl=" if source == "--impl" else f"{source}="))
    return Impl(path, source)


def too_deep_message(what: str, value: str, path: Path, cwd: Path, flag: str) -> str:
    """One line for a learner directory given one level too deep, suggesting its parent as typed."""
    parent = path.parent if Path(value).expanduser().is_absolute() else os.path.relpath(path.parent, cwd)
    return (f"{what} {value!r} is one level too deep: it is the area folder {path.name}/, and the learner "
            f"directory is the folder holding <area>/<module>.py; did you mean {flag}{parent}?")


def too_deep(path: Path) -> bool:
    """True when ``path`` is an ``<area>`` folder of a learner directory rather than the directory
    itself: it holds that area's ``<module>.py`` files directly and nothing laid out like the canon
    (``--impl=practice/posttrain`` for ``practice/posttrain/dpo.py``)."""
    modules = [m for item in catalog.all_items() for m in item.modules if m.split("/", 1)[0] == path.name]
    return (any((path / f"{m.split('/', 1)[1]}.py").is_file() for m in modules)
            and not looks_like_canon(path) and looks_like_canon(path.parent))


def looks_like_canon(path: Path) -> bool:
    """True when ``path`` holds at least one ``<area>/<module>.py`` of the catalog."""
    return any((path / f"{m}.py").is_file() for item in catalog.all_items() for m in item.modules)


def discover(cwd: Path) -> Path | None:
    """The learner directory under ``cwd``: a preferred name first, else the shallowest canon-like folder."""
    refs = reference_dir()
    for name in PREFERRED:
        candidate = cwd / name
        if candidate.is_dir() and looks_like_canon(candidate):
            return candidate.resolve()
    if looks_like_canon(cwd) and cwd.resolve() != refs:
        return cwd.resolve()
    frontier = [cwd]
    for _ in range(DISCOVERY_DEPTH):
        found: list[Path] = []
        next_frontier: list[Path] = []
        for folder in frontier:
            for child in sorted(_subdirs(folder)):
                if child.resolve() == refs or child.name == REF_PACKAGE:
                    continue
                (found if looks_like_canon(child) else next_frontier).append(child)
        if len(found) > 1:
            listed = listing([str(p.relative_to(cwd)) for p in found])
            raise ImplError(f"several learner directories under {cwd}: {listed}; choose one with --impl=PATH")
        if found:
            return found[0].resolve()
        frontier = next_frontier
    return None


def _subdirs(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in SKIP_DIRS]
    except OSError:
        return []


def listing(names: list[str], limit: int = 5) -> str:
    """``a, b, c`` for a message: the first ``limit`` names, then how many more there are."""
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"
