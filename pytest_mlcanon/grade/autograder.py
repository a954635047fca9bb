"""The Gradescope autograder zip (``mlcanon gradescope-autograder``), as otter-grader's ``otter
generate`` builds one: at the root of the archive

* ``setup.sh``: run once by Gradescope while it builds the image; installs Python, CPU torch (from
  the PyTorch CPU index, pinned to the version this machine runs) and pytest-mlcanon into
  ``/autograder/mlcanon-venv``, pytest-mlcanon from the copy of its source bundled in the zip;
* ``run_autograder``: run for each submission; grades ``/autograder/submission`` with ``mlcanon
  grade`` (sandboxed, as on the teacher's machine) and copies the student's ``results.json`` to
  ``/autograder/results/results.json``. ``AUTOGRADER_ROOT`` moves ``/autograder`` (for a trial run);
* ``mlcanon-grade.toml``: the teacher's config (or one naming only the items);
* ``pytest-mlcanon/``: the source of the pytest-mlcanon this machine runs (its checkout: where it was
  installed from, or the folder holding the package), without compiled files.

A submission may be laid out like the canon (``transformer/attention.py``) or flat
(``attention.py``: placed by module name, ``discover``).
"""

from __future__ import annotations

import json
import shlex
import stat
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from pytest_mlcanon import catalog
from pytest_mlcanon.grade import config as config_mod
from pytest_mlcanon.grade.redact import PACKAGES

DISTRIBUTION = "pytest-mlcanon"
#: The source files bundled besides the packages (what ``pyproject.toml`` needs to build).
PROJECT_FILES = ("pyproject.toml", "README.md", "LICENSE")
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
SOURCE = "pytest-mlcanon"

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder's image (this zip is unpacked in
# /autograder/source). Written by `mlcanon gradescope-autograder`; choose an Ubuntu 22.04 or later base
# image (Python 3.10 or later).
set -euo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-pip
python3 -m venv "$ROOT/mlcanon-venv"
PIP="$ROOT/mlcanon-venv/bin/pip"
"$PIP" install --upgrade pip
# CPU torch from the PyTorch index (the version the teacher graded with; edit the pin if this image's
# Python has no wheel of it)
"$PIP" install --index-url {index} {torch}
# pytest-mlcanon from the copy of its source in this zip
"$PIP" install "$ROOT/source/{source}"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for each submission: grade /autograder/submission with `mlcanon grade` and put
# the student's results where Gradescope reads them. Written by `mlcanon gradescope-autograder`.
# AUTOGRADER_ROOT moves /autograder (a trial run in a folder of your own).
set -euo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
MLCANON="$ROOT/mlcanon-venv/bin/mlcanon"
[ -x "$MLCANON" ] || MLCANON=mlcanon
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
"$MLCANON" grade "$ROOT/submission" --item {items} --config "$ROOT/source/{config}" --out "$OUT/gradebook" \\
    --single --no-progress{flags}
shopt -s nullglob
found=("$OUT"/gradebook/gradescope/*/results.json)
if [ "${{#found[@]}}" -ne 1 ]; then
    echo "run_autograder: the submission gave ${{#found[@]}} students' results, not one" >&2
    exit 1
fi
mkdir -p "$ROOT/results"
cp "${{found[0]}}" "$ROOT/results/results.json"
"""


class AutograderError(ValueError):
    """The zip cannot be built; the message says why."""


@dataclass(frozen=True)
class Built:
    path: Path
    items: tuple[str, ...]
    names: tuple[str, ...]  # the archive's entries
    source: Path  # the pytest-mlcanon checkout bundled
    torch: str


def build(out: Path, items: str, config_path: Path | None, *, source: Path | None = None,
          unsafe_no_sandbox: bool = False) -> Built:
    """Write the autograder zip to ``out``: the scripts, the config and pytest-mlcanon's source."""
    settings = config_mod.load(config_path, {"items": items or None})
    if not settings.items:
        raise AutograderError("which items? give --item ITEMS (or items = [...] in the config)")
    try:
        slugs = tuple(item.slug for item in catalog.select(settings.items))
    except catalog.UnknownItemError as exc:
        raise AutograderError(str(exc)) from exc
    root = source or source_root()
    if not (root / "pyproject.toml").is_file() or not all((root / p).is_dir() for p in PACKAGES):
        raise AutograderError(f"{root}: not a pytest-mlcanon checkout (pyproject.toml and {', '.join(PACKAGES)})")
    config_text = (config_path.read_text(encoding="utf-8") if config_path is not None
                   else f"# mlcanon grade's config (see the README's Teachers section)\nitems = {json.dumps(list(slugs))}\n")
    torch = torch_requirement()
    flags = " --unsafe-no-sandbox" if unsafe_no_sandbox else ""
    scripts = {
        "setup.sh": SETUP_SH.format(index=TORCH_INDEX, torch=shlex.quote(torch), source=SOURCE),
        "run_autograder": RUN_AUTOGRADER.format(items=shlex.quote(",".join(slugs)), config=config_mod.CONFIG_NAME,
                                                flags=flags),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in scripts.items():
            _add(archive, name, text.encode(), executable=True)
            names.append(name)
        _add(archive, config_mod.CONFIG_NAME, config_text.encode(), executable=False)
        names.append(config_mod.CONFIG_NAME)
        for path in _source_files(root):
            name = f"{SOURCE}/{path.relative_to(root).as_posix()}"
            _add(archive, name, path.read_bytes(), executable=False)
            names.append(name)
    return Built(out, slugs, tuple(names), root, torch)


def _add(archive: zipfile.ZipFile, name: str, data: bytes, *, executable: bool) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    mode = 0o755 if executable else 0o644
    info.external_attr = (stat.S_IFREG | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def _source_files(root: Path) -> list[Path]:
    files = [root / name for name in PROJECT_FILES if (root / name).is_file()]
    for package in PACKAGES:
        files += sorted(p for p in (root / package).rglob("*")
                        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo"))
    return files


def source_root() -> Path:
    """The checkout pytest-mlcanon was installed from (``pip install -e .`` or ``pip install DIR``), else
    the folder holding the running package when it is one."""
    try:
        direct = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        direct = None
    if direct:
        url = urlparse(json.loads(direct).get("url", ""))
        if url.scheme == "file" and (Path(unquote(url.path)) / "pyproject.toml").is_file():
            return Path(unquote(url.path))
    here = Path(__file__).resolve().parents[2]
    if (here / "pyproject.toml").is_file():
        return here
    raise AutograderError("cannot find pytest-mlcanon's source to bundle (it was not installed from a checkout); "
                          "pass --source DIR, a checkout of pytest-mlcanon")


def torch_requirement() -> str:
    """``torch==X.Y.Z``: the version this machine grades with, without its local tag (``+cpu``)."""
    try:
        return f"torch=={metadata.version('torch').split('+', 1)[0]}"
    except metadata.PackageNotFoundError:
        return "torch"
