"""The project's own files agree with each other: README commands, .ci/run, the constraints file."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    setup = text.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", setup)


def test_readme_has_exactly_two_setup_commands() -> None:
    commands = _readme_commands()
    assert len(commands) == 2
    assert all("\n" not in c for c in commands)
    assert "--impl=examples/learners/good" in commands[0]


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci/run").read_text()
    test_command = _readme_commands()[1]
    install, _, run = test_command.rpartition(" && ")
    assert install in ci, "the README's install step is not what CI runs"
    assert ci.rstrip().endswith(run), "CI must end by running the README's test command"


def test_ci_pins_the_cpu_torch_wheel() -> None:
    pins = [line for line in (REPO / "ci/constraints.txt").read_text().splitlines() if not line.startswith("#")]
    assert pins == ["torch==2.13.0+cpu"]  # the CPU build by name: on a plain PyPI index this fails, never pulls CUDA
    assert "-c ci/constraints.txt" in (REPO / ".ci/run").read_text()


def _pip_installs(text: str) -> list[str]:
    """Each ``pip install`` command in ``text`` (a README code block or a workflow's folded ``run``),
    joined onto one line."""
    joined = re.sub(r"\n\s+(?=[-\"'.~/\w&])", " ", text)
    return [m.group(0) for m in re.finditer(r"pip install [^\n`]+", joined)]


def test_every_documented_install_works_where_the_package_is_not_on_an_index() -> None:
    """pytest-mlcanon is not on PyPI: every install the README or the teacher's workflow gives is from
    a path (a checkout or a built wheel), with the CPU torch constraint (17.7)."""
    readme = (REPO / "README.md").read_text()
    workflow = (REPO / "examples/teacher/.github/workflows/grade.yml").read_text()
    installs = _pip_installs(readme) + _pip_installs(workflow)
    assert len(installs) >= 5
    for command in installs:
        assert "-c " in command and "constraints.txt" in command, command
        assert not re.search(r"pip install[^/]*\s[\"']?pytest-mlcanon\b", command), command  # from an index
    assert workflow.count("rm -rf .pytest-mlcanon") == 1  # no second, unprotected copy of the canon in the jobs
