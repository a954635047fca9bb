"""The shape-comment grammar of canon-spec C4, parsed into a small model.

::

    comment := "#" SP shapes [SP SP free-text]
    shapes  := alts ("," SP alts)*
    alts    := shape (SP "|" SP shape)*
    shape   := "()" | "(" item ",)" | "(" item ("," SP item)+ ")" | "list[" dim "]" | "scalar"
    item    := dim | "..."
    dim     := term (SP? op SP? term)*      op := "+" | "-" | "*" | "//"
    term    := NAME | INT | "(" dim ")"

The parser works on comment text only (what ``tokenize`` hands over), never on code. A dim is kept
as its source text and a validated ``ast`` expression, so the runtime checker can evaluate
``C*kh*kw`` or ``T_q + 1`` against bound names.
"""

from __future__ import annotations

import ast
import keyword
from dataclasses import dataclass

ELLIPSIS = "..."
_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)


class ShapeSyntaxError(ValueError):
    """A comment that starts like a shape but does not follow the grammar; ``hint`` says how to fix it."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Dim:
    """One dimension: its text (``C*kh*kw``) and parsed expression; ``text == '...'`` for an ellipsis."""

    text: str
    expr: ast.expr | None = None

    @property
    def is_ellipsis(self) -> bool:
        return self.text == ELLIPSIS


@dataclass(frozen=True)
class Shape:
    """``kind`` is ``tuple`` (dims), ``list`` (one length dim) or ``scalar`` (a Python number)."""

    kind: str
    dims: tuple[Dim, ...] = ()

    @property
    def rank(self) -> int | None:
        """Number of dims, or None when an ellipsis makes it open."""
        if self.kind != "tuple" or any(d.is_ellipsis for d in self.dims):
            return None
        return len(self.dims)

    def __str__(self) -> str:
        if self.kind == "scalar":
            return "scalar"
        if self.kind == "list":
            return f"list[{self.dims[0].text}]"
        if len(self.dims) == 1:
            return f"({self.dims[0].text},)"
        return "(" + ", ".join(d.text for d in self.dims) + ")"


@dataclass(frozen=True)
class ShapeComment:
    """One entry per value bound on the line; each entry lists its alternatives."""

    values: tuple[tuple[Shape, ...], ...]
    free_text: str = ""

    def __str__(self) -> str:
        return ", ".join(" | ".join(str(s) for s in alts) for alts in self.values)


def looks_like_shape(comment: str) -> bool:
    """True when a comment (without ``#``) starts the way a shape comment does."""
    text = comment.lstrip()
    return text.startswith("(") or text.startswith("list[") or text == "scalar" or text.startswith("scalar ")


def parse(comment: str) -> ShapeComment:
    """Parse a comment's text (without the leading ``#``); raises ShapeSyntaxError."""
    parser = _Parser(comment.strip())
    return parser.comment()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, message: str, hint: str = "") -> ShapeSyntaxError:
        return ShapeSyntaxError(f"{message} at column {self.pos + 1} of {self.text!r}", hint)

    def peek(self, token: str) -> bool:
        return self.text.startswith(token, self.pos)

    def eat(self, token: str) -> bool:
        if self.peek(token):
            self.pos += len(token)
            return True
        return False

    def comment(self) -> ShapeComment:
        values = [self.alternatives()]
        while self.peek(", ") or self.peek(","):
            save = self.pos
            self.eat(",")
            self.eat(" ")
            if not (self.peek("(") or self.peek("list[") or self.peek("scalar")):
                self.pos = save
                break
            values.append(self.alternatives())
        rest = self.text[self.pos :]
        if rest and not rest[0].isspace():
            raise self.error("unexpected text after the shape", "separate free text from the shape with two spaces")
        return ShapeComment(tuple(values), rest.strip())

    def alternatives(self) -> tuple[Shape, ...]:
        shapes = [self.shape()]
        while self.peek(" | "):
            self.eat(" | ")
            shapes.append(self.shape())
        return tuple(shapes)

    def shape(self) -> Shape:
        if self.eat("scalar"):
            return Shape("scalar")
        if self.eat("list["):
            dim = self.dim(stop="]")
            if not self.eat("]"):
                raise self.error("list[...] is not closed")
            return Shape("list", (dim,))
        if not self.eat("("):
            raise self.error("a shape starts with '(', 'list[' or 'scalar'")
        if self.eat(")"):
            return Shape("tuple", ())
        dims = [self.item()]
        if self.eat(",)"):
            return Shape("tuple", tuple(dims))
        if self.peek(")"):
            raise self.error("a one-dim shape needs a trailing comma", f"write ({dims[0].text},)")
        while self.eat(","):
            self.eat(" ")
            if self.peek(")"):
                break
            dims.append(self.item())
        if not self.eat(")"):
            raise self.error("shape is not closed with ')'")
        if sum(d.is_ellipsis for d in dims) > 1:
            raise self.error("'...' may appear once per shape")
        return Shape("tuple", tuple(dims))

    def item(self) -> Dim:
        if self.eat(ELLIPSIS):
            return Dim(ELLIPSIS)
        return self.dim(stop=",)")

    def dim(self, stop: str) -> Dim:
        start = self.pos
        depth = 0
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "(":
                depth += 1
            elif ch == ")":
                if depth == 0:
                    break
                depth -= 1
            elif depth == 0 and ch in stop:
                break
            self.pos += 1
        text = self.text[start : self.pos].strip()
        if not text:
            raise self.error("empty dimension")
        return Dim(text, _dim_expr(text, self))


_KEYWORD_PREFIX = "__kw_"


def _dim_expr(text: str, parser: _Parser) -> ast.expr:
    # Dim names may be Python keywords (the spec writes `(out, in)`): parse them under another name.
    escaped = " ".join(_KEYWORD_PREFIX + tok if keyword.iskeyword(tok) else tok
                       for tok in text.replace("(", " ( ").replace(")", " ) ").split())
    try:
        expr = ast.parse(escaped, mode="eval").body
    except SyntaxError:
        raise parser.error(f"dimension {text!r} is not NAME, INT or an expression of them") from None
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id.startswith(_KEYWORD_PREFIX):
            node.id = node.id[len(_KEYWORD_PREFIX):]
    for node in ast.walk(expr):
        if isinstance(node, ast.BinOp):
            if not isinstance(node.op, _OPS):
                raise parser.error(f"dimension {text!r} uses an operator other than + - * //")
        elif isinstance(node, ast.Constant):
            if not isinstance(node.value, int) or isinstance(node.value, bool):
                raise parser.error(f"dimension {text!r} has a non-integer constant")
        elif not isinstance(node, (ast.Name, ast.Load, *_OPS)):
            raise parser.error(f"dimension {text!r} is not NAME, INT or an expression of them")
    return expr


def dim_names(comment: ShapeComment) -> set[str]:
    """Every symbolic name used in the comment."""
    return {
        node.id
        for alts in comment.values
        for shape in alts
        for dim in shape.dims
        if dim.expr is not None
        for node in ast.walk(dim.expr)
        if isinstance(node, ast.Name)
    }
