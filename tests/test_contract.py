"""docs/contract.md stays true to the code: every item's **API** block names the public functions,
classes and methods of its reference with the reference's parameters (names, order, keyword-only
markers, which have defaults, and literal default values), and the conventions cite real code."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from pytest_mlcanon import catalog
from pytest_mlcanon.rubric import shape_grammar

REPO = Path(__file__).resolve().parents[1]
CONTRACT = REPO / "docs" / "contract.md"
_ITEM_HEADING = re.compile(r"(?m)^## #(\d+) ")
_SUBSECTION = re.compile(r"(?m)^### ")
_PYTHON_BLOCK = re.compile(r"```python\n(.*?)\n```", re.S)
_HEADER = re.compile(r"(?m)(?:^|;)[ \t]*(?P<kind>def|class)\s+(?P<name>\w+)")
_MODULE_IN_HEADING = re.compile(r"`(?:canon_refs/)?(\w+/\w+)\.py`")


@dataclass(frozen=True)
class Param:
    """One parameter as the contract and ``inspect`` both can state it."""

    name: str
    kind: str  # "positional", "keyword", "*args" or "**kwargs"
    default: object  # NO_DEFAULT, a literal value, or NOT_LITERAL (any default, value not compared)


NO_DEFAULT = "<required>"
NOT_LITERAL = "<default>"


@dataclass(frozen=True)
class Declared:
    """A function, or a method of a class (``owner`` set), declared in an API block."""

    modules: tuple[str, ...]
    owner: str | None
    name: str
    params: tuple[Param, ...] | None  # None for a class header

    @property
    def label(self) -> str:
        return f"{self.owner}.{self.name}" if self.owner else self.name


def _strip_comment(line: str) -> str:
    depth, quote = 0, ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "#" and depth == 0:
            return line[:i]
    return line


def _param_text(text: str, start: int) -> str:
    """The text between the parenthesis at ``start`` and its partner."""
    close = shape_grammar._closing(text, start)
    assert close > 0, f"unbalanced parameter list: {text[start:start + 80]!r}"
    return text[start + 1:close]


def _params(text: str) -> tuple[Param, ...]:
    tree = ast.parse(f"def f({text}): ...")
    args = tree.body[0].args  # type: ignore[attr-defined]
    positional = [*args.posonlyargs, *args.args]
    defaults = [NO_DEFAULT] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = [Param(a.arg, "positional", _default(d)) for a, d in zip(positional, defaults)]
    if args.vararg:
        out.append(Param(args.vararg.arg, "*args", NO_DEFAULT))
    out += [Param(a.arg, "keyword", _default(d if d is not None else NO_DEFAULT))
            for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        out.append(Param(args.kwarg.arg, "**kwargs", NO_DEFAULT))
    return tuple(out)


def _default(node: object) -> object:
    if node == NO_DEFAULT:
        return NO_DEFAULT
    try:
        return ast.literal_eval(node)  # type: ignore[arg-type]
    except ValueError:
        return NOT_LITERAL


def _declarations(block: str, modules: tuple[str, ...]) -> list[Declared]:
    """Functions, classes and methods of one API block, read from the pseudo-Python it is written in
    (signatures without bodies, several statements on a line joined by ``;``)."""
    text = "\n".join(_strip_comment(line) for line in block.splitlines())
    found: list[Declared] = []
    owner: tuple[str, int] | None = None
    for match in _HEADER.finditer(text):
        line_start = text.rfind("\n", 0, match.start("kind")) + 1
        line = text[line_start:match.start("kind")]
        indent = len(line) - len(line.lstrip())  # a statement after ";" shares its line's indent
        if owner and indent <= owner[1]:
            owner = None
        name = match.group("name")
        if match.group("kind") == "class":
            owner = (name, indent)
            found.append(Declared(modules, None, name, None))
            continue
        params = _params(_param_text(text, match.end()))
        found.append(Declared(modules, owner[0] if owner else None, name, params))
    return found


def _attributes(block: str) -> set[str]:
    """Names a block declares as attributes (``coef_: np.ndarray; intercept_: float``)."""
    text = "\n".join(_strip_comment(line) for line in block.splitlines())
    return set(re.findall(r"(?m)(?:^|;)[ \t]*(\w+):\s", text))


def _sections() -> list[tuple[int, str]]:
    text = CONTRACT.read_text()
    starts = [(int(m.group(1)), m.start()) for m in _ITEM_HEADING.finditer(text)]
    ends = [s for _, s in starts[1:]] + [len(text)]
    return [(number, text[start:end]) for (number, start), end in zip(starts, ends)]


def contract_declarations() -> dict[int, list[Declared]]:
    """Every item's declarations; a subsection whose heading names modules (``### 60.2
    `capstone/projector.py` ...``, ``### S1. Support module `canon_refs/rl/envs.py` ...``) declares
    names of those modules."""
    out: dict[int, list[Declared]] = {}
    for number, section in _sections():
        item = catalog.get(number)
        parts = _SUBSECTION.split(section)
        declared: list[Declared] = []
        for part in parts:
            heading = part.split("\n", 1)[0]
            named = tuple(_MODULE_IN_HEADING.findall(heading))
            for block in _PYTHON_BLOCK.findall(part):
                declared += _declarations(block, named or item.modules)
        out[number] = declared
    return out


def _reference(declared: Declared) -> object:
    for module in declared.modules:
        namespace = importlib.import_module(f"canon_refs.{module.replace('/', '.')}")
        target = getattr(namespace, declared.owner or declared.name, None)
        if target is None:
            continue
        if not declared.owner:
            return target
        member = inspect.getattr_static(target, declared.name, None)
        if isinstance(member, property):
            return member.fget
        return member.__func__ if isinstance(member, classmethod | staticmethod) else member
    return None


def _reference_params(function: object) -> tuple[Param, ...]:
    kinds: dict[object, str] = {inspect.Parameter.VAR_POSITIONAL: "*args", inspect.Parameter.VAR_KEYWORD: "**kwargs",
             inspect.Parameter.KEYWORD_ONLY: "keyword"}
    return tuple(Param(p.name, kinds.get(p.kind, "positional"),
                       NO_DEFAULT if p.default is inspect.Parameter.empty else p.default)
                 for p in inspect.signature(function).parameters.values())  # type: ignore[arg-type]


def _same(contract: Param, reference: Param) -> bool:
    if (contract.name, contract.kind) != (reference.name, reference.kind):
        return False
    if contract.default == NOT_LITERAL:
        return reference.default != NO_DEFAULT
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (contract.default, reference.default))
    return bool(contract.default == reference.default) and (numeric or type(contract.default) is type(reference.default))


def mismatches(declared: Declared) -> list[str]:
    where = f"{'/'.join(declared.modules) if len(declared.modules) == 1 else declared.modules}: {declared.label}"
    reference = _reference(declared)
    if reference is None:
        return [f"{where} is in the contract but not in the reference"]
    if declared.params is None:
        return [] if inspect.isclass(reference) else [f"{where} is a class in the contract, not in the reference"]
    if not callable(reference):
        return [f"{where} is not callable in the reference"]
    theirs = _reference_params(reference)
    if len(theirs) != len(declared.params) or not all(map(_same, declared.params, theirs)):
        shown = ", ".join(f"{p.name}{'' if p.default == NO_DEFAULT else '=' + repr(p.default)}" for p in theirs)
        return [f"{where}({shown}) in the reference differs from the contract"]
    return []


def _defined_here(module: ModuleType) -> list[tuple[str, str | None, object]]:
    """Public functions, classes and methods a reference module defines (``(name, owner, object)``):
    what the contract must declare. Members inherited or generated (a dataclass's ``__init__``, an
    ``nn.Module`` hook such as ``extra_repr``) are not the item's API."""
    out: list[tuple[str, str | None, object]] = []
    for name, value in vars(module).items():
        if name.startswith("_") or getattr(value, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(value):
            out.append((name, None, value))
        elif inspect.isclass(value):
            out.append((name, None, value))
            outside = {n for base in value.__mro__[1:] if not base.__module__.startswith("canon_refs")
                       for n in vars(base)} - {"__init__", "forward"}
            generated = {"__init__"} if dataclasses.is_dataclass(value) else set()
            out += [(member, name, attr) for member, attr in vars(value).items()
                    if (not member.startswith("_") or member == "__init__") and member not in outside | generated
                    and (callable(attr) or isinstance(attr, property | classmethod | staticmethod))]
    return out


def undeclared(module: str) -> list[str]:
    """Public names of a reference module that no item's API block declares (items sharing a
    module, #9 and #10 in ``optim/optimizers``, each declare their part)."""
    declared = {(d.owner, d.name) for ds in CONTRACT_DECLARATIONS.values() for d in ds if module in d.modules}
    attributes = set().union(*CONTRACT_ATTRIBUTES.values())
    namespace = importlib.import_module(f"canon_refs.{module.replace('/', '.')}")
    return [f"{module}: {owner + '.' if owner else ''}{name} is public in the reference but not in the contract"
            for name, owner, value in _defined_here(namespace)
            if (owner, name) not in declared and not (isinstance(value, property) and name in attributes)]


def _reference_modules() -> list[str]:
    return sorted({m for item in catalog.all_items() for m in item.modules} | {"rl/envs"})


CONTRACT_DECLARATIONS = contract_declarations()
CONTRACT_ATTRIBUTES = {number: set().union(*map(_attributes, _PYTHON_BLOCK.findall(section)))
                       for number, section in _sections()}


def test_every_item_has_an_api_block() -> None:
    assert sorted(CONTRACT_DECLARATIONS) == list(range(1, 61))
    assert not [n for n, declared in CONTRACT_DECLARATIONS.items() if not declared]


@pytest.mark.parametrize("number", range(1, 61), ids=lambda n: catalog.get(n).slug)
def test_api_block_matches_the_reference(number: int) -> None:
    problems = [problem for declared in CONTRACT_DECLARATIONS[number] for problem in mismatches(declared)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("module", _reference_modules())
def test_api_blocks_list_every_public_name(module: str) -> None:
    problems = undeclared(module)
    assert not problems, "\n".join(problems)


def test_a_drifted_signature_is_caught() -> None:
    declared = next(d for d in CONTRACT_DECLARATIONS[55] if d.name == "dpo_loss")
    assert declared.params is not None and not mismatches(declared)
    renamed = (Param("logits", "positional", NO_DEFAULT), *declared.params[1:])
    assert mismatches(dataclasses.replace(declared, params=renamed))
    keyword = tuple(dataclasses.replace(p, kind="keyword") for p in declared.params)
    assert mismatches(dataclasses.replace(declared, params=keyword))
    assert mismatches(dataclasses.replace(declared, name="dpo_loss_v2"))
    beta = tuple(dataclasses.replace(p, default=0.2) if p.name == "beta" else p for p in declared.params)
    assert mismatches(dataclasses.replace(declared, params=beta))


def _modules_in(cell: str) -> tuple[str, ...]:
    """``capstone/{a, b}.py`` and ``area/module.py`` cells as module paths without ``.py``."""
    out: list[str] = []
    for path in re.findall(r"`([^`]+)`", cell):
        group = re.fullmatch(r"(\w+)/\{(.*)\}\.py", path)
        out += [f"{group[1]}/{m.strip()}" for m in group[2].split(",")] if group else [path.removesuffix(".py")]
    return tuple(out)


def test_the_index_matches_the_catalog() -> None:
    index = CONTRACT.read_text().split("## Index of the 60 items", 1)[1].split("\n---", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in index.splitlines()
            if re.match(r"\| \d+ \|", line)]
    assert [int(row[0]) for row in rows] == list(range(1, 61))
    for number, title, level, modules, tests, minutes, framework in rows:
        item = catalog.get(int(number))
        assert (title, level, _modules_in(modules), tuple(re.findall(r"`([^`]+)`", tests)), int(minutes.split()[0]),
                framework) == (item.title, item.level, item.modules, item.test_files, item.minutes,
                               item.framework), item.label


def test_each_item_section_matches_the_catalog() -> None:
    for number, section in _sections():
        item = catalog.get(number)
        row = re.search(r"\|---(?:\|---)+\|\n(\|.*\|)\n", section)
        assert row is not None, item.label
        level, modules, tests, minutes, taught_in, framework = (c.strip() for c in row[1].strip("|").split("|"))
        assert (level, _modules_in(modules), tuple(re.findall(r"`([^`]+)`", tests)), int(minutes.split()[0]),
                taught_in, framework) == (item.level, item.modules, item.test_files, item.minutes, item.taught_in,
                                          item.framework), item.label


def test_c4_prints_the_grammar_the_checker_implements() -> None:
    contract = CONTRACT.read_text().split("### C4.", 1)[1].split("### C5.", 1)[0]
    printed = contract.split("Grammar (the plugin's checker implements exactly this):\n\n```\n", 1)[1].split("```", 1)[0]
    docstring = (shape_grammar.__doc__ or "").split("::\n\n", 1)[1].split("\n\n", 1)[0]
    assert printed.strip() == textwrap.dedent(docstring).strip()


def test_the_parser_reads_signatures_as_written() -> None:
    block = ("def f(a: int, b: float = 0.5, *, c: str = \"x\") -> int   # (n,)\n"
             "class K(nn.Module):\n    def __init__(self, d: int,\n                 n: int = 2) -> None\n"
             "    w: Tensor; b: Tensor\n"
             "def g(x) -> None; def h(y=(1, 2)) -> None\n")
    got = _declarations(block, ("m",))
    assert [(d.owner, d.name) for d in got] == [(None, "f"), (None, "K"), ("K", "__init__"), (None, "g"), (None, "h")]
    assert got[0].params == (Param("a", "positional", NO_DEFAULT), Param("b", "positional", 0.5),
                             Param("c", "keyword", "x"))
    assert got[2].params == (Param("self", "positional", NO_DEFAULT), Param("d", "positional", NO_DEFAULT),
                             Param("n", "positional", 2))
    assert got[4].params == (Param("y", "positional", (1, 2)),)
