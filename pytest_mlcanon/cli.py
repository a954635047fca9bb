"""The ``mlcanon`` command: a thin dispatcher over ``pytest_mlcanon.commands``.

Run ``mlcanon --help`` for the list of subcommands and ``mlcanon COMMAND --help`` for each.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from pytest_mlcanon.commands import COMMANDS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlcanon", description="Drill and grade the ML coding canon.")
    parser.add_argument("--version", action="version", version=f"mlcanon {installed_version()}",
                        help="show the installed pytest-mlcanon version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"pytest_mlcanon.commands.{name}").register(sub)
    return parser


def installed_version() -> str:
    """The version of the installed distribution, from its metadata (what ``pip show`` reports)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pytest-mlcanon")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from pytest_mlcanon import __version__

        return f"{__version__} (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. When the reader of our output leaves early (``mlcanon list | head``), the
    command ends quietly with status 1, as Python's documentation advises (the note on SIGPIPE in
    the ``signal`` module): stdout is flushed here, inside the handler, so the broken pipe cannot
    surface later at interpreter exit as a traceback; argparse's ``--help`` and ``--version`` too."""
    try:
        try:
            return _dispatch(argv)
        finally:  # also when argparse exits (--help): its text may still sit in the buffer
            sys.stdout.flush()
    except BrokenPipeError:
        # the reader left: send what is still buffered nowhere, so the flush at exit cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _dispatch(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return int(args.func(args, extra))


if __name__ == "__main__":
    sys.exit(main())
