"""The sandbox loop behind ``mlcanon stubs``, ``drill``, ``check`` and ``reset``.

The practice directory (``practice/`` by default, laid out ``<area>/<module>.py``) holds the files
the learner writes. It and ``.mlcanon/`` belong to the learner's repo (``state.find_root``: the nearest
folder above with ``.mlcanon/``, else the git root), so a command run from any subfolder uses the one
state; a ``--practice`` path typed on the command line means what it says from where it was typed. ``drill`` writes a fresh stub and starts the clock; ``reset`` writes the clean
stub back and stops the clock. Neither silently destroys work: a file that is no longer a plain
stub is first copied to ``.mlcanon/attempts/<time>/<area>/<module>.py``, where it waits for the
seed's "diff your attempt against the reference" step, out of sight of the next blank-file attempt.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_mlcanon import catalog, impl, progress, stubs
from pytest_mlcanon.layout import shown
from pytest_mlcanon.state import state_dir

DEFAULT_PRACTICE = "practice"
ATTEMPTS_DIR = "attempts"


class DrillError(ValueError):
    """Bad input for a drill command; the message is the one line the CLI prints."""


def fail(command: str, message: object) -> int:
    """Print ``mlcanon COMMAND: message`` on stderr and return the bad-input exit status, 2."""
    print(f"mlcanon {command}: {message}", file=sys.stderr)
    return 2


def warn(warnings: list[str]) -> None:
    """Report state warnings (a corrupt file backed up, a migration) on stderr, one line each."""
    for warning in warnings:
        print(f"mlcanon: warning: {warning}", file=sys.stderr)


def select(selector: str, *, single: bool = False) -> list[catalog.Item]:
    """The items a selector names; DrillError (with the catalog's suggestions) otherwise."""
    try:
        items = list(catalog.select(selector))
    except catalog.UnknownItemError as exc:
        raise DrillError(str(exc)) from None
    if single and len(items) != 1:
        raise DrillError(f"{selector!r} names {len(items)} items; drill one at a time (a slug or a number)")
    return items


@dataclass(frozen=True)
class Written:
    """One practice file a drill or reset (re)wrote, and where the work it replaced was kept."""

    path: Path
    action: str  # "written" (new), "refreshed" (was a stub) or "replaced" (work archived first)
    archived: Path | None = None


@dataclass(frozen=True)
class Sandbox:
    """The learner repo (``state.find_root`` of where a command runs) and its practice directory."""

    root: Path
    practice: Path

    @classmethod
    def at(cls, root: Path, practice: str | None, *, must_exist: bool, remembered: str | None = None,
           cwd: Path | None = None) -> Sandbox:
        """The sandbox of the repo at ``root``: the ``--practice`` directory (relative to ``cwd``, the
        current directory by default, where the user typed it), else the one the drill state remembers
        (``remembered``, relative to the repo), else the repo's ``practice/``. With ``must_exist``, a
        missing directory is a DrillError."""
        here = Path.cwd() if cwd is None else cwd
        given = practice or remembered or DEFAULT_PRACTICE
        path = ((here if practice else root) / given).expanduser()
        if path.exists() and not path.is_dir():
            raise DrillError(f"practice path {given!r} is a file, not a directory")
        if path.is_dir() and impl.too_deep(path.resolve()):
            raise DrillError(impl.too_deep_message("practice path", given, path.resolve(), here.resolve(),
                                                   "--practice="))
        sandbox = cls(root, path)
        if must_exist and not path.is_dir():
            note = " (where your last drill wrote its stub)" if remembered and not practice else ""
            raise DrillError(
                f"no practice directory at {sandbox.show(path)}/{note}: `mlcanon drill ITEM` creates it "
                "(`mlcanon stubs` fills it), or pass --practice PATH")
        return sandbox

    @property
    def name(self) -> str:
        """The practice directory as the drill state remembers it: relative to the repo when inside it."""
        return relative(self.root, self.practice)

    def show(self, path: Path) -> str:
        """``path`` as the user reaches it from the current directory (``practice/x.py`` at the repo
        root, ``../practice/x.py`` from a subfolder), or absolute when it lies outside the repo."""
        return shown(path)

    def file(self, module: str) -> Path:
        return self.practice / f"{module}.py"

    # -- stubs ----------------------------------------------------------------------------------------
    def require_drillable(self, item: catalog.Item) -> None:
        """A DrillError unless the installed canon has the item's references and tests."""
        from pytest_mlcanon.layout import tests_dir

        missing = [m for m in item.modules if stubs.reference_file(m) is None]
        if missing:
            raise DrillError(
                f"{item.label} has no reference in this version of the canon yet ({', '.join(missing)}), so "
                f"there is no stub or test to drill against; `mlcanon hint {item.slug}` still works")
        if not all((tests_dir() / name).is_file() for name in item.test_files):
            raise DrillError(f"{item.label} has no reference tests in this version of the canon yet")

    def fresh_stub(self, item: catalog.Item, now: float, *, keep_work: bool = False) -> list[Written]:
        """Write the clean stub of each of the item's modules; work already there is archived first.

        With ``keep_work``, files that hold work are left alone instead (``mlcanon stubs``).
        """
        written = []
        for module in item.modules:
            path = self.file(module)
            archived = None
            if path.exists():
                if stubs.unimplemented(path) or _same_text(path, stubs.stub_source(module)):
                    action = "refreshed"
                elif keep_work:
                    written.append(Written(path, "kept"))
                    continue
                else:
                    archived = self.archive(path, module, now)
                    action = "replaced"
            else:
                action = "written"
            stubs.write_stub(self.practice, module)
            written.append(Written(path, action, archived))
        return written

    def archive(self, path: Path, module: str, now: float) -> Path:
        """Copy a practice file with work in it to ``.mlcanon/attempts/<time>/<module>.py``."""
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
        target = state_dir(self.root) / ATTEMPTS_DIR / stamp / f"{module}.py"
        counter = 1
        while target.exists():
            counter += 1
            target = state_dir(self.root) / ATTEMPTS_DIR / f"{stamp}-{counter}" / f"{module}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        return target

    # -- checks ---------------------------------------------------------------------------------------
    def require_checkable(self, item: catalog.Item, current: progress.Session) -> None:
        """A DrillError unless the item was drilled (its clock runs) and its files exist."""
        entry = current.peek(item.slug)
        if progress.clock(entry) is None:
            if entry.get("attempts"):
                raise DrillError(f"{item.label} was reset since its last attempt: start a new one with "
                                 f"`mlcanon drill {item.slug}`")
            raise DrillError(f"{item.label} has not been drilled yet: `mlcanon drill {item.slug}` writes the stub "
                             "and starts the clock, then check it")
        for module in item.modules:
            if not self.file(module).is_file():
                raise DrillError(f"{self.show(self.file(module))} does not exist: `mlcanon drill {item.slug}` "
                                 "writes a fresh stub")


@dataclass(frozen=True)
class Started:
    """What :func:`start` did: the files written, the running clock, and the attempt's allowance."""

    sandbox: Sandbox
    written: list[Written]
    clock: progress.Clock
    passes_before: int
    allowed_min: float
    warnings: list[str]
    kept: bool = False  # the item was being drilled: its clock, hints and files were left as they were
    running: tuple[tuple[str, float], ...] = ()  # other items being drilled: (slug, when their clock started)

    @property
    def first(self) -> bool:
        return self.passes_before == 0


def start(root: Path, item: catalog.Item, practice: str | None, *, restart: bool = False) -> Started:
    """``mlcanon drill``: write the item's fresh stub (archiving work it replaces) and start its clock.

    An item already being drilled (``progress.drilling``: its clock runs on an attempt not passed yet)
    whose practice files are all there is left alone, clock, hint count and files, and the result says
    so (``kept``), unless ``restart`` (``mlcanon mock``'s fresh stub) asks for a new attempt anyway.
    An item's first drill keeps work already in its files (written from ``mlcanon stubs``, or another
    item's attempt in a shared module) and only starts the clock; later drills archive it and write the
    fresh stub.

    Raises DrillError, StateError, SettingsError or NoReferenceError on bad input, OSError when a
    file cannot be written.
    """
    from pytest_mlcanon.settings import read_pyproject, resolve

    known = progress.snapshot(root)
    sandbox = prepare(root, item, practice, known)
    factor = resolve(cli={}, ini={}, pyproject=read_pyproject(root)).first_attempt_factor
    now = progress.now()
    with progress.session(root) as current:
        entry = current.entry(item.slug)
        running = progress.drilling(entry)
        first_drill = not restart and progress.clock(entry) is None and not entry.get("attempts")
        kept = running is not None and not restart and all(sandbox.file(m).is_file() for m in item.modules)
        clock = running if kept and running is not None else progress.start_clock(entry, now)
        progress.remember_practice(current, item.slug, sandbox.name)
        passes = progress.passes_before(entry, clock.attempt)
        warnings = [*known.warnings, *current.warnings]
        running_too = _other_clocks(current, item)
    allowed = item.minutes * (factor if passes == 0 else 1.0)
    if kept:
        return Started(sandbox, [], clock, passes, allowed, warnings, kept=True, running=running_too)
    # the clock first, then the file: whoever sees the fresh stub appear (`mlcanon watch` in another
    # terminal) finds its attempt already started
    written = sandbox.fresh_stub(item, now, keep_work=first_drill)
    return Started(sandbox, written, clock, passes, allowed, warnings, running=running_too)


def _other_clocks(current: progress.Session, item: catalog.Item) -> tuple[tuple[str, float], ...]:
    """The items other than ``item`` (and those sharing its module) whose attempt's clock runs: each
    item's time counts from its own drill, so drilling several at once makes every later time long
    (blind rounds 35 and 36)."""
    mine = {item.slug, *(other.slug for other in shared_with(item))}
    found = []
    for slug, entry in current.data["items"].items():
        running = progress.drilling(entry) if slug not in mine and isinstance(entry, dict) else None
        if running is not None:
            found.append((slug, running.start))
    return tuple(sorted(found, key=lambda pair: pair[1]))


def prepare(root: Path, item: catalog.Item, practice: str | None, known: progress.Session) -> Sandbox:
    """Where a drill of ``item`` writes its stub (``--practice``, else where it was drilled, as ``known``
    remembers), once the installed canon is known to have the item. Changes nothing."""
    sandbox = Sandbox.at(root, practice, must_exist=False, remembered=progress.remembered_practice(known, [item.slug]))
    sandbox.require_drillable(item)
    return sandbox


def checkable(root: Path, selector: str, practice: str | None) -> tuple[list[catalog.Item], Sandbox, list[str]]:
    """What ``mlcanon check`` and ``mlcanon watch`` check: the items, their sandbox (``--practice``, else
    where they were drilled) and the state's warnings. DrillError (or StateError) unless every item was
    drilled and its files exist."""
    items = select(selector)
    current = progress.snapshot(root)
    sandbox = Sandbox.at(root, practice, must_exist=True,
                         remembered=progress.remembered_practice(current, [i.slug for i in items]))
    for item in items:
        sandbox.require_checkable(item, current)
    return items, sandbox, current.warnings


def drillable(item: catalog.Item) -> bool:
    """True when the installed canon has the item's references and reference tests."""
    from pytest_mlcanon.layout import in_canon

    return in_canon(item)


def relative(root: Path, path: Path) -> str:
    """``path`` relative to ``root`` when it is inside it, else as given."""
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _same_text(path: Path, text: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False


def shared_with(item: catalog.Item) -> list[catalog.Item]:
    """Other items implemented in one of this item's modules (their stub is rewritten too)."""
    others: dict[int, catalog.Item] = {}
    for module in item.modules:
        for other in catalog.items_for_module(module):
            if other.number != item.number:
                others[other.number] = other
    return [others[n] for n in sorted(others)]
