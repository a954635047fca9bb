"""Where the installed canon lives, and how a path is shown to the user.

The reference modules are the ``canon_refs`` package (``redirect.reference_dir``), the reference
tests the ``canon_tests`` package beside it; both are found without importing any item or test.
"""

from __future__ import annotations

import importlib.util
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


def shown(path: str | Path, root: Path | None = None) -> str:
    """A path as the user would type it: relative to ``root`` (the current directory by default)
    when inside it, else absolute."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to((root or Path.cwd()).resolve()))
    except (ValueError, OSError):
        return str(resolved)
