"""The run's collect job: which items can run, which test files pytest collects, which collected test
belongs to which item, and what another option (``-k``, ``-m``, ``--deselect``, ``--lf``, ``--sw``)
left out of an item, which makes the run partial for it.
"""

from __future__ import annotations

import gc
import importlib
import io
import traceback
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from pytest_mlcanon import catalog, redirect, stubs
from pytest_mlcanon.evidence import Status
from pytest_mlcanon.feedback import learner_names
from pytest_mlcanon.layout import in_canon, in_package, inside, shown, tests_dir
from pytest_mlcanon.run.state import ITEM_PROPERTY, CanonRun
from pytest_mlcanon.run.testreports import short_message

#: What an xdist worker hands the controller about each item's selection (``workeroutput``).
SELECTION_KEY = "mlcanon_selection"


class Collect:
    """Registered as ``mlcanon-collect``."""

    def __init__(self, run: CanonRun) -> None:
        self.run = run
        self.selected_files: set[str] = set()

    # -- before collection -----------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Decide per item: no tests, not attempted, not implemented yet, import error, or ready to run."""
        impl = self.run.impl
        for state in self.run.states.values():
            item = state.item
            if not in_canon(item):
                state.status, state.detail = Status.NO_TESTS, "the canon has no reference tests for this item yet"
                continue
            missing = impl.missing_modules(item)
            if len(missing) == len(item.modules):
                state.status = Status.NOT_ATTEMPTED
                state.detail = f"no {', '.join(f'{m}.py' for m in missing)} under {impl.path}"
                continue
            paths = tuple(state.files.values())
            state.detail = stubs.unimplemented_note(paths, [shown(p) for p in paths], item.slug)
            if state.detail:
                state.status = Status.NOT_IMPLEMENTED
                continue
            state.files = {name: path for name, path in state.files.items() if not redirect.untouched_stub(path)}
            state.fallback = self._fallbacks(item)
            state.built_on = self._built_on(item)
            state.detail = self._import_error(item)
            if state.detail:
                state.status = Status.ERROR

    def _fallbacks(self, item: catalog.Item) -> tuple[str, ...]:
        """What comes from the reference instead of the learner's folder: the item's own modules not
        written (an item of several modules, partly written) and the modules of the items it builds on
        that are missing or still stubs here (the redirect serves the reference for those)."""
        impl = self.run.impl
        served = [f"{m}.py ({why})" for m in item.modules if (why := impl.unwritten(m))]
        for module, others in catalog.modules_built_on(item).items():
            why = impl.unwritten(module)
            if why:
                names = " and ".join(f"#{other.number} {other.slug}" for other in others)
                served.append(f"{module}.py ({why}; {names}, which this item builds on)")
        return tuple(served)

    def _built_on(self, item: catalog.Item) -> tuple[str, ...]:
        """The learner's own modules of the items this item builds on: a failure here may start there."""
        impl = self.run.impl
        return tuple(f"{module}.py ({' and '.join(f'#{o.number} {o.slug}' for o in others)})"
                     for module, others in catalog.modules_built_on(item).items() if not impl.unwritten(module))

    def _import_error(self, item: catalog.Item) -> str:
        """Import the item's modules once; a failure becomes a one-line verdict naming file:line."""
        for module in item.modules:
            name = f"{redirect.REF_PACKAGE}.{module.replace('/', '.')}"
            sink = io.StringIO()
            try:
                with redirect_stdout(sink), redirect_stderr(sink):
                    importlib.import_module(name)
            except (Exception, SystemExit) as exc:  # learner code may raise anything, even SystemExit
                return _describe_import_error(exc, self.run.impl.path, self.run.impl.served())
        return ""

    def collect_args(self) -> list[str]:
        """What pytest is asked to collect: the tests folder itself (a file argument outside the rootdir
        gave node ids without a path, ``::test_x``; ``pytest_pycollect_makemodule`` below names every
        file ``canon_tests/test_x.py``). ``pytest_ignore_collect`` keeps every other file of the
        folder out. A file shared with an item whose learner module failed
        to import cannot import either, and is left out."""
        states = self.run.states.values()
        blocked = {name for state in states if state.status is Status.ERROR for name in state.item.test_files}
        self.selected_files = {name for state in states if state.pending for name in state.item.test_files} - blocked
        return [str(tests_dir())] if self.selected_files else []

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """True (skip it) for a test file of the folder that no selected item owns; None: no opinion."""
        if collection_path.parent != tests_dir() or not collection_path.name.startswith("test_"):
            return None
        return True if collection_path.name not in self.selected_files else None

    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makemodule(self, module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
        """A test file of the canon is named as its package shows it, ``canon_tests/test_x.py``, so
        its tests' node ids (pytest's progress and FAILED lines, the short summary, ``--deselect``,
        the ``--lf`` cache) read ``canon_tests/test_x.py::test_y`` wherever the package is installed:
        not ``.venv/lib/python3.11/site-packages/canon_tests/...`` when the virtual environment sits
        inside the rootdir, nor a bare ``test_x.py::test_y`` when it lies outside. None: pytest's own
        module for any other file."""
        if module_path.parent != tests_dir():
            return None
        return pytest.Module.from_parent(parent, path=module_path, nodeid=in_package(module_path))

    # -- collection --------------------------------------------------------------------------------------------
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        """Keep the tests of the selected, runnable items (tagged with their item); deselect the rest
        (another item's tests in a shared file)."""
        kept: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        for node in items:
            state = self.run.pending_state(node)
            if state is not None:
                node.user_properties.append((ITEM_PROPERTY, state.item.slug))
                kept.append(node)
            else:
                dropped.append(node)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """A test of a selected item that another option deselected makes the run partial for that
        item. The run's own deselection above names tests of no pending item."""
        for node in items:
            state = self.run.pending_state(node)
            if state is not None:
                state.deselected.append(node.nodeid)
                state.narrowed_by[:] = _narrowing_options(self.run.config)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A test file that failed to import marks each selected item it holds as an error."""
        if not report.failed:
            return
        name = Path(str(report.nodeid).split("::")[0]).name
        for item in catalog.items_for_test_file(name):
            state = self.run.states.get(item.number)
            if state is not None and state.pending:
                state.status = Status.ERROR
                state.detail = f"reference tests could not be collected: {short_message(report)}"

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Note the tests each item will run, then move everything imported so far (torch, the
        learner's modules, the tests) out of the garbage collector's reach: nothing of it is garbage,
        and a full collection over torch's heap costs ~0.1 s each time pytest forces one at the end of
        the run. The plugin unfreezes at the very end (a cleanup), so an in-process run (pytester)
        leaves nothing behind. Freezing is a constant-time list splice, also over a heap a grading
        zygote froze already; asking first with ``gc.get_freeze_count()`` would walk every frozen
        object (30 to 40 ms in a grading job).

        ``--lf`` narrows silently (it skips whole files and drops tests inside a file without
        reporting them), so it makes every item partial when it narrowed the run at all."""
        for node in session.items:
            state = self.run.pending_state(node)
            if state is not None:
                state.expected[node.nodeid] = None
        if _last_failed_narrowed(self.run.config, session.items):
            for state in self.run.states.values():
                if state.pending and "--lf" not in state.narrowed_by:
                    state.narrowed_by.append("--lf")
        gc.freeze()

    # -- under xdist: the workers collect, the controller scores ---------------------------------------------
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[SELECTION_KEY] = {
                state.item.slug: {"expected": list(state.expected), "deselected": state.deselected,
                                  "by": state.narrowed_by}
                for state in self.run.states.values() if state.pending}

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Every worker collects the same tests: take the union of what they report."""
        for slug, selection in getattr(node, "workeroutput", {}).get(SELECTION_KEY, {}).items():
            state = self.run.state_of(slug)
            if state is not None and state.pending:
                state.expected.update(dict.fromkeys(selection["expected"]))
                state.deselected[:] = list(dict.fromkeys([*state.deselected, *selection["deselected"]]))
                state.narrowed_by[:] = list(dict.fromkeys([*state.narrowed_by, *selection["by"]]))


def _narrowing_options(config: pytest.Config) -> list[str]:
    """The options of this run that deselect tests, as the user gave them."""
    option = config.option
    keyword, markexpr = getattr(option, "keyword", ""), getattr(option, "markexpr", "")
    given = [(f"-k {keyword!r}", keyword), (f"-m {markexpr!r}", markexpr),
             ("--deselect", getattr(option, "deselect", None)),
             ("--lf", getattr(option, "lf", False)),
             ("--sw", getattr(option, "stepwise", False))]
    return [text for text, value in given if value]


def _last_failed_narrowed(config: pytest.Config, items: list[pytest.Item]) -> bool:
    """``--lf`` ran only the previous failures: the cache knew failures and some collected test is one."""
    if not getattr(config.option, "lf", False) or config.cache is None:
        return False
    known = config.cache.get("cache/lastfailed", {})
    return bool(known) and any(node.nodeid in known for node in items)


def _describe_import_error(exc: BaseException, impl_dir: Path, served: dict[str, str]) -> str:
    """``SyntaxError at practice/posttrain/dpo.py:12: invalid syntax`` and the like; the learner's
    modules are named as their files (``served``), not as the ``canon_refs`` names they import under."""
    kind = type(exc).__name__
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{kind} at {shown(exc.filename)}:{exc.lineno}: {exc.msg}"
    frames = traceback.extract_tb(exc.__traceback__)
    learner_frames = [f for f in frames if inside(f.filename, impl_dir)]
    where = ""
    if learner_frames:
        frame = learner_frames[-1]
        where = f" at {shown(frame.filename)}:{frame.lineno}"
    detail = learner_names(str(exc).splitlines()[0], served) if str(exc) else ""
    return f"{kind}{where} while importing: {detail}".rstrip(": ")
