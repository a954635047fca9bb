"""Scoring one item: the files the rubric reads (:class:`ItemSources`) and :func:`score`, which turns
the item's evidence into its :class:`ItemScore` and makes every finding.

The same function scores a learner's run and a grading job: the learner's run passes the evidence it
gathered and the learner's folder; the grader passes the evidence it decoded from a job, after its
trust policy, and its own copy of the submission. Evidence names places by module file
(``posttrain/dpo.py``); the first step here shows each one as ``sources`` displays it, so the axis
modules only ever see displayed paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_mlcanon import catalog, learner_coverage
from pytest_mlcanon.evidence import ItemEvidence, NonFinite, Outcome
from pytest_mlcanon.layout import shown, tests_dir
from pytest_mlcanon.redirect import reference_dir
from pytest_mlcanon.rubric import api, correctness, explanation, numerics, ownership, shape_runtime, shapes
from pytest_mlcanon.rubric.model import AxisResult, Finding, ItemScore
from pytest_mlcanon.rubric.rules import finding
from pytest_mlcanon.rubric.source import Source, SourceError, load
from pytest_mlcanon.settings import Settings

#: ``ItemScore.tests``: how many tests ended each way (failed input checks under advice apart).
TEST_COUNTS = ("passed", "failed", "error", "skipped")
ADVICE_COUNT = "input checks not held (advice)"


@dataclass(frozen=True)
class ItemSources:
    """The files the rubric reads for one item: the learner's copy of each module file (``folder`` /
    ``posttrain/dpo.py``), the reference's, and how a finding names a file (relative to
    ``display_root``, else absolute)."""

    item: catalog.Item
    folder: Path
    display_root: Path

    @property
    def files(self) -> dict[str, Path]:
        """Module file -> the learner's file, for the item's modules the learner wrote."""
        return {name: path for name in self.item.module_files if (path := self.folder / name).is_file()}

    def display(self, file: str) -> str:
        return shown(self.folder / file, self.display_root)

    def reference(self, file: str) -> Path:
        return reference_dir() / file

    @property
    def tests_display(self) -> str:
        """The item's test files: where a finding no test or line owns (``COR003``) is placed."""
        return ", ".join(shown(tests_dir() / name, self.display_root) for name in self.item.test_files)


def score(evidence: ItemEvidence, sources: ItemSources, settings: Settings) -> ItemScore:
    """The item's score from its evidence and its files; an item whose status is not scored keeps
    its status as its verdict and gets no axes. Raises whatever a broken file makes the static
    rules raise: callers turn that into the item's verdict."""
    item = sources.item
    result = ItemScore(item.number, item.slug, item.title, evidence.status,
                       files=[sources.display(f) for f in evidence.files], error=evidence.detail,
                       fallback=list(evidence.fallback), built_on=list(evidence.built_on),
                       left_out=evidence.left_out)
    if not evidence.status.scored:
        return result
    outcomes = [_shown(o, sources) for o in evidence.outcomes]
    result.tests = _test_counts(outcomes, settings)
    result.timing = evidence.timing.as_dict() if evidence.timing is not None else {}
    files = {f: path for f, path in sources.files.items() if f in evidence.files}
    keyed, problems, own = _parsed(sources, files)
    parsed = [source for _, source in own]
    left_out = {f: ownership.left_out_lines(full, mine) for (f, full), (_, mine) in zip(keyed, own)}
    runtime, notes = shapes.runtime_findings(shape_runtime.merge(own, evidence.shapes), settings)
    transposes = {(sources.display(t.file), t.line): t.ndim for t in evidence.shapes.transposes
                  if t.file in files and t.line not in left_out.get(t.file, ())}
    timing = [api.stall_finding(evidence.timing, item, result.files[0] if result.files else item.slug)
              ] if evidence.timing is not None and evidence.timing.strict and evidence.timing.over else []
    first_file = result.files[0] if result.files else item.slug
    result.axes = {
        "correctness": correctness.evaluate(
            outcomes, [*problems, *_missing_names(keyed, sources)], contract_required=settings.contract_required,
            place=sources.tests_display or item.slug, recheck=evidence.recheck, recheck_place=first_file,
            item=item.slug),
        "shapes": shapes.evaluate((shapes.check_source(s, settings) for s in parsed), runtime, settings, notes),
        "numerics": numerics.evaluate(parsed, outcomes, settings),
        "api": api.evaluate(parsed, item, settings, timing, transposes),
        "explanation": explanation.evaluate(parsed, settings),
    }
    if evidence.coverage is not None:
        executed = {str(files[f].resolve()): set(lines) for f, lines in evidence.coverage.items() if f in files}
        display = {str(path.resolve()): sources.display(f) for f, path in files.items()}
        result.coverage = {c.path: c.to_dict() for c in learner_coverage.summarize(executed, display)}
    return result


def _parsed(sources: ItemSources, files: dict[str, Path]) -> tuple[list[tuple[str, Source]], list[Finding],
                                                                   list[tuple[str, Source]]]:
    """The item's files parsed (with a finding for each that does not parse) and, per file, the part the
    item is judged on: in a module shared with other items (#13 and #14 in nn/normalization.py) the
    static axes and the run-time shape comments judge only the item's own code (rubric.ownership)."""
    keyed, problems = load_sources((f, path, sources.display(f)) for f, path in files.items())
    own = [(f, ownership.for_item(source, sources.item, f.removesuffix(".py"))) for f, source in keyed]
    return keyed, problems, own


def prepare(sources: ItemSources, files: Iterable[str], settings: Settings) -> None:
    """Compute the item's static findings ahead of its score, which reads them back (``per_source``):
    they depend on its files only, so a check does this while it would otherwise wait."""
    chosen = set(files)
    _, _, own = _parsed(sources, {f: path for f, path in sources.files.items() if f in chosen})
    for _, source in own:
        shapes.check_source(source, settings)
        shape_runtime.owner_lines(source)
        numerics.static_findings(source)
        api.static_findings(source, sources.item)
        explanation.findings_for(source, settings)


def _shown(outcome: Outcome, sources: ItemSources) -> Outcome:
    """The outcome with its places in the learner's files shown as ``sources`` displays them."""
    where, first, origin = outcome.where, outcome.nonfinite, outcome.origin
    if where is not None and where.learner:
        where = replace(where, path=sources.display(where.path), learner=False)
    if first is not None:
        first = NonFinite(sources.display(first.file), first.line, first.comment)
    if origin is not None:
        origin = replace(origin, file=sources.display(origin.file))
    return replace(outcome, where=where, nonfinite=first, origin=origin)


def _test_counts(outcomes: Sequence[Outcome], settings: Settings) -> dict[str, int]:
    advice = {o.nodeid for o in outcomes if o.contract and o.outcome == "failed" and not settings.contract_required}
    counted = [o for o in outcomes if o.nodeid not in advice]
    counts = {k: sum(1 for o in counted if o.outcome == k) for k in TEST_COUNTS}
    counts[ADVICE_COUNT] = len(advice)
    return counts


def load_sources(files: Iterable[tuple[str, Path, str]]) -> tuple[list[tuple[str, Source]], list[Finding]]:
    """Parse (key, path, display) triples for the static axes: each parsed file with its key, and a
    finding instead of each file that does not parse."""
    sources: list[tuple[str, Source]] = []
    problems: list[Finding] = []
    for key, path, display in files:
        try:
            sources.append((key, load(path, display)))
        except SourceError as exc:
            problems.append(finding("COR004", display, exc.line, error=str(exc)))
    return sources, problems


def _missing_names(keyed: list[tuple[str, Source]], sources: ItemSources) -> list[Finding]:
    """COR002 for each public name the reference module defines and the learner's lacks, less the
    public names of the other items living in the module (#14 does not answer for batchnorm_forward)."""
    found: list[Finding] = []
    for file, source in keyed:
        theirs = {name for mate in catalog.items_for_module(file.removesuffix(".py"))
                  if mate.number != sources.item.number for name in mate.names}
        ref_path = sources.reference(file)
        if ref_path.resolve() == source.path.resolve():
            continue
        try:
            reference = load(ref_path)
        except (SourceError, OSError):
            continue
        for name in (n for n in correctness.missing_names(source, reference) if n not in theirs):
            found.append(finding("COR002", source.display, 1, subject=name,
                                 problem="is a public name of the API your module lacks"))
    return found


__all__ = ["AxisResult", "ItemSources", "load_sources", "score"]
