"""``mlcanon cheatsheet [TERM ...]``: the NumPy <-> PyTorch cheat sheet, or the rows matching TERM.

One row per operation: the NumPy spelling, the PyTorch spelling, and the gotcha that makes the row
worth having (keepdims vs keepdim, .view after a transpose, torch.var's n - 1, gather's index
shape...), then the numerically stable patterns and what to reach for when you blank. Every row is
executable and tested: both columns agree on random inputs. A TERM of several words matches rows
holding all of them (``mlcanon cheatsheet view``, ``mlcanon cheatsheet softmax``). ``--markdown``
prints the whole sheet as docs/cheatsheet.md holds it."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("cheatsheet", help="NumPy beside PyTorch, one tested row per operation, with its gotcha",
                            description=__doc__)
    parser.add_argument("term", nargs="*", help="words to look for in the operation, the code and the gotcha")
    parser.add_argument("--markdown", action="store_true", help="print the whole sheet as Markdown")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    import shutil
    import sys

    from pytest_mlcanon import drill
    from pytest_mlcanon.chapters import cheatsheet

    term = " ".join(args.term).strip()
    if args.markdown:
        if term:
            return drill.fail("cheatsheet", "--markdown prints the whole sheet; leave out the search term")
        print(cheatsheet.markdown(), end="")
        return 0
    found = cheatsheet.search(term)
    if not found:
        titles = ", ".join(title.lower() for _, title in cheatsheet.sections())
        print(f"mlcanon cheatsheet: no row mentions {term!r}; the sections are {titles}", file=sys.stderr)
        return 1
    width = min(shutil.get_terminal_size((100, 24)).columns, 110) - 2
    print(cheatsheet.terminal(found, width=width))
    if term:
        print(f"\n{len(found)} of {len(cheatsheet.rows())} rows mention {term!r}.")
    return 0
