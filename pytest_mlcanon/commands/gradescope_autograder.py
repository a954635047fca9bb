"""``mlcanon gradescope-autograder --item ITEMS [--config FILE] --out autograder.zip``: the zip to upload
as a Gradescope programming assignment's autograder (``setup.sh``, ``run_autograder``, the config and
pytest-mlcanon's source), as otter-grader's ``otter generate`` builds one. Each submission is then
graded by ``mlcanon grade`` in Gradescope's container, sandboxed as on your machine, into its
``results.json``; a flat upload (``attention.py``) is placed by module name.
"""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("gradescope-autograder", help="build the autograder zip of a Gradescope assignment",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--item", dest="items", action="append", metavar="ITEMS",
                        help="the items graded (repeat it, or a comma list; default: the config's items)")
    parser.add_argument("--config", metavar="FILE", help="the teacher's config put in the zip (default: "
                        "mlcanon-grade.toml in the current folder, else one naming only the items)")
    parser.add_argument("--out", default="autograder.zip", metavar="ZIP", help="the zip (default: autograder.zip)")
    parser.add_argument("--source", metavar="DIR", help="the pytest-mlcanon checkout to bundle (default: the one "
                        "this pytest-mlcanon was installed from)")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="grade even where Gradescope's container allows no sandbox; every output then says "
                        "the submission was graded unsandboxed")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from pathlib import Path

    from pytest_mlcanon.grade import autograder, config
    from pytest_mlcanon.grade.text import clean

    try:
        built = autograder.build(Path(args.out), ",".join(args.items or []), config.find(args.config, None),
                                 source=Path(args.source) if args.source else None,
                                 unsafe_no_sandbox=args.unsafe_no_sandbox)
    except (config.ConfigError, autograder.AutograderError, OSError) as exc:
        print(f"mlcanon gradescope-autograder: {clean(exc)}", file=sys.stderr)
        return 2
    print(f"wrote {built.path}: setup.sh, run_autograder, {config.CONFIG_NAME} and pytest-mlcanon's source "
          f"({len(built.names) - 3} files, from {built.source}); items {', '.join(built.items)}; {built.torch} "
          f"(CPU) from {autograder.TORCH_INDEX}")
    print("upload it as the autograder of a Gradescope programming assignment (Ubuntu 22.04 or later base image)")
    return 0
