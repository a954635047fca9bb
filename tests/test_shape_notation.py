"""The shape grammar reads every shape the canon shows a learner (issue 16, point 1).

Harvested, not listed: every shape comment of ``canon_refs/`` (the references and, through
``mlcanon hint --level 3``, the skeletons), every shape the references' docstrings write in backticks
(the stubs keep those docstrings), the hand-written skeletons and the prose of ``hints.py``, and the
shapes in ``docs/`` and ``README.md``. A new notation in any of them that the grammar cannot read
fails here, naming the file.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from pytest_mlcanon.rubric import shape_grammar

ROOT = Path(__file__).resolve().parents[1]
_BALANCED = r"\((?:[^()]|\([^()]*\))*\)"
#: A parenthesised list of items made of names, numbers, shape operators, `...` and labelled shapes;
#: spans of prose, decimals, comparisons, indexing or nested bare tuples are not shapes.
_ITEM = re.compile(r"\s*(?:\.\.\.|[\w{}'+*/^|\u00b2\s-]+(?:\([^()]*\))?(?:\s+or\s+None)?(?:\s+\w+)?)\s*")
_WORDS = re.compile(r"[A-Za-z_]\w*\s+[A-Za-z_]\w*")


def _items(span: str) -> list[str]:
    inner, depth, items, current = span[1:-1], 0, [], ""
    for ch in inner:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    return [*items, current]


def is_shape_notation(span: str) -> bool:
    """Whether a backticked or parenthesised span of the docs is written as a shape."""
    span = span.strip()
    if span.startswith(("list[", "scalar")):
        return True
    if not re.fullmatch(_BALANCED, span) or "," not in span and span not in ("()", "(...)"):
        return False
    items = [i for i in _items(span) if i.strip()]
    for item in items:
        bare = re.sub(r"\([^()]*\)", "", item).strip()
        labelled = "(" in item and re.match(r"\s*[A-Za-z_]\w*\s+\(", item)
        if (not _ITEM.fullmatch(item) or bare.startswith("-") or re.search(r"\d\.\d|[\[\]<>=]", item)
                or ("(" in item and "," in item and not labelled)
                or (_WORDS.search(bare) and not labelled)):
            return False
    return True


def _code_comments(path: Path) -> list[tuple[str, str]]:
    text = path.read_text(encoding="utf-8")
    return [(f"{path.relative_to(ROOT)}:{tok.start[0]}", tok.string[1:].strip())
            for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type == tokenize.COMMENT and shape_grammar.looks_like_shape(tok.string[1:])]


def _docstrings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))]
    return [doc for n in nodes if (doc := ast.get_docstring(n))]


def _backticked(text: str) -> list[str]:
    return [m.group(1) or m.group(2) for m in re.finditer(r"``([^`\n]+)``|`([^`\n]+)`", text)]


def _strings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _leads_with_shape(comment: str) -> bool:
    """A code comment of the docs that opens with a shape (not a prose remark in parentheses)."""
    comment = comment.strip()
    if comment.startswith(("list[", "scalar")):
        return True
    lead = re.match(_BALANCED, comment)
    return lead is not None and is_shape_notation(lead.group()) and lead.group() != "(N)"


def harvest() -> dict[str, str]:
    """Shape text -> where it was first seen."""
    found: dict[str, str] = {}
    refs = sorted((ROOT / "canon_refs").rglob("*.py"))
    for path in refs:
        for where, comment in _code_comments(path):
            found.setdefault(comment, where)
        for doc in _docstrings(path):
            for span in _backticked(doc):
                if is_shape_notation(span):
                    found.setdefault(span.strip(), f"{path.relative_to(ROOT)} (docstring)")
    hints = ROOT / "pytest_mlcanon" / "catalog" / "hints.py"
    for text in _strings(hints):
        for line in text.splitlines():
            _, sep, comment = line.partition("# ")
            if sep and _leads_with_shape(comment):
                found.setdefault(comment.strip(), "hints.py (skeleton)")
        for match in re.finditer(rf"(?<![\w.\])]){_BALANCED}", text):
            if is_shape_notation(match.group()):
                found.setdefault(match.group(), "hints.py (prose)")
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        text = path.read_text(encoding="utf-8")
        for line in text.splitlines():
            _, sep, comment = line.partition("  # ")
            if sep and _leads_with_shape(comment):
                found.setdefault(comment.strip(), f"{path.name} (code)")
        for span in _backticked(text):
            if is_shape_notation(span) and span.strip() != "(N)":  # rules.md's example of a malformed comment
                found.setdefault(span.strip(), path.name)
    return found


HARVEST = harvest()


def test_the_harvest_finds_the_notations_the_issue_names() -> None:
    assert len(HARVEST) > 400
    for notation in ("(d_l, d_{l+1})", "(n/world,)", "(B, 1|H, 1|T_q, T_k)", "(..., out/world)"):
        assert notation in HARVEST, notation
    assert not is_shape_notation("(Karpathy 2020)") and not is_shape_notation("(x2 - x1) * (y2 - y1)")
    assert not is_shape_notation("(-0.1, 0, 0.1)") and not is_shape_notation("(feature, threshold, impurity decrease)")


@pytest.mark.parametrize("shape", sorted(HARVEST))
def test_every_shape_the_canon_shows_is_read_by_the_grammar(shape: str) -> None:
    try:
        shape_grammar.parse(shape)
    except shape_grammar.ShapeSyntaxError as exc:
        pytest.fail(f"{HARVEST[shape]}: {exc}")


def test_same_shape_as_a_named_value_is_a_shape_comment() -> None:
    """``# same shape as z`` states a shape (a blind from-stub softmax and mask_to_bias wrote it);
    it is read as a shape, so the line is annotated, and never contradicted at run time."""
    from pytest_mlcanon.rubric import shape_grammar

    for text in ("same shape as z", "same as mask; the bias", "(B, T) or same as x"):
        assert shape_grammar.looks_like_shape(text), text
        assert any(shape.kind == "any" for alts in shape_grammar.parse(text).values for shape in alts), text
    assert not shape_grammar.looks_like_shape("same result as before")


@pytest.mark.parametrize("text", ["(...)", "(...,)", "(*rest)", "(*p.shape)"])
def test_an_ellipsis_alone_is_any_shape_with_or_without_its_comma(text: str) -> None:
    ((shape,),) = shape_grammar.parse(text).values
    assert len(shape.dims) == 1 and shape.dims[0].is_ellipsis and shape.rank is None


@pytest.mark.parametrize("text", ["(n)", "(B*T)", "(n_q // 2)", "(B) or ()"])
def test_a_one_dim_shape_may_leave_out_its_comma(text: str) -> None:
    """``(n)`` is how most people write a 1-D shape (blind round 6); it reads as ``(n,)``."""
    shape = shape_grammar.parse(text).values[0][0]
    assert shape.rank == 1 and str(shape) == str(shape_grammar.parse(text.replace(")", ",)", 1)).values[0][0])


def test_a_comment_in_words_is_not_a_shape_and_the_finding_says_what_is(tmp_path: Path) -> None:
    """C4 reads a shape first; words alone (``# reduced axis kept as 1``) state no shape the run can
    check, so the line still lacks its comment. The finding quotes the words, says what C4 reads, and
    its example keeps the learner's words as the note after a shape and names the line's own input;
    both forms it proposes are read by the grammar."""
    from pytest_mlcanon.rubric import shapes
    from pytest_mlcanon.rubric.source import load
    from pytest_mlcanon.settings import Settings

    path = tmp_path / "attention.py"
    path.write_text("def f(scores):\n"
                    "    m = scores.amax(-1, keepdim=True)  # reduced axis kept as 1\n"
                    "    z = scores.sum(-1)  # same shape as scores\n"
                    "    w = scores.transpose(-2, -1)\n"
                    "    return m, z, w\n")
    check = shapes.check_source(load(path, "attention.py"), Settings())
    assert check.annotated == (3,)
    words, bare = check.findings
    assert (words.code, words.line, bare.code, bare.line) == ("SHP001", 2, "SHP001", 4)
    assert words.message.endswith("; its comment `# reduced axis kept as 1` is words, not a shape")
    assert words.hint == ("start the comment with the shape it binds and keep your words after it as a note, "
                          "`# (B, T, 1); reduced axis kept as 1` with your dims; C4 reads a shape first: "
                          "`(B, T, d)`, `()`, `(N,)`, `list[N]`, `scalar`, `None` or `same shape as scores` "
                          "(docs/contract.md C4)")
    assert "is words" not in bare.message and bare.hint == "end the line with the shape of what it binds, e.g. `# (B, T, d)`"
    for proposed in ("(B, T, 1); reduced axis kept as 1", "same shape as scores"):
        assert shape_grammar.looks_like_shape(proposed)
        shape_grammar.parse(proposed)


def test_each_notation_c4_adds_for_blind_learners_is_read_as_c4_says() -> None:
    """Blind round 31: correct, commented code lost the Shapes axis on `# -> (B, T, D)`, `# shape: (..., d_ff)`,
    `# [..., d_ff]` and a keepdims reduction along a variable axis. C4 lists each with an example; every
    example it gives is read as the shape it names, and its two counter-examples stay words."""
    contract = (ROOT / "docs" / "contract.md").read_text(encoding="utf-8")
    block = contract.split("A few more notations read as shapes", 1)[1].split("\n\n", 2)[1]
    comments = [span.split("# ", 1)[1] for span in _backticked(block) if "# " in span]
    assert comments == ["shape: (..., d_ff)", "-> (B, T, D)", "[..., d_ff]", "[0, 1]", "[CLS]", "(..., 1, ...)",
                        "(loss (), margin (B,))"]
    read = {c: str(shape_grammar.parse(c)) for c in comments if shape_grammar.looks_like_shape(c)}
    assert read == {"shape: (..., d_ff)": "(..., d_ff)", "-> (B, T, D)": "(B, T, D)", "[..., d_ff]": "(..., d_ff)",
                    "(..., 1, ...)": "(..., 1, ...)", "(loss (), margin (B,))": "(loss (), margin (B,))"}
    assert str(shape_grammar.parse("[B, T, D]")) == "(B, T, D)" and str(shape_grammar.parse("list[n]")) == "list[n]"


@pytest.mark.parametrize("comment", ["-> (B, T, d_ff)", "shape: (B, T, d_ff)", "[B, T, d_ff]", "[..., d_ff]",
                                     "(..., 1, ...)"])
def test_a_shape_line_commented_in_a_new_notation_is_annotated(tmp_path: Path, comment: str) -> None:
    from pytest_mlcanon.rubric import shapes
    from pytest_mlcanon.rubric.source import load
    from pytest_mlcanon.settings import Settings

    path = tmp_path / "ffn.py"
    path.write_text(f"def f(x, w):\n    h = x @ w  # {comment}\n    return h.max(axis=-1, keepdims=True)  # {comment}\n")
    check = shapes.check_source(load(path, "ffn.py"), Settings())
    assert (check.annotated, check.findings) == ((2, 3), ())
