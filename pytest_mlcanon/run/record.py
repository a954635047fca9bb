"""The run's record job: each test's outcome over its phases, the shape trace the instrumented learner
files recorded while it ran, and the learner's line coverage, folded into the item's state.

Per-test facts travel on the test's report (``user_properties``, in the evidence codec's JSON), so
they reach an xdist controller exactly as they reach a serial run; coverage reaches it through the
workers' ``workeroutput``.
"""

from __future__ import annotations

import functools
from collections.abc import Generator
from typing import Any

import pytest

from pytest_mlcanon import learner_coverage
from pytest_mlcanon.evidence import NonFinite, Outcome, ShapeTrace, ValueOrigin, worse
from pytest_mlcanon.run.state import ITEM_PROPERTY, CanonRun
from pytest_mlcanon.run.testreports import (
    failure_location,
    in_learner_terms,
    phase_outcome,
    raised_by,
    short_message,
    skip_in_package_terms,
    value_origin,
)

SHAPES_PROPERTY = "canon_shapes"
ORIGIN_PROPERTY = "canon_value_origin"
NONFINITE_PROPERTY = "canon_first_nonfinite"
RAISED_PROPERTY = "canon_raised"  # [exception class, where it was raised: evidence.RAISED_AT]
CONTRACT_PROPERTY = "canon_contract_advice"
CONTRACT_MARKER = "contract"


class Record:
    """Registered as ``mlcanon-record``."""

    def __init__(self, run: CanonRun) -> None:
        self.run = run

    @functools.cached_property
    def served(self) -> dict[str, str]:
        """The learner's written modules and how their files are shown (for failures in their terms)."""
        return self.run.impl.served()

    # -- line coverage ------------------------------------------------------------------------------------------
    def start_coverage(self) -> None:
        """Before the first import of a learner module, so its top level counts (``--canon-coverage``,
        or pytest-cov's measurement, read rather than duplicated, under ``--cov``)."""
        option = self.run.config.option
        borrowed = bool(getattr(option, "cov_source", None)) and not getattr(option, "no_cov", False)
        if not (self.run.settings.coverage or borrowed):
            return
        files = (path for state in self.run.states.values() for path in state.files.values())
        self.run.measurement = learner_coverage.Measurement(files, borrow=borrowed)
        self.run.measurement.start()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.run.measurement is not None:
            self.run.measurement.attach()

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None and self.run.measurement is not None:
            workeroutput[learner_coverage.WORKER_KEY] = self.run.measurement.stop()

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        if self.run.measurement is not None:
            self.run.measurement.merge(getattr(node, "workeroutput", {}).get(learner_coverage.WORKER_KEY, {}))

    # -- one test --------------------------------------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, None]:
        """The shape checks, full transposes and first non-finite value of the item's own files while
        the test body runs (SHP002, API001, NUM100), and where a value that failed its check came from."""
        state = self.run.pending_state(item)
        recorder = self.run.recorder
        if state is None or recorder is None or not state.files:
            yield
            return
        recorder.reset()
        recorder.watch_nonfinite = "numerics_probe" in item.keywords  # NUM100 reads it for probes only
        try:
            outcome = yield
            origin = value_origin(recorder, outcome.excinfo, state.by_path)
            if origin is not None:
                item.user_properties.append((ORIGIN_PROPERTY, origin.to_json()))
        finally:
            trace, nonfinite = recorder.take(state.by_path)
            if trace:
                item.user_properties.append((SHAPES_PROPERTY, trace.to_json()))
            if nonfinite is not None:
                item.user_properties.append((NONFINITE_PROPERTY, nonfinite.to_json()))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        """A failing input-validation check (``contract`` marker) is advice unless ``contract = required``:
        reported as an expected failure (``x``), so it neither fails the run nor counts toward Correctness;
        the rubric still records it as failed and lists it."""
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        state = self.run.pending_state(item)
        if state is not None and report.failed and call.excinfo is not None:
            raised = raised_by(call.excinfo, state.by_path)
            if raised is not None:
                report.user_properties.append((RAISED_PROPERTY, list(raised)))
        if state is not None and report.failed:
            origin = dict(report.user_properties).get(ORIGIN_PROPERTY)
            in_learner_terms(report, self.served, ValueOrigin.from_json(origin) if origin else None)
        if state is not None:
            skip_in_package_terms(report)
        if (report.when == "call" and report.failed and not self.run.settings.contract_required
                and item.get_closest_marker(CONTRACT_MARKER) is not None):
            message = short_message(report)
            report.outcome = "skipped"
            report.wasxfail = f"input check (advice): {message}"
            report.user_properties.append((CONTRACT_PROPERTY, message))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Fold one phase report into the test's final outcome (on an xdist controller too)."""
        properties: dict[str, Any] = dict(report.user_properties)
        slug = properties.get(ITEM_PROPERTY)
        state = self.run.state_of(slug) if isinstance(slug, str) else None
        if state is None:
            return
        if report.when == "call" and SHAPES_PROPERTY in properties:
            state.shapes = state.shapes.merge(ShapeTrace.from_json(properties[SHAPES_PROPERTY]))
        advice = properties.get(CONTRACT_PROPERTY)
        outcome = "failed" if advice is not None else phase_outcome(report)
        previous = state.outcomes.get(report.nodeid)
        if outcome is None:
            return
        config = self.run.config
        keywords = report.keywords
        first = properties.get(NONFINITE_PROPERTY)
        folded = Outcome(
            nodeid=report.nodeid,
            outcome=outcome,
            probe="numerics_probe" in keywords,
            edge="edge_case" in keywords,
            contract=CONTRACT_MARKER in keywords,
            message=str(advice) if advice is not None else short_message(report),
            duration=(previous.duration if previous else 0.0) + float(getattr(report, "duration", 0.0)),
            where=failure_location(report, state.by_path, config.invocation_params.dir, config.rootpath),
            nonfinite=NonFinite.from_json(first) if first is not None else previous.nonfinite if previous else None,
            origin=ValueOrigin.from_json(origin) if (origin := properties.get(ORIGIN_PROPERTY)) is not None else None,
            **_raised(properties.get(RAISED_PROPERTY), previous),
        )
        if worse(previous, folded):
            state.outcomes[report.nodeid] = folded


def _raised(value: Any, previous: Outcome | None) -> dict[str, Any]:
    """The ``raised`` fields of a folded outcome: this phase's exception, else an earlier phase's."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return {"raised": value[0], "raised_at": value[1]}
    if previous is not None:
        return {"raised": previous.raised, "raised_at": previous.raised_at}
    return {}
