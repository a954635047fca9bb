"""The notebook front end: ``%load_ext pytest_mlcanon``, then a cell that starts ``%%canon ITEM``.

The cell's code becomes the learner's module for the item (``practice/posttrain/dpo.py``, in the
learner repo the notebook runs in; ``--module`` picks one of an item of several modules), and the
check ``mlcanon check`` runs is made of it: the same report, the same record in
``.mlcanon/progress.json`` and ``.mlcanon/misslog.md``. An item not drilled yet is drilled first (its
clock starts with this cell). A file with work in it that this kernel's cells did not write (an editor
did, or an earlier session) is copied to ``.mlcanon/attempts/`` before the cell replaces it, and the
cell says where: a cell never throws away work.

The check never runs in the kernel: a warm server process (``python -m pytest_mlcanon.warm``, started
on the first cell and kept) warms up once per item and forks each check from itself, so the kernel's
own state is never touched, and a cell that crashes, exits or hangs (stopped after ``--timeout``
seconds) ends that check only; such a check records nothing. The report shows inline: a table and
the findings as HTML in a notebook, text in a terminal IPython, with pytest's output folded beneath.

IPython is an optional extra (``pip install "pytest-mlcanon[notebook]"``); nothing here imports it
until the extension is loaded.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_mlcanon import catalog, warm

if TYPE_CHECKING:
    from pytest_mlcanon.drill import Sandbox

MAGIC = "canon"


class CanonError(Exception):
    """Bad input to ``%%canon``, or a check that could not run: shown as one line, the kernel untouched."""


class Help(CanonError):
    """``%%canon --help``: the message is the help, shown as the cell's output (the cell does not fail)."""


class Interrupted(CanonError):
    """The kernel was interrupted during a check: the check and its server were stopped."""


class Server:
    """The warm check server, a child of the kernel, spoken to one JSON line at a time."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.process = subprocess.Popen([sys.executable, "-m", "pytest_mlcanon.warm"], cwd=root,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True, bufsize=1, start_new_session=True)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def ask(self, request: warm.Request) -> warm.Reply:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(request.to_json() + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except KeyboardInterrupt:  # the kernel's interrupt: the check stops with this server, a reply never comes
            self.close()
            raise Interrupted("interrupted: the check was stopped and recorded nothing; the next cell starts a new "
                             "warm server") from None
        except OSError as exc:
            self.close()
            raise CanonError(f"the warm check server is gone ({exc}); the next cell starts a new one") from None
        if not line:
            raise CanonError(f"the warm check server ended (status {self.process.wait()}); the next cell starts "
                             "a new one")
        return warm.Reply.from_json(line)

    def close(self) -> None:
        """Stop the server: SIGTERM stops a running check with it (its process group); SIGKILL if it lingers."""
        if self.alive:
            self.process.terminate()
        with contextlib.suppress(Exception):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_servers: dict[Path, Server] = {}


def server(root: Path) -> Server:
    """The repo's warm server, started on first use and again if it has ended."""
    current = _servers.get(root)
    if current is None or not current.alive:
        current = _servers[root] = Server(root)
    return current


@atexit.register
def _close_all() -> None:
    for each in _servers.values():
        each.close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="%%canon", add_help=False, exit_on_error=False,
        description="Check the cell's code as your module for one canon item, as `mlcanon check` does (drilling "
        "the item first if needed), in a warm process forked per cell.")
    parser.add_argument("item", metavar="ITEM", help="a slug or a number: posttrain/dpo, 55")
    parser.add_argument("--module", default=None, metavar="M",
                        help="which of the item's modules the cell is (items of several modules)")
    parser.add_argument("--practice", default=None, metavar="DIR",
                        help="the practice directory (default: the one the item was drilled in)")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="stop a check still running after S seconds (it records nothing)")
    return parser


@dataclass(frozen=True)
class Cell:
    """What a ``%%canon`` line asks for."""

    item: catalog.Item
    module: str
    practice: str | None
    timeout_s: float | None


def parse(line: str) -> Cell:
    """The ``%%canon`` line's item, module, practice directory and timeout (CanonError when bad)."""
    from pytest_mlcanon import drill

    try:
        words = shlex.split(line)
        if "-h" in words or "--help" in words:
            raise Help(_parser().format_help())
        args = _parser().parse_args(words)
    except (argparse.ArgumentError, ValueError) as exc:
        raise CanonError(f"usage: %%canon ITEM [--module M] [--practice DIR] [--timeout S] ({exc})") from None
    except SystemExit:  # argparse's exit on a missing argument, whatever exit_on_error says
        raise CanonError("usage: %%canon ITEM [--module M] [--practice DIR] [--timeout S]") from None
    try:
        items = drill.select(args.item)
    except drill.DrillError as exc:
        raise CanonError(str(exc)) from None
    if len(items) != 1:
        raise CanonError(f"%%canon checks one item a cell; {args.item!r} names {len(items)}")
    item = items[0]
    module = args.module or item.modules[0]
    if module not in item.modules:
        module = next((m for m in item.modules if m.rsplit("/", 1)[-1] == module), "")
        if not module:
            raise CanonError(f"{item.label} has the modules {', '.join(item.modules)}; --module names one")
    if args.timeout is not None and not args.timeout > 0:
        raise CanonError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    return Cell(item, module, args.practice, args.timeout)


@dataclass(frozen=True)
class Checked:
    """A ``%%canon`` cell's outcome, shown as HTML in a notebook and as text in a terminal."""

    cell: Cell
    file: str
    started: str
    reply: warm.Reply

    @property
    def headline(self) -> str:
        return self.reply.run.describe(self.cell.item.label) + f" · {self.reply.run.seconds:.2f} s"

    def output(self) -> str:
        try:
            return Path(self.reply.output).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def report(self) -> dict[str, Any]:
        try:
            data = json.loads(Path(self.reply.report).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if self.reply.run.ending.whole and isinstance(data, dict) else {}

    def __repr__(self) -> str:
        text = self.output().rstrip("\n")
        return "\n".join(x for x in (self.started, text, f"── {self.headline} ──") if x)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def _repr_html_(self) -> str:
        run = self.reply.run
        colour = "#1b7f3b" if run.passed else "#b42318"
        parts = [f"<div class='mlcanon-cell'><p style='font-weight:600;color:{colour}'>{escape(self.headline)}</p>"]
        if self.started:
            parts.append(f"<p>{escape(self.started)}</p>")
        report = self.report()
        labels = report.get("axes", {})
        for item in report.get("items", []):
            parts.append(_item_html(item, labels if isinstance(labels, dict) else {}))
        parts.append(f"<details><summary>pytest output ({escape(self.file)})</summary>"
                     f"<pre>{escape(self.output())}</pre></details></div>")
        return "".join(parts)


def _item_html(item: dict[str, Any], labels: dict[str, str]) -> str:
    """One item of the JSON report: its axes, score and verdict as a table, then its findings."""
    axes = item.get("axes", {})
    header = "".join(f"<th>{escape(str(labels.get(name, name)))}</th>" for name in axes)
    cells = "".join(f"<td>{'yes' if axis.get('passed') else 'NO'}</td>" for axis in axes.values())
    rows = [f"<table data-item='{escape(str(item.get('slug')))}'><tr><th>item</th>{header}<th>score</th>"
            f"<th>verdict</th></tr><tr><td>#{escape(str(item.get('number')))} {escape(str(item.get('slug')))}</td>"
            f"{cells}<td>{escape(str(item.get('score')))}/5</td><td>{escape(str(item.get('verdict')))}</td></tr>"
            "</table>"]
    findings = [f for axis in axes.values() for f in axis.get("findings", [])]
    if item.get("error"):
        rows.append(f"<p>{escape(str(item['error']))}</p>")
    if findings:
        rows.append("<ul>" + "".join(f"<li><code>{escape(str(f.get('path', '')))}:{escape(str(f.get('line', '')))}"
                                     f"</code> {escape(str(f.get('code', '')))} {escape(str(f.get('message', '')))}"
                                     "</li>" for f in findings) + "</ul>")
    return "".join(rows)


def run_cell(line: str, cell_code: str, cwd: Path) -> Checked:
    """Write the cell as the learner's module (drilling the item first when its clock is not running)
    and check it in the repo's warm server."""
    from pytest_mlcanon import drill, progress
    from pytest_mlcanon.settings import SettingsError
    from pytest_mlcanon.state import StateError, find_root
    from pytest_mlcanon.stubs import NoReferenceError

    cell = parse(line)
    root = find_root(cwd)
    started = ""
    try:
        current = progress.snapshot(root)
        sandbox = drill.Sandbox.at(root, cell.practice, must_exist=False,
                                   remembered=progress.remembered_practice(current, [cell.item.slug]))
        if progress.clock(current.peek(cell.item.slug)) is None:
            begun = drill.start(root, cell.item, cell.practice)
            sandbox = begun.sandbox
            started = f"{cell.item.label}: drilled from this cell, attempt {begun.clock.attempt} (clock started)"
        target = sandbox.file(cell.module)
        target.parent.mkdir(parents=True, exist_ok=True)
        kept = keep_other_work(sandbox, target, cell.module, cell_code)
        target.write_text(cell_code, encoding="utf-8")
        _written_by_cells[target] = cell_code.encode("utf-8")
    except (drill.DrillError, StateError, SettingsError, NoReferenceError, OSError) as exc:
        raise CanonError(str(exc)) from None
    started = "\n".join(note for note in (started, kept) if note)
    request = warm.Request((cell.item.slug,), str(root), str(sandbox.practice), cell.timeout_s)
    return Checked(cell, sandbox.show(target), started, server(root).ask(request))


_written_by_cells: dict[Path, bytes] = {}  # what this kernel's cells last wrote to each file


def keep_other_work(sandbox: Sandbox, target: Path, module: str, cell_code: str) -> str:
    """Copy ``target`` to ``.mlcanon/attempts/`` when it holds work this kernel's cells did not write (not
    the cell's own code, not what the last cell wrote there, not an untouched stub); the note saying
    where, or ``""``."""
    from pytest_mlcanon import stubs

    try:
        current = target.read_bytes()
    except OSError:
        return ""
    if current in (cell_code.encode("utf-8"), _written_by_cells.get(target)) or stubs.unimplemented(target):
        return ""
    copy = sandbox.archive(target, module, time.time())
    return (f"{sandbox.show(target)} held work this notebook did not write; the cell replaced it, and a copy is "
            f"kept at {sandbox.show(copy)}")


def load(ipython: Any) -> None:
    """Register the ``%%canon`` cell magic (``%load_ext pytest_mlcanon`` calls this)."""

    from IPython.core.error import UsageError

    def canon(line: str, cell: str) -> Checked | None:
        try:
            return run_cell(line, cell, Path.cwd())
        except Help as shown:  # asked for: printed, and the cell does not fail
            print(shown)
            return None
        except CanonError as exc:  # one line, no traceback, and the cell fails: "Run all" stops here
            raise UsageError(f"%%canon: {exc}") from None

    ipython.register_magic_function(canon, magic_kind="cell", magic_name=MAGIC)
