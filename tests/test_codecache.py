"""The compiled-code caches of a process that forks checks (``codecache``): a file served from the cache
is never stale once its contents change, and unchanged contents are compiled once."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest
from _pytest.assertion import rewrite

from pytest_mlcanon import codecache


def _load(path: Path) -> ModuleType:
    """Import ``path`` as a fresh module through the ordinary source loader (no ``.pyc``)."""
    loader = importlib.machinery.SourceFileLoader("cached_probe", str(path))
    spec = importlib.util.spec_from_file_location("cached_probe", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _same_clock(path: Path, text: str) -> None:
    """Write ``text`` (the same length as before) and set the file's times back: only its bytes change."""
    stat = path.stat()
    assert len(text.encode()) == stat.st_size
    path.write_text(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_module_imported_from_source_is_compiled_once_and_again_when_its_bytes_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loader = importlib.machinery.SourceFileLoader
    monkeypatch.setattr(loader, "source_to_code", loader.source_to_code)  # undone after the test
    monkeypatch.setattr("sys.dont_write_bytecode", True)
    codecache.remember_compiled()
    cached = loader.source_to_code
    codecache.remember_compiled()  # twice: still one cache, not one wrapped in another
    assert loader.source_to_code is cached
    path = tmp_path / "probe.py"
    path.write_text("def value():\n    return 1\n")
    first, again = _load(path), _load(path)
    assert first.value() == again.value() == 1
    assert first.value.__code__ is again.value.__code__  # the second import reused the first one's code
    _same_clock(path, "def value():\n    return 2\n")  # a save within the clock's resolution
    changed = _load(path)
    assert changed.value() == 2 and changed.value.__code__ is not first.value.__code__


def test_a_rewritten_test_module_is_compiled_once_and_again_when_it_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rewrite, "_rewrite_test", rewrite._rewrite_test)  # undone after the test
    codecache.remember_rewrites()
    path = tmp_path / "test_probe.py"
    path.write_text("def test_it():\n    assert 1 == 1\n")
    first = rewrite._rewrite_test(path, None)  # type: ignore[arg-type]
    assert rewrite._rewrite_test(path, None) is first  # type: ignore[arg-type]
    path.write_text("def test_it():\n    assert 1 == 22\n")
    changed = rewrite._rewrite_test(path, None)  # type: ignore[arg-type]
    assert changed is not first
    namespace: dict[str, object] = {}
    exec(changed[1], namespace)  # noqa: S102 - the rewritten module: its assertion now fails
    with pytest.raises(AssertionError, match="assert 1 == 22"):
        namespace["test_it"]()  # type: ignore[operator]


def test_a_precompiled_file_is_compiled_without_running_and_its_import_reuses_the_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loader = importlib.machinery.SourceFileLoader
    monkeypatch.setattr(loader, "source_to_code", loader.source_to_code)  # undone after the test
    monkeypatch.setattr("sys.dont_write_bytecode", True)
    path = tmp_path / "reference.py"
    path.write_text("RAN = []\nRAN.append(1)\ndef value():\n    return 3\n")
    compiled: list[str] = []
    original = loader.source_to_code

    def counting(self: object, data: bytes, where: str, *, _optimize: int = -1) -> object:
        compiled.append(where)
        return original(self, data, where, _optimize=_optimize)

    monkeypatch.setattr(loader, "source_to_code", counting)
    codecache.precompile([str(path), str(tmp_path / "missing.py")])  # a missing file is skipped
    assert compiled == [str(path)]
    module = _load(path)
    assert module.value() == 3 and module.RAN == [1] and compiled == [str(path)]  # imported without compiling


def test_a_file_rewritten_ahead_is_served_from_the_cache_without_rewriting_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rewrite, "_rewrite_test", rewrite._rewrite_test)  # undone after the test
    rewritten: list[str] = []
    original = rewrite.AssertionRewriter.run

    def counting(self: rewrite.AssertionRewriter, mod: object) -> None:
        rewritten.append(str(self.module_path))
        original(self, mod)  # type: ignore[arg-type]

    monkeypatch.setattr(rewrite.AssertionRewriter, "run", counting)
    path = tmp_path / "reference.py"
    path.write_text("RAN = []\nRAN.append(1)\ndef value(x):\n    assert x > 0\n    return x\n")
    codecache.rewrite_ahead([path, tmp_path / "missing.py"], None)  # a missing file is skipped
    assert rewritten == [str(path)]
    source_hash, code = rewrite._rewrite_test(path, None)  # type: ignore[arg-type]  # as the rewriting hook asks
    assert rewritten == [str(path)]  # served from the cache
    namespace: dict[str, object] = {}
    exec(code, namespace)  # noqa: S102 - the rewritten module runs only now
    assert namespace["RAN"] == [1]
    with pytest.raises(AssertionError, match="assert -1 > 0"):
        namespace["value"](-1)  # type: ignore[operator]


def test_a_warm_process_rewrites_ahead_the_references_a_check_falls_back_on() -> None:
    from pytest_mlcanon import catalog, warm

    names = {f"{p.parent.name}/{p.stem}" for p in warm.fallback_files([catalog.get("posttrain/dpo")])}
    assert {"posttrain/dpo", "transformer/gpt", "transformer/blocks", "transformer/attention"} <= names
