"""Calibration of the five-axis rubric against a labelled corpus of learner submissions (issue 7, item 4).

Each directory ``tests/rubric_cases/<case>/`` is a learner directory laid out ``<area>/<module>.py``
with a ``labels.toml`` beside it::

    item = "transformer/attention"                 # the canon item the case is scored on
    why = "one line: what is deliberately wrong (or right) with it"
    timed = "strict"                               # optional: run with --timed=strict
    requires = ["scipy"]                           # optional: modules the case imports
    rubric_bug = "..."                             # optional: a known rubric bug makes the case disagree
    rubric_bug_axis = "api"                        #   ... on this axis, and on no other

    [timer]                                        # optional, with timed: the drill clock
    started_min_ago = 240                          # written to .mlcanon/progress.json before the run

    [expected]                                     # the truth on each axis, decided by reading the code
    correctness = true
    shapes = true
    numerics = false
    api = true
    explanation = true

A case that differs from another case by a few lines holds no copy of its files: ``base = "<case>"``
names a case of plain files, and ``patch.diff`` beside the labels is the difference (``diff -u``
run from the base's directory, see ``tests/patching.py``, shared with the canon's broken variants).
A patch that no longer applies fails the case, naming it and the hunk. One set of files scored
under several settings (untimed, timed, stalled) is one case with a ``[[run]]`` table per run: each
has a ``name`` and the keys above other than ``item``, ``base`` and ``requires``, and its test id is
``<case>.<name>``. No two cases hold the same files.

``test_case_agrees_with_its_labels`` runs every case through the plugin (in-process, with pytester)
and asserts exact agreement on all five axes. A case with a ``rubric_bug`` keeps its true labels and
is an expected failure (xfail) as long as the rubric disagrees on ``rubric_bug_axis`` and on nothing
else; once the rule is fixed the test fails with "remove rubric_bug", so the note cannot go stale.

The agreement table (cases x axes, agreement per axis) is printed by::

    python -m tests.test_calibration                  # every case, through this test file, 2 workers
    python -m tests.test_calibration -j 4 --codes knn # cases whose name contains "knn", with finding codes
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_mlcanon import catalog

if __package__:  # python -m tests.test_calibration
    from .patching import apply_patch, patched_files
else:  # under pytest, tests/ is on sys.path (a rootdir conftest and no __init__.py)
    from patching import apply_patch, patched_files

pytestmark = pytest.mark.slow  # the fast lane, pytest -m "not slow", leaves it out (CONTRIBUTING.md)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

AXES = ("correctness", "shapes", "numerics", "api", "explanation")
SHORT = {"correctness": "COR", "shapes": "SHP", "numerics": "NUM", "api": "API", "explanation": "EXP"}
CASES_DIR = Path(__file__).resolve().parent / "rubric_cases"
PATCH = "patch.diff"  # a case with a base: its difference from that case's files
REPORT_NAME = "calibration-report.json"
OUT_ENV = "MLCANON_CALIBRATION_OUT"  # set by main(): each case also writes what the rubric said there


@dataclass(frozen=True)
class Case:
    """One labelled run: a case's learner directory scored under one setting."""

    name: str
    path: Path
    item: str
    expected: dict[str, bool]
    why: str
    timed: str | None = None
    started_min_ago: float | None = None
    requires: tuple[str, ...] = ()
    rubric_bug: str = ""
    rubric_bug_axis: str = ""
    base: str = ""

    @property
    def missing_requirements(self) -> list[str]:
        return [m for m in self.requires if importlib.util.find_spec(m) is None]

    @property
    def files(self) -> set[str]:
        """The learner files of the case, relative to its directory (``classical/pca.py``)."""
        if self.base:
            return _plain_files(CASES_DIR / self.base) | set(patched_files(self.path / PATCH))
        return _plain_files(self.path)


@dataclass
class Observed:
    """What the rubric said about one case: the five axes and the finding codes behind each."""

    axes: dict[str, bool] = field(default_factory=dict)
    codes: dict[str, list[str]] = field(default_factory=dict)
    error: str = ""
    seconds: float = 0.0


def _plain_files(directory: Path) -> set[str]:
    return {p.relative_to(directory).as_posix() for p in directory.rglob("*.py")}


def _run(table: dict[str, Any], where: str, *, name: str, path: Path, item: str, requires: tuple[str, ...],
         base: str) -> Case:
    """One run's labels (the whole file of a single-run case, or one ``[[run]]`` table)."""
    expected = table.get("expected", {})
    if set(expected) != set(AXES) or not all(isinstance(v, bool) for v in expected.values()):
        raise ValueError(f"{where}: [expected] needs exactly {AXES} as true/false, got {expected}")
    if not isinstance(table.get("why"), str) or not table["why"].strip():
        raise ValueError(f"{where}: `why` must be a non-empty string")
    timed = table.get("timed")
    if timed not in (None, "report", "strict"):
        raise ValueError(f"{where}: timed must be 'report' or 'strict', got {timed!r}")
    timer = table.get("timer", {})
    if bool(timed) != ("started_min_ago" in timer):
        raise ValueError(f"{where}: a timed case needs [timer] started_min_ago, and only a timed one")
    bug, bug_axis = table.get("rubric_bug", ""), table.get("rubric_bug_axis", "")
    if bool(bug) != bool(bug_axis) or (bug_axis and bug_axis not in AXES):
        raise ValueError(f"{where}: rubric_bug needs rubric_bug_axis (one of {AXES}) and vice versa")
    return Case(name=name, path=path, item=item, expected=dict(expected), why=table["why"].strip(), timed=timed,
                started_min_ago=timer.get("started_min_ago"), requires=requires, rubric_bug=bug,
                rubric_bug_axis=bug_axis, base=base)


def load_case(path: Path) -> list[Case]:
    """The runs of the case in ``path`` (one unless it has ``[[run]]`` tables); a malformed label file or
    a base that is not a case of plain files is an error naming the case."""
    where = f"{path.name}/labels.toml"
    data = tomllib.loads((path / "labels.toml").read_text(encoding="utf-8"))
    if not isinstance(data.get("item"), str) or not data["item"].strip():
        raise ValueError(f"{where}: `item` must be a non-empty string")
    base = data.get("base", "")
    if base:
        if not (path / PATCH).is_file() or _plain_files(path):
            raise ValueError(f"{where}: a case with a base holds {PATCH} and no .py file")
        if not (CASES_DIR / base / "labels.toml").is_file() or (CASES_DIR / base / PATCH).exists():
            raise ValueError(f"{where}: base {base!r} must be a case of plain files in {CASES_DIR.name}/")
    elif (path / PATCH).exists():
        raise ValueError(f"{where}: {PATCH} needs `base`, the case it patches")
    shared = {"name": path.name, "path": path, "item": data["item"], "requires": tuple(data.get("requires", ())),
              "base": base}
    runs = data.get("run")
    if runs is None:
        return [_run(data, where, **shared)]
    if set(data) - {"item", "base", "requires", "run"}:
        raise ValueError(f"{where}: with [[run]] tables, only item, base and requires stay at the top")
    names = [run.get("name") for run in runs]
    if len(runs) < 2 or not all(isinstance(n, str) and n.isidentifier() for n in names) or len(set(names)) < len(names):
        raise ValueError(f"{where}: give two or more [[run]] tables, each a distinct identifier as `name`")
    return [_run({k: v for k, v in run.items() if k != "name"}, f"{where} run {run['name']!r}",
                 **{**shared, "name": f"{path.name}.{run['name']}"}) for run in runs]


def load_cases(directory: Path = CASES_DIR) -> list[Case]:
    """Every run of every case directory, sorted by case name."""
    if not directory.is_dir():
        return []
    return [run for p in sorted(directory.iterdir()) if (p / "labels.toml").is_file() for run in load_case(p)]


def write_learner_dir(case: Case, into: Path) -> Path:
    """Lay the case's learner directory out in ``into``: its files, or its base's with its patch applied."""
    shutil.copytree(CASES_DIR / case.base if case.base else case.path, into, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("labels.toml", "__pycache__"))
    if case.base:
        apply_patch(case.path / PATCH, into)
    return into


def canon_args(case: Case, impl: Path, report: Path) -> list[str]:
    """The pytest arguments that score one case laid out in ``impl``."""
    args = [f"--canon-item={case.item}", f"--impl={impl}", f"--canon-report=json:{report}",
            "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    if case.timed:
        args.append(f"--timed={case.timed}")
    return args


def prepare(case: Case, workdir: Path, now: float | None = None) -> None:
    """Start the case's drill clock ``started_min_ago`` minutes back, where it asks for one.

    Timed cases without a clock would be timed from the files' creation, which depends on when the
    repository was cloned; the clock written here makes them deterministic.
    """
    if case.started_min_ago is None:
        return
    start = (time.time() if now is None else now) - 60.0 * float(case.started_min_ago)
    state = workdir / ".mlcanon"
    state.mkdir(parents=True, exist_ok=True)
    clock = {"attempt": 1, "start": start, "source": "drill"}
    (state / "progress.json").write_text(json.dumps({"version": 1, "items": {case.item: {"clock": clock,
                                                                                          "attempts": []}}}))


def observe(case: Case, report: Path, output: str = "") -> Observed:
    """The five axes of the case's item from the JSON report (an unscored item is an error)."""
    if not report.is_file():
        return Observed(error=f"no report written:\n{output[-3000:]}")
    data = json.loads(report.read_text(encoding="utf-8"))
    items = [i for i in data["items"] if i["slug"] == case.item]
    if not items:
        return Observed(error=f"{case.item} is not in the report")
    (item,) = items
    if item["status"] != "scored":
        return Observed(error=f"{case.item} was not scored: {item['status']}: {item.get('error', '')}")
    axes = {axis: bool(item["axes"][axis]["passed"]) for axis in AXES}
    codes = {axis: sorted({f["code"] for f in item["axes"][axis]["findings"]}) for axis in AXES}
    return Observed(axes, codes)


def disagreeing_axes(case: Case, seen: Observed) -> list[str]:
    """The axes on which the rubric and the labels differ (all of them when the item was not scored)."""
    if seen.error:
        return list(AXES)
    return [axis for axis in AXES if seen.axes[axis] != case.expected[axis]]


def disagreement(case: Case, seen: Observed) -> str:
    """``""`` when every axis agrees with the labels, else one line per disagreeing axis."""
    if seen.error:
        return f"{case.name}: {seen.error}"
    lines = [f"  {axis}: labelled {case.expected[axis]}, rubric says {seen.axes[axis]} "
             f"(findings: {', '.join(seen.codes[axis]) or 'none'})"
             for axis in disagreeing_axes(case, seen)]
    if not lines:
        return ""
    if case.rubric_bug:
        lines.append(f"  known rubric bug on {case.rubric_bug_axis}: {case.rubric_bug}")
    return "\n".join([f"{case.name} ({case.item}): {case.why}", *lines])


# -- the test ----------------------------------------------------------------------------------------



def test_corpus_is_large_and_varied() -> None:
    cases = load_cases()
    assert len(cases) >= 40, f"only {len(cases)} labelled cases"
    assert len({c.item for c in cases}) >= 12
    for axis in AXES:
        assert any(c.expected[axis] for c in cases) and any(not c.expected[axis] for c in cases), axis
    assert any(all(c.expected.values()) for c in cases), "no perfect case"
    assert any(c.timed == "strict" and not c.expected["api"] for c in cases), "no stalled timed attempt"
    for case in cases:
        item = catalog.get(case.item)
        missing = [m for m in item.modules if f"{m}.py" not in case.files]
        assert not missing, f"{case.name} lacks {missing}: the item would be 'not attempted'"


_EXPECTED = "[expected]\n" + "".join(f"{axis} = true\n" for axis in AXES)
_RUN = 'why = "clean"\n' + _EXPECTED.replace("[expected]", "[run.expected]")


@pytest.mark.parametrize(("labels", "patch", "error"), [
    ('item = "rl/gae"\nbase = "gae_nowhere"\nwhy = "w"\n' + _EXPECTED, True,
     "base 'gae_nowhere' must be a case of plain files"),
    ('item = "rl/gae"\nbase = "gae_perfect"\nwhy = "w"\n' + _EXPECTED, False, "holds patch.diff and no .py file"),
    ('item = "rl/gae"\nwhy = "w"\n' + _EXPECTED, True, "patch.diff needs `base`"),
    ('item = "rl/gae"\n' + ('[[run]]\nname = "untimed"\n' + _RUN) * 2, False, "each a distinct identifier"),
    ('item = "rl/gae"\nwhy = "w"\n[[run]]\nname = "a"\n' + _RUN + '[[run]]\nname = "b"\n' + _RUN, False,
     "only item, base and requires stay at the top"),
], ids=["unknown base", "base without patch", "patch without base", "runs of one name", "shared why"])
def test_a_malformed_case_is_an_error_naming_it(tmp_path: Path, labels: str, patch: bool, error: str) -> None:
    case = tmp_path / "gae_broken"
    case.mkdir()
    (case / "labels.toml").write_text(labels)
    if patch:
        (case / PATCH).write_text("")
    with pytest.raises(ValueError, match=re.escape("gae_broken/labels.toml: ")) as failure:
        load_case(case)
    assert error in str(failure.value)


def test_no_two_cases_hold_the_same_files(tmp_path: Path) -> None:
    """One set of files scored under several settings is one case with ``[[run]]`` tables; every patch applies."""
    holder: dict[tuple[tuple[str, str], ...], str] = {}
    for case in {c.path.name: c for c in load_cases()}.values():
        impl = write_learner_dir(case, tmp_path / case.path.name)
        files = tuple((name, hashlib.sha256((impl / name).read_bytes()).hexdigest()) for name in sorted(case.files))
        assert files not in holder, f"{case.path.name} holds the same files as {holder[files]}: make it a [[run]] there"
        holder[files] = case.path.name


@pytest.mark.parametrize("case", load_cases(), ids=lambda c: c.name)
def test_case_agrees_with_its_labels(pytester: pytest.Pytester, case: Case, tmp_path: Path) -> None:
    if case.missing_requirements:
        pytest.skip(f"needs {', '.join(case.missing_requirements)}")
    impl = write_learner_dir(case, tmp_path / case.name)
    prepare(case, pytester.path)
    report = pytester.path / REPORT_NAME
    started = time.perf_counter()
    result = pytester.runpytest(*canon_args(case, impl, report))
    seen = observe(case, report, result.stdout.str())
    seen.seconds = time.perf_counter() - started
    if os.environ.get(OUT_ENV):
        (Path(os.environ[OUT_ENV]) / f"{case.name}.json").write_text(json.dumps(asdict(seen)))
    wrong = disagreeing_axes(case, seen)
    if case.rubric_bug:
        assert wrong, f"{case.name}: the rubric now agrees on every axis: remove rubric_bug from its labels.toml"
        if wrong == [case.rubric_bug_axis]:
            pytest.xfail(f"known rubric bug on {case.rubric_bug_axis}: {case.rubric_bug}")
    problem = disagreement(case, seen)
    assert not problem, f"{problem}\n\n{result.stdout.str()[-4000:]}"


# -- the agreement table -------------------------------------------------------------------------------

def agreement_table(cases: Sequence[Case], seen: Sequence[Observed], codes: bool = False) -> str:
    """Cases x axes, then the agreement share of each axis.

    A cell is the label (``yes``/``NO``) when the rubric agrees, ``MISS label/rubric`` when it does
    not, with a ``*`` when the case documents that disagreement as a known rubric bug. ``codes``
    adds the finding codes behind each failing axis.
    """
    width = max([len(c.name) for c in cases] + [9])
    head = f"{'case':<{width}}  {'item':<30}" + "".join(f"  {SHORT[a]:<13}" for a in AXES)
    lines = [head, "-" * len(head)]
    agree = dict.fromkeys(AXES, 0)
    scored = 0
    for case, obs in zip(cases, seen):
        if obs.error:
            lines.append(f"{case.name:<{width}}  {case.item:<30}  ERROR {obs.error.splitlines()[0][:80]}")
            continue
        scored += 1
        cells = []
        for axis in AXES:
            want, got = case.expected[axis], obs.axes[axis]
            agree[axis] += want == got
            label = "yes" if want else "NO"
            if want == got:
                cell = label
            else:
                star = "*" if case.rubric_bug_axis == axis else ""
                cell = f"MISS{star} {label}/{'yes' if got else 'NO'}"
            cells.append(f"  {cell:<13}")
        row = f"{case.name:<{width}}  {case.item:<30}" + "".join(cells)
        if codes:
            row += "  " + " ".join(c for a in AXES for c in obs.codes[a])
        lines.append(row.rstrip())
    lines.append("-" * len(head))
    per_axis = "".join(f"  {f'{100.0 * agree[a] / scored if scored else 0.0:.1f}%':<13}" for a in AXES)
    lines.append(f"{'agreement':<{width}}  {f'{scored} cases':<30}" + per_axis)
    total = sum(agree.values())
    lines.append(f"overall: {total}/{scored * len(AXES)} axis labels agree "
                 f"({100.0 * total / (scored * len(AXES)) if scored else 0.0:.1f}%); "
                 "MISS cells read label/rubric, * marks a documented rubric bug")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the calibration test in a subprocess, then print the agreement table from what each case saw.

    Exit status 1 when a case disagrees with its labels other than by its documented rubric bug.
    """
    parser = argparse.ArgumentParser(prog="python -m tests.test_calibration",
                                     description="Score the calibration corpus and print the agreement table.")
    parser.add_argument("filters", nargs="*", help="only the cases whose name contains one of these")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="pytest-xdist workers (default 2; 1 = none)")
    parser.add_argument("--codes", action="store_true", help="also show the finding codes of each case")
    args = parser.parse_args(argv)
    cases = [c for c in load_cases() if not args.filters or any(f in c.name for f in args.filters)]
    cases = [c for c in cases if not c.missing_requirements]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mlcanon-calibration-") as out:
        selection = " or ".join(f"[{c.name}]" for c in cases) or "nothing"
        command = [sys.executable, "-m", "pytest", str(Path(__file__).resolve()), "-q", "-p", "no:cacheprovider",
                   "-k", f"test_case_agrees_with_its_labels and ({selection})"]
        if args.jobs > 1 and importlib.util.find_spec("xdist") is not None:
            command += ["-n", str(args.jobs)]
        proc = subprocess.run(command, cwd=CASES_DIR.parents[1], env={**os.environ, OUT_ENV: out},
                              capture_output=True, text=True)
        seen = []
        for case in cases:
            record = Path(out) / f"{case.name}.json"
            seen.append(Observed(**json.loads(record.read_text())) if record.is_file()
                        else Observed(error=f"did not run; pytest said: {proc.stdout.strip()[-300:]}"))
    print(agreement_table(cases, seen, codes=args.codes))
    slowest = sorted(zip(cases, seen), key=lambda pair: -pair[1].seconds)[:5]
    print("slowest: " + ", ".join(f"{c.name} {o.seconds:.1f} s" for c, o in slowest))
    print(f"wall time {time.perf_counter() - started:.0f} s for {len(cases)} cases, {args.jobs} worker(s)")
    unexpected = 0
    for case, obs in zip(cases, seen):
        problem = disagreement(case, obs)
        if problem:
            print(problem)
            unexpected += disagreeing_axes(case, obs) != [case.rubric_bug_axis]
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
