"""The package's data files (``catalog/data/*.toml``, ``chapters/data/*.toml``), read with ``tomllib``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def read_toml(path: Path, error: type[ValueError]) -> dict[str, Any]:
    """The parsed file; a file that is not TOML raises ``error`` with one line naming it and where."""
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: {exc}") from None
