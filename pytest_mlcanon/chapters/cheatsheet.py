"""The NumPy <-> PyTorch cheat sheet: one executable row per operation, with its gotcha.

The rows live in ``data/cheatsheet.toml``. Each column is the code it shows: :func:`check` runs both
on the same random inputs and says whether they agree, the project's tests run it on every row, and
``docs/cheatsheet.md`` is :func:`markdown` of the same rows, so the sheet cannot rot.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from pytest_mlcanon.chapters import DataError, compare, inputs, load, table

COMPARE_MODES = ("values", "sorted", "shape")


@dataclass(frozen=True)
class Row:
    """One operation, written in both libraries."""

    number: int
    section: str
    op: str
    numpy: str
    torch: str
    gotcha: str
    args: tuple[inputs.Arg, ...]
    compare: str = "values"
    cond: float = 1.0

    def text(self) -> str:
        """Everything a search looks in."""
        return " ".join((self.section, self.op, self.numpy, self.torch, self.gotcha)).lower()

    def given(self) -> str:
        """``x: (3, 4) float32; n: int = 5``: the inputs both columns run on."""
        return "; ".join(arg.describe() for arg in self.args)

    def matches(self, term: str) -> bool:
        """True when every word of ``term`` occurs somewhere in the row (case-insensitive)."""
        return all(word in self.text() for word in term.lower().split())


@cache
def sections() -> tuple[tuple[str, str], ...]:
    """``(key, title)`` of every section, in print order."""
    data = load("cheatsheet")
    titles = data.get("titles", {})
    return tuple((key, str(titles.get(key, key))) for key in data.get("sections", []))


@cache
def rows() -> tuple[Row, ...]:
    """Every row, in section order, then file order."""
    known = [key for key, _ in sections()]
    parsed = []
    for number, raw in enumerate(table("cheatsheet", "row"), start=1):
        where = f"cheatsheet row {number} ({raw.get('op', '?')})"
        missing = [k for k in ("section", "op", "numpy", "torch", "gotcha") if not isinstance(raw.get(k), str)]
        if missing:
            raise DataError(f"{where}: missing {', '.join(missing)}")
        if raw["section"] not in known:
            raise DataError(f"{where}: unknown section {raw['section']!r}")
        mode = str(raw.get("compare", "values"))
        if mode not in COMPARE_MODES:
            raise DataError(f"{where}: compare must be one of {', '.join(COMPARE_MODES)}")
        args = tuple(inputs.Arg.parse(a, where) for a in raw.get("inputs", []))
        parsed.append(Row(number, raw["section"], raw["op"], raw["numpy"], raw["torch"], raw["gotcha"], args, mode,
                          float(raw.get("cond", 1.0))))
    return tuple(sorted(parsed, key=lambda r: (known.index(r.section), r.number)))


def search(term: str | None) -> tuple[Row, ...]:
    """The rows matching ``term`` (all rows when it is empty)."""
    return tuple(r for r in rows() if not term or r.matches(term))


def evaluate(row: Row, seed: int = 0) -> tuple[Any, Any]:
    """Both columns of ``row`` on the same random inputs: ``(numpy_result, torch_result)``."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - the name every PyTorch user types

    values = inputs.make(row.args, {}, np.random.default_rng(seed))
    numpy_result = compare.evaluate(row.numpy, {"np": np, **values}, f"cheatsheet row {row.number}, NumPy")
    torch_result = compare.evaluate(row.torch, {"torch": torch, "F": F, **inputs.to_torch(values)},
                                    f"cheatsheet row {row.number}, PyTorch")
    return numpy_result, torch_result


def check(row: Row, seed: int = 0) -> str:
    """Why the two columns of ``row`` disagree on the inputs of ``seed`` (``""`` when they agree)."""
    numpy_result, torch_result = evaluate(row, seed)
    return compare.difference(torch_result, numpy_result, mode=row.compare, cond=row.cond, what=row.op)


def terminal(selected: tuple[Row, ...], width: int = 100) -> str:
    """The rows as the terminal shows them: a heading per section, then each row's three lines."""
    titles = dict(sections())
    out: list[str] = []
    section = None
    for row in selected:
        if row.section != section:
            section = row.section
            out.append(f"\n== {titles[section]} ==")
        out.append(f"\n{row.op}")
        if row.args:
            out.append(f"  on       {row.given()}")
        out.append(f"  NumPy    {row.numpy}")
        out.append(f"  PyTorch  {row.torch}")
        out.extend(textwrap.wrap(row.gotcha, width=width, initial_indent="  gotcha   ",
                                 subsequent_indent="           "))
    return "\n".join(out).lstrip("\n")


def markdown() -> str:
    """``docs/cheatsheet.md``: every row, one table per section."""
    out = ["# NumPy <-> PyTorch cheat sheet", "",
           "One row per operation, with the gotcha that makes the row worth having. Every row is executable: "
           "the project's tests run both columns on the same random inputs and check they agree. In the "
           "PyTorch column `F` is `torch.nn.functional`; under each operation, the inputs both columns run on. Search it from the command line with "
           "`mlcanon cheatsheet TERM`.", "",
           "Generated from `pytest_mlcanon/chapters/data/cheatsheet.toml` by `mlcanon cheatsheet --markdown`; "
           "edit the data, not this page.", ""]
    for key, title in sections():
        members = [r for r in rows() if r.section == key]
        out += [f"## {title}", "", "| operation | NumPy | PyTorch | gotcha |", "|---|---|---|---|"]
        out += [f"| {r.op}{'<br>' + _cell(r.given()) if r.args else ''} | {_code(r.numpy)} | {_code(r.torch)} | "
                f"{_cell(r.gotcha)} |" for r in members]
        out.append("")
    return "\n".join(out)


def _code(text: str) -> str:
    return f"`{_cell(text)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
