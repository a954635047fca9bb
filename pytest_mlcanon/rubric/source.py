"""A parsed Python file for the static rules: its AST, its comments by line, and import aliases.

Comments come from ``tokenize`` and structure from ``ast``; no rule reads code with a regex.
Parsing is cached by the file's content hash, so a file scored for several items (``multihead.py``
for #26 and #28) or linted again is parsed once.

``decode`` is the one reading of a learner's source bytes, shared by the rubric, the grader's static
scan, the stub checks and the plugin's instrumented import: it is Python's own (``importlib``'s
``decode_source``: a BOM or a PEP 263 coding cookie is honoured, UTF-8 otherwise), and what Python
refuses to import (an unknown or non-text codec such as ``rot13``, bytes that do not decode) it
refuses too, so no reader sees other code than the interpreter runs.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import io
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache, wraps
from pathlib import Path
from typing import Any, TypeVar

_T = TypeVar("_T")


@dataclass(frozen=True)
class Source:
    """One file: ``display`` is the path shown in findings."""

    path: Path
    display: str
    text: str
    tree: ast.Module
    comments: dict[int, str] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)

    def comment(self, line: int) -> str | None:
        """The comment on physical line ``line`` without its ``#`` and leading space, or None."""
        return self.comments.get(line)


class SourceError(ValueError):
    """The file cannot be parsed; ``line`` is where."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line


def load(path: Path, display: str | None = None) -> Source:
    """Parse ``path``; raises SourceError on a syntax error or an unreadable file."""
    parsed = _parse(*_read(path))
    return Source(path, display or str(path), *parsed)


def _read(path: Path) -> tuple[str, bytes]:
    """The file's bytes and their digest (the key of the parse caches); SourceError when unreadable."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror}") from exc
    return hashlib.sha256(raw).hexdigest(), raw


def per_source(rule: Callable[..., _T]) -> Callable[..., _T]:
    """Remember ``rule(source, *args)`` in this process for the same parse of the same file (the tree
    ``load``'s cache shares, or the item's part of it that ``ownership`` keeps) shown the same way, with
    the same other arguments (by identity): a static rule's findings depend on nothing else. A check
    computes them while it waits for its helper's last tests (``scoring.prepare``) and reads them when
    it scores. The arguments are kept with the result, so an identity is never reused under a key."""
    memo: dict[tuple[int, ...], tuple[tuple[Any, ...], _T]] = {}

    @wraps(rule)
    def remembered(source: Source, *args: Any) -> _T:
        key = (id(source.tree), hash(source.display), *map(id, args))
        hit = memo.get(key)
        if hit is not None and hit[0][0] is source.tree and hit[0][1] == source.display:
            return hit[1]
        value = rule(source, *args)
        if len(memo) >= 256:
            memo.clear()
        memo[key] = ((source.tree, source.display, *args), value)
        return value

    return remembered


def decode(raw: bytes) -> str:
    """The text Python reads from a source file's ``raw`` bytes (see the module docstring); raises
    SourceError, worded as Python's SyntaxError, where Python could not import the file."""
    try:
        return importlib.util.decode_source(raw)
    except UnicodeDecodeError as exc:
        raise SourceError(f"SyntaxError: the file is not {exc.encoding} ({exc.reason} at byte {exc.start})") from exc
    except (SyntaxError, LookupError) as exc:  # an unknown codec, or one that is not text (rot13)
        message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        raise SourceError(f"SyntaxError: encoding problem: {message}") from exc


def read_text(path: Path) -> str:
    """``path`` decoded as Python would import it; raises OSError or SourceError."""
    return decode(path.read_bytes())


def tree(path: Path) -> ast.Module:
    """Only the AST of ``path`` (the same object :func:`load` keeps for these bytes, without its comments
    and aliases, which cost three times the parse); raises SourceError as :func:`load` does."""
    return _tree(*_read(path))[1]


@lru_cache(maxsize=256)
def _tree(digest: str, raw: bytes) -> tuple[str, ast.Module]:
    text = decode(raw)
    try:
        return text, ast.parse(text)
    except SyntaxError as exc:
        raise SourceError(f"SyntaxError: {exc.msg}", exc.lineno or 0) from exc


@lru_cache(maxsize=256)
def _parse(digest: str, raw: bytes) -> tuple[str, ast.Module, dict[int, str], dict[str, str]]:
    text, parsed = _tree(digest, raw)
    return text, parsed, _comments(text), import_aliases(parsed)


def _comments(text: str) -> dict[int, str]:
    found: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                found[tok.start[0]] = tok.string[1:].strip()
    except (tokenize.TokenError, IndentationError):
        pass
    return found


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted origin for every import (``F`` -> ``torch.nn.functional``)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".", 1)[0]
                    aliases.setdefault(root, root)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def resolve(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The fully qualified dotted name of a Name/Attribute chain through the import aliases."""
    name = dotted(node)
    if name is None:
        return None
    head, _, rest = name.partition(".")
    origin = aliases.get(head)
    if origin is None:
        return None
    return f"{origin}.{rest}" if rest else origin


def call_name(call: ast.Call) -> str:
    """The last component of a call's function (``softmax`` for ``F.softmax(x)``), or ''."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


@lru_cache(maxsize=4096)
def walk(node: ast.AST) -> tuple[ast.AST, ...]:
    """``ast.walk(node)`` as a tuple, remembered per node (by identity): the rules walk the same module
    and the same functions many times, and walking was most of the rubric's time. Only for trees from
    :func:`load`, which nothing mutates (they are shared through the parse cache); a tree being
    rewritten must use ``ast.walk``."""
    return tuple(ast.walk(node))


def functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function and method in the tree."""
    return [n for n in walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def statements_with_values(tree: ast.AST) -> list[tuple[ast.stmt, ast.expr]]:
    """Assignments (plain, annotated, augmented) and returns with their value expression."""
    found: list[tuple[ast.stmt, ast.expr]] = []
    for node in walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.Return)) and node.value is not None:
            found.append((node, node.value))
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            found.append((node, node.value))
    found.sort(key=lambda pair: (pair[0].lineno, pair[0].col_offset))
    return found
