"""Settings of the plugin and the rubric, each a command-line option and an ini key sharing one help
text, resolved in layers: command line, then pytest ini (``mlcanon_<key>``), then ``[tool.mlcanon]``
in the rootdir's pyproject.toml, then the default. A bad value names the layer it came from.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names the layer and the key."""


def _codes(text: str | list[str]) -> tuple[str, ...]:
    parts = text if isinstance(text, list) else str(text).replace(",", " ").split()
    return tuple(sorted({p.strip().upper() for p in parts if p.strip()}))


def _score(text: Any) -> int:
    value = int(text)
    if not 0 <= value <= 5:
        raise ValueError("must be between 0 and 5")
    return value


def _fraction(text: Any) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


def _positive_float(text: Any) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError("must be > 0")
    return value


def _nonneg_float(text: Any) -> float:
    value = float(text)
    if not value >= 0:  # also rejects NaN
        raise ValueError("must be >= 0")
    return value


def _nonneg_int(text: Any) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


CONTRACT_MODES = ("advice", "required")


def _contract(text: Any) -> str:
    value = str(text).strip().lower()
    if value not in CONTRACT_MODES:
        raise ValueError(f"must be one of {', '.join(CONTRACT_MODES)}")
    return value


def _bool(text: Any) -> bool:
    if isinstance(text, bool):
        return text
    lowered = str(text).strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError("must be true or false")


@dataclass(frozen=True)
class Spec:
    """One setting: its key, option flag, parser, default and help text."""

    key: str
    flag: str | None
    parse: Callable[[Any], Any]
    default: Any
    help: str


SPECS: tuple[Spec, ...] = (
    Spec("min_score", "--canon-min-score", _score, 0,
         "fail the run when an item's rubric score is below N (0-5; default 0: never)"),
    Spec("ignore", "--canon-ignore", _codes, (),
         "rubric rule codes to turn off, comma separated (e.g. SHP001,API003) or a prefix (NUM)"),
    Spec("strict_shapes", "--mlcanon-strict-shapes", _bool, False,
         "missing or malformed shape comments fail the pytest run, not only the Shapes axis"),
    Spec("runtime_shapes", None, _bool, True,
         "verify shape comments against the traced values while the item's tests run (SHP002; default true)"),
    Spec("coverage", "--canon-coverage", _bool, False,
         "measure which lines of the learner's files the reference tests reach (coverage.py) and list "
         "those never reached in the report; always on under pytest --cov, which it reads (default false)"),
    Spec("shape_coverage_min", None, _fraction, 1.0,
         "share of shape lines that must carry a well-formed shape comment for the Shapes axis (default 1.0)"),
    Spec("docstring_min_words", None, _nonneg_int, 20,
         "words a module docstring needs to count as a stated plan (Explanation axis; default 20)"),
    Spec("contract", "--canon-contract", _contract, "advice",
         "input-validation checks (tests marked contract): advice, listed in the report but not counted "
         "toward Correctness nor failing the run (default), or required, counted like any other test"),
    Spec("first_attempt_factor", None, _positive_float, 2.0,
         "with --timed, a first attempt may take this multiple of the item's from-memory minutes (default 2)"),
    Spec("whole_module", None, _bool, True,
         "selecting an item also checks the other items living in a module the learner wrote for it (#26 "
         "brings #28's cross-attention; default true); the grader turns it off, a job grades its own items"),
    Spec("test_timeout", "--canon-test-timeout", _nonneg_float, 60.0,
         "seconds of CPU time one phase of a canon test may take before it fails as a timeout naming your "
         "function and line (5x that in wall-clock time for code that waits); the item's other tests are "
         "then not run (0: no limit; default 60)"),
)


@dataclass(frozen=True)
class Settings:
    """Resolved settings; ``origin`` maps each key to the layer that set it."""

    min_score: int = 0
    ignore: tuple[str, ...] = ()
    strict_shapes: bool = False
    runtime_shapes: bool = True
    coverage: bool = False
    shape_coverage_min: float = 1.0
    docstring_min_words: int = 20
    first_attempt_factor: float = 2.0
    contract: str = "advice"
    whole_module: bool = True
    test_timeout: float = 60.0
    origin: dict[str, str] = field(default_factory=dict, compare=False)

    def enabled(self, code: str) -> bool:
        """False when ``code`` or one of its prefixes (``NUM``, ``NUM00``) is in ``ignore``."""
        return not any(code.startswith(prefix) for prefix in self.ignore)

    @property
    def contract_required(self) -> bool:
        """Input-validation checks count toward Correctness (``contract = "required"``)."""
        return self.contract == "required"


def ini_name(key: str) -> str:
    return f"mlcanon_{key}"


def read_pyproject(rootdir: Path) -> dict[str, Any]:
    """The ``[tool.mlcanon]`` table of ``rootdir/pyproject.toml``, or {} when there is none."""
    path = rootdir / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read [tool.mlcanon]: {exc}") from exc
    table = data.get("tool", {}).get("mlcanon", {})
    unknown = sorted(set(table) - {s.key for s in SPECS})
    if unknown:
        raise SettingsError(f"{path} [tool.mlcanon]: unknown key(s) {', '.join(unknown)}")
    return dict(table)


def resolve(cli: dict[str, Any], ini: dict[str, Any], pyproject: dict[str, Any]) -> Settings:
    """Merge the layers, highest first; ``None`` or an empty string means "not set in this layer"."""
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for spec in SPECS:
        for layer, table, name in (
            ("command line", cli, spec.flag or spec.key),
            ("ini", ini, ini_name(spec.key)),
            ("[tool.mlcanon]", pyproject, spec.key),
        ):
            raw = table.get(spec.key)
            if raw is None or raw == "" or raw == []:
                continue
            try:
                values[spec.key] = spec.parse(raw)
            except (TypeError, ValueError) as exc:
                raise SettingsError(f"{layer} {name}={raw!r}: {exc}") from exc
            origin[spec.key] = layer
            break
        else:
            values[spec.key] = spec.parse(spec.default) if spec.key == "ignore" else spec.default
            origin[spec.key] = "default"
    return Settings(**values, origin=origin)
