"""The pytest plugin: its options, the redirect installed before any conftest, and the run built in
``pytest_configure``; every hook of a run is a method of the run's job objects (``pytest_mlcanon.run``).

Nothing heavy is imported at load (``pytest --help`` must not import torch); the run is built only
when ``--canon-item`` is given. Without it the plugin only registers its markers and stays out of
the way of an ordinary test run.
"""

from __future__ import annotations

import argparse
import gc
from pathlib import Path
from typing import Any

import pytest

from pytest_mlcanon import settings as settings_mod

RUN_PLUGIN_NAME = "mlcanon-run"  # the run's shared state (``run.CanonRun``)
_IMPL_KEY = pytest.StashKey["tuple[Any, Any]"]()

MARKERS = (
    "canon(slug): ties a reference test to a canon item (slug or number) where a file holds several",
    "numerics_probe: an extreme-input probe; counts toward the rubric's Numerics axis",
    "edge_case: an edge case of the item (empty input, batch of one); counts toward Correctness",
    "contract: checks argument validation (the documented exception type only); advice unless "
    "contract = required",
)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    if pluginmanager.is_blocked("cacheprovider"):
        # ``mlcanon check`` keeps pytest's cache at the repo root (``-o cache_dir=...``); with the cache
        # turned off (``-p no:cacheprovider``) that setting has no owner, and a strict repo
        # (``-W error``) would fail on pytest's "unknown config option" warning
        parser.addini("cache_dir", "pytest's cache folder (unused: the cache provider is off)", default=".pytest_cache")
    group = parser.getgroup("mlcanon", "coding canon (pytest-mlcanon)")
    group.addoption(
        "--canon-item", dest="canon_item", metavar="ITEMS", default=None,
        help="run the canon's reference tests for ITEMS: a slug (posttrain/dpo), a number (55), a glob "
        "(transformer/*), block:N, or a comma list; then score the rubric",
    )
    group.addoption(
        "--impl", dest="canon_impl", metavar="PATH", default=None,
        help="learner directory laid out <area>/<module>.py (default: $MLCANON_IMPL or its alias $MLBOOK_IMPL, else practice/, "
        "src/mlbook/, mlbook/ or any canon-like folder here); --impl=canon_refs runs the references",
    )
    group.addoption(
        "--timed", dest="canon_timed", nargs="?", const="report", default=None, choices=("report", "strict"),
        metavar="strict",
        help="show each item's elapsed time against its from-memory target, mark an attempt over time and record "
        "it in .mlcanon/ (see mlcanon drill); --timed=strict also counts running over time against API fluency",
    )
    group.addoption(
        "--canon-report", dest="canon_report", action="append", default=[], metavar="FORMAT:PATH",
        help="also write the rubric report: json:PATH or markdown:PATH (repeatable)",
    )
    group.addoption("--canon-gather-only", dest="canon_gather_only", action="store_true", default=False,
                    help=argparse.SUPPRESS)  # a grading job: gather the evidence, score nothing
    for spec in settings_mod.SPECS:
        if spec.flag is not None:
            kwargs: dict[str, Any] = {"dest": f"mlcanon_{spec.key}", "default": None, "help": spec.help}
            if spec.parse is settings_mod._bool:  # noqa: SLF001 - flags are store_true
                kwargs.update(action="store_true")
            group.addoption(spec.flag, **kwargs)
        parser.addini(settings_mod.ini_name(spec.key), spec.help, default=None)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Resolve the items and the learner directory and install the redirect before any conftest."""
    ns = early_config.known_args_namespace
    if getattr(ns, "canon_item", None) is None or getattr(ns, "help", False):
        return
    from pytest_mlcanon import catalog, impl, redirect

    try:
        items = catalog.select(ns.canon_item)
        chosen = impl.resolve(ns.canon_impl, early_config.invocation_params.dir)
    except (catalog.UnknownItemError, impl.ImplError) as exc:
        raise pytest.UsageError(str(exc)) from None
    redirect.install(chosen.path)
    early_config.stash[_IMPL_KEY] = (items, chosen)
    # CanonRun freezes the heap after collection; registered first, this runs last among the
    # cleanups, after pytest's own end-of-run collections, so an in-process run leaks nothing.
    early_config.add_cleanup(gc.unfreeze)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    if _IMPL_KEY not in config.stash:
        return
    from pytest_mlcanon import redirect
    from pytest_mlcanon.rubric.shape_instrument import Recorder
    from pytest_mlcanon.run import start

    items, chosen = config.stash[_IMPL_KEY]
    try:
        resolved = settings_mod.resolve(
            cli={s.key: config.getoption(f"mlcanon_{s.key}", None) for s in settings_mod.SPECS},
            ini={s.key: config.getini(settings_mod.ini_name(s.key)) for s in settings_mod.SPECS},
            pyproject=settings_mod.read_pyproject(config.rootpath),
        )
        reports = _parse_report_targets(config.getoption("canon_report"))
    except (settings_mod.SettingsError, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None
    if config.args_source == pytest.Config.ArgsSource.ARGS and config.args and not hasattr(config, "workerinput"):
        raise pytest.UsageError(
            "--canon-item collects the item's reference tests itself; drop the positional paths "
            f"({' '.join(config.args)})"
        )
    recorder = Recorder() if resolved.runtime_shapes else None
    finder = redirect.active_finder()
    if finder is not None:
        finder.instrument = frozenset(m for item in items for m in item.modules) if recorder else frozenset()
        finder.recorder = recorder
    gather_only = config.getoption("canon_gather_only")
    start(config, items, chosen, resolved, recorder, reports=reports, timed=config.getoption("canon_timed"),
          gather_only=gather_only)
    if resolved.test_timeout > 0 and not gather_only:  # a grading job's parent enforces its limits itself
        from pytest_mlcanon.run import ITEM_PROPERTY
        from pytest_mlcanon.watchdog import Watchdog

        config.pluginmanager.register(Watchdog(config, resolved.test_timeout, chosen.path, ITEM_PROPERTY),
                                      "mlcanon-watchdog")


def _parse_report_targets(values: list[str]) -> list[tuple[str, Path]]:
    targets = []
    for value in values:
        fmt, sep, path = value.partition(":")
        if not sep or not path or fmt not in {"json", "markdown"}:
            raise ValueError(f"--canon-report={value!r}: expected json:PATH or markdown:PATH")
        targets.append((fmt, Path(path)))
    return targets


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.pluginmanager.has_plugin(RUN_PLUGIN_NAME):
        from pytest_mlcanon import redirect

        redirect.uninstall()
