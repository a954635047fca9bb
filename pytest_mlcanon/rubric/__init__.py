"""The five-axis rubric: correctness, shapes, numerics, API fluency and explanation.

Each axis is a pure function from evidence to ``AxisResult(passed, findings)``; ``score_item`` gathers
the evidence for one item and ``lint`` runs the static axes over files for ``mlcanon lint``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_mlcanon import catalog
from pytest_mlcanon.rubric import api, correctness, explanation, numerics, shapes
from pytest_mlcanon.rubric.model import AxisResult, Finding, ItemScore, Outcome
from pytest_mlcanon.rubric.source import Source, SourceError, load
from pytest_mlcanon.settings import Settings

__all__ = ["Evidence", "ItemScore", "lint", "score_item"]


@dataclass
class Evidence:
    """Everything the rubric looks at for one item."""

    item: catalog.Item
    files: Sequence[Path]
    reference_files: Sequence[Path]
    outcomes: Sequence[Outcome]
    display_root: Path
    runtime_shape_findings: Sequence[Finding] = ()
    runtime_shape_notes: Sequence[str] = ()
    timing_findings: Sequence[Finding] = ()
    #: (resolved path, line) -> largest ndim a ``.T`` reversed there at run time (API001)
    runtime_transposes: Mapping[tuple[str, int], int] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def load_sources(files: Iterable[Path], root: Path) -> tuple[list[Source], list[Finding]]:
    """Parse files for the static axes; an unparsable file becomes a finding instead."""
    sources: list[Source] = []
    problems: list[Finding] = []
    for path in files:
        try:
            sources.append(load(path, _display(path, root)))
        except SourceError as exc:
            problems.append(Finding("COR004", _display(path, root), exc.line, str(exc), "fix the syntax error"))
    return sources, problems


def score_item(evidence: Evidence, settings: Settings) -> dict[str, AxisResult]:
    """Score one item's five axes from its evidence."""
    sources, problems = load_sources(evidence.files, evidence.display_root)
    missing = _missing_name_findings(sources, evidence)
    axes = {
        "correctness": correctness.evaluate(evidence.outcomes, [*problems, *missing],
                                            contract_required=settings.contract_required),
        "shapes": shapes.evaluate((shapes.check_source(s, settings) for s in sources),
                                  evidence.runtime_shape_findings, settings, evidence.runtime_shape_notes),
        "numerics": numerics.evaluate(sources, evidence.outcomes, settings),
        "api": api.evaluate(sources, evidence.item, settings, evidence.timing_findings, evidence.runtime_transposes),
        "explanation": explanation.evaluate(sources, settings),
    }
    return axes


def _missing_name_findings(sources: list[Source], evidence: Evidence) -> list[Finding]:
    refs = {p.name: p for p in evidence.reference_files}
    found: list[Finding] = []
    for source in sources:
        ref_path = refs.get(source.path.name)
        if ref_path is None or ref_path.resolve() == source.path.resolve():
            continue
        try:
            reference = load(ref_path)
        except SourceError:
            continue
        for name in correctness.missing_names(source, reference):
            found.append(Finding("COR002", source.display, 1, f"public name `{name}` of the API is missing",
                                 "export every name of the item's API with the spec's signature"))
    return found


def lint(paths: Iterable[Path], settings: Settings, root: Path) -> list[Finding]:
    """Static findings (shapes, numerics, API, explanation) for ``mlcanon lint``.

    The item, for its forbidden shortcuts, is inferred from the last two path parts
    (``.../posttrain/dpo.py`` -> #55).
    """
    findings: list[Finding] = []
    sources, problems = load_sources(paths, root)
    findings += problems
    for source in sources:
        module = "/".join(source.path.with_suffix("").parts[-2:])
        items = catalog.items_for_module(module)
        findings += shapes.check_source(source, settings).findings
        findings += [f for f in numerics.static_findings(source) if settings.enabled(f.code)]
        for item in items or (None,):
            findings += [f for f in api.static_findings(source, item) if settings.enabled(f.code)]
        findings += [f for f in explanation.findings_for(source, settings) if settings.enabled(f.code)]
    return sorted(set(findings), key=lambda f: (f.path, f.line, f.code))
