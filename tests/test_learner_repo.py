"""Issue 17 as a learner meets it in their own repo: one state from any subfolder (17.3), strict
pytest configurations (17.4), and the installed command (17.7)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from _pytest.assertion.rewrite import AssertionRewritingHook

import pytest_mlcanon
from pytest_mlcanon import cli, progress

REPO = Path(__file__).resolve().parents[1]
GOOD = REPO / "examples" / "learners" / "good"
STRICT_PYPROJECT = '[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n'


def mlcanon(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_mlcanon.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def state_folders(root: Path) -> list[str]:
    """Every ``.mlcanon`` and ``practice`` folder under ``root``, relative to it."""
    return sorted(str(p.relative_to(root)) for name in (".mlcanon", "practice") for p in root.rglob(name))


# -- 17.3 one state per learner repo ------------------------------------------------------------------------

def test_following_the_advice_from_a_subfolder_keeps_one_state(from_subfolder: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = from_subfolder
    assert cli.main(["check", "posttrain/dpo"]) == 2
    err = capsys.readouterr().err
    assert "no practice directory at ../practice/: `mlcanon drill ITEM` creates it" in err  # the repo's, shown from here
    assert cli.main(["drill", "posttrain/dpo"]) == 0  # the advice, followed from the subfolder
    assert "edit    ../practice/posttrain/dpo.py" in capsys.readouterr().out
    assert cli.main(["stubs", "--item", "transformer/attention"]) == 0
    assert "stubs in ../practice/" in capsys.readouterr().out
    assert cli.main(["reset", "posttrain/dpo"]) == 0
    assert "reset #55 posttrain/dpo: ../practice/posttrain/dpo.py is the clean stub again" in capsys.readouterr().out
    assert cli.main(["drill", "posttrain/dpo"]) == 0
    assert cli.main(["hint", "posttrain/dpo", "--level", "2"]) == 0
    assert state_folders(root) == [".mlcanon", "practice"]
    entry = json.loads((root / ".mlcanon" / "progress.json").read_text())["items"]["posttrain/dpo"]
    assert entry["clock"]["hints"] == 2  # the hint is noted on the attempt the drill started
    assert (root / "practice" / "transformer" / "attention.py").is_file()
    capsys.readouterr()
    assert cli.main(["list", "posttrain/dpo"]) == 0
    assert "running" in capsys.readouterr().out
    assert cli.main(["misslog"]) == 0
    assert "no miss log yet (../.mlcanon/misslog.md)" in capsys.readouterr().out
    assert cli.main(["plan"]) == 0


def test_the_nearest_drill_state_wins_over_the_git_root(from_subfolder: Path) -> None:
    notes = from_subfolder / "notes"
    (notes / ".mlcanon").mkdir()
    (notes / "deeper").mkdir()
    assert mlcanon("drill", "posttrain/dpo", cwd=notes / "deeper").returncode == 0
    assert state_folders(from_subfolder) == ["notes/.mlcanon", "notes/practice"]


def test_a_typed_practice_path_means_what_it_says_from_where_it_was_typed(
        from_subfolder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = from_subfolder
    assert cli.main(["drill", "posttrain/dpo", "--practice", "work"]) == 0
    assert (root / "notes" / "work" / "posttrain" / "dpo.py").is_file()
    assert json.loads((root / ".mlcanon" / "progress.json").read_text())["practice"] == "notes/work"
    monkeypatch.chdir(root)  # the remembered directory is the repo's notes/work from anywhere
    capsys.readouterr()
    assert cli.main(["reset", "posttrain/dpo"]) == 0
    assert "reset #55 posttrain/dpo: notes/work/posttrain/dpo.py is the clean stub again" in capsys.readouterr().out
    assert cli.main(["reset", "posttrain/dpo", "--practice", "notes/work"]) == 0
    assert not (root / "practice").exists() and not (root / "notes" / "notes").exists()


def test_a_timed_pytest_run_from_a_subfolder_finds_the_repos_practice_and_state(
        pytester: pytest.Pytester, learner, monkeypatch: pytest.MonkeyPatch) -> None:
    learner(copy=["posttrain/dpo"])
    (pytester.path / ".git").mkdir()
    (pytester.path / "notes").mkdir()
    monkeypatch.chdir(pytester.path / "notes")
    result = pytester.runpytest("--canon-item=55", "--timed", "-q", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["learner: *practice (discovered)", "*#55 posttrain/dpo attempt 1: passed in *"])
    assert state_folders(pytester.path) == [".mlcanon", "practice"]
    (attempt,) = json.loads((pytester.path / ".mlcanon" / "progress.json").read_text())["items"]["posttrain/dpo"][
        "attempts"]
    assert attempt["passed"] is True


def test_no_learner_directory_from_a_subfolder_points_at_the_repo_root(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    (pytester.path / ".git").mkdir()
    (pytester.path / "notes").mkdir()
    monkeypatch.chdir(pytester.path / "notes")
    result = pytester.runpytest("--canon-item=55")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no learner directory found under * or the repo root *: create "
                                 "../practice/<area>/<module>.py*"])


# -- 17.3 + 17.4: the scenario, end to end ------------------------------------------------------------------

def test_check_from_a_subfolder_of_a_strict_repo(git_repo: Path) -> None:
    """A repo whose pytest config turns warnings into errors; the learner works in ``notes/``."""
    (git_repo / "pyproject.toml").write_text(STRICT_PYPROJECT)
    notes = git_repo / "notes"
    notes.mkdir()
    assert mlcanon("drill", "transformer/attention", cwd=notes).returncode == 0
    shutil.copy(GOOD / "transformer" / "attention.py", git_repo / "practice" / "transformer" / "attention.py")
    checked = mlcanon("check", "transformer/attention", "-q", "-p", "no:cacheprovider", "-W", "error", cwd=notes)
    out = checked.stdout + checked.stderr
    assert checked.returncode == 0, out
    assert "#25 transformer/attention attempt 1: passed in " in out
    assert "Warning" not in out and "Traceback" not in out
    assert state_folders(git_repo) == [".mlcanon", "practice"]
    summary = progress.summarize(json.loads((git_repo / ".mlcanon" / "progress.json").read_text())["items"][
        "transformer/attention"])
    assert summary.attempts == 1 and summary.passes == 1


def test_pytest_may_mark_our_package_for_rewriting_after_mlcanon_imported_it(pytester: pytest.Pytester) -> None:
    """The cause of the strict-repo crash: pytest marks every top-level package of a plugin's
    distribution for assertion rewriting (a non-editable install lists ``pytest_mlcanon``) and warns
    about one imported already, as ``mlcanon check`` imports it before ``pytest.main``."""
    pytester.makepyprojecttoml(STRICT_PYPROJECT)
    hook = AssertionRewritingHook(pytester.parseconfig("-W", "error"))
    assert "pytest_mlcanon" in sys.modules
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hook.mark_rewrite("pytest_mlcanon")  # PytestAssertRewriteWarning, an error here, before the fix


# -- 17.7 install as a user would -------------------------------------------------------------------------

def test_version_comes_from_the_installed_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"mlcanon {version('pytest-mlcanon')}"
    assert version("pytest-mlcanon") == pytest_mlcanon.__version__  # one source for both


def test_the_license_is_the_one_the_metadata_names() -> None:
    from importlib.metadata import metadata

    assert "MIT" in (metadata("pytest-mlcanon")["License"] or "")
    assert (REPO / "LICENSE").read_text().startswith("MIT License")
