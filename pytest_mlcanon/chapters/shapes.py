"""Shape and broadcasting drills: thirty "given these shapes, produce that shape" problems.

The problems live in ``data/shapes.toml``. The learner writes ``solve(...)`` in a file of their own
(:meth:`Problem.stub` is its starting point); :func:`check` runs it and the problem's annotated answer
on the same random inputs, for every case of sizes the problem lists and two seeds, and compares
shape and values. Any correct spelling passes: only the result is compared, never the code.
"""

from __future__ import annotations

import textwrap
import traceback
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from pytest_mlcanon.chapters import DataError, compare, inputs, pick, table

SEEDS = (0, 1)
FUNCTION = "solve"
DEFAULT_MINUTES = 5


class ShapesError(ValueError):
    """A problem that does not exist, or an answer file that cannot be used; the message is one line."""


@dataclass(frozen=True)
class Problem:
    number: int
    name: str
    trap: str
    produce: str
    args: tuple[inputs.Arg, ...]
    cases: tuple[Mapping[str, int], ...]
    answer: str
    lesson: str
    minutes: int = DEFAULT_MINUTES

    @property
    def label(self) -> str:
        return f"shapes {self.number} {self.name}"

    @property
    def filename(self) -> str:
        """``09_gather_token_logprobs.py``: where the learner writes the answer, under ``<practice>/shapes/``."""
        return f"{self.number:02d}_{self.name.replace('-', '_')}.py"

    def given(self) -> list[str]:
        return [arg.describe() for arg in self.args]

    def stub(self) -> str:
        """The file the learner starts from: the problem in the docstring, ``solve`` to write."""
        given = "\n".join(f"    {line}" for line in self.given())
        params = ", ".join(arg.name for arg in self.args)
        return (f'"""Shape drill {self.number} of {len(problems())}: {self.name}.\n\n'
                f"Given\n{given}\nProduce\n    {self.produce}\n\n"
                f"Write one shape comment per line. Check with: mlcanon shapes {self.number} --check\n"
                '"""\n\nimport torch\nimport torch.nn.functional as F\n\n\n'
                f"def {FUNCTION}({params}):\n    raise NotImplementedError\n")


@cache
def problems() -> tuple[Problem, ...]:
    parsed = []
    for number, raw in enumerate(table("shapes", "problem"), start=1):
        where = f"shapes problem {number} ({raw.get('name', '?')})"
        missing = [k for k in ("name", "trap", "produce", "answer", "lesson") if not isinstance(raw.get(k), str)]
        if missing or not raw.get("cases"):
            raise DataError(f"{where}: missing {', '.join(missing) or 'cases'}")
        args = tuple(inputs.Arg.parse(a, where) for a in raw.get("inputs", []))
        cases = tuple(dict(case) for case in raw["cases"])
        parsed.append(Problem(number, raw["name"], raw["trap"], raw["produce"], args, cases,
                              textwrap.dedent(raw["answer"]).strip() + "\n", " ".join(raw["lesson"].split()),
                              int(raw.get("minutes", DEFAULT_MINUTES))))
    return tuple(parsed)


def get(key: str) -> Problem:
    """A problem by number (``9``), name (``gather-token-logprobs``) or a unique part of its name."""
    return pick(key, problems(), lambda p: (p.name,), what="shape drill", listing="mlcanon shapes", error=ShapesError)


def reference(problem: Problem) -> Callable[..., Any]:
    """The problem's annotated answer, as a function."""
    return _answer(problem.number)


@cache
def _answer(number: int) -> Callable[..., Any]:
    problem = problems()[number - 1]
    import torch
    import torch.nn.functional as F  # noqa: N812

    scope: dict[str, Any] = {"torch": torch, "F": F}
    exec(compile(problem.answer, f"<shapes answer {problem.number}>", "exec"), scope)  # noqa: S102 - our data
    return scope[FUNCTION]


def load_answer(path: Path, shown: str | None = None) -> Callable[..., Any]:
    """The learner's ``solve`` from ``path``; ShapesError naming ``file:line`` when it cannot be had.

    The file is compiled from its text each time (no ``__pycache__``), so an edit made within the same
    second as the last check is never masked by stale bytecode.
    """
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ShapesError(f"cannot read {shown or path}: {exc}") from None
    module = types.ModuleType("mlcanon_shapes_answer")
    module.__file__ = str(path)
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - the learner's own file
    except SyntaxError as exc:
        raise ShapesError(f"{shown or path}:{exc.lineno}: {exc.msg}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure of the learner's file is its verdict
        raise ShapesError(f"{_where(exc, path, shown)}: importing the file raised {type(exc).__name__}: "
                          f"{_first_line(exc)}") from None
    solve = getattr(module, FUNCTION, None)
    if not callable(solve):
        raise ShapesError(f"{shown or path} defines no function {FUNCTION}(...)")
    return solve


@dataclass(frozen=True)
class Verdict:
    """How the learner's answer did: ``passed``, how many inputs it was run on, and the first failure."""

    passed: bool
    runs: int
    failure: str = ""
    unimplemented: bool = False


def check(problem: Problem, solve: Callable[..., Any], path: Path | None = None, shown: str | None = None) -> Verdict:
    """Run ``solve`` and the answer on every case and seed; stop at the first disagreement.

    ``path`` is the learner's file (errors point at its deepest line), ``shown`` how to print it.
    """
    intended = reference(problem)
    runs = 0
    for case_number, dims in enumerate(problem.cases):
        for seed in SEEDS:
            values = inputs.make(problem.args, dims, np.random.default_rng(1000 * seed + case_number))
            sizes = ", ".join(f"{k}={v}" for k, v in dims.items())
            want = intended(*inputs.to_torch(values).values())
            try:
                got = solve(*inputs.to_torch(values).values())
            except NotImplementedError:
                return Verdict(False, runs, "solve(...) still raises NotImplementedError", unimplemented=True)
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - the learner's error is the verdict
                return Verdict(False, runs + 1, f"with {sizes}: your solve raised {type(exc).__name__}: "
                                                f"{_first_line(exc)} ({_where(exc, path, shown)})")
            runs += 1
            reason = compare.difference(got, want, what="your result")
            if reason:
                return Verdict(False, runs, f"with {sizes}: {reason}")
    return Verdict(True, runs)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else "(no message)"


def _where(exc: BaseException, path: Path | None, shown: str | None = None) -> str:
    """``file:line`` of the deepest frame of the traceback in the learner's file (else the deepest)."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if path is not None and Path(f.filename) == path]
    if mine:
        return f"{shown or mine[-1].filename}:{mine[-1].lineno}"
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else str(shown or path)
