"""``mlcanon makefile [--out PATH] [--force]``: write the seed's Makefile into your repo.

  make stubs                              every stub in practice/ (your work is kept)
  make drill ITEM=transformer/multihead   a fresh stub and a running clock
  make check ITEM=transformer/multihead   the reference tests and the rubric against your file, timed
  make reset ITEM=transformer/multihead   your attempt kept in .mlcanon/attempts/, the clean stub back

plus ``make diff``, ``make hint``, ``make today``, ``make plan`` and ``make list``. Each target runs
the matching mlcanon command. The file goes to the root of your repo (found from any subfolder);
an existing file that differs is left alone unless you pass --force. ``--out -`` prints it, and
``--out mlcanon.mk`` writes a file to ``include`` from a Makefile of your own."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("makefile", help="write a Makefile with the seed's stubs/drill/check/reset targets",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="Makefile", metavar="PATH",
                        help="where to write it, relative to the repo root (default Makefile; - prints it)")
    parser.add_argument("--force", action="store_true", help="replace an existing file that differs")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from pathlib import Path

    from pytest_mlcanon import drill, makefile
    from pytest_mlcanon.state import find_root, write_text

    content = makefile.text()
    if args.out == "-":
        print(content, end="")
        return 0
    root = find_root(Path.cwd())
    target = (root / args.out).expanduser()
    shown = drill.relative(root, target)
    if target.is_dir():
        return drill.fail("makefile", f"{shown} is a directory; give a file path with --out")
    try:
        existing = target.read_text(encoding="utf-8") if target.exists() else None
    except (OSError, UnicodeDecodeError) as exc:
        return drill.fail("makefile", f"cannot read {shown}: {exc}")
    if existing == content:
        print(f"{shown} is up to date.")
        return 0
    if existing is not None and not args.force:
        return drill.fail("makefile", f"{shown} already exists and differs: pass --force to replace it, or "
                          "--out mlcanon.mk and add `include mlcanon.mk` to yours")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text(target, content)
    except OSError as exc:
        return drill.fail("makefile", f"cannot write {shown}: {exc.strerror or exc}")
    print(f"wrote {shown}: make stubs, make drill ITEM=..., make check ITEM=..., make reset ITEM=... "
          "(`make` alone lists every target)")
    return 0
