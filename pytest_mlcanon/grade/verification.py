"""How each item's correctness is verified: the table ``docs/verification.md`` is generated from.

``TABLE`` (in ``_verification_table``) is what the verifier's calibration of every item reports,
per public function and method: ``verified: how`` or ``unverified: why``. A batch grades by its own
calibration, which agrees with the table for an unchanged canon (the attack suite checks four
items); the table is the documentation, and the list a teacher reads before choosing
``[recheck] unverified``.

    python -m pytest_mlcanon.grade.verification --write   # calibrate every item, rewrite both files
    python -m pytest_mlcanon.grade.verification           # print the document from the table

An item is *verified* when every public name is, *partly verified* when some are (its correctness
points need the verified part to pass, and a test making a call no case verifies earns what the
teacher's policy says), *unverified* when none is (the policy decides what it earns).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from pytest_mlcanon import catalog
from pytest_mlcanon.grade._verification_table import TABLE

DOC = Path(__file__).resolve().parents[2] / "docs" / "verification.md"
TABLE_FILE = Path(__file__).with_name("_verification_table.py")


def status(coverage: dict[str, str]) -> str:
    """``verified``, ``partly verified`` or ``unverified`` for one item's coverage (the names its tests
    never call themselves count for nothing)."""
    verified = [name for name, how in coverage.items() if how.startswith("verified")]
    unverified = [name for name, how in coverage.items() if how.startswith("unverified")]
    if verified and not unverified:
        return "verified"
    return "partly verified" if verified else "unverified"


def render(table: dict[str, dict[str, str]] | None = None) -> str:
    """The Markdown document of ``table`` (default: ``TABLE``)."""
    table = TABLE if table is None else table
    counts = {word: sum(1 for cov in table.values() if status(cov) == word)
              for word in ("verified", "partly verified", "unverified")}
    lines = [
        "# How each item's correctness is verified",
        "",
        "Generated from `pytest_mlcanon/grade/_verification_table.py` by "
        "`python -m pytest_mlcanon.grade.verification --write` (a calibration of every item); "
        "`tests/test_grade_trust.py` keeps the two in sync. Do not edit by hand.",
        "",
        "`mlcanon grade` awards an item's correctness points only on evidence it verified itself: the seeded "
        "re-check (README, \"What the grade rests on\"). Per public function and method of each item, the table "
        "says how the verifier checks a submission's answers, or why it cannot:",
        "",
        "- *fresh inputs*: the reference tests' own calls, with floating inputs perturbed by this run's seed, "
        "compared with the reference's answers at the tolerance of the dtype;",
        "- *a model with the verifier's parameters*: a model argument (a test helper's or `torch.nn`'s class, "
        "or the item's own class built from the test's constructor arguments) given fresh parameters by the "
        "verifier; its parameters after the call are compared too;",
        "- *the verifier's parameters*: an object of the item's class, built as the test built it, given the "
        "verifier's parameters by name, then its methods called in the test's order (a submission whose "
        "parameters are named otherwise is unverified for that item, not failed);",
        "- *its objects rebuilt*: a plain class built as the test built it, its methods called in order;",
        "- *a replay of its first training steps*: a training function run for two steps on one batch from the "
        "verifier's start, every parameter compared with the verifier's own replay (a made-up history proves "
        "nothing);",
        "- *canonical form*: outputs defined up to a relabelling (k-means clusters) or a sign (PCA components) "
        "compared after matching, an empty GMM component's mean as any finite one, int8 codes up to a few rounding "
        "ties; where a contract accepts two "
        "conventions (PPO's population or sample std for normalised advantages), the verifier answers under both "
        "and either passes.",
        "",
        "A call whose answer is the tests' own answer on each of five draws of fresh inputs (a count of parameters, labels a 2 % "
        "nudge never flips; booleans and strings are never perturbed) verifies nothing: the public calls' "
        "answers, learned by heart, would pass it. Such a call is drawn again with its integer arguments (sizes, "
        "widths, lengths) moved up by even steps, the reference judging and answering the new sizes "
        "(`causal_mask(T)` for a `T` of this run's); where that changes the answer, it verifies.",
        "",
        f"{counts['verified']} items verified, {counts['partly verified']} partly verified, "
        f"{counts['unverified']} unverified. An unverified item's correctness, and on any other item each test "
        "one of whose calls (its own, or a fixture's it uses) no case verifies (a name of the last column, or a "
        "kind of call with no case: a seed, an answer no draw changes), earns what the teacher's "
        "`[recheck] unverified` says (`award`, `review` (default: held for review), `zero`).",
        "",
        "| # | item | correctness | verified | not verified (why) |",
        "|---|---|---|---|---|",
    ]
    for item in catalog.all_items():
        coverage = table.get(item.slug, {})
        verified: dict[str, list[str]] = {}
        for name, how in coverage.items():
            if how.startswith("verified: "):
                verified.setdefault(how.removeprefix("verified: ").rsplit(" (", 1)[0], []).append(f"`{name}`")
        done = "; ".join(f"{', '.join(names)} by {how}" for how, names in verified.items()) or "-"
        missing = "; ".join(f"`{name}` ({how.removeprefix('unverified: ')})" for name, how in coverage.items()
                            if how.startswith("unverified")) or "-"
        lines.append(f"| {item.number} | `{item.slug}` | {status(coverage) if coverage else 'unverified'} | {done} "
                     f"| {missing} |")
    return "\n".join(lines) + "\n"


def calibrate_all(seed: int = 1) -> dict[str, dict[str, str]]:
    """Every item's coverage, from a calibration of the whole canon (minutes)."""
    from pytest_mlcanon.grade import batch, config, verifier
    from pytest_mlcanon.run import in_canon, tests_dir

    items = [item for item in catalog.all_items() if in_canon(item)]
    with tempfile.TemporaryDirectory(prefix="mlcanon-verification-") as temp:
        folder = Path(temp) / "calibration"
        folder.mkdir()
        ini = folder / "pytest.ini"
        ini.write_text(batch._ini(config.GradeConfig()), encoding="utf-8")  # noqa: SLF001 - the jobs' own ini
        result = verifier.calibrate(Path(temp), 3600, items=",".join(i.slug for i in items), seed=seed, skip=[],
                                    recheck=True, dir=str(folder), ini=str(ini), tests_dir=str(tests_dir()),
                                    options=[])
    return {slug: dict(sorted(cov.items())) for slug, cov in sorted(result.coverage.items())}


def write_table(table: dict[str, dict[str, str]]) -> None:
    body = ["\"\"\"Generated by ``python -m pytest_mlcanon.grade.verification --write``; do not edit by hand.\"\"\"",
            "", "from __future__ import annotations", "", "# fmt: off", "TABLE: dict[str, dict[str, str]] = {"]
    for slug, coverage in table.items():
        body.append(f"    {slug!r}: {{")
        body += [f"        {name!r}: {how!r}," for name, how in coverage.items()]
        body.append("    },")
    body += ["}", "# fmt: on", ""]
    TABLE_FILE.write_text("\n".join(body), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_mlcanon.grade.verification", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--write", action="store_true", help="calibrate every item; rewrite the table and the doc")
    args = parser.parse_args(argv)
    if args.write:
        table = calibrate_all()
        write_table(table)
        DOC.write_text(render(table), encoding="utf-8")
        print(f"wrote {TABLE_FILE} and {DOC}")
    else:
        sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
