"""The five-axis rubric: correctness, shapes, numerics, API fluency and explanation.

Each axis is a pure function from evidence to ``AxisResult(passed, findings)``. ``score`` (in
:mod:`.scoring`) scores one item from its ``ItemEvidence`` and its ``ItemSources``, and makes every
finding; ``lint`` runs the static axes over files for ``mlcanon lint``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pytest_mlcanon import catalog
from pytest_mlcanon.layout import shown
from pytest_mlcanon.rubric import api, explanation, numerics, shapes
from pytest_mlcanon.rubric.model import Finding, ItemScore
from pytest_mlcanon.rubric.scoring import ItemSources, load_sources, prepare, score
from pytest_mlcanon.settings import Settings

__all__ = ["ItemScore", "ItemSources", "lint", "prepare", "score"]


def lint(paths: Iterable[Path], settings: Settings, root: Path) -> list[Finding]:
    """Static findings (shapes, numerics, API, explanation) for ``mlcanon lint``.

    The item, for its forbidden shortcuts, is inferred from the last two path parts
    (``.../posttrain/dpo.py`` -> #55).
    """
    keyed, findings = load_sources((str(path), path, shown(path, root)) for path in paths)
    for _, source in keyed:
        module = "/".join(source.path.with_suffix("").parts[-2:])
        items = catalog.items_for_module(module)
        findings += shapes.check_source(source, settings).findings
        findings += [f for f in numerics.static_findings(source) if settings.enabled(f.code)]
        for item in items or (None,):
            findings += [f for f in api.static_findings(source, item) if settings.enabled(f.code)]
        findings += [f for f in explanation.findings_for(source, settings) if settings.enabled(f.code)]
    return sorted(set(findings), key=lambda f: (f.path, f.line, f.code))
