"""The shape-comment grammar of docs/contract.md C4, parsed into a small model (the grammar below is
the one C4 prints; ``tests/test_contract.py`` keeps the two the same).

::

    comment := "#" SP [lead SP?] shapes [SP "each"] [note]
    lead    := ("shape" | "shapes") [":"] | "->" | "→"          # "# shape: (..., d_ff)", "# -> (B, T, D)"
    shapes  := alts ("," SP? alts)*
    alts    := shape ((SP? "|" SP? | SP "or" SP) shape)*          # "(N, T) | (N,)", "(T, d) or (B, T, d)"
    shape   := "()" | "(" item [","] ")" | "(" item ("," SP? item)+ [","] ")" | "list[" dim "]" | "scalar" | "None"
             | "[" ... "]"                                        # a "(" ... ")" form in brackets: "[B, T, D]"
             | "(" "..." "," SP? "1" "," SP? "..." ")"            # keepdims along a variable axis: "(..., 1, ...)"
             | "(" member ("," SP? member)* ")"                   # a labelled tuple: "(logits (B, T, V), loss ())"
             | "same" [SP "shape"] SP "as" SP NAME               # "same shape as z": read, not checked at run time
    member  := LABEL SP alts [SP words] | LABEL                  # a bare label: a value whose shape is not stated
    item    := dim | "..." | "*" NAME ("." NAME)*                # "...", "*rest", "*p.shape": any number (0+) of dims
    dim     := term (SP? op SP? term)* | INT SP NAME | NAME SP INT    # "16 patches", "d_v 32": a labelled size
    op      := "+" | "-" | "*" | "/" | "//" | "^" | "**" | "|" | "or" | "−" | "×" | "·"
    term    := NAME | INT | INT NAME | INT "(" dim ")" | "(" dim ")" | "{" dim "}" | term ("²" | "³")
             | NAME "(" text ")" | ("sum" | "Σ") ["_" NAME] SP NAME   # 2w = 2*w; 1|H = 1 or H; len(ids), sum_b M_b are names
    NAME    := letter (letter | digit | "_" | "_{" text "}")* "'"*   (B, T, d_h, N_q, d_{l+1}, P', ...)
    LABEL   := letter (letter | digit | "_" | "/" | "'")*             (logits, loss, dL/dw, ...)
    note    := any text after the shapes, set off by a space or punctuation: "# (K, d); centroids"

So the notation of the stubs and the docs is a shape: subscripts and superscripts (``d_{l+1}``,
``x^2``), arithmetic (``d_h/2``, ``B*T``, ``n/world``, ``L+1``, ``2w`` for ``2*w``), primes
(``P'``), alternatives (``(T, d_h/2) or (B, T, d_h/2)``, a per-dim ``1|H``), ``# (B, T, d) each``
and a note after the shape (``# (K, d); note``, ``# scalar: note``, ``# (B,)  -- note``).

The parser works on comment text only (what ``tokenize`` hands over), never on code. A dim is kept
as its source text and a validated ``ast`` expression (names keep their text, ``d_{l+1}`` included),
so the runtime checker can evaluate ``C*kh*kw`` or ``d_h/2`` against bound names.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass

ELLIPSIS = "..."
_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Div, ast.Pow, ast.BitOr)
#: What may start a shape: ``(``, ``list[``, ``[`` (a shape in brackets, ``[B, T, D]``, but not a range
#: from 0, ``[0, 1]``, nor a special token, ``[CLS]``), the words ``scalar`` / ``None`` standing alone,
#: or ``same (shape) as``.
_SHAPE_START = re.compile(r"\(|list\[|\[(?!\s*0\s*[,\]]|(?:CLS|SEP|PAD|MASK|UNK|BOS|EOS|SOS)\])"
                          r"|scalar(?![\w'])|None(?![\w'])|same (?:shape )?as [^\W\d]")
#: A lead-in the shape may follow: ``# shape: (..., d_ff)``, ``# -> (B, T, D)``.
_LEAD = re.compile(r"(?:[Ss]hapes?\s*:?|->|\u2192)\s*")
#: ``(..., 1, ...)``: a keepdims reduction along an axis held in a variable; the one shape with two ``...``.
KEEPDIMS = (ELLIPSIS, "1", ELLIPSIS)
#: ``same shape as z`` (or ``same as z``): the shape of another value in scope; read, not checked at run time
_SAME_AS = re.compile(r"same (?:shape )?as ([^\W\d][\w.]*)")
_NAME = re.compile(r"[^\W\d](?:_\{[^{}]*\}|\w)*'*")
_NUMBER = re.compile(r"\d+")
_OPERATOR = re.compile(r"//|\*\*|[-+*/^|(){}\u2212\u00d7\u00b7\u00b2\u00b3]")
_UNICODE_OPS = {"^": "**", "{": "(", "}": ")", "\u2212": "-", "\u00d7": "*", "\u00b7": "*", "\u00b2": "**2",
                "\u00b3": "**3"}
#: ``name (B, T)`` inside a tuple: a labelled value (``dL/dw (d,)`` too).
_LABEL = re.compile(r"([^\W\d][\w/']*)\s+(?=\(|\[|list\[|scalar(?![\w'])|None(?![\w']))")
_BARE = re.compile(r"[^\W\d][\w/']*(?=\s*[,)\]])")
_TRAILING_WORDS = re.compile(r"(?:\s+[^\W\d]\w*)+(?=\s*[,)\]])")
_ALT_OR = re.compile(r"\s+or\s+")
_EACH = re.compile(r"\s*\beach\b")
_STARRED = re.compile(r"\*[^\W\d]\w*(?:\.[^\W\d]\w*)*")  # *rest, *p.shape (blind round 36's optimizers)
_PLACEHOLDER = "__mlcanon_dim_"
#: A comment is read as a shape within its first ``MAX_TEXT`` characters (the rest is a note), and
#: shapes nest ``MAX_NESTING`` deep at most: untrusted comments are parsed in time linear in this
#: bound, whatever their length, and never exhaust the stack.
MAX_TEXT = 1000
MAX_NESTING = 16


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
        """``...``, or a starred name (``(B, *expected)``): any number of dims."""
        return self.text == ELLIPSIS or self.text.startswith("*")


@dataclass(frozen=True)
class Shape:
    """``kind`` is ``tuple`` (dims), ``list`` (one length dim), ``scalar`` (a Python number),
    ``none`` (the value None), ``any`` (a value named but not shaped, as ``b`` in ``(w (d,), b)``) or
    ``group`` (a labelled tuple of values, each with its alternatives)."""

    kind: str
    dims: tuple[Dim, ...] = ()
    members: tuple[tuple[Shape, ...], ...] = ()
    labels: tuple[str, ...] = ()

    @property
    def keepdims(self) -> bool:
        """``(..., 1, ...)``: any shape with a 1 at some axis (a reduction kept along a variable axis)."""
        return self.kind == "tuple" and tuple(d.text for d in self.dims) == KEEPDIMS

    @property
    def rank(self) -> int | None:
        """Number of dims, or None when an ellipsis makes it open (or the shape is not a tuple)."""
        if self.kind != "tuple" or any(d.is_ellipsis for d in self.dims):
            return None
        return len(self.dims)

    def __str__(self) -> str:
        if self.kind == "scalar":
            return "scalar"
        if self.kind == "none":
            return "None"
        if self.kind == "any":
            return "any"
        if self.kind == "list":
            return f"list[{self.dims[0].text}]"
        if self.kind == "group":
            return "(" + ", ".join(label if alts[0].kind == "any" else f"{label} {_alts_text(alts)}"
                                   for label, alts in zip(self.labels, self.members)) + ")"
        if len(self.dims) == 1:
            return f"({self.dims[0].text},)"
        return "(" + ", ".join(d.text for d in self.dims) + ")"


def _alts_text(alternatives: tuple[Shape, ...]) -> str:
    return " | ".join(str(s) for s in alternatives)


@dataclass(frozen=True)
class ShapeComment:
    """One entry per value bound on the line; each entry lists its alternatives. ``each``: the one
    entry applies to every value bound (``q, k, v = ...  # (B, T, d) each``)."""

    values: tuple[tuple[Shape, ...], ...]
    free_text: str = ""
    each: bool = False

    def __str__(self) -> str:
        return ", ".join(_alts_text(alts) for alts in self.values) + (" each" if self.each else "")


def looks_like_shape(comment: str) -> bool:
    """True when a comment (without ``#``) starts the way a shape comment does, after a lead-in
    (``shape:``, ``->``) if it has one."""
    return _SHAPE_START.match(_without_lead(comment.lstrip())) is not None


def parse(comment: str) -> ShapeComment:
    """Parse a comment's text (without the leading ``#``); raises ShapeSyntaxError."""
    parser = _Parser(_without_lead(comment.strip())[:MAX_TEXT])
    return parser.comment()


def _without_lead(text: str) -> str:
    """The text after a lead-in (``shape: (B, T)``, ``-> (B, T)``) when a shape follows it."""
    lead = _LEAD.match(text)
    if lead is not None and _SHAPE_START.match(text, lead.end()):
        return text[lead.end():]
    return text


def statement_comment(comments: Mapping[int, str], first: int, last: int) -> tuple[int, str] | None:
    """The shape comment of a statement spanning lines ``first..last``: on its first line, else on its
    last, else on any line between (a comment anywhere on a multi-line statement counts). When none
    looks like a shape, the first line's comment (or the first comment at all) is returned, so a
    caller can say why it is not one; None when the statement carries no comment."""
    order = [first, *([last] if last != first else []), *range(first + 1, last)]
    present = [(line, comments[line]) for line in order if line in comments]
    shaped = [pair for pair in present if looks_like_shape(pair[1])]
    if shaped:
        return shaped[0]
    return present[0] if present else None


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0

    def error(self, message: str, hint: str = "") -> ShapeSyntaxError:
        return ShapeSyntaxError(f"{message} at column {self.pos + 1} of {_cut(self.text)!r}", hint)

    def peek(self, token: str) -> bool:
        return self.text.startswith(token, self.pos)

    def eat(self, token: str) -> bool:
        if self.peek(token):
            self.pos += len(token)
            return True
        return False

    def skip_spaces(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def at_shape(self) -> bool:
        return _SHAPE_START.match(self.text, self.pos) is not None

    def comment(self) -> ShapeComment:
        values = [self.alternatives()]
        while True:
            save = self.pos
            if not self.eat(","):
                break
            self.skip_spaces()
            if not self.at_shape():
                self.pos = save
                break
            values.append(self.alternatives())
        each = _EACH.match(self.text, self.pos)
        if each:
            self.pos = each.end()
        rest = self.text[self.pos:]
        if rest and (rest[0].isalnum() or rest[0] in "_([{'"):
            raise self.error("unexpected text after the shape",
                             "set a note off from the shape with a space or `;`: `# (B, T); note`")
        return ShapeComment(tuple(values), rest.strip(" \t;:,-=\u2013\u2014"), each=bool(each))

    def alternatives(self) -> tuple[Shape, ...]:
        shapes = [self.shape()]
        while True:
            save = self.pos
            self.skip_spaces()
            if self.eat("|"):
                self.skip_spaces()
            else:
                match = _ALT_OR.match(self.text, save)
                if match is None or _SHAPE_START.match(self.text, match.end()) is None:
                    self.pos = save
                    break
                self.pos = match.end()
            if not self.at_shape():
                raise self.error("an alternative must be a shape")
            shapes.append(self.shape())
        return tuple(shapes)

    def shape(self) -> Shape:
        if self.depth >= MAX_NESTING:
            raise self.error(f"shapes nested over {MAX_NESTING} deep")
        self.depth += 1
        try:
            return self._shape()
        finally:
            self.depth -= 1

    def _shape(self) -> Shape:
        same = _SAME_AS.match(self.text, self.pos)
        if same:
            self.pos = same.end()
            return Shape("any")
        if self.eat("scalar"):
            return Shape("scalar")
        if self.eat("None"):
            return Shape("none")
        if self.eat("list["):
            dim = self.dim(stop="]")
            if not self.eat("]"):
                raise self.error("list[...] is not closed")
            return Shape("list", (dim,))
        if self.eat("("):
            close = ")"
        elif self.eat("["):  # ``[B, T, D]``: brackets delimit a shape as parentheses do
            close = "]"
        else:
            raise self.error("a shape starts with '(', '[', 'list[' or 'scalar'")
        self.skip_spaces()
        if self.eat(close):
            return Shape("tuple", ())
        if self.labelled_tuple_ahead():
            return self.group(close)
        dims = [self.item(close)]
        if self.eat("," + close):
            return Shape("tuple", tuple(dims))
        if self.peek(close):  # ``(n)``: a one-dim shape without its comma, as most people write it; ``(...)``
            self.eat(close)
            return Shape("tuple", tuple(dims))
        while self.eat(","):
            self.skip_spaces()
            if self.peek(close):
                break
            dims.append(self.item(close))
        if not self.eat(close):
            raise self.error(f"shape is not closed with '{close}'")
        shape = Shape("tuple", tuple(dims))
        if sum(d.is_ellipsis for d in dims) > 1 and not shape.keepdims:
            raise self.error("'...' (or a starred name) may appear once per shape")
        return shape

    def labelled_tuple_ahead(self) -> bool:
        """Whether the tuple opened just before ``pos`` has an item of the form ``name shape``."""
        depth, start = 0, self.pos
        for index in range(self.pos, len(self.text)):
            ch = self.text[index]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                if depth == 0:
                    return False
                depth -= 1
            if depth == 0 and ch == "," or index == start:
                item = index + 1 if ch == "," else index
                while item < len(self.text) and self.text[item] == " ":
                    item += 1
                if _LABEL.match(self.text, item):
                    return True
        return False

    def group(self, close: str = ")") -> Shape:
        """``(logits (B, T, V), loss () or None)``, ``(w (d,), b)``: a tuple of labelled values (a bare
        name is a value whose shape is not stated; words after a member's shape are a note)."""
        labels: list[str] = []
        members: list[tuple[Shape, ...]] = []
        while True:
            label = _LABEL.match(self.text, self.pos)
            bare = None if label else _BARE.match(self.text, self.pos)
            if label is not None:
                labels.append(label.group(1))
                self.pos = label.end()
                members.append(self.alternatives())
                if words := _TRAILING_WORDS.match(self.text, self.pos):
                    self.pos = words.end()
            elif bare is not None:
                labels.append(bare.group())
                self.pos = bare.end()
                members.append((Shape("any"),))
            else:
                raise self.error("a labelled tuple lists `name shape` pairs")
            self.skip_spaces()
            if self.eat(close):
                return Shape("group", members=tuple(members), labels=tuple(labels))
            if not self.eat(","):
                raise self.error(f"labelled tuple is not closed with '{close}'")
            self.skip_spaces()

    def item(self, close: str = ")") -> Dim:
        if self.eat(ELLIPSIS):
            return Dim(ELLIPSIS)
        starred = _STARRED.match(self.text, self.pos)
        if starred:  # (B, *expected): the dims of a named shape, any number of them
            self.pos = starred.end()
            return Dim(starred.group())
        return self.dim(stop="," + close)

    def dim(self, stop: str) -> Dim:
        start = self.pos
        depth = 0
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                if depth == 0 and ch in stop:
                    break
                depth -= 1
            elif depth == 0 and ch in stop:
                break
            self.pos += 1
        text = self.text[start:self.pos].strip()
        if not text:
            raise self.error("empty dimension")
        return Dim(text, _dim_expr(text, self))


def _cut(text: str) -> str:
    """The comment as an error message quotes it (built for every dim, raised for few)."""
    return text if len(text) <= 200 else text[:200] + "..."


def _dim_expr(text: str, parser: _Parser) -> ast.expr:
    """The dim as an ``ast`` expression whose names keep their text (``d_{l+1}``, ``P'``, ``len(ids)``).

    ``2w`` is ``2*w``; ``x^2``, ``x²`` are powers; ``1|H`` and ``2 or 3`` are alternatives; a size with a
    label (``16 patches``, ``d_v 32``) is the number; ``sum M``, ``sum_b M_b`` (``ΣM``, ``Σ_b M_b``) is one name."""
    bad = ShapeSyntaxError(f"dimension {text!r} is not a name, a number or an arithmetic expression of them "
                           f"in {_cut(parser.text)!r}")
    tokens = _dim_tokens(text, bad)
    kinds = [kind for kind, _ in tokens]
    if kinds in (["int", "name"], ["name", "int"]):  # 16 patches, d_v 32: a labelled size
        tokens = [next(t for t in tokens if t[0] == "int")]
    elif kinds == ["name", "name"] and tokens[0][1].split("_", 1)[0] in {"sum", "\u03a3"}:  # sum M, sum_b M_b
        tokens = [("name", f"{tokens[0][1]} {tokens[1][1]}")]
    names: list[str] = []
    pieces: list[str] = []
    for kind, token in tokens:
        if kind == "name":
            pieces.append(f"{_PLACEHOLDER}{len(names)}")
            names.append(token)
        else:
            pieces.append(token)
    try:
        expr = ast.parse(" ".join(pieces), mode="eval").body
    except SyntaxError:
        raise bad from None
    for node in ast.walk(expr):
        if isinstance(node, ast.BinOp):
            if not isinstance(node.op, _OPS):
                raise bad
        elif isinstance(node, ast.Constant):
            if not isinstance(node.value, int) or isinstance(node.value, bool):
                raise bad
        elif isinstance(node, ast.Name):
            node.id = names[int(node.id[len(_PLACEHOLDER):])]
        elif not isinstance(node, (ast.Load, *_OPS)):
            raise bad
    return expr


def _dim_tokens(text: str, bad: ShapeSyntaxError) -> list[tuple[str, str]]:
    """``(kind, text)`` tokens of a dim: ``name``, ``int`` and ``op`` (operators already in Python's spelling)."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        if match := _NAME.match(text, pos):
            name, pos = match.group(), match.end()
            if name == "or":
                tokens.append(("op", "|"))
                continue
            if text.startswith("(", pos):  # a call such as len(prompts): one opaque name
                close = _closing(text, pos)
                if close < 0:
                    raise bad
                name, pos = text[match.start():close + 1], close + 1
            tokens.append(("name", name))
        elif match := _NUMBER.match(text, pos):
            tokens.append(("int", match.group()))
            pos = match.end()
            if pos < len(text) and (text[pos] == "(" or _NAME.match(text, pos)):
                tokens.append(("op", "*"))  # 2w, 4H, 2(d+1): implicit multiplication
        elif match := _OPERATOR.match(text, pos):
            tokens.append(("op", _UNICODE_OPS.get(match.group(), match.group())))
            pos = match.end()
        else:
            raise bad
    return tokens


def _closing(text: str, start: int) -> int:
    """Index of the parenthesis closing the one at ``start``, or -1."""
    depth = 0
    for index in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return index
    return -1


def shapes_of(comment: ShapeComment) -> list[Shape]:
    """Every shape in the comment, the members of labelled tuples included."""
    found: list[Shape] = []
    stack = [shape for alts in comment.values for shape in alts]
    while stack:
        shape = stack.pop()
        found.append(shape)
        stack.extend(s for alts in shape.members for s in alts)
    return found
