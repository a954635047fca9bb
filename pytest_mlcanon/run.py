"""One ``pytest --canon-item`` run: which items, which learner files, which tests, which outcomes.

Built in ``pytest_configure`` only when ``--canon-item`` is given and registered with the plugin
manager as ``mlcanon-run``; the hook functions in ``plugin.py`` delegate here.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import io
import traceback
from collections.abc import Generator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_mlcanon import catalog, learner_coverage, redirect, rubric, stubs
from pytest_mlcanon.impl import Impl, with_module_mates
from pytest_mlcanon.reports import Report, write
from pytest_mlcanon.reports import terminal as terminal_report
from pytest_mlcanon.rubric import correctness, shape_instrument, shape_runtime
from pytest_mlcanon.rubric.model import AXES, Finding, ItemScore, Outcome
from pytest_mlcanon.settings import Settings
from pytest_mlcanon.timer import TimedRun

TEST_PACKAGE = "canon_tests"
ITEM_PROPERTY = "canon_item"
SHAPES_PROPERTY = "canon_shapes"
NONFINITE_PROPERTY = "canon_first_nonfinite"
CONTRACT_PROPERTY = "canon_contract_advice"
CONTRACT_MARKER = "contract"


def tests_dir() -> Path:
    """Directory of the installed ``canon_tests`` package (found without importing any test)."""
    spec = importlib.util.find_spec(TEST_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the canon_tests package is not installed next to pytest_mlcanon")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def in_canon(item: catalog.Item) -> bool:
    """True when the installed canon has the item's reference modules and test files."""
    refs, tests = redirect.reference_dir(), tests_dir()
    return all((refs / f).is_file() for f in item.module_files) and all(
        (tests / name).is_file() for name in item.test_files)


@dataclass
class ItemState:
    """What the run knows about one selected item before the rubric scores it."""

    item: catalog.Item
    files: tuple[Path, ...] = ()
    status: str = "pending"  # pending -> scored | not attempted | error | no tests
    error: str = ""
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    fallback: list[str] = field(default_factory=list)
    shape_results: list[list[list[Any]]] = field(default_factory=list)


class CanonRun:
    """State of one canon run, shared by the hooks."""

    def __init__(self, config: pytest.Config, items: tuple[catalog.Item, ...], impl: Impl, settings: Settings, *,
                 reports: list[tuple[str, Path]] | None = None, timed: str | None = None) -> None:
        self.config = config
        self.impl = impl
        self.settings = settings
        self.report_targets = reports or []
        self.timed = timed
        mates: list[str] = []
        if settings.whole_module and not impl.is_reference:  # a selected module is checked whole
            items, mates = with_module_mates(items, impl)
        self.states = {item.number: ItemState(item) for item in items}
        self.report: Report | None = None
        self.messages: list[str] = mates
        self.measurement: learner_coverage.Measurement | None = None
        self.selected_files: set[str] = set()

    @property
    def cov_running(self) -> bool:
        """pytest-cov measures this run (``--cov``): its measurement is read, none started."""
        option = self.config.option
        return bool(getattr(option, "cov_source", None)) and not getattr(option, "no_cov", False)

    @property
    def measures_coverage(self) -> bool:
        return self.settings.coverage or self.cov_running

    # -- before collection -------------------------------------------------------------------------
    def prepare(self) -> None:
        """Decide per item: not attempted, import error, no tests, or ready to run."""
        if self.measures_coverage:  # before the first import of a learner module: its top level counts
            self.measurement = learner_coverage.Measurement(
                (f for state in self.states.values() for f in self.impl.files(state.item)), borrow=self.cov_running)
            self.measurement.start()
        for state in self.states.values():
            item = state.item
            state.files = self.impl.files(item)
            if not in_canon(item):
                state.status = "no tests"
                state.error = "the canon has no reference tests for this item yet"
                continue
            missing = self.impl.missing_modules(item)
            if len(missing) == len(item.modules):
                state.status = "not attempted"
                listed = ", ".join(f"{m}.py" for m in missing)
                state.error = f"no {listed} under {self.impl.path}"
                continue
            state.error = stubs.unimplemented_note(state.files, [_show(str(p)) for p in state.files],
                                                   item.slug)
            if state.error:
                state.status = "not implemented yet"
                continue
            state.files, state.fallback = self._fallbacks(item, state.files)
            state.error = self._import_error(item)
            if state.error:
                state.status = "error"

    def _fallbacks(self, item: catalog.Item, files: tuple[Path, ...]) -> tuple[tuple[Path, ...], list[str]]:
        """The item's written files, and what comes from the reference instead: its own modules not
        written (an item of several modules, partly written) and the modules of the items it builds on
        that are missing or still stubs here (the redirect serves the reference for those)."""
        written = tuple(p for p in files if not redirect.untouched_stub(p))
        served = [f"{m}.py ({why})" for m in item.modules if (why := self.impl.unwritten(m))]
        for other in catalog.builds_on(item):
            served += [f"{m}.py ({why}; #{other.number} {other.slug}, which this item builds on)"
                       for m in other.modules if m not in item.modules and (why := self.impl.unwritten(m))]
        return written, served

    def _import_error(self, item: catalog.Item) -> str:
        """Import the item's modules once; a failure becomes a one-line verdict naming file:line."""
        for module in item.modules:
            name = f"{redirect.REF_PACKAGE}.{module.replace('/', '.')}"
            sink = io.StringIO()
            try:
                with redirect_stdout(sink), redirect_stderr(sink):
                    importlib.import_module(name)
            except (Exception, SystemExit) as exc:  # learner code may raise anything, even SystemExit
                return _describe_import_error(exc, self.impl.path)
        return ""

    def test_paths(self) -> list[str]:
        """The test files of the items that will run, each once, in canon order."""
        base = tests_dir()
        paths: dict[str, None] = {}
        for state in self.states.values():
            if state.status == "pending":
                for name in state.item.test_files:
                    paths[str(base / name)] = None
        blocked = self._blocked_files()
        return [p for p in paths if Path(p).name not in blocked]

    def _blocked_files(self) -> set[str]:
        """Test files shared with an item whose learner module failed to import: they cannot import."""
        return {
            name
            for state in self.states.values()
            if state.status == "error"
            for name in state.item.test_files
        }

    def collect_args(self) -> list[str]:
        """What pytest is asked to collect: the tests folder itself, so node ids keep the file name
        (``test_posttrain_dpo.py::test_x``; pytest names a test relative to the argument it came from,
        and a file argument outside the rootdir left ``::test_x``). ``pytest_ignore_collect`` keeps
        every other file of the folder out."""
        self.selected_files = {Path(p).name for p in self.test_paths()}
        return [str(tests_dir())] if self.selected_files else []

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """True (skip it) for a test file of the folder that no selected item owns; None: no opinion."""
        if collection_path.parent != tests_dir() or not collection_path.name.startswith("test_"):
            return None
        return True if collection_path.name not in self.selected_files else None

    # -- collection ---------------------------------------------------------------------------------
    def owner(self, node: pytest.Item) -> catalog.Item | None:
        """The canon item a collected test belongs to: its ``canon`` marker, else its file's only item."""
        marker = node.get_closest_marker("canon")
        if marker is not None and marker.args:
            try:
                return catalog.get(marker.args[0])
            except catalog.UnknownItemError:
                return None
        owners = catalog.items_for_test_file(Path(str(node.fspath)).name)
        return owners[0] if len(owners) == 1 else None

    def select(self, items: list[pytest.Item]) -> tuple[list[pytest.Item], list[pytest.Item]]:
        """Split collected tests into (kept, deselected) by the selected, runnable items."""
        kept: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        for node in items:
            owner = self.owner(node)
            state = self.states.get(owner.number) if owner else None
            if state is not None and state.status == "pending":
                node.user_properties.append((ITEM_PROPERTY, owner.slug))  # type: ignore[union-attr]
                kept.append(node)
            else:
                dropped.append(node)
        return kept, dropped

    # -- running ----------------------------------------------------------------------------------------
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Move everything imported so far (torch, the learner's modules, the tests) out of the
        garbage collector's reach: nothing of it is garbage, and a full collection over torch's heap
        costs ~0.1 s each time pytest forces one at the end of the run. The plugin unfreezes at the
        very end (a cleanup), so an in-process run (pytester) leaves nothing behind. Freezing is a
        constant-time list splice, also over a heap a grading zygote froze already; asking first with
        ``gc.get_freeze_count()`` would walk every frozen object (30 to 40 ms in a grading job)."""
        gc.freeze()
        if self.measurement is not None:
            self.measurement.attach()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        """Collect the shape checks of the item's own files made while its test body runs (SHP002)."""
        owner = self.owner(item)
        state = self.states.get(owner.number) if owner else None
        if state is None or not self.settings.runtime_shapes or not state.files:
            yield
            return
        shape_instrument.reset()
        try:
            yield
        finally:
            mine = {str(p.resolve()) for p in state.files}
            results = [[path, line, status, detail]
                       for (path, line), (status, detail) in sorted(shape_instrument.RECORDER.items())
                       if path in mine]
            results += [[path, line, shape_runtime.ENTERED, ""] for path, line in sorted(shape_instrument.ENTERED)
                        if path in mine]
            results += [[path, line, shape_runtime.TRANSPOSED, str(ndim)]
                        for (path, line), ndim in sorted(shape_instrument.TRANSPOSED.items()) if path in mine]
            nonfinite = [list(first) for first in shape_instrument.FIRST_NONFINITE]  # only these files are instrumented
            shape_instrument.reset()
            item.user_properties.append((SHAPES_PROPERTY, results))
            if nonfinite:
                item.user_properties.append((NONFINITE_PROPERTY, nonfinite[0]))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        """A failing input-validation check (``contract`` marker) is advice unless ``contract = required``:
        reported as an expected failure (``x``), so it neither fails the run nor counts toward Correctness;
        the rubric still records it as failed and lists it."""
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if (report.when == "call" and report.failed and not self.settings.contract_required
                and item.get_closest_marker(CONTRACT_MARKER) is not None):
            report.outcome = "skipped"
            report.wasxfail = f"input check (advice): {_short_message(report)}"
            report.user_properties.append((CONTRACT_PROPERTY, "failed"))

    # -- outcomes (hooks of this registered plugin object, so they also run on an xdist controller) --
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.record(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.record_collect_error(report)

    def record(self, report: pytest.TestReport) -> None:
        """Fold one phase report into the test's final outcome (works on an xdist controller too)."""
        properties: dict[str, Any] = dict(report.user_properties)
        slug = properties.get(ITEM_PROPERTY)
        if slug is None:
            return
        state = self.states.get(catalog.get(slug).number)
        if state is None:
            return
        if report.when == "call":
            self._record_shapes(state, properties.get(SHAPES_PROPERTY, []))
        previous = state.outcomes.get(report.nodeid)
        outcome = "failed" if properties.get(CONTRACT_PROPERTY) else _phase_outcome(report)
        if outcome is None:
            return
        keywords = report.keywords
        if previous is not None and _rank(previous.outcome) >= _rank(outcome):
            return
        state.outcomes[report.nodeid] = Outcome(
            nodeid=report.nodeid,
            outcome=outcome,
            probe="numerics_probe" in keywords,
            edge="edge_case" in keywords,
            contract=CONTRACT_MARKER in keywords,
            message=(report.wasxfail.partition(": ")[2] if properties.get(CONTRACT_PROPERTY)
                     else _short_message(report)),
            where=_failure_location(report, state.files, self.config.invocation_params.dir, self.config.rootpath),
            nonfinite=self._nonfinite_at(properties.get(NONFINITE_PROPERTY)) or (
                previous.nonfinite if previous else None),
            duration=(previous.duration if previous else 0.0) + float(getattr(report, "duration", 0.0)),
        )

    def _nonfinite_at(self, first: list[Any] | None) -> tuple[str, int, str] | None:
        if not first:
            return None
        path, line, text = first
        return _show(path), int(line), str(text)

    @staticmethod
    def _record_shapes(state: ItemState, exported: list[list[Any]]) -> None:
        if exported:
            state.shape_results.append(exported)

    def record_collect_error(self, report: pytest.CollectReport) -> None:
        """A test file that failed to import marks each selected item it holds as an error."""
        if not report.failed:
            return
        name = Path(str(report.nodeid).split("::")[0]).name
        for item in catalog.items_for_test_file(name):
            state = self.states.get(item.number)
            if state is not None and state.status == "pending":
                state.status = "error"
                state.error = f"reference tests could not be collected: {_short_message(report)}"


    # -- coverage of the learner's files (an xdist worker hands its lines to the controller) ---------
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None and self.measurement is not None:
            workeroutput[learner_coverage.WORKER_KEY] = self.measurement.stop()

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        if self.measurement is not None:
            self.measurement.merge(getattr(node, "workeroutput", {}).get(learner_coverage.WORKER_KEY, {}))

    # -- after the tests -------------------------------------------------------------------------------
    def finish(self) -> int:
        """Score every item, write the reports, and return how many extra failures the run gets."""
        if self.measurement is not None:
            self.measurement.stop()
        timer = (TimedRun(self.config.invocation_params.dir, self.timed, self.settings.first_attempt_factor)
                 if self.timed else None)
        scores = [self._score_safely(state, timer) for state in self.states.values()]
        if timer is not None:
            outcomes = {s.item.slug: list(s.outcomes.values()) for s in self.states.values()}
            self.messages += timer.record(scores, outcomes)
        self.report = Report(self.impl.describe(), scores, self.settings.min_score)
        self._add_junit_properties(scores)
        for fmt, path in self.report_targets:
            write(self.report, fmt, path)
            self.messages.append(f"wrote {fmt} report to {path}")
        failures = len(self.report.failed_items)
        if self.settings.strict_shapes:
            failures += sum(1 for s in scores if any(f.code in {"SHP001", "SHP003"} for f in s.findings))
        return failures

    def _score_safely(self, state: ItemState, timer: TimedRun | None) -> ItemScore:
        """Score one item; a failure inside the rubric becomes that item's verdict, never a crash."""
        try:
            return self._score(state, timer)
        except Exception as exc:  # the grader must survive whatever the learner's files contain
            item = state.item
            return ItemScore(item.number, item.slug, item.title, "error",
                             error=f"the rubric could not score this item: {type(exc).__name__}: {exc}")

    def _score(self, state: ItemState, timer: TimedRun | None) -> ItemScore:
        item = state.item
        root = self.config.invocation_params.dir
        score = ItemScore(item.number, item.slug, item.title, state.status,
                          files=[_show(str(p)) for p in state.files], error=state.error,
                          fallback=state.fallback)
        if state.status != "pending":
            return score
        outcomes = list(state.outcomes.values())
        score.status = "scored"
        advice = {o.nodeid for o in outcomes if o.contract and o.outcome == "failed" and not self.settings.contract_required}
        counted = [o for o in outcomes if o.nodeid not in advice]
        score.tests = {k: sum(1 for o in counted if o.outcome == k) for k in ("passed", "failed", "error", "skipped")}
        score.tests["input checks not held (advice)"] = len(advice)
        timing_findings: list[Finding] = []
        if timer is not None:
            score.timing, timing_findings = timer.assess(item, state.files, score.files[0] if score.files else item.slug)
        ref_files = [redirect.reference_dir() / f for f in item.module_files]
        runtime, notes = self._runtime_shapes(state, root)
        evidence = rubric.Evidence(item, list(state.files), ref_files, outcomes, root, timing_findings=timing_findings,
                                   runtime_shape_findings=runtime, runtime_shape_notes=notes,
                                   runtime_transposes=shape_runtime.full_transposes(state.shape_results))
        score.axes = rubric.score_item(evidence, self.settings)
        tests = ", ".join(_show(str(tests_dir() / name)) for name in item.test_files)
        score.axes["correctness"] = correctness.locate(score.axes["correctness"], tests or item.slug)
        if self.measurement is not None:
            display = {str(p.resolve()): _show(str(p)) for p in state.files}
            score.coverage = {c.path: c.to_dict() for c in learner_coverage.summarize(self.measurement.lines, display)}
        return score

    def _runtime_shapes(self, state: ItemState, root: Path) -> tuple[list[Finding], list[str]]:
        """SHP002 findings and the confirmed share, from the traced tests of one item."""
        if not self.settings.runtime_shapes:
            return [], ["runtime shape check off (mlcanon_runtime_shapes = false)"]
        display = {str(p.resolve()): _show(str(p)) for p in state.files}
        verdicts = shape_runtime.merge(state.files, state.shape_results, display)
        findings = [
            Finding("SHP002", f"{v.path}", v.line, f"wrong shape comment: {v.detail}",
                    "correct the comment (or the code): the comment must state the value's real shape")
            for v in verdicts if v.status == shape_runtime.CONTRADICTED
        ]
        verdicts = [v for v in verdicts if v.status != shape_runtime.NOT_EXERCISED]  # another item's code
        counts = {s: sum(1 for v in verdicts if v.status == s)
                  for s in (shape_runtime.CONFIRMED, shape_runtime.CONTRADICTED, "never executed")}
        total = len(verdicts)
        share = counts[shape_runtime.CONFIRMED] / total if total else 1.0
        notes = [f"runtime: {counts['confirmed']} confirmed, {counts['contradicted']} contradicted, "
                 f"{counts['never executed']} never executed of {total} shape comments ({share:.0%} confirmed)"]
        return findings, notes

    def _add_junit_properties(self, scores: list[ItemScore]) -> None:
        from _pytest.junitxml import xml_key

        xml = self.config.stash.get(xml_key, None)
        if xml is None:
            return
        for score in scores:
            prefix = f"mlcanon.{score.slug}"
            xml.add_global_property(f"{prefix}.verdict", score.verdict)
            if score.status == "scored":
                xml.add_global_property(f"{prefix}.score", str(score.score))
                for axis in AXES:
                    xml.add_global_property(f"{prefix}.{axis}", "pass" if score.axes[axis].passed else "fail")

    def summarize(self, terminalreporter: Any) -> None:
        """The rubric section of the terminal summary."""
        if self.report is None:
            return
        terminalreporter.write_sep("=", "mlcanon rubric")
        for line in terminal_report.render(self.report):
            terminalreporter.write_line(line)
        for message in self.messages:
            terminalreporter.write_line(message)


_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def _rank(outcome: str) -> int:
    return _RANK[outcome]


def _phase_outcome(report: pytest.TestReport) -> str | None:
    if report.when == "call":
        return "skipped" if report.skipped else ("failed" if report.failed else "passed")
    if report.failed:
        return "error"
    if report.skipped:
        return "skipped"
    return None


def _short_message(report: Any) -> str:
    """The last meaningful line of a failure (``E   AssertionError: ...``), trimmed to one line."""
    longrepr = getattr(report, "longrepr", None)
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # skip: (path, line, reason)
        return str(longrepr[2])
    crash = getattr(getattr(longrepr, "reprcrash", None), "message", None)
    text = crash if crash else str(longrepr)
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""


def _failure_location(report: Any, learner_files: tuple[Path, ...], root: Path,
                      rootpath: Path | None = None) -> tuple[str, int] | None:
    """Where a failure happened: the deepest traceback entry in the learner's files, else the
    failing line of the test function's own body (an assertion on a wrong value never enters the
    learner's code; a shared helper such as ``_close`` would name the same line for every test), else
    the deepest entry, else (no traceback: ``--tb=no``, a string report) the test function itself."""
    if not getattr(report, "failed", False):
        return None
    entries = getattr(getattr(getattr(report, "longrepr", None), "reprtraceback", None), "reprentries", None) or []
    locations = [(loc.path, loc.lineno) for e in entries if (loc := getattr(e, "reprfileloc", None)) is not None]
    if not locations:
        return _test_location(report, rootpath or root)
    learner = {str(p.resolve()) for p in learner_files}
    inside = [loc for loc in locations if _resolve_quietly(loc[0], root) in learner]
    if inside:
        path, line = inside[-1]
    else:
        test = _test_location(report, rootpath or root)
        in_test = [loc for loc in locations if test is not None and _show(_resolve_quietly(loc[0], root)) == test[0]]
        path, line = in_test[0] if in_test else locations[-1]  # the outermost test-file entry: the test's body
    return _show(_resolve_quietly(path, root)), int(line)


def _test_location(report: Any, rootpath: Path) -> tuple[str, int] | None:
    """The test function's file and ``def`` line (``report.location`` is relative to the rootdir)."""
    location = getattr(report, "location", None)
    if not location or not location[0]:
        return None
    path, lineno = location[0], location[1]
    return _show(_resolve_quietly(path, rootpath)), int(lineno) + 1 if lineno is not None else 0


def _resolve_quietly(path: str, root: Path) -> str:
    try:
        return str((root / path).resolve())
    except OSError:
        return path


def _describe_import_error(exc: BaseException, impl_dir: Path) -> str:
    """``SyntaxError at practice/posttrain/dpo.py:12: invalid syntax`` and the like."""
    kind = type(exc).__name__
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{kind} at {_show(exc.filename)}:{exc.lineno}: {exc.msg}"
    frames = traceback.extract_tb(exc.__traceback__)
    learner_frames = [f for f in frames if _inside(f.filename, impl_dir)]
    where = ""
    if learner_frames:
        frame = learner_frames[-1]
        where = f" at {_show(frame.filename)}:{frame.lineno}"
    detail = str(exc).splitlines()[0] if str(exc) else ""
    return f"{kind}{where} while importing: {detail}".rstrip(": ")


def _inside(filename: str, folder: Path) -> bool:
    try:
        Path(filename).resolve().relative_to(folder)
    except (ValueError, OSError):
        return False
    return True


def _show(filename: str) -> str:
    """A path as the user typed it: relative to the current directory when inside it."""
    path = Path(filename).resolve()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)

