"""Signature-only stubs and shape-commented skeletons, made from ``canon_refs`` by AST.

A **stub** keeps what a learner must match and nothing they should produce themselves: the
imports, the public functions and classes with their exact signatures, type hints, decorators and
docstrings, dataclass fields and class constants; every body becomes ``raise NotImplementedError``.
The module docstring is reduced to the reference's title and a TODO, because writing the plan is
part of the drill (the Explanation axis reads it). Private helpers are dropped unless something
kept refers to them. Source text is copied line by line from the reference rather than
regenerated, so signatures keep their layout.

A **skeleton** (``mlcanon hint ITEM --level 3``) is a step further: the signatures, each
docstring's first line, and for every shape line of the reference its target and shape comment
with the expression elided (``margin = ...  # (B,)``), inside the loops and branches that hold them.

:func:`unimplemented` tells a stub still untouched from a started attempt, so the plugin can say
"not implemented yet" instead of running every reference test into a wall of tracebacks.
"""

from __future__ import annotations

import ast
import copy
import io
import re
import tokenize
from collections.abc import Iterable, Sequence
from pathlib import Path

from pytest_mlcanon import catalog
from pytest_mlcanon.redirect import reference_dir, untouched_stub
from pytest_mlcanon.rubric import source

STUB_MESSAGE = "not implemented yet"
#: Comments under the stub's docstring say what the rubric reads, so no axis asks for anything the
#: stub does not announce. Comments, not docstring text: an untouched stub must not pass Explanation.
STUB_RUBRIC_NOTE = (
    "# What the rubric reads: in the docstring above, your plan (what the module computes and its subtle",
    "# point, the shapes, a trade-off: why this way rather than another, and what you would test); a",
    "# docstring on every public function; a shape comment at the end of every line that creates,",
    "# reshapes, contracts or reduces a tensor: `scores = q @ k.transpose(-2, -1)  # (B, H, T_q, T_k)`.",
)
_SHAPE_COMMENT = re.compile(r"#\s*(\(|list\[|scalar\b)")
_MAX_TITLE_WORDS = 12
_AUG_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
            ast.Pow: "**", ast.MatMult: "@", ast.BitOr: "|", ast.BitAnd: "&"}


class NoReferenceError(LookupError):
    """The canon has no reference module to build a stub or skeleton from (yet)."""


def reference_file(module: str) -> Path | None:
    """``canon_refs/<area>/<module>.py`` when the installed canon has it."""
    path = reference_dir() / f"{module}.py"
    return path if path.is_file() else None


def has_reference(item: catalog.Item) -> bool:
    """True when every module of the item has a reference (so a full stub can be made)."""
    return all(reference_file(m) is not None for m in item.modules)


class _Source:
    """A reference module's text, lines and tree, with whole-line segments by node."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.text = path.read_text(encoding="utf-8")
        self.lines = self.text.splitlines()
        self.tree = ast.parse(self.text, filename=str(path))

    def segment(self, node: ast.AST) -> list[str]:
        start, end = node.lineno, node.end_lineno or node.lineno  # type: ignore[attr-defined]
        return self.lines[start - 1:end]

    def header(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> list[str]:
        """Decorators and the ``def``/``class`` line(s), verbatim."""
        first = min([d.lineno for d in node.decorator_list] + [node.lineno])
        body_start = node.body[0].lineno
        if body_start > node.lineno:
            return self.lines[first - 1:body_start - 1]
        # a one-line definition (``def f(): ...``): rebuild its header from the tree
        bare = copy.copy(node)
        bare.body = [ast.Pass()]
        indent = " " * node.col_offset
        return [indent + line for line in ast.unparse(bare).splitlines()[:-1]]

    def docstring(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> list[str]:
        first = node.body[0]
        if _is_docstring(first):
            return self.segment(first)
        return []

    def source(self, node: ast.AST) -> str:
        """The exact source text of an expression (``ast.unparse`` would add parentheses to tuples)."""
        return ast.get_source_segment(self.text, node) or ast.unparse(node)

    def comments(self) -> dict[int, str]:
        """Line number -> the comment on that line."""
        found: dict[int, str] = {}
        for tok in tokenize.generate_tokens(io.StringIO(self.text).readline):
            if tok.type == tokenize.COMMENT:
                found[tok.start[0]] = tok.string
        return found


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _is_public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _body_indent(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    return " " * node.body[0].col_offset


def _names_used(nodes: Iterable[ast.AST]) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def _signature_parts(node: ast.AST) -> list[ast.AST]:
    """The parts of a definition evaluated when the module is imported."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args
        return [*node.decorator_list, *args.defaults, *(d for d in args.kw_defaults if d is not None)]
    if isinstance(node, ast.ClassDef):
        kept = [s for s in node.body if isinstance(s, (ast.Assign, ast.AnnAssign))]
        methods = [s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        return [*node.decorator_list, *node.bases, *node.keywords, *kept,
                *(p for m in methods for p in _signature_parts(m))]
    return [node]


# -- stubs ----------------------------------------------------------------------------------------------

def stub_source(module: str) -> str:
    """The stub of ``<area>/<module>``; raises NoReferenceError when the canon has no reference for it."""
    path = reference_file(module)
    if path is None:
        raise NoReferenceError(f"the canon has no reference for {module}.py yet, so no stub can be made from it")
    src = _Source(path)
    body = list(src.tree.body)
    defined = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    kept = [n for n in body if _keep_top_level(n, defined, set())]
    referenced = _names_used(p for n in kept for p in _signature_parts(n))
    kept = [n for n in body if _keep_top_level(n, defined, referenced)]
    title = _title(ast.get_docstring(src.tree) or module)
    out = [f'"""{title}', "", f"TODO: your plan ({STUB_MESSAGE}).", '"""', *STUB_RUBRIC_NOTE,
           *_forbidden_note(module), ""]
    previous: ast.stmt | None = None
    for node in kept:
        if _is_docstring(node) and node is body[0]:
            continue
        if previous is not None:
            out += _gap(previous, node)
        out += _stub_statement(src, node, defined)
        previous = node
    text = "\n".join(out).rstrip() + "\n"
    compile(text, str(path), "exec", dont_inherit=True)
    return text


def _forbidden_note(module: str) -> list[str]:
    """The stub's line naming the library calls the module's items forbid (the rubric's API005)."""
    names = sorted({name for item in catalog.items_for_module(module) for name in item.forbidden})
    if not names:
        return []
    return [f"# Not allowed in this file (the drill is to write them; API fluency says no): {', '.join(names)}."]


def _gap(previous: ast.stmt, node: ast.stmt) -> list[str]:
    """Blank lines between two kept top-level statements: two around definitions, else the source's one."""
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    if isinstance(node, defs) or isinstance(previous, defs):
        return ["", ""]
    return [""] if node.lineno > (previous.end_lineno or previous.lineno) + 1 else []


def _keep_top_level(node: ast.stmt, defined: set[str], referenced: set[str]) -> bool:
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.Try)):
        return True
    if isinstance(node, ast.If):
        return "TYPE_CHECKING" in ast.unparse(node.test)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return _is_public(node.name) or node.name in referenced
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        return any(_is_public(n) or n in referenced for n in names)
    return _is_docstring(node)


def _stub_statement(src: _Source, node: ast.stmt, defined: set[str]) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return _stub_function(src, node, node.name)
    if isinstance(node, ast.ClassDef):
        return _stub_class(src, node, node.name)
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        calls = {c.func.id for c in ast.walk(node.value) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
        if calls & defined:
            target = ast.unparse(node.targets[0] if isinstance(node, ast.Assign) else node.target)
            return [f"{target} = ...  # TODO: built from this module's functions in the reference"]
    return src.segment(node)


def _stub_function(src: _Source, node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str) -> list[str]:
    indent = _body_indent(node)
    return [*src.header(node), *src.docstring(node),
            f'{indent}raise NotImplementedError("{qualname}: {STUB_MESSAGE}")']


def _stub_class(src: _Source, node: ast.ClassDef, qualname: str) -> list[str]:
    indent = _body_indent(node)
    out = [*src.header(node), *src.docstring(node)]
    has_body = bool(src.docstring(node))
    for stmt in node.body:
        if _is_docstring(stmt) and stmt is node.body[0]:
            continue
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            out += src.segment(stmt)
            has_body = True
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_public(stmt.name):
            out += ["", *_stub_function(src, stmt, f"{qualname}.{stmt.name}")]
            has_body = True
        elif isinstance(stmt, ast.ClassDef) and _is_public(stmt.name):
            out += ["", *_stub_class(src, stmt, f"{qualname}.{stmt.name}")]
            has_body = True
    if not has_body:
        out.append(f"{indent}pass")
    return out


def _title(docstring: str) -> str:
    words = docstring.strip().splitlines()[0].split() if docstring.strip() else []
    if len(words) > _MAX_TITLE_WORDS:
        words = [*words[:_MAX_TITLE_WORDS], "..."]
    return " ".join(words)


def write_stub(practice: Path, module: str) -> Path:
    """Write the stub of ``module`` to ``practice/<area>/<module>.py`` (atomically); returns the path."""
    from pytest_mlcanon.state import write_text

    target = practice / f"{module}.py"
    write_text(target, stub_source(module))
    return target


# -- untouched stubs ------------------------------------------------------------------------------------

def _is_unimplemented_body(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = node.body[1:] if _is_docstring(node.body[0]) else node.body
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def unimplemented(path: Path) -> bool:
    """True when ``path`` defines functions and every one of them only raises NotImplementedError."""
    try:  # the parse the rubric reads next (``source`` keeps it); a watch asks before every check
        tree = source.tree(path)
    except (OSError, SyntaxError, ValueError):
        return False
    # the first written function ends the walk: a learner's save is decided after its first ``def``
    functions = (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    first = next(functions, None)
    return first is not None and _is_unimplemented_body(first) and all(_is_unimplemented_body(f) for f in functions)


def names_unwritten(path: Path, names: Iterable[str]) -> bool:
    """True when none of ``names`` (top-level functions or classes of ``path``) has a function that does
    more than raise NotImplementedError: the item that owns them in a shared module is not written yet."""
    try:
        tree = ast.parse(source.read_text(path))
    except (OSError, SyntaxError, ValueError):
        return False
    wanted = set(names)
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.name in wanted]
    functions = [f for d in defs for f in ast.walk(d) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return all(_is_unimplemented_body(f) for f in functions)


def all_unimplemented(files: Sequence[Path]) -> bool:
    """True when there are ``files`` and every one is an untouched stub (``unimplemented``): the item is
    ``Status.NOT_IMPLEMENTED``, in a learner's run and in the grader alike. A file too deep to parse is
    not a stub (the run then says what is wrong with it)."""
    try:  # remembered per file and modification (``redirect.untouched_stub``): the redirect asks again
        return bool(files) and all(untouched_stub(f) for f in files)
    except (RecursionError, MemoryError):
        return False


def unimplemented_note(files: Sequence[Path], shown: Sequence[str], slug: str = "ITEM") -> str:
    """The "not implemented yet" verdict for an item whose files are all untouched stubs, else ``""``."""
    if not all_unimplemented(files):
        return ""
    listed = ", ".join(shown)
    return (f"{listed}: every function still raises NotImplementedError; write the item, then run the "
            f"check again (`mlcanon hint {slug}` if you are stuck)")


# -- skeletons (hint level 3) -----------------------------------------------------------------------------

def skeleton(module: str, names: Sequence[str] | None = None) -> str:
    """Signatures, first docstring lines and the reference's shape lines with their expressions elided."""
    path = reference_file(module)
    if path is None:
        raise NoReferenceError(f"the canon has no reference for {module}.py yet")
    src = _Source(path)
    comments = src.comments()
    out: list[str] = [f"# {module}.py"]
    for node in src.tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or not _is_public(node.name):
            continue
        if names is not None and node.name not in names:
            continue
        out += ["", *_skeleton_def(src, node, comments)]
    return "\n".join(out) + "\n"


def _skeleton_def(src: _Source, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef,
                  comments: dict[int, str]) -> list[str]:
    indent = _body_indent(node)
    out = list(src.header(node))
    doc = ast.get_docstring(node)
    if doc:
        out.append(f'{indent}"""{doc.strip().splitlines()[0]}"""')
    if isinstance(node, ast.ClassDef):
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign):
                out += src.segment(stmt)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_public(stmt.name):
                out += ["", *_skeleton_def(src, stmt, comments)]
        if len(out) == len(src.header(node)):
            out.append(f"{indent}...")
        return out
    rows = _outline(src, node.body, comments, indent)
    out += _align(rows) if rows else [f"{indent}..."]
    return out


def _outline(src: _Source, body: list[ast.stmt], comments: dict[int, str], indent: str) -> list[tuple[str, str]]:
    """(code, comment) rows for the shape lines in ``body``, nested in the compound statements holding them."""
    rows: list[tuple[str, str]] = []
    for stmt in body:
        comment = comments.get(stmt.lineno, "")
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            inner = _outline(src, stmt.body, comments, indent + "    ")
            if inner:
                rows += [(f"{indent}for {src.source(stmt.target)} in ...:", ""), *inner]
        elif isinstance(stmt, (ast.While, ast.With, ast.AsyncWith, ast.If)):
            word = {ast.While: "while", ast.With: "with", ast.AsyncWith: "async with", ast.If: "if"}[type(stmt)]
            inner = _outline(src, stmt.body, comments, indent + "    ")
            other = _outline(src, stmt.orelse, comments, indent + "    ") if isinstance(stmt, ast.If) else []
            if inner or other:
                rows += [(f"{indent}{word} ...:", ""), *(inner or [(f"{indent}    ...", "")])]
                if other:
                    rows += [(f"{indent}else:", ""), *other]
        elif isinstance(stmt, ast.Try):
            inner = _outline(src, stmt.body, comments, indent)
            rows += inner
        elif _SHAPE_COMMENT.match(comment):
            code = _elided(src, stmt)
            if code:
                rows.append((indent + code, comment))
    return rows


def _elided(src: _Source, stmt: ast.stmt) -> str:
    if isinstance(stmt, ast.Assign):
        return " = ".join(src.source(t) for t in stmt.targets) + " = ..."
    if isinstance(stmt, ast.AnnAssign):
        return f"{src.source(stmt.target)}: {src.source(stmt.annotation)} = ..."
    if isinstance(stmt, ast.AugAssign):
        return f"{src.source(stmt.target)} {_AUG_OPS.get(type(stmt.op), '')}= ..."
    if isinstance(stmt, ast.Return):
        return "return ..."
    if isinstance(stmt, ast.Expr):
        return "..."
    return ""


def _align(rows: list[tuple[str, str]]) -> list[str]:
    width = max((len(code) for code, comment in rows if comment), default=0) + 2
    width = max(width, 40)
    return [f"{code.ljust(width)}{comment}" if comment else code for code, comment in rows]


# -- tests of an item -------------------------------------------------------------------------------------

def count_tests(item: catalog.Item, tests_dir: Path) -> list[tuple[str, int]]:
    """``(test file, number of test functions of this item)`` for each of the item's test files present."""
    found = []
    for name in item.test_files:
        path = tests_dir / name
        if not path.is_file():
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        owners = catalog.items_for_test_file(name)
        default = _marker_slug(tree.body) or (owners[0].slug if len(owners) == 1 else None)
        found.append((name, _count(tree.body, item, default)))
    return found


def _count(body: list[ast.stmt], item: catalog.Item, owner: str | None) -> int:
    total = 0
    for node in body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            total += _count(node.body, item, _marker_slug(node.body) or owner)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            mine = _decorator_slug(node) or owner
            total += int(_same_item(mine, item))
    return total


def _marker_slug(body: list[ast.stmt]) -> str | None:
    for node in body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            for call in ast.walk(node.value):
                slug = _canon_arg(call)
                if slug:
                    return slug
    return None


def _decorator_slug(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    for decorator in node.decorator_list:
        slug = _canon_arg(decorator)
        if slug:
            return slug
    return None


def _canon_arg(node: ast.AST) -> str | None:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "canon"
            and node.args and isinstance(node.args[0], ast.Constant)):
        return str(node.args[0].value)
    return None


def _same_item(slug: str | None, item: catalog.Item) -> bool:
    if slug is None:
        return False
    try:
        return catalog.get(slug).number == item.number
    except catalog.UnknownItemError:
        return False
