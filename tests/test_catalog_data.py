"""The catalog's data files (``pytest_mlcanon/catalog/data/*.toml``): their schema, their references
to the rest of the tree, and that an installed (not editable) copy of the package carries them."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pytest_mlcanon import catalog
from pytest_mlcanon.catalog import hints
from pytest_mlcanon.datafiles import read_toml

REPO = Path(__file__).resolve().parents[1]
ITEMS = catalog.all_items()


def test_items_are_numbered_one_to_sixty_with_unique_slugs() -> None:
    assert [item.number for item in ITEMS] == list(range(1, 61))
    assert len({item.slug for item in ITEMS}) == 60
    assert all(item.level in {"A", "B"} and 1 <= item.block <= 8 and item.minutes > 0 for item in ITEMS)
    assert [item.block for item in ITEMS] == sorted(item.block for item in ITEMS)


def test_references_between_items_name_existing_items() -> None:
    for item in ITEMS:
        assert set(item.depends_on) | set(item.after) <= set(range(1, 61)), item.label
        assert item.number not in item.depends_on + item.after, item.label


def test_modules_and_test_files_exist() -> None:
    for item in ITEMS:
        assert item.modules and item.test_files, item.label
        for module in item.modules:
            assert (REPO / "canon_refs" / f"{module}.py").is_file(), f"{item.label}: no canon_refs/{module}.py"
        for name in item.test_files:
            assert (REPO / "canon_tests" / name).is_file(), f"{item.label}: no canon_tests/{name}"


def test_own_names_are_public_names_of_a_shared_module() -> None:
    for item in ITEMS:
        if not item.names:
            continue
        assert catalog.module_mates(item), f"{item.label} names its own names but shares no module"
        modules = [importlib.import_module(f"canon_refs.{m.replace('/', '.')}") for m in item.modules]
        assert all(any(hasattr(module, name) for module in modules) for name in item.names), item.label


def test_every_item_has_one_hint_entry_and_no_other() -> None:
    assert sorted(hints.all_hints()) == list(range(1, 61))
    entries = read_toml(catalog.DATA_DIR / "hints.toml", catalog.CatalogDataError)["hint"]
    assert len(entries) == 60


def test_a_malformed_table_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (catalog.DATA_DIR / "items.toml").read_text()
    annotations = catalog._annotations(catalog.Item)
    monkeypatch.setattr(catalog, "DATA_DIR", tmp_path)
    (tmp_path / "items.toml").write_text(text)
    assert len(catalog.typed_entries("items", "item", annotations)) == 60  # the copy itself is well formed
    broken = {"a missing key": text.replace("minutes = 20\n", "", 1),
              "an unknown key": text.replace("minutes = 20\n", "minutes = 20\nminute = 20\n", 1),
              "a string number": text.replace("number = 5\n", 'number = "5"\n', 1),
              "a bool for an int": text.replace("block = 2\n", "block = true\n", 1),
              "a number among module paths": text.replace('modules = ["classical/knn"]', 'modules = ["classical/knn", 4]', 1),
              "not TOML": text + "\n[[item]\n"}
    for what, bad in broken.items():
        assert bad != text, what
        (tmp_path / "items.toml").write_text(bad)
        with pytest.raises(catalog.CatalogDataError) as info:
            catalog.typed_entries("items", "item", annotations)
        assert "\n" not in str(info.value).strip(), what


@pytest.mark.slow
def test_a_non_editable_install_carries_the_data(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    source = tmp_path / "src"  # a copy, so the build leaves nothing in the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in ("pytest_mlcanon", "canon_refs", "canon_tests"):
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels), str(source)], check=True, capture_output=True, text=True, timeout=600)
    (wheel,) = wheels.glob("*.whl")
    members = set(zipfile.ZipFile(wheel).namelist())
    for data in ("catalog/data/items.toml", "catalog/data/hints.toml"):
        assert f"pytest_mlcanon/{data}" in members
    target = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, text=True, timeout=600)
    probe = ("import pytest_mlcanon.catalog as c, pytest_mlcanon.catalog.hints as h; "
             "print(c.__file__); print(len(c.all_items()), len(h.all_hints()), c.get(55).slug)")
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True, timeout=120).stdout.splitlines()
    assert out[0].startswith(str(target)) and out[1] == "60 60 posttrain/dpo"


def test_modules_built_on_names_each_module_once_with_its_items() -> None:
    blocks = catalog.modules_built_on(catalog.get(55))["transformer/blocks"]
    assert [i.number for i in blocks] == [29, 30]
    grpo = catalog.modules_built_on(catalog.get(56))
    assert "posttrain/dpo" in grpo and "posttrain/grpo" not in grpo  # what it builds on, never its own
    assert all("transformer/blocks" not in catalog.modules_built_on(catalog.get(n)) for n in (29, 30))
