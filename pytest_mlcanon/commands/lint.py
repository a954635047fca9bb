"""``mlcanon lint PATH...``: the rubric's static findings (shapes, numerics, API, explanation) for
files or folders, ruff-style; exit 1 when there are findings, 2 on bad input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("lint", help="static rubric findings for files or folders", description=__doc__)
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--ignore", default="", help="rule codes or prefixes to turn off, comma separated")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from pytest_mlcanon import rubric, settings
    from pytest_mlcanon.state import find_root

    files: list[Path] = []
    for raw in args.paths:
        path = Path(raw)
        if not path.exists():
            print(f"mlcanon lint: {raw}: no such file or directory", file=sys.stderr)
            return 2
        files += sorted(p for p in path.rglob("*.py") if p.name != "__init__.py") if path.is_dir() else [path]
    root = find_root(Path.cwd())  # [tool.mlcanon] of the learner's repo, from any subfolder
    try:
        resolved = settings.resolve(cli={"ignore": args.ignore}, ini={}, pyproject=settings.read_pyproject(root))
    except settings.SettingsError as exc:
        print(f"mlcanon lint: {exc}", file=sys.stderr)
        return 2
    findings = rubric.lint(files, resolved, Path.cwd())
    for finding in findings:
        print(finding.render())
    print(f"{len(findings)} finding(s) in {len(files)} file(s)")
    return 1 if findings else 0
