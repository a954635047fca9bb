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


@pytest.mark.parametrize("argv", [["list"], ["hint", "4"], ["today"], ["--help"], ["list", "--help"], ["--version"]])
def test_a_reader_that_leaves_early_ends_the_command_quietly(git_repo: Path, argv: list[str]) -> None:
    """``mlcanon list | head``: the reader closes the pipe before anything is written. The command
    exits with status 1 and nothing on stderr (no BrokenPipeError, no "Exception ignored" at exit),
    as Python's documentation advises; stdout block-buffered, as a learner's shell gives it."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen([sys.executable, "-m", "pytest_mlcanon.cli", *argv], cwd=git_repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader leaves before the first line
    status = proc.wait(timeout=120)
    assert proc.stderr.read().decode() == ""
    assert status == 1
