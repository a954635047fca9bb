"""The ``mlcanon`` command.

* ``mlcanon list [ITEMS]``: the catalog as a table (number, slug, title, level, block, minutes).
* ``mlcanon lint PATH...``: the rubric's static findings (shapes, numerics, API, explanation) for
  files or folders, ruff-style; exit 1 when there are findings.
* ``mlcanon check ITEMS [--impl PATH] [pytest args...]``: run the item's tests and the rubric, i.e.
  ``pytest --canon-item=ITEMS``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_mlcanon import catalog


def _cmd_list(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    try:
        items = catalog.select(args.items) if args.items else catalog.all_items()
    except catalog.UnknownItemError as exc:
        print(f"mlcanon: {exc}", file=sys.stderr)
        return 2
    rows = [(i.number, i.slug, i.title, i.level, i.block, i.minutes, i.framework) for i in items]
    print(tabulate(rows, headers=["#", "slug", "title", "level", "block", "min", "framework"]))
    return 0


def _cmd_lint(args: argparse.Namespace) -> int:
    from pytest_mlcanon import rubric, settings

    files: list[Path] = []
    for raw in args.paths:
        path = Path(raw)
        if not path.exists():
            print(f"mlcanon lint: {raw}: no such file or directory", file=sys.stderr)
            return 2
        files += sorted(p for p in path.rglob("*.py") if p.name != "__init__.py") if path.is_dir() else [path]
    try:
        resolved = settings.resolve(cli={"ignore": args.ignore}, ini={}, pyproject=settings.read_pyproject(Path.cwd()))
    except settings.SettingsError as exc:
        print(f"mlcanon lint: {exc}", file=sys.stderr)
        return 2
    findings = rubric.lint(files, resolved, Path.cwd())
    for finding in findings:
        print(finding.render())
    print(f"{len(findings)} finding(s) in {len(files)} file(s)")
    return 1 if findings else 0


def _cmd_check(args: argparse.Namespace, extra: list[str]) -> int:
    import pytest

    argv = [f"--canon-item={args.items}", *([f"--impl={args.impl}"] if args.impl else []), *extra]
    return int(pytest.main(argv))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlcanon", description="Drill and grade the ML coding canon.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_list = sub.add_parser("list", help="show the catalog")
    p_list.add_argument("items", nargs="?", help="a selector: slug, number, glob, block:N or a comma list")
    p_lint = sub.add_parser("lint", help="static rubric findings for files or folders")
    p_lint.add_argument("paths", nargs="+")
    p_lint.add_argument("--ignore", default="", help="rule codes or prefixes to turn off, comma separated")
    p_check = sub.add_parser("check", help="run an item's tests and the rubric (pytest --canon-item)")
    p_check.add_argument("items")
    p_check.add_argument("--impl", default=None, help="learner directory (default: discovered)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "check":
        return _cmd_check(args, extra)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "list":
        return _cmd_list(args)
    return _cmd_lint(args)


if __name__ == "__main__":
    sys.exit(main())
