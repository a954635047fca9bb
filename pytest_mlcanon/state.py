"""The learner's drill state in ``.mlcanon/``: one lock, atomic writes, corrupt files backed up.

Every read-modify-write of a state file (``progress.json``, ``misslog.md``) happens while
:func:`locked` holds an exclusive lock on ``.mlcanon/state.lock``, so two ``mlcanon check`` runs
finishing at the same moment take turns instead of overwriting each other's update. Files are
replaced atomically (a temporary file in the same folder, then ``os.replace``), so a reader, or a
run killed half-way through a write, only ever sees the old file or the new one, never a mixture.
A JSON file that cannot be read is moved aside to ``<name>.corrupt-<time>`` and reported in one
line; it is never silently dropped, because it holds weeks of drill history the learner may want
to repair by hand.

The lock is ``fcntl.flock`` (``msvcrt.locking`` on Windows) on a separate lock file rather than on
the state file itself, because ``os.replace`` swaps the file out from under a lock held on it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pytest_mlcanon.reports.model import atomic_write

STATE_DIR = ".mlcanon"
LOCK_FILE = "state.lock"
LOCK_TIMEOUT_S = 30.0
_POLL_S = 0.02


class StateError(RuntimeError):
    """The state directory could not be locked or a file in it could not be used; the message says why."""


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _try_lock(fd: int) -> None:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)

    def _unlock(fd: int) -> None:
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _try_lock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


def state_dir(root: Path) -> Path:
    """``<root>/.mlcanon``: where the drill state of the learner repo at ``root`` lives."""
    return root / STATE_DIR


def find_root(start: Path) -> Path:
    """The learner repo ``start`` lies in: the nearest folder at or above it that holds ``.mlcanon/``,
    else the nearest that holds ``.git`` (the repository root), else ``start`` itself.

    Every command that reads or writes the drill state goes through here, so running one from a
    subfolder uses the repo's one ``.mlcanon/`` instead of starting a second history.
    """
    start = start.resolve()
    folders = (start, *start.parents)
    for marker, is_there in ((STATE_DIR, Path.is_dir), (".git", Path.exists)):
        for folder in folders:
            if is_there(folder / marker):
                return folder
    return start


@contextmanager
def locked(directory: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the exclusive lock of ``directory`` (created if needed) for the duration of the block.

    Not re-entrant: a process must not nest two ``locked`` blocks on the same directory.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StateError(f"cannot use the state directory {directory}: {exc.strerror or exc}") from None
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                _try_lock(fd)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise StateError(
                        f"{directory / LOCK_FILE} is still locked after {timeout:.0f} s: another mlcanon is "
                        "writing the drill state; wait for it to finish, or delete the lock file if none is running"
                    ) from None
                time.sleep(_POLL_S)
        try:
            yield
        finally:
            _unlock(fd)
    finally:
        os.close(fd)


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` atomically (temporary file in the same folder, then a rename)."""
    atomic_write(path, text)


def write_json(path: Path, data: Any) -> str:
    """Write ``data`` as indented JSON, atomically; returns the text written."""
    text = dump_json(data)
    atomic_write(path, text)
    return text


def dump_json(data: Any) -> str:
    """The canonical text of a state file (stable key order, so unchanged state compares equal)."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def load_json(path: Path, default: Callable[[], dict[str, Any]],
              validate: Callable[[Any], str]) -> tuple[dict[str, Any], str]:
    """Read a JSON state file under the caller's lock: ``(data, warning)``.

    A missing file gives ``default()`` and no warning. A file that is not valid JSON, or that
    ``validate`` rejects (it returns the reason, or ``""`` when the data is fine), is moved to
    ``<name>.corrupt-<YYYYmmdd-HHMMSS>`` and the warning says so; the data is then ``default()``.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return default(), ""
    except OSError as exc:
        raise StateError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
        reason = validate(data)
    except json.JSONDecodeError as exc:
        reason = f"not valid JSON: {exc.msg} at line {exc.lineno}"
    except UnicodeDecodeError:
        reason = "not UTF-8 text"
    if not reason:
        return data, ""
    backup = backup_corrupt(path)
    return default(), (f"{path} was unreadable ({reason}); moved it to {backup.name} and started a fresh one "
                       "(repair the backup and move it back to restore that history)")


def backup_corrupt(path: Path) -> Path:
    """Move ``path`` aside to a fresh ``<name>.corrupt-<time>[-n]`` beside it; returns the new path."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup = path.with_name(f"{path.name}.corrupt-{stamp}")
    counter = 1
    while backup.exists():
        counter += 1
        backup = path.with_name(f"{path.name}.corrupt-{stamp}-{counter}")
    os.replace(path, backup)
    return backup
