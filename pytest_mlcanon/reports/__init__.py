"""Reports: one ``Report`` model, one renderer per format (terminal, markdown, json, junit properties)."""

from __future__ import annotations

from pytest_mlcanon.reports.model import Report, write

__all__ = ["Report", "write"]
