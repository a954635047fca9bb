"""The grading child's pytest plugin: streams each test's start and outcome to the parent as it
happens, so a crash or a kill still leaves the parent a clear record of the tests that ran before it.

Thin hooks only: outcomes come from the plugin's own ``CanonRun`` (already folded over the setup,
call and teardown phases), the rubric report from its ``finish``; the guard's tamper check runs after
every teardown.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from pytest_mlcanon import catalog
from pytest_mlcanon.grade.channel import ChannelWriter
from pytest_mlcanon.grade.guard import Guard
from pytest_mlcanon.plugin import RUN_PLUGIN_NAME
from pytest_mlcanon.run import ITEM_PROPERTY


class StreamPlugin:
    """Registered with ``pytest.main(plugins=[...])`` in the child."""

    def __init__(self, channel: ChannelWriter, guard: Guard | None) -> None:
        self.channel = channel
        self.guard = guard
        self.config: pytest.Config | None = None

    def pytest_configure(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.channel.send("collected", tests=[[_slug(item.user_properties), item.nodeid] for item in session.items])

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.channel.send("start", test=nodeid)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        slug = _slug(report.user_properties)
        state = self._state(slug)
        outcome = state.outcomes.get(report.nodeid) if state is not None else None
        if outcome is not None:
            self.channel.send("outcome", item=slug, outcome=asdict(outcome))
        if report.when == "teardown" and self.guard is not None and self.config is not None:
            self.guard.check(self.config.pluginmanager.get_plugins())

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.guard is not None:
            self.guard.check(session.config.pluginmanager.get_plugins())
        run = session.config.pluginmanager.get_plugin(RUN_PLUGIN_NAME)
        report = getattr(run, "report", None)
        states = getattr(run, "states", {})
        self.channel.send("report", report=report.to_dict() if report is not None else None,
                          states={s.item.slug: {"status": s.status, "error": s.error} for s in states.values()})

    def _state(self, slug: str | None) -> Any:
        if slug is None or self.config is None:
            return None
        run = self.config.pluginmanager.get_plugin(RUN_PLUGIN_NAME)
        return getattr(run, "states", {}).get(catalog.get(slug).number)


def _slug(properties: list[tuple[str, object]]) -> str | None:
    """The canon item the plugin tagged a test with (``CanonRun.select``)."""
    slug = dict(properties).get(ITEM_PROPERTY)
    return slug if isinstance(slug, str) else None
