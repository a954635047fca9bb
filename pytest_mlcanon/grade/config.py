"""The teacher's configuration of ``mlcanon grade``, resolved in layers: command line, then the config
file (``--config PATH``, else ``mlcanon-grade.toml`` beside the submissions folder or in the current
folder), then the defaults. A bad value names its layer and key, as the plugin's settings do.

```toml
assignment = "Homework 3"  # the report's title (default: the submissions folder's name)
items = ["posttrain/dpo", "transformer/attention"]   # or "posttrain/dpo,55"
workers = 2
on_flag = "zero"          # a flagged item scores 0 ("review": keep the points, list the flags)

[limits]                  # per (student, item) job
wall_s = 120              # whole job, wall clock
test_timeout_s = 20       # one test or one re-check call
cpu_s = 90
memory_mb = 4096
output_mb = 16            # any one file the job writes, its captured output included
processes = 64

[points]                  # the item's maximum
default = 10
"posttrain/dpo" = 20

[weights]                 # shares of an item's points per rubric axis
correctness = 6
shapes = 1
numerics = 1
api = 1
explanation = 1

[tests]                   # relative weights of reference tests within correctness (glob on the name)
"test_seed_pairs_closed_form*" = 2

[recheck]
enabled = true
skip = []                 # items not re-checked
unverified = "review"     # what an item whose correctness cannot be verified earns for it: "award" the
                          # points its tests claim, hold them for "review" (the default: none until a
                          # teacher looks), or "zero"

[sandbox]
network = true            # new network namespace where allowed
filesystem = true         # read-only file system where allowed
user = true               # a sandbox uid when the grader is root
uid_base = 61000

[gradescope]
visibility = "visible"           # top level: visible, hidden, after_due_date, after_published
test_visibility = "visible"
flags_visibility = "hidden"      # the integrity entries, and any word of a flag in the outputs: hidden
                                 # until a teacher reviews them (the default), or as Gradescope's
                                 # after_due_date, after_published, visible

[rubric]                  # the keys of [tool.mlcanon]: min_score, ignore, shape_coverage_min, ...
```
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_mlcanon import settings as settings_mod
from pytest_mlcanon.rubric.model import AXES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

CONFIG_NAME = "mlcanon-grade.toml"
VISIBILITY = ("visible", "hidden", "after_due_date", "after_published")
#: What an item whose correctness the re-check cannot verify earns for it (``[recheck] unverified``).
UNVERIFIED = ("award", "review", "zero")
DEFAULT_WEIGHTS = {"correctness": 6.0, "shapes": 1.0, "numerics": 1.0, "api": 1.0, "explanation": 1.0}
#: The command-line flag of each key that has one (``mlcanon grade --help``).
FLAGS = {"items": "--item", "workers": "--workers", "seed": "--seed", "wall_s": "--timeout",
         "test_timeout_s": "--test-timeout", "memory_mb": "--memory"}


class ConfigError(ValueError):
    """A configuration value cannot be used; the message names the layer and the key."""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 120.0
    test_timeout_s: float = 20.0
    cpu_s: float = 90.0
    memory_mb: int = 4096
    output_mb: int = 16
    processes: int = 64


@dataclass(frozen=True)
class Points:
    default: float = 10.0
    per_item: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    tests: tuple[tuple[str, float], ...] = ()

    def item(self, slug: str) -> float:
        return self.per_item.get(slug, self.default)

    def share(self, axis: str) -> float:
        total = sum(self.weights.values())
        return self.weights.get(axis, 0.0) / total if total else 0.0

    def test_weight(self, name: str) -> float:
        """The weight of the first ``[tests]`` pattern matching the test's name, else 1."""
        return next((w for pattern, w in self.tests if fnmatch.fnmatchcase(name, pattern)), 1.0)


@dataclass(frozen=True)
class GradeConfig:
    assignment: str = ""  # empty: the submissions folder's name (set by the batch)
    items: str = ""
    workers: int = 0  # 0: one per available core
    seed: int | None = None
    on_flag: str = "zero"
    limits: Limits = field(default_factory=Limits)
    points: Points = field(default_factory=Points)
    recheck: bool = True
    recheck_skip: tuple[str, ...] = ()
    unverified: str = "review"
    network: bool = True
    filesystem: bool = True
    user: bool = True
    uid_base: int = 61000
    unsafe_no_sandbox: bool = False  # only from the command line: grade even where no sandbox can be made
    single: bool = False  # only from the command line: the submissions folder is one student's submission
    visibility: str = "visible"
    test_visibility: str = "visible"
    flags_visibility: str = "hidden"
    rubric: dict[str, Any] = field(default_factory=dict)
    source: str = "defaults"

    def settings(self) -> settings_mod.Settings:
        """The rubric's settings from ``[rubric]`` (as ``[tool.mlcanon]``)."""
        try:
            return settings_mod.resolve(cli={}, ini={}, pyproject=self.rubric)
        except settings_mod.SettingsError as exc:
            raise ConfigError(f"{self.source} [rubric]: {exc}") from exc

    def to_dict(self) -> dict[str, Any]:
        return {"assignment": self.assignment, "items": self.items, "seed": self.seed, "on_flag": self.on_flag, "limits": vars(self.limits),
                "points": {"default": self.points.default, "per_item": self.points.per_item,
                           "weights": self.points.weights, "tests": [list(t) for t in self.points.tests]},
                "recheck": self.recheck, "recheck_skip": list(self.recheck_skip), "unverified": self.unverified,
                "visibility": self.visibility,
                "test_visibility": self.test_visibility, "flags_visibility": self.flags_visibility, "source": self.source}


def find(path: str | None, submissions: Path | None) -> Path | None:
    """The config file: ``--config``, else ``mlcanon-grade.toml`` beside the submissions or here."""
    if path:
        found = Path(path)
        if not found.is_file():
            raise ConfigError(f"--config {path}: no such file")
        return found
    for folder in ([submissions.resolve().parent] if submissions else []) + [Path.cwd()]:
        if (folder / CONFIG_NAME).is_file():
            return folder / CONFIG_NAME
    return None


def load(path: Path | None, cli: dict[str, Any]) -> GradeConfig:
    """Resolve the layers; ``cli`` holds the command-line values (None when not given)."""
    table: dict[str, Any] = {}
    if path is not None:
        try:
            table = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read: {exc}") from exc
    return from_table(table, cli, str(path) if path else "defaults")


_SECTIONS = {"limits", "points", "weights", "tests", "recheck", "sandbox", "gradescope", "rubric"}
_TOP = {"assignment", "items", "workers", "seed", "on_flag"}


def from_table(table: dict[str, Any], cli: dict[str, Any] | None = None, source: str = "defaults") -> GradeConfig:
    """The configuration from a parsed TOML table (``source`` names it in error messages)."""
    _known_keys(table, _SECTIONS | _TOP, source)
    reader = _Reader(source, cli or {})
    items = reader.value("items", table.get("items"), _items, "")
    limits_table = reader.section(table, "limits", set(asdict(Limits())))
    limits = Limits(**{name: reader.value(name, limits_table.get(name), kind, getattr(Limits(), name), "limits")
                       for name, kind in (("wall_s", _positive), ("test_timeout_s", _positive), ("cpu_s", _positive),
                                          ("memory_mb", _positive_int), ("output_mb", _positive_int),
                                          ("processes", _positive_int))})
    points_table = reader.section(table, "points")
    per_item = {str(k): reader.value(str(k), v, _nonneg, 0.0, "points") for k, v in points_table.items()
                if k != "default"}
    weights_table = reader.section(table, "weights")
    unknown_axes = sorted(set(weights_table) - set(AXES))
    if unknown_axes:
        raise ConfigError(f"{source} [weights]: unknown axis {', '.join(unknown_axes)} (axes: {', '.join(AXES)})")
    weights = {axis: reader.value(axis, weights_table.get(axis), _nonneg, DEFAULT_WEIGHTS[axis], "weights")
               for axis in AXES}
    tests = tuple((str(k), reader.value(str(k), v, _nonneg, 1.0, "tests")) for k, v in
                  reader.section(table, "tests").items())
    points = Points(reader.value("default", points_table.get("default"), _nonneg, 10.0, "points"), per_item,
                    weights, tests)
    recheck = reader.section(table, "recheck", {"enabled", "skip", "unverified"})
    sandbox = reader.section(table, "sandbox", {"network", "filesystem", "user", "uid_base"})
    gradescope = reader.section(table, "gradescope", {"visibility", "test_visibility", "flags_visibility"})
    return GradeConfig(
        assignment=reader.value("assignment", table.get("assignment"), _text, ""),
        items=items,
        workers=reader.value("workers", table.get("workers"), _nonneg_int, 0),
        seed=reader.value("seed", table.get("seed"), _int, None),
        on_flag=reader.value("on_flag", table.get("on_flag"), _choice(("zero", "review")), "zero"),
        limits=limits, points=points,
        recheck=reader.value("enabled", recheck.get("enabled"), _bool, True, "recheck"),
        recheck_skip=reader.value("skip", recheck.get("skip"), _slugs, (), "recheck"),
        unverified=reader.value("unverified", recheck.get("unverified"), _choice(UNVERIFIED), "review", "recheck"),
        network=reader.value("network", sandbox.get("network"), _bool, True, "sandbox"),
        filesystem=reader.value("filesystem", sandbox.get("filesystem"), _bool, True, "sandbox"),
        user=reader.value("user", sandbox.get("user"), _bool, True, "sandbox"),
        uid_base=reader.value("uid_base", sandbox.get("uid_base"), _positive_int, 61000, "sandbox"),
        visibility=reader.value("visibility", gradescope.get("visibility"), _choice(VISIBILITY), "visible",
                                "gradescope"),
        test_visibility=reader.value("test_visibility", gradescope.get("test_visibility"), _choice(VISIBILITY),
                                     "visible", "gradescope"),
        flags_visibility=reader.value("flags_visibility", gradescope.get("flags_visibility"), _choice(VISIBILITY),
                                      "hidden", "gradescope"),
        rubric=reader.section(table, "rubric"),
        source=source,
    )


class _Reader:
    def __init__(self, source: str, cli: dict[str, Any]) -> None:
        self.source = source
        self.cli = cli

    def section(self, table: dict[str, Any], name: str, keys: set[str] | None = None) -> dict[str, Any]:
        """The ``[name]`` table; with ``keys``, a key outside them is an error (a misspelt ``[sandbox]
        netwrk`` was silently the default: the third fresh-teacher trial)."""
        value = table.get(name, {})
        if not isinstance(value, dict):
            raise ConfigError(f"{self.source}: [{name}] must be a table")
        if keys is not None:
            _known_keys(value, keys, f"{self.source} [{name}]")
        return value

    def value(self, key: str, raw: Any, parse: Callable[[Any], Any], default: Any, section: str = "") -> Any:
        flag = self.cli.get(key) if key in FLAGS and section in ("", "limits") else None
        for layer, candidate in (("command line", flag), (self.source, raw)):
            if candidate is None or candidate == "":
                continue
            try:
                return parse(candidate)
            except (TypeError, ValueError) as exc:
                where = FLAGS[key] if layer == "command line" else f"[{section}] {key}" if section else key
                raise ConfigError(f"{layer} {where}={candidate!r}: {exc}") from None
        return default


def _known_keys(table: dict[str, Any], keys: set[str], where: str) -> None:
    """ConfigError naming each key of ``table`` outside ``keys``, with the nearest known one."""
    unknown = sorted(str(k) for k in set(table) - keys)
    if unknown:
        named = []
        for key in unknown:
            near = difflib.get_close_matches(key, sorted(keys), n=1)
            named.append(f"{key} (did you mean {near[0]}?)" if near else key)
        raise ConfigError(f"{where}: unknown key(s) {', '.join(named)}; known: {', '.join(sorted(keys))}")


def _positive(value: Any) -> float:
    number = float(value)
    if not number > 0:
        raise ValueError("must be > 0")
    return number


def _positive_int(value: Any) -> int:
    number = int(value)
    if number <= 0:
        raise ValueError("must be a whole number > 0")
    return number


def _nonneg(value: Any) -> float:
    number = float(value)
    if number < 0:
        raise ValueError("must be >= 0")
    return number


def _nonneg_int(value: Any) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("must be a whole number >= 0")
    return number


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("must be a whole number")
    return int(value)


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError("must be true or false")


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value.strip()


def _items(value: Any) -> str:
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise ValueError("must be a selector string or a list of slugs")
    return value


def _slugs(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    if not isinstance(value, list):
        raise ValueError("must be a list of slugs")
    return tuple(str(v).strip() for v in value)


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return str(value)

    return parse


def workers(config: GradeConfig) -> int:
    """The number of parallel jobs: the config's, else one per core this process may use."""
    if config.workers:
        return config.workers
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
