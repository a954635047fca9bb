"""Fixtures for the project's own tests.

pytester's inline runs restore ``sys.modules`` afterwards, which would make torch import its
lazily loaded submodules afresh in the next run and fail ("Only a single TORCH_LIBRARY can be used
to register the namespace ..."). Third-party libraries are therefore kept loaded across inline
runs; our own packages (``canon_refs`` above all, which the redirect swaps) are still restored.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
from pathlib import Path

import _pytest.pytester
import numpy  # noqa: F401  - loaded once for every inline run
import pytest
import torch  # noqa: F401  - loaded once for every inline run

_OURS = {"canon_refs", "canon_tests", "pytest_mlcanon", "mlbook", "_pytest", "pytest", "pluggy"}
_THIRD_PARTY = frozenset(importlib.metadata.packages_distributions()) - _OURS
_original_snapshot_init = _pytest.pytester.SysModulesSnapshot.__init__


def _snapshot_init(self, preserve=None) -> None:  # type: ignore[no-untyped-def]
    def keep(name: str) -> bool:
        return name.split(".", 1)[0] in _THIRD_PARTY or bool(preserve and preserve(name))

    _original_snapshot_init(self, preserve=keep)


_pytest.pytester.SysModulesSnapshot.__init__ = _snapshot_init  # type: ignore[method-assign]

REPO = Path(__file__).resolve().parents[1]
REFS = REPO / "canon_refs"
EXAMPLES = REPO / "examples" / "learners"


@pytest.fixture
def learner(pytester: pytest.Pytester):
    """Build a learner directory ``practice/`` inside the pytester dir from reference files and texts.

    ``learner(copy=["posttrain/dpo"], files={"detection/boxes": "source"})`` returns its path.
    """

    def build(copy: tuple[str, ...] | list[str] = (), files: dict[str, str] | None = None,
              root: str = "practice") -> Path:
        base = pytester.path / root
        base.mkdir(parents=True, exist_ok=True)
        for module in copy:
            dst = base / f"{module}.py"
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REFS / f"{module}.py", dst)
        for module, text in (files or {}).items():
            dst = base / f"{module}.py"
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(text)
        return base

    return build


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """An empty git repository: a learner's repo, which the commands find from any folder inside it."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return tmp_path


@pytest.fixture
def from_subfolder(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``git_repo`` with a subfolder ``notes/`` as the current directory; returns the repo root."""
    (git_repo / "notes").mkdir()
    monkeypatch.chdir(git_repo / "notes")
    return git_repo
