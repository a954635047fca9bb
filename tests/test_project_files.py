"""The project's own files agree with each other: README commands, .ci/run, the constraints file."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

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


def _workflow_jobs(text: str) -> dict[str, list[dict[str, Any]]]:
    """The steps of each job of a GitHub workflow, for the YAML this repository writes (pyyaml is no
    test dependency): ``key: value``, folded ``key: >`` blocks and one nested map (``with:``)."""
    jobs: dict[str, list[dict[str, Any]]] = {}
    lines = [line for line in text.split("\n") if line.strip() and not line.lstrip().startswith("#")]
    section, steps, step, block, nested = "", None, None, None, None
    for line in lines:
        indent, body = len(line) - len(line.lstrip()), line.strip()
        if indent == 0:
            section = body.rstrip(":")
            continue
        if section != "jobs":
            continue
        if indent == 2:
            steps = jobs.setdefault(body.rstrip(":"), [])
            step = block = nested = None
        elif block is not None and indent > block[1]:
            step[block[0]] = f"{step[block[0]]} {body}".strip()  # a folded (>) scalar: lines joined by spaces
        elif steps is not None and body.startswith("- ") and indent == 6:
            step, block, nested = {}, None, None
            steps.append(step)
            body, indent = body[2:], indent + 2
            key, _, value = body.partition(":")
            step[key.strip()] = value.strip()
        elif step is not None and indent == 8:
            key, _, value = body.partition(":")
            key, value = key.strip(), value.strip()
            block = (key, indent) if value in (">", "|") else None
            nested = {} if not value else None
            step[key] = nested if nested is not None else "" if block else value
        elif nested is not None and indent == 10:
            key, _, value = body.partition(":")
            nested[key.strip()] = value.strip()
    return jobs


#: Where the workflow checks the repository out, and where the README's commands have the clone.
CHECKOUT, CLONE = ".pytest-mlcanon", "~/src/pytest-mlcanon"


def _readme_teacher_install() -> list[str]:
    teachers = (REPO / "README.md").read_text().split("\n## Teachers", 1)[1]
    [command] = [c for c in re.findall(r"```bash\n(.+?)\n```", teachers, re.S) if c.startswith("pip install")][:1]
    return shlex.split(command)


def test_the_teacher_workflow_installs_as_the_readme_says() -> None:
    """Each job of the example workflow that installs pytest-mlcanon checks the repository out and runs
    the README's teacher install on that checkout: the same command, word for word, but the path."""
    jobs = _workflow_jobs((REPO / "examples/teacher/.github/workflows/grade.yml").read_text())
    assert set(jobs) == {"grade", "merge"}
    readme = _readme_teacher_install()
    assert readme[:2] == ["pip", "install"] and "-c" in readme and "https://download.pytorch.org/whl/cpu" in readme
    for name, steps in jobs.items():
        runs = [step.get("run", "") for step in steps]
        [index] = [i for i, run in enumerate(runs) if run.startswith("pip install")]
        install = shlex.split(runs[index].split("&&")[0])
        assert [word.replace(f"./{CHECKOUT}", CLONE).replace(CHECKOUT, CLONE) for word in install] == readme, name
        checkouts = [s for s in steps[:index] if s.get("uses", "").startswith("actions/checkout@")
                     and s.get("with", {}).get("path") == CHECKOUT]
        assert [c["with"]["repository"] for c in checkouts] == ["${{ env.MLCANON_REPOSITORY }}"], name
    grade = jobs["grade"]
    [command] = [s["run"] for s in grade if "mlcanon grade" in s.get("run", "")]
    assert command.startswith('sudo -E env "PATH=$PATH" mlcanon grade submissions')
    out = command.split(" --out ", 1)[1].split(" --", 1)[0]  # gradebook-${{ matrix.shard }}
    uploads = [s for s in grade if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert [u["with"]["path"] for u in uploads] == [out]  # the upload step reads what the grader wrote


def test_the_readme_explains_every_level_of_the_catalog() -> None:
    """The README says what each level of `mlcanon list` means, and how many items have it."""
    from pytest_mlcanon import catalog

    readme = (REPO / "README.md").read_text()
    counts = {level: sum(1 for i in catalog.all_items() if i.level == level) for level in ("A", "B")}
    assert {i.level for i in catalog.all_items()} == set(counts)
    assert f"a **level A** item ({counts['A']} of the sixty:" in readme
    assert "with no reference at all" in readme.split("**level A**")[1].split("**level B**")[0]
    assert f"**level B** item ({counts['B']}:" in readme
    assert "chapter open the first two\ntimes" in readme
    for slug, level in (("classical/linear_regression", "A"), ("transformer/attention", "A"), ("posttrain/dpo", "A"),
                        ("classical/kmeans", "B"), ("detection/nms", "B"), ("posttrain/grpo", "B")):
        assert catalog.get(slug).level == level  # the README's examples
