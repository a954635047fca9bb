"""The run's score job: after the tests, each item's evidence (timed under ``--timed``) is scored by
``rubric.score``, the timed attempts are recorded, and the run fails for each item that fails it.

Like pytest-cov, it turns a failure into the exit status inside ``pytest_runtestloop``. It is
registered only where the run is scored: not on an xdist worker, not in a grading child.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Generator
from dataclasses import replace
from typing import Any

import pytest

from pytest_mlcanon import catalog, rubric
from pytest_mlcanon.evidence import ItemEvidence, Status
from pytest_mlcanon.reports import Report
from pytest_mlcanon.rubric.model import ItemScore
from pytest_mlcanon.run.report import Reporter
from pytest_mlcanon.run.state import CanonRun
from pytest_mlcanon.timer import TimedRun

#: Findings that fail the run under ``strict_shapes``.
STRICT_SHAPE_CODES = frozenset({"SHP001", "SHP003"})


class Score:
    """Registered as ``mlcanon-score``."""

    def __init__(self, run: CanonRun, reporter: Reporter, timed: str | None) -> None:
        self.run = run
        self.reporter = reporter
        self.timed = timed
        self._sigterm: Any = None

    # -- SIGTERM ends the run as Ctrl-C does -----------------------------------------------------------------
    def pytest_configure(self, config: pytest.Config) -> None:
        """SIGTERM (a closed terminal, a cancelled CI job) raises KeyboardInterrupt, so pytest reports
        the interrupted run and the items are partial instead of the process dying silently. Only on
        the main thread of a process that had no handler of its own."""
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._sigterm = signal.signal(signal.SIGTERM, _interrupt)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._sigterm is not None:
            signal.signal(signal.SIGTERM, self._sigterm)
            self._sigterm = None

    # -- after the tests ---------------------------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, Any, None]:
        """Innermost of the wrappers, so it reads a borrowed coverage measurement before pytest-cov's
        own wrapper stops it."""
        outcome = yield
        excinfo = outcome.excinfo
        # Ctrl-C or SIGTERM raise KeyboardInterrupt itself; pytest's and xdist's own stops (--sw after a
        # failure, -x under xdist) raise subclasses named Interrupted, and leave tests not run as -x does
        self.run.interrupted = excinfo is not None and excinfo[0] is KeyboardInterrupt
        session.testsfailed += self.finish()

    def finish(self) -> int:
        """Score every item, record the timed attempts, publish the report, and return how many
        extra failures the run gets."""
        run = self.run
        timer = (TimedRun(run.config.invocation_params.dir, self.timed, run.settings.first_attempt_factor)
                 if self.timed else None)
        evidence = run.evidence()
        scores = [self._score(e, timer) for e in evidence]
        # an input check that is advice (contract = "advice") neither fails the attempt nor is a miss
        required = run.settings.contract_required
        counted = {e.slug: tuple(o for o in e.outcomes if required or not o.contract) for e in evidence}
        messages = timer.record(scores, counted) if timer is not None else []
        run.report = Report(run.impl.describe(), scores, run.settings.min_score)
        self.reporter.publish(run.report, [*run.notes, *messages])
        failures = len(run.report.failed_items)
        if run.settings.strict_shapes:
            failures += sum(1 for s in scores if any(f.code in STRICT_SHAPE_CODES for f in s.findings))
        return failures

    def _score(self, evidence: ItemEvidence, timer: TimedRun | None) -> ItemScore:
        """Score one item; a failure inside the rubric becomes that item's verdict, never a crash."""
        run = self.run
        item = catalog.get(evidence.slug)
        sources = rubric.ItemSources(item, run.impl.path, run.config.invocation_params.dir)
        try:
            if timer is not None and evidence.status is Status.SCORED:
                evidence = replace(evidence, timing=timer.assess(item, list(sources.files.values())))
            return rubric.score(evidence, sources, run.settings)
        except Exception as exc:  # the run must survive whatever the learner's files contain
            return ItemScore(item.number, item.slug, item.title, Status.ERROR,
                             error=f"the rubric could not score this item: {type(exc).__name__}: {exc}")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")
