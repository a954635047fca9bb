"""The shape and broadcasting drills: thirty problems, a checker that accepts any correct answer and
rejects each problem's trap, and ``mlcanon shapes`` from a learner's repo."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from shape_answers import ALTERNATIVES, TRAPS

from pytest_mlcanon import cli
from pytest_mlcanon.chapters import shapes

SIZE_LINE = re.compile(r"^\s*[\w, ]+ = (\w+\.shape(\[-?\d+\])?( // \w+)?|\w+ // \w+|\w+)$")


def solve_from(problem: shapes.Problem, body: str) -> Callable[..., Any]:
    """A ``solve`` with the problem's parameters and ``body`` (statements separated by ``; ``)."""
    params = ", ".join(arg.name for arg in problem.args)
    scope: dict[str, Any] = {"torch": torch, "F": F}
    exec(f"def solve({params}):\n    " + body.replace("; ", "\n    "), scope)
    return scope["solve"]


def test_thirty_problems_each_naming_the_trap_it_teaches() -> None:
    problems = shapes.problems()
    assert len(problems) == 30
    assert len({p.name for p in problems}) == 30 and len({p.trap for p in problems}) == 30
    traps = " | ".join(p.trap for p in problems)
    for taught in ("keepdim", "(B,) against (B, T)", "permute", "view on a non-contiguous tensor", "einsum",
                   "gather's index"):
        assert taught in traps, taught
    assert all(p.lesson and len(p.cases) >= 2 for p in problems)


@pytest.mark.parametrize("problem", shapes.problems(), ids=lambda p: p.name)
def test_every_answer_passes_its_own_check_and_is_annotated_line_by_line(problem: shapes.Problem) -> None:
    verdict = shapes.check(problem, shapes.reference(problem))
    assert verdict.passed and verdict.runs == len(problem.cases) * len(shapes.SEEDS)
    for line in problem.answer.splitlines()[1:]:
        assert "# " in line or SIZE_LINE.match(line), f"unannotated line: {line!r}"


def test_every_problem_has_a_trap_fixture() -> None:
    assert set(TRAPS) == {p.name for p in shapes.problems()}


@pytest.mark.parametrize("name", sorted(TRAPS))
def test_the_trap_each_problem_teaches_is_rejected(name: str) -> None:
    problem = shapes.get(name)
    verdict = shapes.check(problem, solve_from(problem, TRAPS[name]))
    assert not verdict.passed and verdict.failure.startswith("with ")


@pytest.mark.parametrize("name", sorted(ALTERNATIVES))
def test_a_correct_answer_written_another_way_passes(name: str) -> None:
    problem = shapes.get(name)
    verdict = shapes.check(problem, solve_from(problem, ALTERNATIVES[name]))
    assert verdict.passed, verdict.failure


def test_problems_are_found_by_number_name_or_unique_part_of_a_name() -> None:
    assert shapes.get("9").name == shapes.get("gather-token-logprobs").name == shapes.get("gather").name
    with pytest.raises(shapes.ShapesError):
        shapes.get("31")
    with pytest.raises(shapes.ShapesError):
        shapes.get("heads")  # split-heads, merge-heads


# -- the command, as a learner runs it ---------------------------------------------------------------------

@pytest.fixture
def repo(from_subfolder: Path) -> Path:
    """The learner's repo root, the current directory a subfolder of it."""
    return from_subfolder


WRONG = """import torch


def solve(logits, tokens):
    logp = torch.log_softmax(logits, dim=-1)  # (B, T, V)
    return logp.gather(-1, tokens)  # (B, T)
"""
RIGHT = WRONG.replace("gather(-1, tokens)", "gather(-1, tokens[..., None])[..., 0]")


def test_a_wrong_then_a_right_answer_from_a_subfolder(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["shapes", "9"]) == 0
    answer = repo / "practice" / "shapes" / "09_gather_token_logprobs.py"
    assert "def solve(logits, tokens):" in answer.read_text() and "tokens: (B, T) int64 in [0, V)" in answer.read_text()
    capsys.readouterr()
    assert cli.main(["shapes", "9", "--check"]) == 1
    out = capsys.readouterr().out
    assert "not attempted yet" in out  # the untouched stub is not an attempt
    answer.write_text(WRONG)
    assert cli.main(["shapes", "9", "--check"]) == 1
    out = capsys.readouterr().out
    assert "not yet: with B=2, T=3, V=5: your solve raised RuntimeError" in out
    assert "(../practice/shapes/09_gather_token_logprobs.py:6)" in out  # as reached from notes/
    assert "The annotated answer" not in out
    answer.write_text(RIGHT)
    assert cli.main(["shapes", "9", "--check"]) == 0
    out = capsys.readouterr().out
    assert "right. Shape and values match the intended operation on 6 random inputs" in out
    assert "The trap: gather's index has as many axes as its input" in out
    assert "logp.gather(-1, tokens.unsqueeze(-1))  # (B, T, 1)" in out
    (attempt,) = json.loads((repo / ".mlcanon" / "progress.json").read_text())["shapes"]["gather-token-logprobs"][
        "attempts"]
    assert attempt["passed"] is True and attempt["checks"] == 2 and attempt["misses"] == [shapes.get("9").trap]
    assert cli.main(["shapes"]) == 0
    listing = capsys.readouterr().out
    assert re.search(r"9\s+gather-token-logprobs .* passed \(", listing)
    assert "1 of 30 passed. Next: mlcanon shapes 1" in listing
    assert not (repo / "notes" / ".mlcanon").exists()


def test_an_answer_file_that_does_not_import_is_a_failed_check(repo: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["shapes", "1"]) == 0
    (repo / "practice" / "shapes" / "01_row_normalise.py").write_text("def solve(x):\n    return x /\n")
    assert cli.main(["shapes", "1", "--check"]) == 1
    assert "not yet: ../practice/shapes/01_row_normalise.py:2: invalid syntax" in capsys.readouterr().out


def test_answer_shows_the_answer_and_notes_it(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["shapes", "21"]) == 0
    assert cli.main(["shapes", "21", "--answer"]) == 0
    assert "return x.squeeze(1)" in capsys.readouterr().out
    entry = json.loads((repo / ".mlcanon" / "progress.json").read_text())["shapes"]["drop-the-singleton"]
    assert entry["clock"]["hints"] == 3


@pytest.mark.parametrize("argv", [["shapes", "31"], ["shapes", "--check"], ["shapes", "5", "--check"],
                                  ["shapes", "nonsense"], ["shapes", "heads"]])
def test_bad_input_is_one_line_and_exit_2(repo: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mlcanon shapes: ") and err.count("\n") == 1
