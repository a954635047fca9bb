"""What a batch keeps in its ``--out`` so that it can be resumed exactly: ``records/``.

* ``records/run.json``: what the batch is (``Identity``): the items, the teacher's configuration (all
  of it but the worker count), the seed of the re-check, the shard, the submissions folder, the
  grader's fingerprint (its version, torch's and numpy's, and the bytes of the items' tests and
  references) and, once the reference run is done, its digest;
* ``records/students/<student>.json``: every finished cell of that student, written as each job is
  assessed, in the gradebook's own JSON codec (``Gradebook.to_dict``).

``mlcanon grade --resume`` keeps these cells and grades the rest; ``--only STUDENT...`` regrades
those students and keeps everyone else's. Either refuses (``RecordError``, one line) a batch whose
identity differs from the recorded one: a resumed gradebook is one run's, under one configuration,
one seed and one reference run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from dataclasses import asdict, dataclass, fields, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from pytest_mlcanon import catalog
from pytest_mlcanon.evidence import Status
from pytest_mlcanon.grade.config import GradeConfig
from pytest_mlcanon.grade.gradebook import Gradebook, ItemResult, StudentResult
from pytest_mlcanon.grade.verifier import Calibration
from pytest_mlcanon.layout import tests_dir
from pytest_mlcanon.redirect import reference_dir
from pytest_mlcanon.reports.model import atomic_write

FOLDER = "records"
FORMAT_VERSION = 1
#: Configuration keys that do not change a grade: how many jobs run at once, and where the file was.
UNGRADED_KEYS = ("workers", "source")

Key = tuple[str, str]  # (student, item slug)


class RecordError(ValueError):
    """The records cannot be used for this batch; the message says why and what to pass."""


@dataclass(frozen=True)
class Identity:
    items: list[str]
    config: dict[str, Any]
    seed: int
    shard: str
    submissions: str
    grader: str
    calibration: str = ""
    version: int = FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Identity:
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise RecordError(f"records of format {data.get('version') if isinstance(data, dict) else None!r}, "
                              f"not {FORMAT_VERSION}")
        try:
            return cls(**{f.name: data[f.name] for f in fields(cls)})
        except KeyError as exc:
            raise RecordError(f"records without {exc}") from None

    def differences(self, recorded: Identity) -> list[str]:
        """What differs from the ``recorded`` batch, for the refusal's one line."""
        found = []
        if self.items != recorded.items:
            found.append(f"items {','.join(recorded.items)} -> {','.join(self.items)}")
        mine, theirs = _flat(self.config), _flat(recorded.config)
        found += [f"config {k} {_short(theirs.get(k))} -> {_short(mine.get(k))}"
                  for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
        for name in ("seed", "shard", "submissions"):
            if getattr(self, name) != getattr(recorded, name):
                found.append(f"{name} {getattr(recorded, name) or '-'} -> {getattr(self, name) or '-'}")
        if self.grader != recorded.grader:
            found.append("the grader (its version, or the items' tests or references, or torch or numpy)")
        return found


def identity(config: GradeConfig, items: Collection[catalog.Item], seed: int, shard: tuple[int, int] | None,
             submissions: Path) -> Identity:
    """The identity of the batch about to run (its calibration digest comes later)."""
    return Identity([i.slug for i in items], _config(config), seed, f"{shard[0]}/{shard[1]}" if shard else "",
                    str(submissions.resolve()), fingerprint(items))


def _config(config: GradeConfig) -> dict[str, Any]:
    """Every setting that can change a grade, as JSON gives it back (tuples as lists)."""
    data = {k: v for k, v in asdict(config).items() if k not in UNGRADED_KEYS and k != "items"}
    return dict(json.loads(json.dumps(data, default=str, sort_keys=True)))


def _flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"limits": {"wall_s": 90}}`` -> ``{"limits.wall_s": 90}``: a refusal names the key that differs."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _short(value: Any) -> str:
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def fingerprint(items: Collection[catalog.Item]) -> str:
    """The grader as it grades these items: versions, and the bytes of its own code and data, and of
    the items' tests and references (an edited rubric rule is another grader, whatever the version)."""
    digest = hashlib.sha256()
    for name in ("pytest-mlcanon", "torch", "numpy"):
        try:
            digest.update(f"{name}={metadata.version(name)}\n".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name}=?\n".encode())
    base, refs = tests_dir(), reference_dir()
    package = Path(catalog.__file__).resolve().parents[1]
    paths = sorted(p for p in package.rglob("*") if p.suffix in (".py", ".toml") and "__pycache__" not in p.parts)
    paths.append(base / "conftest.py")
    for item in items:
        paths += [base / name for name in item.test_files] + [refs / f"{module}.py" for module in item.modules]
    for path in dict.fromkeys(paths):
        digest.update(str(path.relative_to(path.parents[1])).encode() + b"\0")
        try:
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        except OSError:
            digest.update(b"missing")
    return digest.hexdigest()


def calibration_digest(calibration: Calibration) -> str:
    """The reference run's result in short: what it collected, failed, probed and covered."""
    data = {k: getattr(calibration, k) for k in ("nodeids", "failed", "probes", "contract", "coverage")}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


class Journal:
    """The records of one ``--out``: the identity, and each finished cell as soon as it is assessed.
    ``record`` and ``calibrated`` are called by the batch under its own lock."""

    def __init__(self, out: Path, batch: Identity, cells: dict[Key, ItemResult] | None = None) -> None:
        self.folder = out / FOLDER
        self.batch = batch
        self.cells: dict[str, dict[str, ItemResult]] = {}
        for (student, slug), cell in (cells or {}).items():
            self.cells.setdefault(student, {})[slug] = cell

    @staticmethod
    def exists(out: Path) -> bool:
        return (out / FOLDER / "run.json").is_file()

    @staticmethod
    def load(out: Path) -> tuple[Identity, dict[Key, ItemResult]]:
        """The recorded identity and every recorded cell (a cell of an interrupted job is not one)."""
        folder = out / FOLDER
        try:
            recorded = Identity.from_dict(json.loads((folder / "run.json").read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise RecordError(f"{out} holds no record of a batch ({FOLDER}/run.json)") from None
        except (OSError, ValueError) as exc:
            raise RecordError(f"{folder / 'run.json'}: cannot be read: {exc}") from None
        cells: dict[Key, ItemResult] = {}
        for path in sorted((folder / "students").glob("*.json")):
            try:
                book = Gradebook.from_dict(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise RecordError(f"{path}: cannot be read: {exc}") from None
            for student in book.students:
                for cell in student.items:
                    if cell.status is not Status.INTERRUPTED:
                        cells[(student.student, cell.slug)] = cell
        return recorded, cells

    def start(self, regraded: Collection[str] = ()) -> None:
        """Write the identity, and forget the ``regraded`` students' earlier cells (on disk too, so a
        batch interrupted before their first new cell does not resume with the old ones)."""
        atomic_write(self.folder / "run.json", json.dumps(self.batch.to_dict(), indent=2, sort_keys=True) + "\n")
        for student in regraded:
            self.cells.pop(student, None)
            (self.folder / "students" / f"{student}.json").unlink(missing_ok=True)

    def calibrated(self, calibration: Calibration) -> None:
        """Record the reference run's digest; refuse if it differs from the one already recorded (a
        resumed batch's identity carries its recorded run's)."""
        digest = calibration_digest(calibration)
        if self.batch.calibration and digest != self.batch.calibration:
            raise RecordError("the reference run on this machine differs from the recorded batch's "
                              "(its tests, failures or re-check coverage); grade into a new --out, or pass --force")
        self.batch = replace(self.batch, calibration=digest)
        atomic_write(self.folder / "run.json", json.dumps(self.batch.to_dict(), indent=2, sort_keys=True) + "\n")

    def record(self, student: str, cell: ItemResult) -> None:
        mine = self.cells.setdefault(student, {})
        mine[cell.slug] = cell
        ordered = [mine[slug] for slug in self.batch.items if slug in mine]
        book = Gradebook(list(self.batch.items), students=[StudentResult(student, items=ordered)])
        atomic_write(self.folder / "students" / f"{student}.json", json.dumps(book.to_dict(), default=str) + "\n")
