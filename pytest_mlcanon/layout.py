"""Where the installed canon lives, and how a path is shown to the user.

The reference modules are the ``canon_refs`` package (``redirect.reference_dir``), the reference
tests the ``canon_tests`` package beside it; both are found without importing any item or test.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from pytest_mlcanon import catalog
from pytest_mlcanon.redirect import reference_dir

TEST_PACKAGE = "canon_tests"


def tests_dir() -> Path:
    """Directory of the installed ``canon_tests`` package (found without importing any test)."""
    spec = importlib.util.find_spec(TEST_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the canon_tests package is not installed next to pytest_mlcanon")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def in_canon(item: catalog.Item) -> bool:
    """True when the installed canon has the item's reference modules and test files."""
    refs, tests = reference_dir(), tests_dir()
    return all((refs / f).is_file() for f in item.module_files) and all(
        (tests / name).is_file() for name in item.test_files)


def inside(filename: str | Path, folder: Path) -> bool:
    """True when ``filename`` lies in ``folder`` (an absolute, resolved folder)."""
    try:
        Path(filename).resolve().relative_to(folder)
    except (ValueError, OSError):
        return False
    return True


def in_package(path: str | Path) -> str | None:
    """A file of the installed canon as its package shows it (``canon_tests/test_x.py``,
    ``canon_refs/posttrain/dpo.py``), wherever it is installed; None for any other file. A relative
    ``path`` is relative to the current directory."""
    resolved = Path(path).resolve()
    for package in (tests_dir(), reference_dir()):
        try:
            return f"{package.name}/{resolved.relative_to(package)}"
        except ValueError:
            continue
    return None


def shown(path: str | Path, root: Path | None = None) -> str:
    """A path as the user would type it: a file of the installed canon as its package shows it
    (``canon_tests/test_x.py``, never ``.venv/lib/.../site-packages/canon_tests/test_x.py``), else
    relative to ``root`` (the current directory by default) when inside it, else, when it lies in the
    learner's repo (``state.find_root``), as reached from there (``../practice/x.py`` from a subfolder),
    else absolute."""
    from pytest_mlcanon.state import find_root

    resolved = Path(path).resolve()
    packaged = in_package(resolved)
    if packaged is not None:
        return packaged
    here = (root or Path.cwd()).resolve()
    try:
        return str(resolved.relative_to(here))
    except (ValueError, OSError):
        pass
    try:
        resolved.relative_to(find_root(here))
    except (ValueError, OSError):
        return str(resolved)
    return os.path.relpath(resolved, here)
