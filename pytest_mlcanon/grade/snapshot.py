"""The root-only snapshot of one student's module files, taken before any job runs.

The parent scans, scores and gives each job a copy of exactly these bytes. Only what can be a canon
module is copied: ``<area>/<module>.py`` where both names are Python identifiers, each a regular file
with one name (a hard link could be a second name of a file the student may not read, such as a
root-only one), opened without following links and checked again on the open file, at most
``MAX_FILE_BYTES`` each and ``MAX_FILES`` in all. A link, a FIFO, a device, a socket or a folder
named like a module is skipped and named as what it is; so is anything past the budget of
``MAX_ENTRIES`` folder entries looked at.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pytest_mlcanon.grade.text import readable

MAX_FILE_BYTES = 1 << 20
MAX_FILES = 400
MAX_ENTRIES = 5000


def take(source: Path, target: Path, placed: tuple[str, ...] = ()) -> list[str]:
    """Copy the module files of the learner directory ``source`` into ``target`` (created 0700);
    returns what was not copied, each as ``area/name (why)``. ``placed`` modules (``area/name``) of a
    flat upload are taken from ``source/name.py`` instead, into ``target/area/name.py``."""
    target.mkdir(mode=0o700)
    if placed:
        return _take_flat(source, target, placed)
    skipped: list[str] = []
    copied = 0
    left = MAX_ENTRIES
    for area in _entries(source):
        left -= 1
        if left < 0:
            skipped.append(f"... (more than {MAX_ENTRIES} files and folders; the rest was not looked at)")
            break
        if not area.name.isidentifier():
            continue
        if not area.is_dir(follow_symlinks=False):
            if area.is_symlink() and os.path.isdir(area.path):
                skipped.append(f"{area.name}/ (a link to a folder)")
            continue
        for entry in _entries(Path(area.path)):
            left -= 1
            if left < 0:
                break
            if not entry.name.endswith(".py"):
                continue
            relative = f"{readable(area.name)}/{readable(entry.name)}"
            why = _refusal(entry)
            if not why and copied >= MAX_FILES:
                why = f"over {MAX_FILES} files"
            if not why:
                why = _copy(Path(entry.path), target / area.name, entry.name)
            if why:
                skipped.append(f"{relative} ({why})")
            else:
                copied += 1
    return skipped


def _take_flat(source: Path, target: Path, placed: tuple[str, ...]) -> list[str]:
    """The flat upload's files, each checked and copied as ``take`` copies a module file."""
    wanted = {f"{module.rsplit('/', 1)[-1]}.py": module.split("/", 1)[0] for module in placed}
    skipped: list[str] = []
    for entry in _entries(source):
        area = wanted.get(entry.name)
        if area is None:
            continue
        why = _refusal(entry) or _copy(Path(entry.path), target / area, entry.name)
        if why:
            skipped.append(f"{area}/{readable(entry.name)} ({why})")
    return skipped


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as listing:
            return sorted(listing, key=lambda e: os.fsencode(e.name))
    except OSError:
        return []


def kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    if stat.S_ISLNK(mode):
        return "a link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def _refusal(entry: os.DirEntry[str]) -> str:
    """Why ``entry`` is not copied, from its own metadata (never through a link), or ''."""
    if not entry.name[:-3].isidentifier():
        return "not a module name"
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    if not stat.S_ISREG(info.st_mode):
        return kind(info.st_mode)
    if info.st_nlink > 1:
        return "a hard link"
    if info.st_size > MAX_FILE_BYTES:
        return f"over {MAX_FILE_BYTES >> 20} MB"
    return ""


def _read(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _copy(path: Path, folder: Path, name: str) -> str:
    """Copy one regular file, checking the opened file itself (it may have been swapped for a link,
    a FIFO or a hard link since it was listed); returns why it was refused, or ''."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return "a link" if os.path.islink(path) else f"unreadable: {exc.strerror}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return kind(info.st_mode)
        if info.st_nlink > 1:
            return "a hard link"
        data = _read(fd, MAX_FILE_BYTES + 1)
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        return f"over {MAX_FILE_BYTES >> 20} MB"
    folder.mkdir(mode=0o700, exist_ok=True)
    out = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(out, "wb") as handle:
        handle.write(data)
    return ""
