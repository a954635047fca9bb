"""Fixtures as differences: a variant is a base plus a unified diff, applied with ``git apply``.

Shared by the canon's broken variants (``tests/impls/broken_*.diff``, whose base is the items'
reference modules, see ``test_canon_bites.py``) and the rubric calibration cases
(``tests/rubric_cases/<case>/patch.diff``, whose base is another case, see ``test_calibration.py``).

A patch is made with ``diff -u`` (or ``git diff --no-index``) from the base's directory, so it names
each file ``a/<area>/<module>.py`` and ``b/<area>/<module>.py``; any text before the first ``--- a/``
line is its header (what the variant is). ``git apply`` places hunks exactly (no fuzz) and applies
all of them or none, so a patch whose base has changed fails loudly, with the hunk that no longer
fits, instead of silently testing something else.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

PATCHED_FILE = re.compile(r"^\+\+\+ b/(\S+)$", re.MULTILINE)
_FAILED_AT = re.compile(r"patch failed: (\S+):(\d+)")


class PatchDoesNotApply(Exception):
    """The patch no longer fits its base; the message names the patch and the hunk."""


def patched_files(diff: Path) -> list[str]:
    """The paths, relative to the base, that ``diff`` changes (``posttrain/dpo.py``)."""
    return PATCHED_FILE.findall(diff.read_text(encoding="utf-8"))


def apply_patch(diff: Path, into: Path) -> None:
    """Apply ``diff`` to the base's copy in ``into``, all hunks or none.

    Raises ``PatchDoesNotApply`` naming ``diff`` and quoting the hunk that no longer applies.
    """
    done = subprocess.run(["git", "apply", "--verbose", "--whitespace=nowarn", str(diff.resolve())], cwd=into,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise PatchDoesNotApply(f"{diff}: the patch no longer applies to its base "
                                f"(regenerate it with diff -u from the base)\n{_failed_hunk(diff, done.stderr)}")


def _failed_hunk(diff: Path, stderr: str) -> str:
    """The hunk git reports as failed, as written in ``diff``; git's own words when it names none."""
    failed = _FAILED_AT.search(stderr)
    if failed:
        path, line = failed.groups()
        files = re.split(r"^\+\+\+ b/(\S+)\n", diff.read_text(encoding="utf-8"), flags=re.MULTILINE)
        for name, body in zip(files[1::2], files[2::2]):
            for hunk in re.split(r"^(?=@@ )", body, flags=re.MULTILINE):
                if name == path and re.match(rf"@@ -{line}[ ,]", hunk):
                    return f"failed hunk of {path}:\n" + re.split(r"^(?:--- |diff )", hunk, flags=re.MULTILINE)[0]
    return stderr.strip()
