"""The output folder of ``mlcanon grade`` (``--out``): one batch's outputs, never mixed with another's.

A folder that already holds something is refused, unless the teacher says what to do with it:
``--force`` clears it first (so no stale student's feedback or Gradescope folder stays beside the new
gradebook), ``--resume`` and ``--only`` keep it (they finish or amend the batch recorded in it).

``--force`` deletes only what is inside ``--out``, never following a link out of it, and refuses an
``--out`` that is a link, the file system's root, a home folder, the current folder, the submissions
folder, the config file's folder, or a folder holding any of them.
"""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Iterable
from pathlib import Path


class OutError(ValueError):
    """The output folder cannot be used as asked; the message says what to pass."""


def check(out: Path, *, force: bool, keep: bool, protected: Iterable[Path] = ()) -> None:
    """Refuse a non-empty ``out`` unless ``force`` or ``keep``; with ``force``, refuse any ``out``
    that clearing could hurt (``protected``: the submissions, the config, the merged shards)."""
    if out.is_symlink() and force:
        raise OutError(f"--out {out} is a link; --force clears only a real folder (give the folder it points to)")
    if out.exists() and not out.is_dir():
        raise OutError(f"--out {out} is not a folder")
    if force:
        _check_clearable(out, protected)
    if keep or force or not holds_anything(out):
        return
    raise OutError(f"--out {out} is not empty; pass --force to clear it, --resume to finish the batch recorded "
                   f"in it, or another --out")


def holds_anything(out: Path) -> bool:
    try:
        with os.scandir(out) as entries:
            return any(True for _ in entries)
    except FileNotFoundError:
        return False


def _check_clearable(out: Path, protected: Iterable[Path]) -> None:
    target = out.resolve()
    guarded = [(Path("/"), "the file system's root"), (Path.cwd(), "the current folder"),
               *((home, "a home folder") for home in _homes())]
    guarded += [(path, str(path)) for path in protected]
    for path, what in guarded:
        try:
            resolved = path.resolve()
        except OSError:
            continue
        if resolved == target or target in resolved.parents:
            holds = "is" if resolved == target else "holds"
            raise OutError(f"--force will not clear --out {out}: it {holds} {what}; give a folder of its own")
    for path in protected:  # clearing a folder inside the submissions would delete a student's files
        if path.is_dir() and path.resolve() in target.parents:
            raise OutError(f"--force will not clear --out {out}: it is inside {path}; give a folder of its own")


def _homes() -> list[Path]:
    """The home folders of whoever runs this, also under ``sudo -E`` (``$HOME`` and the account's)."""
    found = [Path.home()]
    for uid in {os.getuid(), os.geteuid()}:
        try:
            found.append(Path(pwd.getpwuid(uid).pw_dir))
        except KeyError:
            pass
    sudo_user = os.environ.get("SUDO_USER")
    if sudo_user:
        try:
            found.append(Path(pwd.getpwnam(sudo_user).pw_dir))
        except KeyError:
            pass
    return found


def clear(out: Path) -> None:
    """Remove everything inside ``out`` (a link is removed, never followed); ``out`` itself stays."""
    try:
        entries = list(os.scandir(out))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)  # on Linux it works through file descriptors: a link is not followed
        else:
            os.unlink(entry.path)
