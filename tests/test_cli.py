"""The mlcanon command: list, lint and check, with their exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_mlcanon import cli


def test_list_shows_the_catalog(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["list"]) == 0
    table, blocks = capsys.readouterr().out.split("\n\n")
    assert table.count("\n") == 61  # header, rule, sixty rows
    assert "posttrain/dpo" in table and " 15 " in table
    assert blocks.count("\n") == 10  # header, rule, eight blocks


def test_list_selection_and_unknown_item(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["list", "block:4"]) == 0
    table = capsys.readouterr().out.split("\n\n")[0]
    assert [line.split()[0] for line in table.splitlines()[2:]] == ["35", "36", "37", "38"]
    assert cli.main(["list", "nope"]) == 2
    assert "unknown canon item 'nope'" in capsys.readouterr().err


def test_lint_reports_findings_and_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "transformer" / "attention.py"
    bad.parent.mkdir()
    bad.write_text("import torch\n\ndef f(x):\n    return x.view(2, 3)\n")
    assert cli.main(["lint", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}:4: SHP001 missing shape comment" in out
    assert cli.main(["lint", str(bad), "--ignore=SHP,EXP"]) == 0
    assert cli.main(["lint", str(tmp_path / "missing.py")]) == 2


def test_references_lint_clean(capsys: pytest.CaptureFixture[str]) -> None:
    refs = Path(__file__).resolve().parents[1] / "canon_refs"
    assert cli.main(["lint", str(refs)]) == 0, capsys.readouterr().out
