"""The seeded re-check, the verifier's side: how the reference tests call each item, turned into cases
with this run's fresh inputs and the reference's answers.

In the verifier (a trusted process; no learner code ever runs there), ``Recorder`` wraps, while the
reference tests run, the public functions of each item's modules and the public methods of its
classes, and keeps calls of every distinct kind the tests make: one per combination of argument
types, ranks and dtypes (a Python float and a tensor, a single example and a batch, float16 and
float64 are different kinds) and values of flags and options (``reduction="sum"``). Arguments are
captured as they were at the call:

* plain data: tensors, arrays, numbers, strings, dtypes and containers of these;
* a model of a trusted class (a test helper's, ``torch.nn``'s), as a deep copy;
* an object of one of the item's own classes built by the test, as its constructor arguments and,
  for an ``nn.Module``, its parameters at the call;
* a dataclass (the item's own or a test helper's), as its fields.

An object of an item's class also becomes a *script*: its constructor arguments, its parameters at
its first method call, and up to ``MAX_STEPS`` method calls, replayed in order. A call taking the
state another call returned (``batchnorm_backward(dy, cache)``) is replayed after that call, on the
state the side that runs it made (its layout is the implementer's), and such a state is never
compared.

``Recorder.cases`` perturbs each kept call with this run's seed (floating values and a model's
parameters scaled by 1 +- 2 %; masks, integers and booleans kept), shortens training calls to their
first steps (``SHORTEN``), runs it on the reference twice under different global seeds through
exactly the code a job runs (``replay.run_case``), and keeps it when both answers agree; a case whose
answer (the result and the arguments the call changed) is the answer to the tests' own inputs on every
one of ``FRESH_DRAWS`` draws is ``fixed``: no evidence, as the public calls' answers learned by heart
would pass it (``compare.proves_nothing``), unless drawn again with its integer sizes stirred
(``stir_sizes``) it answers differently. Where a contract accepts two conventions (``CHOICES``), the
case also carries the reference's answers under the others (``alternatives``). A case is
the encoded inputs plus the expected answer (and the post-call value of every model argument and
of any other argument the reference changes in place). The job gets only the inputs
(``child_cases``); the parent compares its answers with the expected ones (``compare``).

A call a numerics probe made (extreme magnitudes, half precision) is a kind of its own and its case
is marked ``probe``: a difference there is the parent's evidence against the item's Numerics, never
against its correctness, so an honest ``-log(sigmoid(margin))`` that overflows where the reference's
``logsigmoid`` does not loses Numerics, as its probe tests say, and is never called a forgery.

Not re-checked, which leaves their item's correctness unverified: calls taking a seed, a generator,
a callable, an environment or anything else that is not data; functions whose outputs are only
defined up to an implementation's choice and have no canonical form (``UNDEFINED``); items a
teacher lists in ``[recheck] skip``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import json
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_mlcanon import catalog
from pytest_mlcanon.grade import replay
from pytest_mlcanon.grade.compare import CANONICAL, is_mask, proves_nothing
from pytest_mlcanon.grade.values import DTYPES, Recipe, encode, map_leaves
from pytest_mlcanon.redirect import REF_PACKAGE
from pytest_mlcanon.run import ITEM_PROPERTY

PER_FUNCTION = 8
PER_ITEM = 64
MAX_STEPS = 6
#: A case whose answer is larger is not kept: a job's answer must fit one frame with room to spare.
MAX_ANSWER_BYTES = 1 << 20
#: How coverage marks a public name the item's tests never call themselves: it counts for nothing.
UNTESTED = "not called by the item's tests"
#: A parameter whose name holds this takes another call's state (``batchnorm_backward(dy, cache)``).
STATE_WORD = "cache"
MAX_PRODUCED = 256
MAX_ELEMENTS = 100_000
SCALE = 0.02
RANDOM_PARAMETERS = frozenset({"seed", "rng", "generator", "random_state", "key"})
#: Classes whose models a case may carry whole (pickled): trusted code no submission can replace.
TRUSTED_MODULES = ("canon_tests.", "torch.nn.")
#: Functions whose outputs are an implementation's choice, with no canonical form to compare.
UNDEFINED: dict[tuple[str, str], str] = {
    ("retrieval/ann", "IVFIndex"): "approximate search may return other neighbours",
    ("retrieval/ann", "HNSWIndex"): "approximate search may return other neighbours",
    ("retrieval/ann", "ProductQuantizer"): "codebooks depend on the implementer's k-means",
    ("retrieval/rag", "HashingEmbedder"): "buckets come from the implementer's choice of stable hash",
    ("retrieval/rag", "VectorStore"): "scores rest on the implementer's hashing embedder",
    ("retrieval/rag", "RAGPipeline"): "retrieval rests on the implementer's hashing embedder",
    ("multimodal/projectors", "ResamplerProjector"): "the contract fixes its layers, not how they combine "
                                                       "(a residual around the cross-attention is the implementer's choice)",
}


#: Choices a contract leaves to the implementer, as a private constant of the reference module and the
#: other values it accepts: the verifier answers each case of the function under every one of them too
#: (``alternatives``), and the parent accepts an answer that matches any (``assess._recheck``).
QUANTILE_METHODS = ("inverted_cdf", "averaged_inverted_cdf", "closest_observation", "interpolated_inverted_cdf",
                    "hazen", "weibull", "median_unbiased", "normal_unbiased", "lower", "higher", "midpoint", "nearest")
CHOICES: dict[tuple[str, str], dict[str, tuple[Any, ...]]] = {
    ("rl/ppo", "ppo_loss"): {"_ADVANTAGE_STD_CORRECTION": (1,)},  # the population or the sample std
    **{("evaluation/harness", name): {"_QUANTILE_METHOD": QUANTILE_METHODS}  # "the quantiles": any definition
       for name in ("bootstrap_ci", "paired_bootstrap", "evaluate")},
}


@dataclass(frozen=True)
class Shorten:
    """How a training call is replayed: the step counts set small, the sequences of batches cut to
    their first element and the batch sizes to the whole data (so no implementation-defined visiting
    order enters), a seed made irrelevant by that."""

    counts: dict[str, int]
    first: tuple[str, ...] = ()
    whole: tuple[str, ...] = ()


#: A batch size that takes the whole data (``batch_size`` is capped at ``N``).
WHOLE = 1 << 30
SHORTEN: dict[tuple[str, str], Shorten] = {
    ("posttrain/dpo", "run_dpo"): Shorten({"steps": 2}, first=("batches",)),
    ("posttrain/reward_model", "train_reward_model"): Shorten({"steps": 2}, first=("batches",)),
    ("vision/tiny_cnn", "train_cnn"): Shorten({"steps": 2}, whole=("batch_size",)),
}


# -- what a call's arguments were ---------------------------------------------------------------------------


class NotData(Exception):
    """An argument the re-check cannot carry to a job; the message says what it is ('takes a ...')."""


@dataclass
class Model:
    """A model of a trusted class, as it was at the call (a deep copy)."""

    model: Any


@dataclass
class Instance:
    """An object of one of the item's classes: how it was built, its parameters at the call."""

    module: str  # area/module
    cls: str
    init: tuple[tuple[Any, ...], dict[str, Any]]
    state: dict[str, Any] | None
    training: bool = True


@dataclass
class Object:
    """A dataclass instance, by its fields."""

    module: str  # the Python module of its class
    cls: str
    fields: dict[str, Any]


@dataclass
class Script:
    """An object of an item's class and the method calls made on it."""

    slug: str
    module: str
    cls: str
    obj: Any
    init: tuple[tuple[Any, ...], dict[str, Any]]
    steps: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    state: dict[str, Any] | None = None
    training: bool = True
    frozen: bool = False
    probe: bool = False  # built by a numerics probe: its case tests Numerics, not correctness
    reach: str = ""  # the kind of its constructor arguments: what its case verifies of a test's method calls


@dataclass
class Call:
    slug: str
    module: str
    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    after: Call | None = None  # the call that returned this one's state (``cache``): replayed first
    probe: bool = False  # made by a numerics probe: its case tests Numerics, not correctness
    reach: str = ""  # its kind as the tests made it (``reach_token``): what its case verifies of a test


@dataclass(frozen=True)
class FromStep:
    """An argument that is (element ``index`` of) the result of an earlier step of the same case."""

    step: int
    index: int | None


class Recorder:
    """Calibration plugin for the verifier's reference run: expected test ids and re-check cases."""

    def __init__(self, items: tuple[catalog.Item, ...], skip: frozenset[str] = frozenset()) -> None:
        self.items = {item.slug: item for item in items}
        self.skip = skip
        self.nodeids: dict[str, list[str]] = {item.slug: [] for item in items}
        self.probes: dict[str, list[str]] = {item.slug: [] for item in items}
        self.contract: dict[str, list[str]] = {item.slug: [] for item in items}
        self.failed: dict[str, list[str]] = {item.slug: [] for item in items}
        self.skipped: dict[str, list[str]] = {item.slug: [] for item in items}
        self.publics: dict[str, list[str]] = {item.slug: [] for item in items}
        self.calls: list[Call] = []
        #: calls of a kind already kept but with scalar values of another size (``soft_update(tau=0.5)``
        #: after ``tau=0.25``): cases too, after every function's first ``calls``, as the item's cap allows
        self.later: list[Call] = []
        self._sized: dict[tuple[str, str], set[str]] = {}  # (item, name) -> the kept calls' kinds with sizes
        self.scripts: dict[int, Script] = {}
        self._keys: dict[tuple[str, str], set[str]] = {}
        self._originals: list[tuple[Any, str, Any]] = []
        self._active = False
        self._why: dict[tuple[str, str], str] = {}  # (item, name) -> why a call of it is no case
        self._results: dict[int, tuple[Call, int | None, Any]] = {}  # id(container returned) -> its call
        self.consumers: set[tuple[str, str]] = set()  # (area/module, function) taking a state (``cache``)
        self._current = ""  # the item of the running test
        self._probe = False  # whether the running test is a numerics probe
        self._called: set[tuple[str, str]] = set()  # (item, name) its own tests call
        self._test = ""  # the running test's node id
        #: item -> test node id -> what the test calls itself, as ``reach_token``s (a call inside another
        #: recorded call is the outer call's business; a fixture's calls are every test's that uses it): a
        #: test one of whose calls no case verifies pays on the child's word only (``held``)
        self.reaches: dict[str, dict[str, set[str]]] = {item.slug: {} for item in items}
        self._fixtures: list[str] = []  # the fixtures being set up, innermost last
        self._fixture_reaches: dict[str, set[tuple[str, str]]] = {}  # fixture -> (item, token) its setup made
        self._fixturenames: tuple[str, ...] = ()  # the running test's fixtures

    # -- hooks -------------------------------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        owners: dict[str, list[str]] = {}  # a module shared by items (optim/optimizers) is wrapped once
        for slug, item in self.items.items():
            if slug not in self.skip:
                for module_path in item.modules:
                    owners.setdefault(module_path, []).append(slug)
        for module_path, slugs in owners.items():
            module = sys.modules.get(f"{REF_PACKAGE}.{module_path.replace('/', '.')}")
            if module is not None:
                self._wrap_module(tuple(slugs), module_path, module)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        slug = dict(item.user_properties).get(ITEM_PROPERTY)
        self._current = slug if isinstance(slug, str) else ""
        self._test = item.nodeid
        self._probe = item.get_closest_marker("numerics_probe") is not None
        self._fixturenames = tuple(getattr(item, "fixturenames", ()))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Any:
        self._fixtures.append(str(fixturedef.argname))
        try:
            yield
        finally:
            self._fixtures.pop()

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        for name in self._fixturenames:  # a module-scoped fixture's calls were made once, for the first test
            for slug, token in self._fixture_reaches.get(name, ()):
                self.reaches.setdefault(slug, {}).setdefault(nodeid, set()).add(token)
        self._current = self._test = ""
        self._probe = False
        self._fixturenames = ()

    def _owner(self, slugs: tuple[str, ...], name: str, key: str = "") -> str:
        """The item a call is recorded for: the running test's, when it is one of the module's items."""
        if self._current in slugs:
            self._called.add((self._current, name))
            token = reach_token(name, key)
            self.reaches.setdefault(self._current, {}).setdefault(self._test, set()).add(token)
            for fixture in self._fixtures:
                self._fixture_reaches.setdefault(fixture, set()).add((self._current, token))
            return self._current
        return slugs[0]

    def held(self, cases: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, list[str]]]:
        """Per item, each test that makes a call no case verifies (its kind has no case whose answer fresh
        inputs change, or no case at all: a seed, a kind past the cap): the public names of those calls."""
        out: dict[str, dict[str, list[str]]] = {}
        for slug, tests in self.reaches.items():
            verified = {token for case in cases.get(slug, []) if not case.get("probe") and not proves_nothing(case)
                        for token in case_tokens(case)}
            found = {test: sorted({token.split(TOKEN_SEP)[0] for token in tokens - verified})
                     for test, tokens in tests.items()}
            out[slug] = {test: names for test, names in found.items() if names}
        return out

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for node in session.items:
            slug = dict(node.user_properties).get(ITEM_PROPERTY)
            if isinstance(slug, str) and slug in self.nodeids:
                self.nodeids[slug].append(node.nodeid)
                if node.get_closest_marker("numerics_probe") is not None:
                    self.probes[slug].append(node.nodeid)
                if node.get_closest_marker("contract") is not None:
                    self.contract[slug].append(node.nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        slug = dict(report.user_properties).get(ITEM_PROPERTY)
        if report.failed and isinstance(slug, str) and slug in self.failed:
            self.failed[slug].append(report.nodeid)
        elif report.skipped and isinstance(slug, str) and slug in self.skipped:
            self.skipped[slug].append(report.nodeid)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        for owner, name, original in reversed(self._originals):
            if original is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._originals.clear()

    # -- wrapping ----------------------------------------------------------------------------------------
    def _wrap_module(self, slugs: tuple[str, ...], module_path: str, module: Any) -> None:
        for name, value in vars(module).copy().items():
            if name.startswith("_") or getattr(value, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(value):
                for slug in slugs:
                    self.publics[slug].append(name)
                if any(STATE_WORD in parameter for parameter in inspect.signature(value).parameters):
                    self.consumers.add((module_path, name))
                self._patch(module, name, self._function_wrapper(slugs, module_path, name, value))
            elif inspect.isclass(value):
                methods = public_methods(value)
                if not methods:
                    continue  # a data container (a config, a result): compared where it is returned
                for slug in slugs:
                    self.publics[slug] += [f"{name}.{m}" for m in methods]
                self._patch(value, "__init__", self._init_wrapper(slugs, module_path, value, value.__init__))
                for method in methods:
                    self._patch(value, method, self._method_wrapper(slugs, name, vars(value)[method]))

    def _patch(self, owner: Any, name: str, wrapper: Any) -> None:
        self._originals.append((owner, name, vars(owner).get(name, _ABSENT) if isinstance(owner, type)
                                else getattr(owner, name)))
        setattr(owner, name, wrapper)

    def _outermost(self, record: Callable[[], None], call: Callable[[], Any]) -> Any:
        """Record (only a call the tests make themselves, not one inside another recorded call), then call."""
        if self._active:
            return call()
        self._active = True
        try:
            record()
            return call()
        finally:
            self._active = False

    def _function_wrapper(self, slugs: tuple[str, ...], module_path: str, name: str,
                          fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            if self._active:
                return fn(*args, **kwargs)
            key = raw_kind(args, kwargs)
            slug = self._owner(slugs, name, key)
            result = self._outermost(lambda: self._keep_call(slug, module_path, name, fn, args, kwargs, key),
                                     lambda: fn(*args, **kwargs))
            self._produced(Call(slug, module_path, name, fn, args, kwargs), result)
            return result

        return recorded

    def _produced(self, call: Call, result: Any) -> None:
        """Remember which call returned each container it returned (a later call may take it as its state)."""
        parts = enumerate(result) if type(result) is tuple else [(None, result)]
        for index, part in parts:
            if type(part) in (dict, list, tuple):
                self._results[id(part)] = (call, index, part)
        while len(self._results) > MAX_PRODUCED:
            self._results.pop(next(iter(self._results)))

    def _init_wrapper(self, slugs: tuple[str, ...], module_path: str, cls: type,
                      init: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(obj: Any, *args: Any, **kwargs: Any) -> None:
            def record() -> None:
                if type(obj) is not cls:
                    return  # a subclass (a test's own): not the item's class
                slug = self._current if self._current in slugs else slugs[0]
                torch = sys.modules.get("torch")
                module = torch is not None and isinstance(obj, torch.nn.Module)
                if not module and _takes_randomness(init, (obj, *args), kwargs, unknown=False):
                    self._why.setdefault((slug, cls.__qualname__), "built from a seed or a random generator")
                    return
                try:
                    captured = (self._capture(args, slug), self._capture(kwargs, slug))
                except NotData as exc:
                    self._why.setdefault((slug, cls.__qualname__), f"built from arguments it {exc}".replace(
                        "it takes", "that are"))
                    return
                self.scripts[id(obj)] = Script(slug, module_path, cls.__qualname__, obj, captured,
                                               probe=self._probe, reach=kind(captured))

            self._outermost(record, lambda: init(obj, *args, **kwargs))

        return recorded

    def _method_wrapper(self, slugs: tuple[str, ...], cls: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def recorded(obj: Any, *args: Any, **kwargs: Any) -> Any:
            def record() -> None:
                script = self.scripts.get(id(obj))
                carried = script is not None and script.obj is obj and not script.frozen
                # an object the re-check cannot rebuild (its constructor took a model of another item, a
                # seed) or can no longer follow: no case verifies its calls (red team: rope tests were paid)
                self._owner(slugs, f"{cls}.{method.__name__}", script.reach if carried and script else UNCARRIED)
                if script is None or script.obj is not obj or script.frozen or len(script.steps) >= MAX_STEPS:
                    return
                try:
                    if _takes_randomness(method, (obj, *args), kwargs, unknown=False):
                        raise NotData("takes a seed or a random generator")
                    step = (method.__name__, self._capture(args, script.slug), self._capture(kwargs, script.slug))
                except NotData as exc:
                    script.frozen = True  # what follows depends on a call the re-check cannot repeat
                    self._why.setdefault((script.slug, f"{script.cls}.{method.__name__}"), str(exc))
                    self._owner(slugs, f"{cls}.{method.__name__}", UNCARRIED)
                    return
                if not script.steps:
                    script.state, script.training = _parameters(obj), bool(getattr(obj, "training", True))
                script.steps.append(step)

            return self._outermost(record, lambda: method(obj, *args, **kwargs))

        return recorded

    # -- recording ---------------------------------------------------------------------------------------
    def _keep_call(self, slug: str, module_path: str, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
                   kwargs: dict[str, Any], reach: str = "") -> None:
        seen = self._keys.setdefault((slug, name), set())
        sized = self._sized.setdefault((slug, name), set())
        if (len(seen) >= PER_FUNCTION and len(sized) >= 2 * PER_FUNCTION) or (slug, name) in UNDEFINED:
            return
        if (slug, name) not in SHORTEN and _takes_randomness(fn, args, kwargs):
            self._why.setdefault((slug, name), "takes a seed or a random generator")
            return
        producer = self._producer(module_path, name, fn, args, kwargs)
        try:
            if producer is not None:
                args, kwargs = self._from_step(fn, args, kwargs, producer)
            captured = (self._capture(args, slug), self._capture(kwargs, slug))
            before = (self._capture(producer[0].args, slug), self._capture(producer[0].kwargs, slug)) if producer else None
        except NotData as exc:
            self._why.setdefault((slug, name), str(exc) or "takes arguments the re-check cannot carry")
            return
        prefix, tail = "probe:" if self._probe else "", f"<-{producer[0].name}{kind(before)}" if producer and before else ""
        key, with_sizes = prefix + kind(captured) + tail, prefix + kind(captured, sizes=True) + tail
        first = Call(slug, module_path, producer[0].name, producer[0].fn, *before) if producer and before else None
        call = Call(slug, module_path, name, fn, *captured, after=first, probe=self._probe, reach=reach)
        if key not in seen and len(seen) < PER_FUNCTION:
            seen.add(key)
            sized.add(with_sizes)
            self.calls.append(call)
        elif with_sizes not in sized and len(sized) < 2 * PER_FUNCTION:
            sized.add(with_sizes)
            self.later.append(call)

    def _producer(self, module_path: str, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> tuple[Call, int | None, str] | None:
        """The earlier call of this module that returned the state this call takes (its ``cache``)."""
        if (module_path, name) not in self.consumers:
            return None
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError:
            return None
        for parameter, value in bound.arguments.items():
            found = self._results.get(id(value))
            if STATE_WORD in parameter and found is not None and found[2] is value and found[0].module == module_path:
                return found[0], found[1], parameter
        return None

    @staticmethod
    def _from_step(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                   producer: tuple[Call, int | None, str]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's arguments with its state replaced by a reference to the producing step's result."""
        bound = inspect.signature(fn).bind(*args, **kwargs)
        bound.arguments[producer[2]] = FromStep(0, producer[1])
        return tuple(bound.args), dict(bound.kwargs)

    def _capture(self, value: Any, slug: str, depth: int = 0) -> Any:
        """``value`` as the re-check can carry it, copied as it is now; raises NotData."""
        if depth > 6:
            raise NotData("takes data nested too deeply")
        if value is None or isinstance(value, (bool, int, float, str, FromStep)):
            return value
        torch, np = sys.modules.get("torch"), sys.modules.get("numpy")
        if torch is not None and isinstance(value, torch.Tensor):
            if (type(value) not in (torch.Tensor, torch.nn.Parameter) or value.layout != torch.strided
                    or str(value.dtype).removeprefix("torch.") not in DTYPES or value.numel() > MAX_ELEMENTS
                    or value.device.type != "cpu"):
                raise NotData(f"takes a {value.dtype} tensor of {value.numel()} elements the codec does not carry")
            return value.detach().clone().requires_grad_(value.requires_grad and value.is_floating_point())
        if torch is not None and isinstance(value, torch.dtype):
            return value
        if np is not None and isinstance(value, (np.ndarray, np.generic)):
            if value.dtype.name not in DTYPES or np.size(value) > MAX_ELEMENTS:
                raise NotData(f"takes a {value.dtype.name} array of {np.size(value)} elements the codec does not carry")
            return value.copy()
        if type(value) in (tuple, list):
            if len(value) > 64:
                raise NotData("takes a sequence longer than 64")
            return type(value)(self._capture(v, slug, depth + 1) for v in value)
        if type(value) is dict and all(type(k) is str for k in value):
            if len(value) > 64:
                raise NotData("takes a mapping larger than 64")
            return {k: self._capture(v, slug, depth + 1) for k, v in value.items()}
        return self._capture_object(value, slug, depth)

    def _capture_object(self, value: Any, slug: str, depth: int) -> Any:  # noqa: PLR0911
        torch = sys.modules.get("torch")
        script = self.scripts.get(id(value))
        is_module = torch is not None and isinstance(value, torch.nn.Module)
        if is_module and script is not None and script.obj is value and script.slug == slug:
            return Instance(script.module, script.cls, script.init, _parameters(value), bool(value.training))
        if is_module and type(value).__module__.startswith(TRUSTED_MODULES) and _trusted_all_through(value):
            return Model(copy.deepcopy(value))
        if (dataclasses.is_dataclass(value) and not isinstance(value, type)
                and type(value).__module__.startswith(("canon_tests.", f"{REF_PACKAGE}."))):
            fields = {f.name: self._capture(getattr(value, f.name), slug, depth + 1) for f in dataclasses.fields(value)
                      if f.init}
            return Object(type(value).__module__, type(value).__qualname__, fields)
        if is_module:
            raise NotData(f"takes a {type(value).__name__} model of another item or of a test's own class")
        if callable(value):
            raise NotData("takes a callable")
        raise NotData(f"takes a {type(value).__name__}")

    def coverage(self, cases: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, str]]:
        """Per item, each public function and method: ``verified: how (n cases)`` or ``unverified: why``."""
        out: dict[str, dict[str, str]] = {}
        for slug, names in self.publics.items():
            found: dict[str, list[str]] = {}
            count: dict[str, int] = {}
            hollow: dict[str, str] = {}  # name -> what its cases expect instead of data
            for case in cases.get(slug, []):
                if held := proves_nothing(case):
                    for name in case_names(case):
                        hollow.setdefault(name, held)
                    continue
                for name in case_names(case):
                    found.setdefault(name, []).extend(how(case, name))
                    count[name] = count.get(name, 0) + 1
            out[slug] = {}
            for name in names:
                if name in found:
                    ways = ", ".join(dict.fromkeys(found[name]))
                    out[slug][name] = f"verified: {ways} ({count[name]} case{'s' * (count[name] > 1)})"
                    continue
                if (slug, name) not in self._called:
                    out[slug][name] = f"{UNTESTED}: only through other functions, if at all"
                    continue
                owner = name.split(".")[0]
                why = (UNDEFINED.get((slug, owner)) or hollow.get(name) or self._why.get((slug, name))
                       or self._why.get((slug, owner)) or "never called by the reference tests with data")
                out[slug][name] = f"unverified: {why}"
        return out

    # -- cases ---------------------------------------------------------------------------------------------
    def cases(self, seed: int) -> dict[str, list[dict[str, Any]]]:
        """This run's cases: every kept call and script with fresh inputs and the reference's answers."""
        import numpy as np

        candidates: dict[str, list[tuple[str, Callable[[Any], dict[str, Any] | None]]]] = {s: [] for s in self.items}
        for call in [*self.calls, *self.later]:  # a function's own kinds first, then its other sizes of scalar
            candidates[call.slug].append((call.name, functools.partial(self._call_case, call)))
        for script in _distinct_scripts(self.scripts.values()):
            if (script.slug, script.cls) not in UNDEFINED:
                candidates[script.slug].append((script.cls, functools.partial(self._script_case, script)))
        out: dict[str, list[dict[str, Any]]] = {}
        for slug, found in candidates.items():
            out[slug] = []
            for index, (_, build) in enumerate(_round_robin(found)):
                if len(out[slug]) >= PER_ITEM:
                    break
                case = _built(build, np.random.default_rng([seed, index, len(slug)]))
                public = _answer_of(build, UNPERTURBED)
                # fresh inputs the reference refuses where it takes the tests' own (an input check's it always
                # refuses): draw again, or a kind would have a case in some runs and not others
                for draw in range(FRESH_DRAWS if case is None and public is not None else 0):
                    case = _built(build, _Tied(np.random.default_rng([seed, index, len(slug), 5, draw])))
                    if case is not None:
                        break
                if case is None:
                    continue
                answer = case.pop(ANSWER)
                for draw in range(FRESH_DRAWS if answer == public else 0):  # a fixed draw: another may not be
                    again = _built(build, np.random.default_rng([seed, index, len(slug), 1, draw]))
                    if again is not None and again[ANSWER] != public:
                        case, answer = again, again.pop(ANSWER)
                        break
                case["fixed"] = answer == public
                out[slug].append(self._stirred(build, case, answer, [seed, index, len(slug)]) if case["fixed"] else case)
        return out

    @staticmethod
    def _stirred(build: Callable[..., dict[str, Any] | None], case: dict[str, Any], answer: str,
                 key: list[int]) -> dict[str, Any]:
        """A fixed case drawn again with its sizes stirred (``stir_sizes``): kept where the reference takes
        two such draws and their answers differ from each other and from the fixed one's (a mask's length,
        a layer's width now varies per run); else the fixed case, which proves nothing."""
        import numpy as np

        stirred = functools.partial(build, stir=True)

        def draw(*path: int) -> dict[str, Any] | None:
            return _built(stirred, np.random.default_rng([*key, *path]))

        for attempt in range(STIR_ATTEMPTS):
            first = draw(2, attempt)
            if first is None or first[ANSWER] == answer:
                continue
            for again in range(STIR_ATTEMPTS):
                second = draw(3, attempt, again)
                if second is not None and second[ANSWER] != first[ANSWER]:
                    first.pop(ANSWER)
                    return {**first, "fixed": False, "stirred": True}
        return case

    def _call_case(self, call: Call, rng: Any, *, stir: bool = False) -> dict[str, Any] | None:
        steps = [] if call.after is None else [self._step(call.after, rng)]
        steps.append(self._step(call, rng, stir=stir and call.after is None))
        case = {"item": call.slug, "module": call.module, "kind": "call", "function": call.name, "steps": steps,
                "opaque": [self._state_outputs(step["function"], call.module) for step in steps],
                "probe": call.probe, "reach": call.reach}
        return _with_expected(case)

    @staticmethod
    def _step(call: Call, rng: Any, *, stir: bool = False) -> dict[str, Any]:
        args, kwargs = _shorten(call, SHORTEN.get((call.slug, call.name)))
        if stir:
            args, kwargs = stir_sizes((args, kwargs), rng)
        return {"function": call.name, "args": encode(recipes(perturb(args, rng))),
                "kwargs": encode(recipes(perturb(kwargs, rng)))}

    def _state_outputs(self, name: str, module_path: str) -> bool:
        """Whether the function's returned mappings are its state for another (a ``cache``): the
        implementer's own layout, never compared."""
        return (module_path, name) not in self.consumers and any(m == module_path for m, _ in self.consumers)

    def _script_case(self, script: Script, rng: Any, *, stir: bool = False) -> dict[str, Any] | None:
        """The script's case (``stir`` is for calls: a script's sizes are its object's, never stirred)."""
        init_args, init_kwargs = script.init
        case = {"item": script.slug, "module": script.module, "kind": "script", "function": script.cls,
                "init": [encode(recipes(perturb(init_args, rng))), encode(recipes(perturb(init_kwargs, rng)))],
                "state": encode(perturb(script.state, rng)) if script.state is not None else None,
                "training": script.training, "probe": script.probe, "reach": script.reach,
                "steps": [{"method": m, "args": encode(recipes(perturb(a, rng))), "kwargs": encode(recipes(perturb(k, rng)))}
                          for m, a, k in script.steps]}
        return _with_expected(case)


_ABSENT = object()


def public_methods(cls: type) -> list[str]:
    """The public methods a class defines itself (``forward`` included), in definition order."""
    return [name for name, value in vars(cls).items()
            if inspect.isfunction(value) and not name.startswith("_")]


def how(case: dict[str, Any], name: str) -> list[str]:
    """How a case verifies ``name``, in a few words each."""
    text = json.dumps([case.get("init"), case.get("steps")])
    parts = []
    if (case["item"], case["function"]) in SHORTEN:
        parts.append("a replay of its first training steps")
    elif case.get("kind") == "script":
        parts.append("the verifier's parameters" if case.get("state") is not None else "its objects rebuilt")
    elif '"$": "pickled"' in text or '"$": "instance"' in text:
        parts.append("a model with the verifier's parameters")
    else:
        parts.append("fresh inputs")
    steps = case.get("steps", ())
    if case.get("kind") != "script" and len(steps) > 1 and steps[-1]["function"] == name:
        parts.append(f"after the learner's own {steps[0]['function']} (its {STATE_WORD})")
    if (case["item"], case["function"]) in CANONICAL:
        parts.append(f"compared in canonical form ({CANONICAL[(case['item'], case['function'])]})")
    return parts


def case_names(case: dict[str, Any]) -> list[str]:
    """The public names (``fn`` or ``Class.method``) a case exercises."""
    if case.get("kind") == "script":
        return list(dict.fromkeys(f"{case['function']}.{step['method']}" for step in case["steps"]))
    return list(dict.fromkeys(step["function"] for step in case["steps"]))


def _parameters(obj: Any) -> dict[str, Any] | None:
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.nn.Module):
        return None
    return {name: p.detach().clone() for name, p in obj.named_parameters()}


def _trusted_all_through(model: Any) -> bool:
    """Every submodule of ``model`` is of a trusted class a job can import (no item's layer hidden inside,
    no class local to a test function)."""
    return all(type(m).__module__.startswith(TRUSTED_MODULES) and "<locals>" not in type(m).__qualname__
               for m in model.modules())


def _takes_randomness(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                      unknown: bool = True) -> bool:
    """Whether the call passes a seed or a generator (``unknown`` when its signature cannot say)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return unknown
    return any(name in RANDOM_PARAMETERS and value is not None for name, value in bound.arguments.items())


#: A string this short with no space is an option's value (``reduction="sum"``, ``side="left"``, ``init="random"``).
MODE_CHARS = 24


def kind(value: Any, *, sizes: bool = False) -> str:
    """The kind of a captured value: types, ranks and dtypes, not sizes or values; but a flag's value and an
    option's (a bool, a short string with no space) are kinds of their own: each is a branch of the code
    (``sigmoid_focal_loss(reduction="sum")`` once went unchecked because ``reduction="none"`` came first).

    With ``sizes``, a Python float also says its sign and power of two (``tau=0.25`` and ``tau=0.5``
    differ): the second tier of calls, so code honest at one size of a hyperparameter and wrong at
    another the tests use meets a case of both."""
    if sizes and type(value) is float:
        return f"float{_size(value)}"
    if sizes and isinstance(value, (tuple, list, dict)):
        parts = value.items() if isinstance(value, dict) else enumerate(value)
        inner = ",".join(f"{k}:{kind(v, sizes=True)}" for k, v in (sorted(parts) if isinstance(value, dict) else parts))
        return f"{kind(value)}<{inner}>"
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return f"{type(value).__name__[0]}{len(shape)}{str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, Model):
        return f"Model:{type(value.model).__name__}"
    if isinstance(value, (Instance, Object)):
        return f"{type(value).__name__}:{value.cls}"
    if isinstance(value, tuple):  # arguments: in order
        return "(" + ",".join(kind(v) for v in value) + ")"
    if isinstance(value, list):  # a collection: its kinds of element
        return "[" + ",".join(sorted({kind(v) for v in value})) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{kind(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, bool) or (isinstance(value, str) and len(value) <= MODE_CHARS and not any(
            c.isspace() for c in value)):
        return f"{type(value).__name__}={value}"
    return type(value).__name__


#: Between a public name and the kind of a call of it in a ``reach_token``.
TOKEN_SEP = "\t"
#: The kind of a method call on an object no script follows: no case verifies it.
UNCARRIED = "(an object the re-check cannot rebuild)"


def reach_token(name: str, key: str) -> str:
    """A test's call as the verifier attributes it: a function's name and the kind of its arguments as the
    test passed them (``raw_kind``); a method's name and the kind of its object's constructor arguments
    (``Script.reach``, or ``UNCARRIED``)."""
    return f"{name}{TOKEN_SEP}{key}"


def raw_kind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """``kind`` of a call's arguments as they came, before any capture: cheap, and the same for the call a
    case was built from and every other call of that kind."""
    try:
        return kind((args, kwargs))
    except Exception:  # noqa: BLE001 - arguments of no kind (unorderable keys): a kind no case has
        return "?"


def case_tokens(case: dict[str, Any]) -> set[str]:
    """What a case verifies of the tests: its call's token, or its script's methods."""
    if case.get("kind") == "script":
        return {reach_token(f"{case['function']}.{step['method']}", str(case.get("reach", "")))
                for step in case.get("steps", [])}
    return {reach_token(str(case["function"]), str(case.get("reach", "")))}


def _size(number: float) -> str:
    """``+e-2`` for 0.25, ``-e3`` for -8.0, ``0`` for zero, ``nan``/``inf`` for the rest."""
    if number == 0 or not math.isfinite(number):
        return "0" if number == 0 else ("nan" if math.isnan(number) else "inf")
    return f"{'-' if number < 0 else '+'}e{math.frexp(abs(number))[1] - 1}"


def _distinct_scripts(scripts: Any) -> list[Script]:
    """One script per kind (class, constructor arguments, the methods and their arguments), at most
    ``PER_FUNCTION`` per class; scripts without a method call are no case."""
    seen: dict[str, set[str]] = {}
    kept = []
    for script in scripts:
        if not script.steps:
            continue
        key = ("probe:" if script.probe else "") + kind(script.init) + "".join(
            f"|{m}{kind((a, k))}" for m, a, k in script.steps)
        keys = seen.setdefault(f"{script.slug}:{script.cls}", set())
        if key not in keys and len(keys) < PER_FUNCTION:
            keys.add(key)
            kept.append(script)
    return kept


def _round_robin(found: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Interleave the candidates by function, so a cap on an item leaves none of them out."""
    groups: dict[str, list[tuple[str, Any]]] = {}
    for name, build in found:
        groups.setdefault(name, []).append((name, build))
    ordered = []
    while any(groups.values()):
        for group in groups.values():
            if group:
                ordered.append(group.pop(0))
    return ordered


def _shorten(call: Call, spec: Shorten | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if spec is None:
        return call.args, call.kwargs
    bound = inspect.signature(call.fn).bind(*call.args, **call.kwargs)
    for name, count in spec.counts.items():
        if name in inspect.signature(call.fn).parameters:
            bound.arguments[name] = min(int(bound.arguments.get(name, count) or count), count)
    for name in spec.first:
        value = bound.arguments.get(name)
        if isinstance(value, (list, tuple)) and value:
            bound.arguments[name] = type(value)(value[:1])
    for name in spec.whole:
        if name in inspect.signature(call.fn).parameters:
            bound.arguments[name] = WHOLE
    return tuple(bound.args), dict(bound.kwargs)


def _with_expected(case: dict[str, Any]) -> dict[str, Any] | None:
    """The case with the reference's answer, or None when the reference refuses it or answers
    differently under two global seeds."""
    answers = []
    for global_seed in (11, 23):
        seed_everything(global_seed)
        answer = replay.run_case(case, replay.import_module, report_all=True)
        if answer.raised:
            return None
        answers.append(answer)
    first, second = answers
    text = json.dumps([first.result, first.after], sort_keys=True)
    if len(text) > MAX_ANSWER_BYTES or text != json.dumps([second.result, second.after], sort_keys=True):
        return None
    changed = {key: value for key, value in first.after.items()
               if key in first.modules or value != first.before.get(key)}
    moved = {key: value for key, value in changed.items() if value != first.before.get(key)}
    # what an answer could get wrong: a model argument the call leaves as it came is the job's input echoed
    return {**case, "expected": first.result, "mutated": changed, "alternatives": _alternatives(case, first.result),
            ANSWER: json.dumps([first.result, moved], sort_keys=True)}


def _alternatives(case: dict[str, Any], expected: Any) -> list[Any]:
    """The case's answers under the other choices its function's contract accepts (``CHOICES``), each
    computed by the reference with its constant set so; those that differ from ``expected``."""
    choices = CHOICES.get((case["item"], case["function"]), {})
    if not choices:
        return []
    module = replay.import_module(case["module"])
    found: list[Any] = []
    for name, values in choices.items():
        kept = getattr(module, name)
        try:
            for value in values:
                setattr(module, name, value)
                seed_everything(11)
                answer = replay.run_case(case, replay.import_module, report_all=True)
                if not answer.raised and answer.result != expected and answer.result not in found:
                    found.append(answer.result)
        finally:
            setattr(module, name, kept)
    return found


#: A built case's answer as text while ``Recorder.cases`` compares it with the answer to the tests' own
#: inputs (then dropped): the expected result and the arguments the call changed. A case whose every draw
#: answers as the tests' inputs do (a count of parameters of a model it leaves unchanged, labels a 2 %
#: nudge never flips) proves nothing about a submission that answers it: the public calls' answers,
#: learned by heart, are its answers (``fixed``).
ANSWER = "answer-text"


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - reset the legacy global RNG a submission might use
    torch.manual_seed(seed)


# -- fresh inputs ------------------------------------------------------------------------------------------


#: How many fresh draws a case whose first draw answers as the tests' own inputs do gets before it is
#: ``fixed``: an edge case a 2 % nudge flips only sometimes is evidence in every run, not one run in two.
FRESH_DRAWS = 4


class _Tied:
    """A generator whose draws keep equal input values equal (``_scale``): a zero-width box stays one, where
    independent noise inverts it half the time and the reference refuses it (red team: a kind that had a
    case in some runs only, and an honest grade that moved with the seed)."""

    tied = True

    def __init__(self, rng: Any) -> None:
        self.rng = rng

    def uniform(self, low: float, high: float, size: Any = None) -> Any:
        return self.rng.uniform(low, high, size=size)


class _Unperturbed:
    """A generator of no noise: ``perturb`` with it leaves the tests' own inputs as they were."""

    @staticmethod
    def uniform(low: float, high: float, size: Any = None) -> Any:
        import numpy as np

        return 0.0 if size is None else np.zeros(size)


UNPERTURBED = _Unperturbed()


def _built(build: Callable[..., dict[str, Any] | None], rng: Any) -> dict[str, Any] | None:
    try:
        return build(rng)
    except Exception:  # noqa: BLE001 - a draw the reference refuses says nothing either way
        return None


def _answer_of(build: Callable[..., dict[str, Any] | None], rng: Any) -> str | None:
    case = _built(build, rng)
    return None if case is None else str(case[ANSWER])


#: A fixed case's integer arguments each move up by an even step of at most ``2 * STIR_STEPS`` (parity
#: kept: a width that must be even stays even), at least one of them; ``STIR_ATTEMPTS`` draws at most.
STIR_STEPS = 4
STIR_ATTEMPTS = 3


def stir_sizes(value: Any, rng: Any) -> Any:
    """``value`` (nested tuples, lists, dicts) with its Python ints >= 1 moved up by even steps, at least one
    moved; tensors, arrays, booleans, zeros and negative ints (``ignore_index=-100``) kept. Only for a
    case whose answer no 2 % nudge of its floats changes: the reference then judges the new sizes (it
    refuses what its contract refuses) and answers them."""
    sizes: list[int] = []
    map_leaves(value, lambda leaf: sizes.append(leaf) if _a_size(leaf) else None)
    if not sizes:
        return value
    steps = [2 * int(step) for step in rng.integers(0, STIR_STEPS + 1, size=len(sizes))]
    if not any(steps):
        steps[int(rng.integers(len(steps)))] = 2
    moves = iter(steps)
    return map_leaves(value, lambda leaf: leaf + next(moves) if _a_size(leaf) else leaf)


def _a_size(leaf: Any) -> bool:
    return type(leaf) is int and leaf >= 1


def perturb(value: Any, rng: Any) -> Any:
    """Scale floating values by ``1 + SCALE * U(-1, 1)``; keep masks, integers, booleans and +-1, 0. A
    model's or an instance's floating parameters are scaled too: a fresh start on every run."""
    import numpy as np

    torch = sys.modules.get("torch")
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if value in (0.0, 1.0, -1.0) or value != value or abs(value) == float("inf"):
            return value
        return float(value * (1.0 + SCALE * rng.uniform(-1.0, 1.0)))
    if torch is not None and isinstance(value, torch.Tensor):
        if not value.is_floating_point():
            return value
        scaled = _scale(value.detach().double().numpy(), rng)
        return torch.from_numpy(scaled).to(value.dtype).requires_grad_(value.requires_grad)
    if isinstance(value, np.ndarray):
        return _scale(value, rng).astype(value.dtype) if value.dtype.kind == "f" else value
    if isinstance(value, Model):
        model = copy.deepcopy(value.model)
        with torch.no_grad():  # type: ignore[union-attr]
            for param in model.parameters():
                param.copy_(perturb(param.detach(), rng))
        return Model(model)
    if isinstance(value, Instance):
        return dataclasses.replace(value, init=(perturb(value.init[0], rng), perturb(value.init[1], rng)),
                                   state=perturb(value.state, rng))
    if isinstance(value, Object):
        return dataclasses.replace(value, fields=perturb(value.fields, rng))
    if type(value) in (tuple, list, dict):
        return map_leaves(value, lambda leaf: perturb(leaf, rng))
    return value


def _scale(array: Any, rng: Any) -> Any:
    import numpy as np

    values = np.asarray(array, dtype=np.float64)
    finite = values[np.isfinite(values)]
    if finite.size == 0 or is_mask(finite):
        return values.copy()  # a 0/1 mask or an additive mask: its meaning is in the exact values
    if getattr(rng, "tied", False):  # one factor per distinct value: values equal in the tests' inputs stay equal
        distinct, where = np.unique(values, return_inverse=True)
        noise = (1.0 + SCALE * rng.uniform(-1.0, 1.0, size=distinct.shape))[where.reshape(values.shape)]
    else:
        noise = 1.0 + SCALE * rng.uniform(-1.0, 1.0, size=values.shape)
    scaled = np.where(np.isfinite(values), values * noise, values)
    if _distributions(values):  # a transition model or a stochastic policy stays one: rows renormalised
        scaled = scaled / scaled.sum(axis=-1, keepdims=True)
    return scaled


def _distributions(values: Any) -> bool:
    """Whether an array's rows (its last axis) are probability distributions: non-negative, summing to 1."""
    import numpy as np

    return (values.ndim > 0 and values.shape[-1] > 1 and bool(np.isfinite(values).all()) and bool((values >= 0).all())
            and bool(np.allclose(values.sum(axis=-1), 1.0, rtol=0.0, atol=1e-6)))


def recipes(value: Any) -> Any:
    """Captured models, instances and objects as the recipes a job builds them from."""
    return map_leaves(value, _recipe)


def _recipe(value: Any) -> Any:
    if isinstance(value, Model):
        import base64
        import pickle

        dtypes = [str(p.dtype).removeprefix("torch.") for p in value.model.parameters() if p.is_floating_point()]
        return Recipe("pickled", {"type": type(value.model).__name__, "dtype": dtypes[0] if dtypes else "",
                                  "data": base64.b64encode(pickle.dumps(value.model)).decode()})
    if isinstance(value, Instance):
        return Recipe("instance", {"module": value.module, "class": value.cls,
                                   "init": [encode(recipes(value.init[0])), encode(recipes(value.init[1]))],
                                   "state": encode(value.state) if value.state is not None else None,
                                   "training": value.training})
    if isinstance(value, Object):
        return Recipe("object", {"module": value.module, "class": value.cls, "fields": encode(recipes(value.fields))})
    if isinstance(value, FromStep):
        return Recipe("step", {"step": value.step, "index": value.index})
    return value


# -- what a job may see ------------------------------------------------------------------------------------


#: What a job may see of a case: how to run it and on what inputs (``replay.run_case``), nothing the
#: verifier knows of its answers or of how it was chosen (a list of what to hide would let a new key through).
CHILD_KEYS = ("item", "module", "kind", "function", "steps", "opaque", "init", "state", "training")


def child_cases(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the child may see of the cases: the inputs and which arguments to send back, no answers."""
    return [{**{k: c[k] for k in CHILD_KEYS if k in c}, "mutated": sorted(c["mutated"])} for c in cases]
