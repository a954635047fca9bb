"""The state one ``pytest --canon-item`` run's jobs share: the selected items, what each job has
learnt about each of them, and the :class:`~pytest_mlcanon.evidence.ItemEvidence` it adds up to.

Registered with the plugin manager as ``mlcanon-run`` (it implements no hook); the jobs that fill it
are in :mod:`.collect` and :mod:`.record`, the ones that read it in :mod:`.score` and :mod:`.report`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_mlcanon import catalog
from pytest_mlcanon.evidence import ItemEvidence, LeftOut, Outcome, ShapeTrace, Status
from pytest_mlcanon.impl import Impl, with_module_mates
from pytest_mlcanon.learner_coverage import Measurement
from pytest_mlcanon.reports import Report
from pytest_mlcanon.rubric.shape_instrument import Recorder
from pytest_mlcanon.settings import Settings

#: The user property that ties a collected test to the canon item it runs for (its slug).
ITEM_PROPERTY = "canon_item"
#: A collected test's canon item, found once (its hooks ask for it five times a test).
_OWNER = pytest.StashKey["catalog.Item | None"]()


@dataclass
class ItemState:
    """What the run knows about one selected item. ``files`` maps each module file the learner
    wrote (``posttrain/dpo.py``) to its path."""

    item: catalog.Item
    files: dict[str, Path] = field(default_factory=dict)
    status: Status = Status.PENDING
    detail: str = ""  # why it will not run
    fallback: tuple[str, ...] = ()  # modules of the item the reference stands in for
    built_on: tuple[str, ...] = ()  # the learner's modules of the items this one builds on
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    shapes: ShapeTrace = field(default_factory=ShapeTrace)
    expected: dict[str, None] = field(default_factory=dict)  # test ids selected to run (after every
    # deselection), in the order they run: an ordered set
    deselected: list[str] = field(default_factory=list)  # test ids another option (-k, -m, --lf...) left out
    narrowed_by: list[str] = field(default_factory=list)  # such options, as given
    _resolved: tuple[tuple[tuple[str, Path], ...], dict[str, str]] | None = field(default=None, init=False,
                                                                                 repr=False, compare=False)

    @property
    def pending(self) -> bool:
        return self.status is Status.PENDING

    @property
    def by_path(self) -> dict[str, str]:
        """Resolved path -> module file, for the learner's files of the item (resolved once per set of
        files: every test's report asks)."""
        key = tuple(self.files.items())
        if self._resolved is None or self._resolved[0] != key:
            self._resolved = (key, {str(path.resolve()): name for name, path in self.files.items()})
        return self._resolved[1]

    def left_out(self, interrupted: bool) -> LeftOut:
        """What this run left out of the item (falsy when nothing: a whole run)."""
        not_run = [nodeid for nodeid in self.expected if nodeid not in self.outcomes]
        return LeftOut(tuple(_test_name(n) for n in self.deselected), tuple(self.narrowed_by),
                       tuple(_test_name(n) for n in not_run), interrupted,
                       len(self.expected) + len(self.deselected))

    def evidence(self, interrupted: bool, coverage: Mapping[str, set[int]] | None) -> ItemEvidence:
        """The item's evidence once its tests have run: a pending item is scored, or partial when
        the run left some of its tests out; ``coverage`` maps resolved paths to executed lines."""
        status, detail, left_out = self.status, self.detail, None
        if self.pending:
            left = self.left_out(interrupted)
            status, detail, left_out = (Status.PARTIAL, left.describe(), left) if left else (Status.SCORED, "", None)
        executed = None
        if coverage is not None:
            executed = {name: tuple(sorted(coverage.get(path, ()))) for path, name in self.by_path.items()}
        # in the order the tests were collected, however they ran (a watched check runs them in two processes)
        order = {nodeid: index for index, nodeid in enumerate(self.expected)}
        outcomes = sorted(self.outcomes.values(), key=lambda outcome: order.get(outcome.nodeid, len(order)))
        return ItemEvidence(self.item.slug, status, detail, tuple(self.files), self.fallback,
                            tuple(outcomes), self.shapes, left_out, executed, built_on=self.built_on)


class CanonRun:
    """One canon run: its settings, the learner's folder, and an :class:`ItemState` per item."""

    def __init__(self, config: pytest.Config, items: tuple[catalog.Item, ...], impl: Impl, settings: Settings,
                 recorder: Recorder | None) -> None:
        self.config = config
        self.impl = impl
        self.settings = settings
        self.recorder = recorder  # the shape instrumenter's, when run-time shape checks are on
        self.notes: list[str] = []  # for the terminal summary: the module mates checked or left out
        if settings.whole_module and not impl.is_reference:  # a selected module is checked whole
            items, self.notes = with_module_mates(items, impl)
        self.states = {item.number: ItemState(item, _written(impl, item)) for item in items}
        self._numbers: dict[str, int] = {}  # slug -> item number, for the hooks that fold each report
        self.measurement: Measurement | None = None  # line coverage of the learner's files
        self.interrupted = False  # Ctrl-C or SIGTERM ended the tests
        self.report: Report | None = None  # the scored run (not in a grading child, nor on an xdist worker)

    def owner(self, node: pytest.Item) -> catalog.Item | None:
        """The canon item a collected test belongs to: its ``canon`` marker, else its file's only item."""
        if _OWNER not in node.stash:
            node.stash[_OWNER] = self._owner(node)
        return node.stash[_OWNER]

    @staticmethod
    def _owner(node: pytest.Item) -> catalog.Item | None:
        marker = node.get_closest_marker("canon")
        if marker is not None and marker.args:
            try:
                return catalog.get(marker.args[0])
            except catalog.UnknownItemError:
                return None
        owners = catalog.items_for_test_file(Path(str(node.fspath)).name)
        return owners[0] if len(owners) == 1 else None

    def pending_state(self, node: pytest.Item) -> ItemState | None:
        """The state of the selected, runnable item a collected test belongs to, if any."""
        owner = self.owner(node)
        state = self.states.get(owner.number) if owner else None
        return state if state is not None and state.pending else None

    def state_of(self, slug: str) -> ItemState | None:
        number = self._numbers.get(slug)
        if number is None:
            number = self._numbers[slug] = catalog.get(slug).number
        return self.states.get(number)

    def prepare_scores(self) -> None:
        """The static part of every runnable item's score, ahead of it (``rubric.prepare``: it depends on the
        learner's files only): a split check computes it while its helper runs the last tests."""
        from pytest_mlcanon import rubric

        for state in self.states.values():
            if state.pending:
                rubric.prepare(rubric.ItemSources(state.item, self.impl.path, self.config.invocation_params.dir),
                               state.files, self.settings)

    def evidence(self) -> list[ItemEvidence]:
        """Every item's evidence, once the tests have run."""
        coverage = self.measurement.stop() if self.measurement is not None else None
        lines = {path: set(numbers) for path, numbers in coverage.items()} if coverage is not None else None
        return [state.evidence(self.interrupted, lines) for state in self.states.values()]


def _written(impl: Impl, item: catalog.Item) -> dict[str, Path]:
    return {f"{module}.py": path for module in item.modules if (path := impl.file_for(module)) is not None}


def _test_name(nodeid: str) -> str:
    return nodeid.partition("::")[2] or nodeid
