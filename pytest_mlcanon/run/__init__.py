"""One ``pytest --canon-item`` run: built in ``pytest_configure`` only when ``--canon-item`` is given.

The run's shared state (:class:`CanonRun`, registered as ``mlcanon-run``) is filled and read by one
plugin object per job, each registered under its own name, as pytest's own ``stepwise`` and
``junitxml`` plugins are:

* ``mlcanon-collect`` (:mod:`.collect`): which items can run, which test files pytest collects, which
  test belongs to which item, and what another option left out of an item (a partial run);
* ``mlcanon-record`` (:mod:`.record`): each test's outcome, its shape trace and the learner's line
  coverage, folded into the item's state (on an xdist controller, from the workers' reports);
* ``mlcanon-score`` (:mod:`.score`): after the tests, each item's ``ItemEvidence``, timed under
  ``--timed``, scored by ``rubric.score``; the attempts recorded; the run's exit status;
* ``mlcanon-report`` (:mod:`.report`): the terminal summary, the report files, the junit properties.

Score and report are not registered on an xdist worker (the controller scores) nor in a grading job
(``gather_only``: the job streams its evidence and the grader scores it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_mlcanon import catalog
from pytest_mlcanon.impl import Impl
from pytest_mlcanon.layout import in_canon, tests_dir
from pytest_mlcanon.plugin import RUN_PLUGIN_NAME
from pytest_mlcanon.rubric.shape_instrument import Recorder
from pytest_mlcanon.run.collect import Collect
from pytest_mlcanon.run.record import Record
from pytest_mlcanon.run.report import Reporter
from pytest_mlcanon.run.score import Score
from pytest_mlcanon.run.state import ITEM_PROPERTY, CanonRun, ItemState
from pytest_mlcanon.settings import Settings

__all__ = ["ITEM_PROPERTY", "RUN_PLUGIN_NAME", "CanonRun", "ItemState", "in_canon", "start", "tests_dir"]


def start(config: pytest.Config, items: tuple[catalog.Item, ...], impl: Impl, settings: Settings,
          recorder: Recorder | None, *, reports: list[tuple[str, Path]], timed: str | None,
          gather_only: bool) -> CanonRun:
    """Build the run, decide what can run (importing the learner's modules once), point pytest at the
    tests, and register the jobs."""
    run = CanonRun(config, items, impl, settings, recorder)
    record, collect = Record(run), Collect(run)
    record.start_coverage()
    collect.prepare()
    config.args[:] = collect.collect_args()
    # what runs is the canon's tests, not the learner's ``testpaths``: pytest's header must not say
    # ``testpaths: tests`` (it prints that line only for arguments taken from that setting)
    config.args_source = pytest.Config.ArgsSource.ARGS
    manager = config.pluginmanager
    manager.register(run, RUN_PLUGIN_NAME)
    manager.register(collect, "mlcanon-collect")
    manager.register(record, "mlcanon-record")
    if not gather_only and not hasattr(config, "workerinput"):
        reporter = Reporter(config, reports)
        manager.register(Score(run, reporter, timed), "mlcanon-score")
        manager.register(reporter, "mlcanon-report")
    return run
