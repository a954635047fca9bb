"""Which submissions a folder holds: one per student folder, or the folder itself when it is one.

Each student folder is searched the way the plugin finds a learner directory (``impl.discover``):
``practice/``, ``src/mlbook/``, ``mlbook/``, the folder itself, or the one folder below it (at most
three levels down) laid out like the canon. A student folder with none, or with several, becomes a row
saying so. Unlike the plugin, which trusts the learner's own disk, the grader never follows a link
(a ``practice -> ../classmate`` link is named, not read) and looks at no more than ``MAX_ENTRIES``
files and folders per student. Student ids come from the folder names (``text.student_id``): capped,
unique ignoring case, safe on every file system, readable when a name is not UTF-8.

A flat upload (Gradescope's ``submission/attention.py``, with no ``<area>/`` folder) is placed by
module name: each ``<name>.py`` that names exactly one module of the items being graded is graded
as that module (``transformer/attention``); a name several of them share is a row saying so.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from pytest_mlcanon import catalog, impl
from pytest_mlcanon.grade.text import readable, student_id, unique
from pytest_mlcanon.redirect import REF_PACKAGE

#: Files and folders looked at per student while searching for the learner directory.
MAX_ENTRIES = 5000


@dataclass(frozen=True)
class Submission:
    student: str
    folder: Path
    impl: Path | None
    problem: str = ""
    #: The modules a flat upload holds in ``impl`` itself (``transformer/attention`` from ``attention.py``).
    placed: tuple[str, ...] = ()


class SubmissionsError(ValueError):
    """The submissions folder cannot be used; the message says why."""


def find(root: Path, items: tuple[catalog.Item, ...] = (), *, single: bool = False) -> list[Submission]:
    """The submissions under ``root``, sorted by folder name (flat uploads placed among ``items``); with
    ``single``, ``root`` is one student's submission, searched as a student folder is."""
    if not root.is_dir():
        raise SubmissionsError(f"{readable(str(root))}: no such folder")
    if single:
        return [_student(student_id(root.resolve().name), root, items)]
    if impl.looks_like_canon(root):
        return [Submission(student_id(root.resolve().name), root, root.resolve())]
    flat = _flat(root, items)
    if flat is not None:
        placed, problem = flat
        return [Submission(student_id(root.resolve().name), root, None if problem else root.resolve(), problem, placed)]
    found: list[Submission] = []
    files: list[str] = []
    taken: set[str] = set()
    try:
        with os.scandir(root) as listing:
            entries = sorted(listing, key=lambda e: os.fsencode(e.name))
    except OSError as exc:
        raise SubmissionsError(f"{readable(str(root))}: cannot list it ({exc.strerror})") from exc
    for entry in entries:
        if entry.name.startswith((".", "_")):
            continue
        folder = Path(entry.path)
        if entry.is_symlink():
            if folder.is_dir():
                student = unique(student_id(entry.name), taken)
                found.append(Submission(student, folder, None, "the student folder is a link; links are not "
                                                               "followed (copy the files in)"))
            continue
        if not entry.is_dir(follow_symlinks=False):
            files.append(readable(entry.name))
            continue
        found.append(_student(unique(student_id(entry.name), taken), folder, items))
    names = _file_names(items)
    if not found and files and names:  # an upload of files only (Gradescope's), none of them a graded module
        more = f" and {len(files) - 5} more" if len(files) > 5 else ""
        return [Submission(student_id(root.resolve().name), root, None,
                           f"no file named after a graded module ({names}) among the files uploaded "
                           f"({', '.join(files[:5])}{more})")]
    if not found:
        or_flat = f", or a file named after a graded module ({names})" if names else ""
        raise SubmissionsError(f"{readable(str(root))}: no student folders (expected one sub-folder per "
                               f"student{or_flat})")
    return found


def _student(student: str, folder: Path, items: tuple[catalog.Item, ...]) -> Submission:
    """One student's submission in ``folder``: its learner directory, else its flat upload."""
    located, problem = locate(folder, _file_names(items))
    flat = _flat(folder, items) if located is None else None
    if flat is None:
        return Submission(student, folder, located, problem)
    placed, why = flat
    return Submission(student, folder, None if why else folder.resolve(), why, placed)


def _file_names(items: tuple[catalog.Item, ...]) -> str:
    """``dpo.py, attention.py``: the files a flat upload of ``items`` holds."""
    return ", ".join(dict.fromkeys(f"{m.rsplit('/', 1)[-1]}.py" for item in items for m in item.modules))


def locate(folder: Path, flat: str = "") -> tuple[Path | None, str]:
    """The learner directory inside a student's ``folder`` and '' , or None and why not (naming the
    ``flat`` file names a flat upload would have held)."""
    budget = _Budget(MAX_ENTRIES)
    links: list[str] = []
    for name in impl.PREFERRED:
        candidate = folder / name
        link = _first_link(folder, name)
        if link:
            links.append(link)
        elif candidate.is_dir() and _canon_like(candidate, budget):
            return _inside(candidate, folder)
    if _canon_like(folder, budget):
        return _inside(folder, folder)
    frontier = [folder]
    for _ in range(impl.DISCOVERY_DEPTH):
        found: list[Path] = []
        next_frontier: list[Path] = []
        for parent in frontier:
            for child, is_link in _subdirs(parent, budget):
                relative = readable(str(child.relative_to(folder)))
                if is_link:
                    links.append(relative)
                elif child.name != REF_PACKAGE:
                    (found if _canon_like(child, budget) else next_frontier).append(child)
        if len(found) > 1:
            listed = impl.listing([readable(str(p.relative_to(folder))) for p in found])
            return None, f"several learner directories: {listed}; keep one"
        if found:
            return _inside(found[0], folder)
        frontier = next_frontier
    if budget.exhausted:
        return None, f"no folder laid out like the canon in the first {MAX_ENTRIES} files and folders"
    links = list(dict.fromkeys(links))
    if links:
        return None, (f"no folder laid out like the canon; links are not followed ({', '.join(links[:3])} "
                      f"{'is a link' if len(links) == 1 else 'are links'})")
    return None, "no folder laid out like the canon (<area>/<module>.py)" + (
        f", nor a file named after a graded module ({flat})" if flat else "")


def _flat(folder: Path, items: tuple[catalog.Item, ...]) -> tuple[tuple[str, ...], str] | None:
    """A flat upload in ``folder``: the graded modules its ``<name>.py`` files are, and '' (or why they
    cannot be placed); None when it holds no file named after a module of ``items``."""
    by_name: dict[str, list[str]] = {}
    for module in dict.fromkeys(m for item in items for m in item.modules):
        by_name.setdefault(f"{module.rsplit('/', 1)[-1]}.py", []).append(module)
    try:
        with os.scandir(folder) as listing:
            names = sorted(e.name for e in listing if e.name in by_name and not e.is_dir(follow_symlinks=False))
    except OSError:
        return None
    if not names:
        return None
    shared = [f"{name} could be {' or '.join(by_name[name])}" for name in names if len(by_name[name]) > 1]
    if shared:
        return (), (f"a flat upload cannot be placed: {'; '.join(shared)} (all graded); put each file in its "
                    f"area's folder ({by_name[names[0]][0]}.py)")
    return tuple(by_name[name][0] for name in names), ""


class _Budget:
    def __init__(self, size: int) -> None:
        self.left = size
        self.exhausted = False

    def take(self) -> bool:
        if self.left <= 0:
            self.exhausted = True
            return False
        self.left -= 1
        return True


@functools.cache
def _modules_by_area() -> dict[str, frozenset[str]]:
    found: dict[str, set[str]] = {}
    for item in catalog.all_items():
        for module in item.modules:
            area, name = module.split("/", 1)
            found.setdefault(area, set()).add(name)
    return {area: frozenset(names) for area, names in found.items()}


def _canon_like(folder: Path, budget: _Budget) -> bool:
    """True when ``folder`` holds an ``<area>/<module>.py`` of the catalog in a real (not linked) area
    folder: one listing of the folder, counted in the budget, then one ``stat`` per module of its areas."""
    areas = _modules_by_area()
    try:
        with os.scandir(folder) as listing:
            for entry in listing:
                if not budget.take():
                    return False
                names = areas.get(entry.name)
                if names and entry.is_dir(follow_symlinks=False) and any(
                        os.path.isfile(os.path.join(entry.path, f"{name}.py")) for name in names):
                    return True
    except OSError:
        return False
    return False


def _first_link(folder: Path, relative: str) -> str:
    """The first component of ``folder/relative`` that is a link (``practice``), or ''."""
    path = folder
    for part in Path(relative).parts:
        path = path / part
        if path.is_symlink():
            return readable(str(path.relative_to(folder)))
        if not path.is_dir():
            return ""
    return ""


def _subdirs(parent: Path, budget: _Budget) -> list[tuple[Path, bool]]:
    """The visible sub-folders of ``parent`` (never through a link), each with whether it is a link."""
    found: list[tuple[Path, bool]] = []
    try:
        with os.scandir(parent) as listing:
            for entry in listing:
                if not budget.take():
                    break
                if entry.name.startswith(".") or entry.name in impl.SKIP_DIRS:
                    continue
                if entry.is_symlink():
                    if os.path.isdir(entry.path):
                        found.append((Path(entry.path), True))
                elif entry.is_dir(follow_symlinks=False):
                    found.append((Path(entry.path), False))
    except OSError:
        return found
    return sorted(found, key=lambda pair: os.fsencode(pair[0].name))


def _inside(candidate: Path, folder: Path) -> tuple[Path | None, str]:
    """``candidate`` resolved, if it lies inside the student's folder (no link led out of it)."""
    resolved = candidate.resolve()
    if resolved != folder.resolve() and folder.resolve() not in resolved.parents:
        return None, f"{readable(str(candidate.relative_to(folder)))} leads out of the student's folder"
    return resolved, ""
