"""The parent's own comparison of a job's re-check answers with the verifier's (numpy only).

Values are compared structurally, led by the expected value, and must be of exactly the expected
type: a tensor where a tensor is expected, of the same dtype (a floating one may have another
precision, down to float32 or the inputs' own, and is compared at the lower precision); a dataclass or named tuple of the same name, field by field; a module of the same class, parameter by parameter; sequences item by item
(a list and a tuple are both sequences; an int may stand for a float, never a bool for a number).
Numbers are compared at the tolerance of the expected dtype, or of the case's inputs where they are
less precise (a Python float computed from float32 tensors): ``testing.tolerance``, a few ulps of
the larger of the expected values and 1 times the condition ``COND`` of a composed computation in
that precision, or of the case's largest input times ``INPUT_COND`` (an output that is a difference
of large inputs), whichever is larger. NaN and infinities must be in the
same places (a masked value written as the dtype's lowest finite number counts as ``-inf``); integers
and booleans must be equal.

Outputs defined only up to an implementation's choice are compared in a canonical form
(``CANONICAL``): k-means clusters up to a relabelling, PCA components up to their signs, an empty GMM
component's mean as any finite one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pytest_mlcanon.grade.values import (
    TAG,
    Array,
    CodecError,
    Ignored,
    Module,
    Opaque,
    Raised,
    Record,
    decode_array,
)
from pytest_mlcanon.testing import tolerance

#: The condition number allowed per dtype: a composed computation (a loss through log-softmax, two
#: optimizer steps) in that precision, evaluated in another order, may differ by this many times a
#: few ulps of the magnitude at stake. Low precision keeps the dtype's own tolerance.
COND = {"float64": 1e8, "float32": 512.0}
#: The condition allowed on the magnitude of the case's inputs, for an output that is a difference of
#: them (a DPO margin of sequence log-probabilities near -12).
INPUT_COND = 4.0
#: Finite input values at or below this are a mask's sentinels (``-1e9``, ``finfo.min``) beside real
#: values: no output is a difference of them, and their size once allowed any answer at all (red team).
SENTINEL = -1e8
#: The lowest finite value of each dtype: a masked logit written as it (``finfo.min``) or as ``-inf``
#: is the same choice, and both are compared as ``-inf``.
LOWEST = {"float64": -1.7976931348623157e308, "float32": -3.4028234663852886e38, "bfloat16": -3.3895313892515355e38,
          "float16": -65504.0}
MAX_PROBLEMS = 4
#: (item, function or class) -> its canonical form.
CANONICAL = {("classical/kmeans", "kmeans"): "clusters", ("classical/pca", "PCA"): "signs",
             ("classical/gmm", "m_step"): "empty components",
             ("quant/qlinear", "quantize_per_channel"): "rounded codes"}
#: How many of a result's integer codes may sit one step off where ``round(w / scale)`` and an equivalent
#: formula (``round(w * (127 / max))``) round a value within float spacing of a half differently.
ROUNDING_TIES = 1e-3
#: A mixture weight at or below this is an empty component's (the reference's is 10 eps / n).
EMPTY_WEIGHT = 1e-12


@dataclass(frozen=True)
class Context:
    """What a comparison needs beyond the two values."""

    scale: float = 0.0  # the largest finite |float| among the case's inputs
    precision: str = "float64"  # the lowest floating precision among the case's inputs
    canonical: str = ""
    argument: bool = False  # an argument after the call: a model's mode and flags are its caller's business

    @classmethod
    def of(cls, slug: str, case: dict[str, Any]) -> Context:
        inputs = [case.get(key) for key in ("init", "state", "steps")]
        scale, precision = _inputs(inputs)
        return cls(scale, precision, CANONICAL.get((slug, str(case.get("function"))), ""))

    def for_argument(self) -> Context:
        return replace(self, canonical="", argument=True)


def compare(expected: Any, got: Any, where: str = "result", context: Context | None = None) -> list[str]:
    """Differences between the decoded expected and actual values; empty when they agree."""
    context = context or Context()
    problems: list[str] = []
    if context.canonical:
        got = _canonical(context.canonical, expected, got)
    _compare(expected, got, where, problems, context)
    return problems[:MAX_PROBLEMS]


def evidence(case: dict[str, Any]) -> str:
    """Empty when a case's expected answer (or an argument after the call) holds something an answer
    could get wrong; else what it holds instead (``a Value``): an object the codec does not carry is
    compared by its type's name only and an empty mapping takes any mapping, so a case that expects
    nothing else proves nothing about the function's values."""
    from pytest_mlcanon.grade.values import decode

    values = [case.get("expected"), *dict(case.get("mutated") or {}).values()]
    try:
        decoded = [decode(value) for value in values]
    except CodecError:
        return "an answer the parent cannot read"
    if any(_holds_data(value) for value in decoded):
        return ""
    opaque = _first_opaque(decoded)
    return f"a {opaque}" if opaque else "an empty mapping"


#: Why a case whose answers two draws of fresh inputs leave unchanged (``recheck``'s ``fixed``) verifies nothing.
FIXED = "its answers are the same on any fresh inputs, so the public calls' answers learned by heart would pass"


def proves_nothing(case: dict[str, Any]) -> str:
    """Empty when a case can tell a right answer from a wrong one; else why it cannot: its answer holds
    nothing to compare (``evidence``), or it is the same whatever the fresh inputs (``fixed``)."""
    if held := evidence(case):
        return f"its answers are {held}, which the re-check cannot compare"
    return FIXED if case.get("fixed") else ""


def _holds_data(value: Any) -> bool:
    """Whether comparing with ``value`` can tell one answer of its type from another."""
    if isinstance(value, (Opaque, Ignored, Raised)):
        return False
    if isinstance(value, Record):
        return any(_holds_data(v) for v in value.fields.values())
    if isinstance(value, dict):  # extra keys are never compared: an empty mapping takes any mapping
        return any(_holds_data(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return not value or any(_holds_data(v) for v in value)
    return True


def _first_opaque(values: Any) -> str:
    stack = list(values)
    while stack:
        value = stack.pop(0)
        if isinstance(value, Opaque):
            return value.type
        if isinstance(value, Record):
            stack += list(value.fields.values())
        elif isinstance(value, dict):
            stack += list(value.values())
        elif isinstance(value, (list, tuple)):
            stack += list(value)
    return ""


def _compare(expected: Any, got: Any, where: str, problems: list[str], context: Context) -> None:  # noqa: PLR0911
    if len(problems) >= MAX_PROBLEMS or isinstance(expected, Ignored):
        return
    if isinstance(got, Raised):
        problems.append(f"{where}: raised {got.type}: {got.message}")
        return
    if isinstance(expected, Opaque) or isinstance(got, Opaque):
        if expected != got:
            problems.append(f"{where}: expected {_kind(expected)}, got {_kind(got)}")
        return
    if isinstance(expected, Module):
        _compare_module(expected, got, where, problems, context)
        return
    if isinstance(expected, Record):
        if not isinstance(got, Record) or got.type != expected.type:
            problems.append(f"{where}: expected a {expected.type}, got {_kind(got)}")
            return
        for name, value in expected.fields.items():
            if name not in got.fields:
                problems.append(f"{where}.{name}: missing")
            else:
                _compare(value, got.fields[name], f"{where}.{name}", problems, context)
        return
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)):
            problems.append(f"{where}: expected a sequence of {len(expected)}, got {_kind(got)}")
        elif len(got) != len(expected):
            problems.append(f"{where}: expected {len(expected)} values, got {len(got)}")
        else:
            for index, (want, have) in enumerate(zip(expected, got)):
                _compare(want, have, f"{where}[{index}]", problems, context)
        return
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            problems.append(f"{where}: expected a mapping, got {_kind(got)}")
            return
        for key, value in expected.items():
            if key not in got:
                problems.append(f"{where}[{key!r}]: missing")
            else:
                _compare(value, got[key], f"{where}[{key!r}]", problems, context)
        return
    if isinstance(expected, Array) or _number(expected):
        if _type_of(expected) != _type_of(got):
            problems.append(f"{where}: expected {_kind(expected)}, got {_kind(got)}")
            return
        _compare_values(expected, got, where, problems, context)
        return
    if expected != got or type(expected) is not type(got):
        problems.append(f"{where}: expected {expected!r}"[:120] + f", got {_kind(got)}")


def _compare_module(expected: Module, got: Any, where: str, problems: list[str], context: Context) -> None:
    if not isinstance(got, Module) or got.type != expected.type:
        problems.append(f"{where}: expected a {expected.type} module, got {_kind(got)}")
        return
    if set(got.parameters) != set(expected.parameters):
        problems.append(f"{where}: parameters {sorted(got.parameters)[:4]} instead of {sorted(expected.parameters)[:4]}")
        return
    if not context.argument and got.training != expected.training:
        problems.append(f"{where}: in {'training' if got.training else 'eval'} mode, the reference's is "
                        f"{'training' if expected.training else 'eval'}")
    for name, value in expected.parameters.items():
        have = got.parameters[name]
        if not context.argument and have.requires_grad != value.requires_grad:
            problems.append(f"{where}.{name}: requires_grad={have.requires_grad}, the reference's {value.requires_grad}")
        _compare(value, have, f"{where}.{name}", problems, context)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _type_of(value: Any) -> str:
    """What must match exactly: an array's kind and dtype (a floating dtype only as 'floating': the
    precision of a result is the implementer's where the contract says 'computed in float32'; the
    values are compared at the lower one); for Python numbers, 'number' (an int may stand for a
    float); 'bool' for a bool. NumPy's scalars and 0-d arrays are numbers too: ``sigmoid(0.0)`` may be
    ``0.5``, ``np.float64(0.5)`` or ``np.array(0.5)`` where the contract says "an array of the shape of
    ``z``" (blind trial: the 0-d array failed the re-check); a 0-d tensor is not."""
    if isinstance(value, Array) and value.kind in ("ndarray", "npscalar") and value.values.ndim == 0:
        return "bool" if value.dtype == "bool" else "number"
    if isinstance(value, Array):
        return f"{value.kind} {'floating' if value.dtype in EPS else value.dtype}"
    if isinstance(value, bool):
        return "bool"
    if _number(value):
        return "number"
    return type(value).__name__


def _as_array(value: Any) -> tuple[Any, str]:
    import numpy as np

    if isinstance(value, Array):
        return value.values, value.dtype
    return np.asarray(value), "float64" if isinstance(value, float) else "int64"


def _compare_values(expected: Any, got: Any, where: str, problems: list[str], context: Context) -> None:
    import numpy as np

    (w, dtype), (h, got_dtype) = _as_array(expected), _as_array(got)
    answered = _lower(dtype, got_dtype) if dtype in EPS and got_dtype in EPS else dtype
    if dtype in EPS and got_dtype in EPS:
        least = _least_precision(dtype, context)
        if _lower(got_dtype, least) != least:  # the answer's dtype would set its own, looser, tolerance
            problems.append(f"{where}: a {got_dtype} answer where the reference's is {dtype} "
                            f"(no less precise than {least})")
            return
        dtype = _lower(dtype, got_dtype)
    if w.shape != h.shape:
        problems.append(f"{where}: shape {tuple(h.shape)} instead of {tuple(w.shape)}")
        return
    w64, h64 = w.astype(np.float64), h.astype(np.float64)
    if dtype in LOWEST:
        w64[w64 <= LOWEST[dtype]] = -np.inf
        h64[h64 <= LOWEST[dtype]] = -np.inf
    dtype = _lower(dtype, context.precision) if dtype in EPS else dtype
    if not np.array_equal(np.isnan(w64), np.isnan(h64)):
        problems.append(f"{where}: NaN where the reference has {'none' if not np.isnan(w64).any() else 'a number'}")
        return
    if not (np.array_equal(np.isinf(w64), np.isinf(h64)) and np.array_equal(w64[np.isinf(w64)], h64[np.isinf(h64)])):
        problems.append(f"{where}: infinities differ from the reference")
        return
    finite = np.isfinite(w64)
    if dtype in EPS:
        # COND states the whole allowance (float64: about 3.6e-7 relative, above the tests' floor)
        tol = tolerance(dtype, max(float(np.max(np.abs(w64[finite]), initial=0.0)), 1.0), cond=COND.get(dtype, 1.0),
                        floor=0.0)
        # a difference of large inputs, rounded in the answer's precision (the inputs' only below float32: a
        # float32 answer to bfloat16 inputs once got bfloat16's allowance, as large as the inputs themselves)
        computed = _lower(answered, "float32" if context.precision != "float64" else "float64")
        cancelled = tolerance(computed, context.scale, cond=INPUT_COND, floor=0.0).atol
        close = np.abs(w64[finite] - h64[finite]) <= max(tol.atol, cancelled) + tol.rtol * np.abs(w64[finite])
    else:
        close = w64[finite] == h64[finite]
    if bool(close.all()):
        return
    error = np.where(finite, np.abs(w64 - h64), 0.0).reshape(-1)
    flat = int(np.argmax(error))
    at = tuple(int(i) for i in np.unravel_index(flat, w64.shape)) if w64.ndim else ()
    problems.append(f"{where}: off by up to {float(error[flat]):.3g} (at {at}: expected "
                    f"{float(w64.reshape(-1)[flat]):.6g}, got {float(h64.reshape(-1)[flat]):.6g})")


def _least_precision(dtype: str, context: Context) -> str:
    """The least precise floating dtype an answer may have: the reference's own, float32 (a result
    "computed in float32" where the reference's is float64) or the inputs' (a float16 answer to
    float16 inputs), whichever is lowest. A bfloat16 answer to float32 inputs is not one: compared at
    its own precision (16 ulps of bfloat16 are 12 %), it would pass an answer that is 10 % off."""
    return _lower(dtype, _lower("float32", context.precision))


def _inputs(encoded: Any) -> tuple[float, str]:
    """The largest finite |float| in encoded inputs (recipes' parameters included) and their lowest
    floating precision, without building the recipes (the parent never does)."""
    import numpy as np

    largest, precision = 0.0, "float64"
    stack = [encoded]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, dict):
            tag, dtype = value.get(TAG), value.get("dtype")
            if dtype in EPS:
                precision = _lower(precision, str(dtype))
            if tag in ("tensor", "ndarray", "npscalar") and dtype in EPS:
                try:
                    values = decode_array(value).astype(np.float64)
                except CodecError:
                    continue
                finite = values[np.isfinite(values)]
                if not is_mask(finite):  # a mask's -1e9 or finfo.min is no magnitude any output is a difference of
                    real = finite[finite > SENTINEL]
                    largest = max(largest, float(np.max(np.abs(real), initial=0.0)))
            elif tag == "float" and isinstance(value.get("hex"), str):
                try:
                    number = abs(float.fromhex(value["hex"]))
                except ValueError:
                    continue
                largest = max(largest, number) if np.isfinite(number) else largest
            else:
                stack.extend(value.values())
    return largest, precision


def is_mask(finite: Any) -> bool:
    """Whether an array's finite values are a 0/1 mask or an additive one (0 and values at or below -1e4):
    their meaning is in the exact values (the re-check never perturbs them), and their size says nothing
    of the precision of an answer (an additive mask of ``finfo.min`` once allowed any answer at all)."""
    import numpy as np

    return finite.size > 0 and bool(np.isin(finite, (0.0, 1.0)).all() or ((finite == 0) | (finite <= -1e4)).all())


#: Machine epsilon of the floating dtypes the codec carries.
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}


def _lower(a: str, b: str) -> str:
    """The lower of two floating precisions."""
    return a if EPS.get(a, 0.0) >= EPS.get(b, 0.0) else b


# -- canonical forms ---------------------------------------------------------------------------------------


def _canonical(form: str, expected: Any, got: Any) -> Any:
    """``got`` brought to the form of ``expected`` where an implementation's choice separates them."""
    if form == "clusters" and isinstance(expected, Record) and isinstance(got, Record):
        return _relabelled(expected, got)
    if form == "signs" and isinstance(expected, list) and isinstance(got, list):
        return [_signs_matched(w, h) for w, h in zip(expected, got)] + got[len(expected):]
    if form == "rounded codes" and isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)) \
            and len(expected) == len(got) and expected:
        return [_codes_at_ties(expected[0], got[0]), *got[1:]]
    if form == "empty components" and isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)) \
            and len(expected) == len(got) == 3:
        return [got[0], _empty_means(list(expected), got[1]), got[2]]  # a list and a tuple compare alike
    return got


def _codes_at_ties(expected: Any, got: Any) -> Any:
    """Integer codes one step off the reference's in a handful of places (at most one in a thousand, or
    one) taken as the reference's: each is a value at a rounding tie, which float spacing decides (blind
    trial: ``w * (127 / max)`` for ``w / (max / 127)``); a floor for a round is off in half of them."""
    import numpy as np

    if not (isinstance(expected, Array) and isinstance(got, Array) and expected.dtype == got.dtype
            and expected.dtype not in EPS and expected.values.shape == got.values.shape):
        return got
    off = np.abs(got.values.astype(np.int64) - expected.values.astype(np.int64))
    if off.max(initial=0) > 1 or int((off == 1).sum()) > max(1, int(ROUNDING_TIES * off.size)):
        return got
    return replace(got, values=expected.values.copy())


def _empty_means(expected: list[Any], means: Any) -> Any:
    """GMM's M-step: the contract asks only for *a finite mean* of a component with no responsibility
    (the reference's is 0, the data mean is as good): a finite one is taken as the reference's."""
    import numpy as np

    weights, want = expected[0], expected[1]
    if not (isinstance(weights, Array) and isinstance(want, Array) and isinstance(means, Array)
            and means.values.shape == want.values.shape and want.values.ndim == 2
            and weights.values.shape == want.values.shape[:1]):
        return means
    empty = (weights.values.astype(np.float64) <= EMPTY_WEIGHT) & np.isfinite(means.values.astype(np.float64)).all(axis=1)
    values = means.values.copy()
    values[empty] = want.values[empty].astype(values.dtype)
    return replace(means, values=values)


def _relabelled(expected: Record, got: Record) -> Record:
    """k-means: the learner's cluster ``j`` renamed to the reference's cluster it overlaps most (when
    that is a one-to-one map), centroids reordered to match; the iteration count and history, which
    depend on the implementer's stopping rule, taken as the reference's."""
    import numpy as np

    labels, want = got.fields.get("labels"), expected.fields.get("labels")
    centroids = got.fields.get("centroids")
    if not (isinstance(labels, Array) and isinstance(want, Array) and isinstance(centroids, Array)
            and labels.values.shape == want.values.shape):
        return got
    k = int(max(labels.values.max(initial=-1), want.values.max(initial=-1))) + 1
    if k <= 0 or centroids.values.ndim != 2 or centroids.values.shape[0] != k:
        return got
    overlap = np.zeros((k, k), dtype=np.int64)
    np.add.at(overlap, (labels.values.astype(np.int64), want.values.astype(np.int64)), 1)
    mapping = overlap.argmax(axis=1)
    if len(set(mapping.tolist())) != k:
        return got
    order = np.argsort(mapping)
    fields = dict(got.fields)
    fields["labels"] = replace(labels, values=mapping[labels.values.astype(np.int64)].astype(labels.values.dtype))
    fields["centroids"] = replace(centroids, values=centroids.values[order])
    for name in ("n_iter", "inertia_history"):
        if name in expected.fields:
            fields[name] = expected.fields[name]
    return Record(got.type, fields)


def _signs_matched(expected: Any, got: Any) -> Any:
    """PCA: each column of a projection (or each row of components) flipped to the reference's sign."""
    import numpy as np

    if not (isinstance(expected, Array) and isinstance(got, Array) and expected.values.shape == got.values.shape
            and expected.values.ndim == 2 and expected.dtype in COND):
        return got
    dots = np.sum(expected.values.astype(np.float64) * got.values.astype(np.float64), axis=0)
    signs = np.where(dots < 0, -1.0, 1.0).astype(got.values.dtype)
    return replace(got, values=got.values * signs[None, :])


def _kind(value: Any) -> str:
    if isinstance(value, Array):
        return f"a {value.dtype} {value.kind} of shape {tuple(value.values.shape)}"
    if isinstance(value, (Opaque, Record)):
        return f"a {value.type}"
    if isinstance(value, Module):
        return f"a {value.type} module"
    if isinstance(value, dict) and TAG not in value:
        return "a mapping"
    return f"{type(value).__name__} {value!r}"[:60]
