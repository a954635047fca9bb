"""The run's report job: the report files (``--canon-report``), the junit properties
(``--junitxml``) and the rubric section of the terminal summary. Registered where the run is
scored."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_mlcanon.reports import Report, write
from pytest_mlcanon.reports import terminal as terminal_report
from pytest_mlcanon.rubric.model import AXES, ItemScore


class Reporter:
    """Registered as ``mlcanon-report``."""

    def __init__(self, config: pytest.Config, targets: Sequence[tuple[str, Path]]) -> None:
        self.config = config
        self.targets = list(targets)
        self.report: Report | None = None
        self.messages: list[str] = []

    def publish(self, report: Report, messages: Sequence[str] = ()) -> None:
        """Write the report files and the junit properties; keep the rest for the terminal summary."""
        self.report = report
        self.messages = list(messages)
        self._junit_properties(report.items)
        for fmt, path in self.targets:
            write(report, fmt, path)
            self.messages.append(f"wrote {fmt} report to {path}")

    def _junit_properties(self, scores: Sequence[ItemScore]) -> None:
        from _pytest.junitxml import xml_key

        xml = self.config.stash.get(xml_key, None)
        if xml is None:
            return
        for score in scores:
            prefix = f"mlcanon.{score.slug}"
            xml.add_global_property(f"{prefix}.verdict", score.verdict)
            if score.scored:
                xml.add_global_property(f"{prefix}.score", str(score.score))
                for axis in AXES:
                    xml.add_global_property(f"{prefix}.{axis}", "pass" if score.axes[axis].passed else "fail")

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        """The rubric section of the terminal summary."""
        if self.report is None:
            return
        terminalreporter.write_sep("=", "mlcanon rubric")
        for line in [*terminal_report.render(self.report), *self.messages]:
            terminalreporter.write_line(line)
