"""The grading child's pytest plugin: streams each test's start and outcome to the parent as it
happens, so a crash or a kill still leaves the parent a clear record of the tests that ran before it,
and at the end each item's ``ItemEvidence``. The child scores nothing (its run is ``gather_only``):
the parent decodes the evidence, applies its trust policy and scores it (``assess``).

Thin hooks only: outcomes come from the run's record job (already folded over the setup, call and
teardown phases), the evidence from the run's state; the guard's tamper check runs after every
teardown, and sees every plugin as it is registered.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_mlcanon.grade.channel import ChannelWriter
from pytest_mlcanon.grade.guard import Guard
from pytest_mlcanon.plugin import RUN_PLUGIN_NAME
from pytest_mlcanon.run import ITEM_PROPERTY, CanonRun


class StreamPlugin:
    """Registered with ``pytest.main(plugins=[...])`` in the child."""

    def __init__(self, channel: ChannelWriter, guard: Guard | None) -> None:
        self.channel = channel
        self.guard = guard
        self.config: pytest.Config | None = None

    def pytest_configure(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_plugin_registered(self, plugin: Any) -> None:
        """Every plugin as it is registered (those before this one too: the hook is historic)."""
        if self.guard is not None:
            self.guard.plugin_registered(plugin)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.channel.send("collected", tests=[[_slug(item.user_properties), item.nodeid] for item in session.items])
        if self.guard is not None:
            self.guard.watch_tests()

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.channel.send("start", test=nodeid)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        slug = _slug(report.user_properties)
        run = self._run()
        state = run.state_of(slug) if run is not None and slug is not None else None
        outcome = state.outcomes.get(report.nodeid) if state is not None else None
        if outcome is not None:
            self.channel.send("outcome", item=slug, outcome=outcome.to_json())
        if report.when == "teardown" and self.guard is not None:
            self.guard.check()

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.guard is not None:
            self.guard.check(session.config.pluginmanager.get_plugins())
        run = self._run()
        for evidence in run.evidence() if run is not None else ():
            self.channel.send("evidence", evidence=evidence.to_json())

    def _run(self) -> CanonRun | None:
        run = self.config.pluginmanager.get_plugin(RUN_PLUGIN_NAME) if self.config is not None else None
        return run if isinstance(run, CanonRun) else None


def _slug(properties: list[tuple[str, object]]) -> str | None:
    """The canon item the run tagged a test with (its collect job)."""
    slug = dict(properties).get(ITEM_PROPERTY)
    return slug if isinstance(slug, str) else None
