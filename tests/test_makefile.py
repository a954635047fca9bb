"""The seed's commands: ``mlcanon makefile`` and its ``make stubs/drill/check/reset ITEM=...`` targets."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_mlcanon import cli, makefile, stubs

REPO = Path(__file__).resolve().parents[1]
GOOD_DPO = REPO / "examples" / "learners" / "good" / "posttrain" / "dpo.py"
MLCANON = f"MLCANON={sys.executable} -m pytest_mlcanon.cli"


@pytest.fixture
def repo(from_subfolder: Path) -> Path:
    """The learner's repo root, the current directory a subfolder of it."""
    return from_subfolder


def make(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "--no-print-directory", MLCANON, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_the_makefile_goes_to_the_repo_root_and_never_clobbers(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["makefile"]) == 0
    written = (repo / "Makefile").read_text()
    assert written == makefile.text() and written.startswith(makefile.MARKER)
    for target in ("stubs:", "drill: _item", "check: _item", "reset: _item"):
        assert f"\n{target}\n\t$(MLCANON) " in written
    assert cli.main(["makefile"]) == 0 and "up to date" in capsys.readouterr().out
    (repo / "Makefile").write_text("all:\n\techo mine\n")
    assert cli.main(["makefile"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err and "include mlcanon.mk" in err
    assert (repo / "Makefile").read_text() == "all:\n\techo mine\n"
    assert cli.main(["makefile", "--out", "mlcanon.mk"]) == 0 and (repo / "mlcanon.mk").read_text() == written
    assert cli.main(["makefile", "--force"]) == 0 and (repo / "Makefile").read_text() == written


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_drill_check_reset_with_item_as_in_the_seed(repo: Path) -> None:
    assert cli.main(["makefile"]) == 0
    listed = make(cwd=repo)
    assert listed.returncode == 0 and "make check ITEM=transformer/multihead" in listed.stdout
    missing = make("check", cwd=repo)
    assert missing.returncode == 2 and "make check: say which item" in missing.stderr
    assert make("drill", "ITEM=posttrain/dpo", cwd=repo).returncode == 0
    target = repo / "practice" / "posttrain" / "dpo.py"
    assert stubs.unimplemented(target)
    shutil.copy(GOOD_DPO, target)
    checked = make("check", "ITEM=posttrain/dpo", cwd=repo)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr
    assert "#55 posttrain/dpo attempt 1: passed in " in checked.stdout
    assert make("reset", "ITEM=posttrain/dpo", cwd=repo).returncode == 0
    assert stubs.unimplemented(target) and list((repo / ".mlcanon" / "attempts").glob("*/posttrain/dpo.py"))
    stubbed = make("stubs", "PRACTICE=elsewhere", cwd=repo)
    assert stubbed.returncode == 0 and stubs.unimplemented(repo / "elsewhere" / "detection" / "nms.py")
