"""Running a re-check case: in the verifier on the references (its expected answer), in a job on the
learner's code (its answer), through exactly the same code.

``run_case`` builds the case's inputs (decoding them, and building the models, objects and instances
their recipes describe, with the classes of the side it runs on), makes the call or plays the script
(the constructor, the parameters given by name, the method calls in order), and encodes what came
back: the result, and the post-call values of the arguments the verifier named (every model
argument, and any other the reference changes in place).

In a job, ``ReplayPlugin`` runs the cases when its pytest session starts: the plugin has imported
the learner's modules, no test has run (so a submission cannot forge passing tests and then hang or
exit before the one check it cannot forge), and the cases call the very module objects the tests
will use: a learner module is imported once per process, and the copy the tests exercise is the
copy that is re-checked. Each answer goes back on the channel; the parent compares it with the
verifier's expected answer, which never enters the job.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import pickle
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pytest

from pytest_mlcanon.grade.channel import ChannelWriter
from pytest_mlcanon.grade.forbidden import Detector
from pytest_mlcanon.grade.values import (
    IGNORED,
    TAG,
    Recipe,
    decode,
    encode_raised,
    encode_result,
    encode_unverifiable,
    map_leaves,
)
from pytest_mlcanon.plugin import RUN_PLUGIN_NAME
from pytest_mlcanon.redirect import REF_PACKAGE
from pytest_mlcanon.run.state import CanonRun

Modules = Callable[[str], "ModuleType | None"]
#: An answer larger than this is replaced by an error (the verifier keeps no case whose answer is
#: over a quarter of it; a frame holds 8 MB).
MAX_ANSWER_BYTES = 4 << 20
#: What ``PYTEST_CURRENT_TEST`` names while the cases run.
CURRENT_TEST = "test_module.py::test_case"
#: (module, class) -> the fitted attributes its contract states, compared after a script's steps (red team:
#: a PCA whose ``fit`` returns ``self``, compared by its type's name only, set them to zeros unseen).
FITTED: dict[tuple[str, str], tuple[str, ...]] = {
    ("classical/pca", "PCA"): ("mean_", "components_", "explained_variance_", "explained_variance_ratio_",
                               "singular_values_"),
}


class ReplayPlugin:
    """Runs the re-check cases once, when the job's session starts, watching each for the item's
    forbidden shortcuts (``forbidden``)."""

    def __init__(self, cases: list[dict[str, Any]], channel: ChannelWriter, forbidden: tuple[str, ...] = ()) -> None:
        self.cases = cases
        self.channel = channel
        self.detector = Detector(forbidden)
        self.done = False

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        run = session.config.pluginmanager.get_plugin(RUN_PLUGIN_NAME)
        recorder = getattr(run, "recorder", None) if isinstance(run, CanonRun) else None
        if recorder is None:
            self.run()
            return
        recorder.paused = True  # the cases are not tests: checking their shapes would only cost time
        try:
            self.run()
        finally:
            recorder.paused = False

    def run(self) -> None:
        """Answer every case once (also called when no session starts: a usage error)."""
        if self.done:
            return
        self.done = True
        self.channel.send("phase", name="recheck")
        # as pytest sets it while a test runs: code that answers honestly only when it is unset (red team: honest
        # during the re-check, a forbidden shortcut in the tests) cannot tell the re-check by it
        os.environ["PYTEST_CURRENT_TEST"] = f"canon_tests/{CURRENT_TEST} (call)"
        for index, case in enumerate(self.cases):
            self.channel.send("start", test=f"recheck::{case['function']}(case {index + 1})")  # as the verdicts name it
            with self.detector.case() as hits:
                answer = run_case(case, session_module, learner=self.detector.learner)
            if len(json.dumps([answer.result, answer.after], default=str)) > MAX_ANSWER_BYTES:
                answer.result, answer.after = encode_raised(ValueError("the answer is far larger than the "
                                                                       "reference's")), {}
            self.channel.send("recheck", index=index, result=answer.result, mutated=answer.after, forbidden=hits)
        os.environ.pop("PYTEST_CURRENT_TEST", None)


def session_module(path: str) -> ModuleType | None:
    """In a job: the learner's module the session imported (``area/module``), or None."""
    return sys.modules.get(f"{REF_PACKAGE}.{path.replace('/', '.')}")


def import_module(path: str) -> ModuleType | None:
    """In the verifier: the reference module ``area/module``."""
    return importlib.import_module(f"{REF_PACKAGE}.{path.replace('/', '.')}")


class Unverifiable(Exception):
    """The case cannot be set up on this submission (its parameters are named otherwise)."""


@dataclass
class Answer:
    result: Any = None
    after: dict[str, Any] = field(default_factory=dict)
    before: dict[str, Any] = field(default_factory=dict)
    modules: set[str] = field(default_factory=set)  # keys whose values are models
    raised: bool = False


def run_case(case: dict[str, Any], modules: Modules, report_all: bool = False,
             learner: Callable[[], AbstractContextManager[None]] = nullcontext) -> Answer:
    """Run one case on the code ``modules`` resolves; never raises. ``report_all`` (the verifier):
    report every argument's value before and after the call, not only those the case names.
    ``learner()`` wraps each call into the code under test (the forbidden-call detector)."""
    answer = Answer()
    wanted = None if report_all else set(case.get("mutated", ()))
    run = _Run(modules, learner)
    try:
        if case.get("kind") == "script":
            _play(case, run, answer, wanted)
        else:
            _call(case, run, answer, wanted)
    except Unverifiable as exc:
        answer.result, answer.raised = encode_unverifiable(str(exc)), True
    except BaseException as exc:  # noqa: BLE001 - even SystemExit is only a wrong answer here
        answer.result, answer.raised = encode_raised(exc), True
    return answer


@dataclass(frozen=True)
class _Run:
    modules: Modules
    learner: Callable[[], AbstractContextManager[None]]

    def module(self, path: str) -> ModuleType:
        module = self.modules(path)
        if module is None:
            raise ImportError(f"{path}.py was not imported (it failed to import, or no test ran)")
        return module

    def inputs(self, encoded: Any) -> Any:
        return build(decode(encoded, to_torch=True), self)


def _call(case: dict[str, Any], run: _Run, answer: Answer, wanted: set[str] | None) -> None:
    """A function call, after the call that made its state where it takes one (forward, then backward):
    the answer is the last call's result (with every step's, in order, when there are several)."""
    module = run.module(case["module"])
    results: list[Any] = []
    encoded: list[Any] = []
    values: dict[str, Any] = {}
    for step, opaque in zip(case["steps"], case.get("opaque", [])):
        fn = getattr(module, step["function"], None)
        if not callable(fn):
            raise AttributeError(f"{case['module']}.py has no function {step['function']!r}")
        args = _from_steps(run.inputs(step["args"]), results)
        kwargs = _from_steps(run.inputs(step["kwargs"]), results)
        values = {**{str(i): v for i, v in enumerate(args)}, **kwargs}
        if wanted is None:
            answer.before = {key: encode_result(v) for key, v in values.items()}
        try:
            with run.learner():
                returned = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported as the answer, the arguments after it too
            encoded.append(encode_raised(exc))
            answer.raised = True
            break
        results.append(returned)
        encoded.append(_without_state(encode_result(returned)) if opaque else encode_result(returned))
    answer.result = encoded[0] if len(case["steps"]) == 1 else {TAG: "list", "items": encoded}
    _after(values, answer, wanted)


def _from_steps(value: Any, results: list[Any]) -> Any:
    """Inputs with every ``step`` recipe replaced by that step's result (or the element it names)."""
    def resolve(leaf: Any) -> Any:
        if not (isinstance(leaf, Recipe) and leaf.tag == "step"):
            return leaf
        step, index = int(leaf.data["step"]), leaf.data.get("index")
        if step >= len(results):
            raise ValueError(f"step {step} has no result")
        return results[step] if index is None else results[step][int(index)]

    return map_leaves(value, resolve)


def _without_state(encoded: Any) -> Any:
    """A result with its state for another call (a mapping, or a list of mappings, on its own or in the
    returned tuple) replaced by ``ignored``: its layout is the implementer's choice."""
    def state(item: Any) -> bool:
        if not isinstance(item, dict):
            return False
        if item.get(TAG) == "dict":
            return True
        items = item.get("items")
        return item.get(TAG) in ("list", "tuple") and isinstance(items, list) and bool(items) and all(
            state(i) for i in items)

    if state(encoded):
        return IGNORED
    if isinstance(encoded, dict) and encoded.get(TAG) == "tuple":
        return {**encoded, "items": [IGNORED if state(i) else i for i in encoded["items"]]}
    return encoded


def _play(case: dict[str, Any], run: _Run, answer: Answer, wanted: set[str] | None) -> None:
    init_args, init_kwargs = run.inputs(case["init"][0]), run.inputs(case["init"][1])
    obj = _construct(run, case["module"], case["function"], init_args, init_kwargs, case)
    values = {**{f"init.{i}": v for i, v in enumerate(init_args)}, **{f"init.{k}": v for k, v in init_kwargs.items()}}
    if wanted is None:
        answer.before = {key: encode_result(v) for key, v in values.items()}
    results = []
    for step in case["steps"]:
        args, kwargs = run.inputs(step["args"]), run.inputs(step["kwargs"])
        try:
            with run.learner():
                returned = getattr(obj, step["method"])(*args, **kwargs)
            results.append(encode_result(returned))
        except BaseException as exc:  # noqa: BLE001 - the step's answer; the script stops there
            results.append(encode_raised(exc))
            answer.raised = True
            break
    answer.result = {TAG: "list", "items": results}
    if case.get("state") is not None:
        values["state"] = obj
    fitted = FITTED.get((case["module"], case["function"]), ())
    if fitted and not answer.raised:
        values["fitted"] = {name: getattr(obj, name, None) for name in fitted}
    _after(values, answer, wanted)


def _after(values: dict[str, Any], answer: Answer, wanted: set[str] | None) -> None:
    torch = sys.modules.get("torch")
    for key, value in values.items():
        if wanted is not None and key not in wanted:
            continue
        if torch is not None and isinstance(value, torch.nn.Module):
            answer.modules.add(key)
        answer.after[key] = encode_result(value)


def build(value: Any, run: _Run) -> Any:
    """Decoded inputs with every recipe built (see ``values``; a ``step`` is resolved by ``_call``)."""
    return map_leaves(value, lambda leaf: _build(leaf, run) if isinstance(leaf, Recipe) and leaf.tag != "step"
                      else leaf)


def _build(recipe: Recipe, run: _Run) -> Any:
    data = recipe.data
    if recipe.tag == "pickled":
        return pickle.loads(base64.b64decode(data["data"]))  # noqa: S301 - pickled by the verifier (trusted)
    if recipe.tag == "object":  # a dataclass: of the item, another item (through the redirect) or a test helper
        cls = getattr(importlib.import_module(str(data["module"])), str(data["class"]))
        fields = run.inputs(data["fields"])
        with run.learner():
            return cls(**fields)
    return _construct(run, str(data["module"]), str(data["class"]), run.inputs(data["init"][0]),
                      run.inputs(data["init"][1]), data)


def _construct(run: _Run, module: str, name: str, args: list[Any], kwargs: dict[str, Any],
               spec: dict[str, Any]) -> Any:
    """An object of the learner's class ``module.name`` built from its constructor arguments, with the
    verifier's parameters (``spec["state"]``, in ``spec["training"]`` mode) when it has them."""
    cls = getattr(run.module(module), name, None)
    if not isinstance(cls, type):
        raise AttributeError(f"{module}.py has no class {name!r}")
    with run.learner():
        obj = cls(*args, **kwargs)
    if spec.get("state") is not None:
        load_parameters(obj, decode(spec["state"], to_torch=True), bool(spec.get("training", True)))
    return obj


def load_parameters(obj: Any, state: dict[str, Any], training: bool) -> None:
    """Give ``obj`` (an ``nn.Module``) the verifier's parameters, by name; Unverifiable when its
    parameters are not those of the reference (names or shapes)."""
    import torch

    if not isinstance(obj, torch.nn.Module):
        raise Unverifiable(f"a {type(obj).__name__} is not an nn.Module: its parameters cannot be set")
    own = dict(obj.named_parameters())
    if set(own) != set(state):
        missing, extra = sorted(set(state) - set(own)), sorted(set(own) - set(state))
        raise Unverifiable(f"{type(obj).__name__}'s parameters are not the reference's (missing "
                           f"{', '.join(missing[:3]) or 'none'}; extra {', '.join(extra[:3]) or 'none'})")
    with torch.no_grad():
        for name, param in own.items():
            if tuple(param.shape) != tuple(state[name].shape):
                raise Unverifiable(f"{type(obj).__name__}.{name} has shape {tuple(param.shape)}, the "
                                   f"reference's {tuple(state[name].shape)}")
            param.copy_(state[name])
    obj.train(training)

