"""Numerics axis: static rules for the classic instabilities, plus the item's numerics probes.

Codes: ``NUM001`` exp normalised without max-subtraction, ``NUM002`` infinite mask fill, ``NUM003``
eps outside the sqrt, ``NUM004`` log of a softmax or sigmoid, ``NUM005`` a hard-coded mask constant
beyond float16's range, ``NUM100`` a numerics probe failed.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from pytest_mlcanon.evidence import Location
from pytest_mlcanon.rubric import correctness
from pytest_mlcanon.rubric.model import AxisResult, Finding, Outcome
from pytest_mlcanon.rubric.rules import finding
from pytest_mlcanon.rubric.shapes import unguarded
from pytest_mlcanon.rubric.source import Source, call_name, dotted, functions, per_source, walk
from pytest_mlcanon.settings import Settings

MASK_FILLERS = frozenset({"masked_fill", "masked_fill_", "where", "full", "full_like", "fill_", "new_full", "fill"})
STABILISERS = frozenset({"max", "amax", "logsumexp", "logaddexp", "log_softmax", "softmax", "nanmax"})
FP16_MAX = 65504.0


def _is_call_to(node: ast.AST, names: frozenset[str] | set[str]) -> TypeGuard[ast.Call]:
    return isinstance(node, ast.Call) and call_name(node) in names


def _is_neg_inf(node: ast.AST) -> bool:
    """``float('-inf')``, ``-float('inf')``, ``-math.inf``, ``-np.inf``, ``-torch.inf``, ``np.NINF``."""
    if isinstance(node, ast.Call) and call_name(node) == "float" and node.args:
        arg = node.args[0]
        return isinstance(arg, ast.Constant) and str(arg.value).strip().lower() in {"-inf", "-infinity"}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = node.operand
        if isinstance(inner, ast.Call) and call_name(inner) == "float" and inner.args:
            arg = inner.args[0]
            return isinstance(arg, ast.Constant) and str(arg.value).strip().lower() in {"inf", "infinity"}
        return (dotted(inner) or "").split(".")[-1] == "inf"
    return (dotted(node) or "").split(".")[-1] == "NINF"


def _huge_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(
        node.value, bool) and abs(node.value) > FP16_MAX


def _contains(node: ast.AST, predicate: Callable[[ast.AST], bool]) -> bool:
    return any(predicate(n) for n in ast.walk(node))


def _assigned_names(fn: ast.AST) -> dict[str, ast.expr]:
    """Last value assigned to each plain name inside ``fn`` (a cheap data-flow for the rules);
    ``x -= m`` counts as ``x = x - m``."""
    values: dict[str, ast.expr] = {}
    for node in sorted((n for n in walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))),
                       key=lambda n: (n.lineno, n.col_offset)):
        if isinstance(node, ast.AugAssign):
            if isinstance(node.target, ast.Name):
                values[node.target.id] = ast.BinOp(left=ast.Name(node.target.id, ast.Load()), op=node.op,
                                                   right=node.value)
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Name) and node.value is not None:
                values[target.id] = node.value
    return values


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _unstable_exps(fn: ast.AST) -> list[ast.Call]:
    """``exp`` calls whose result is normalised by a sum with nothing subtracted from the argument,
    in one expression or across statements (``e = torch.exp(x)`` ... ``e / e.sum(-1, keepdim=True)``,
    ``z = e.sum(axis=1)[:, None]; p = e / z``, ``e /= e.sum()``)."""
    assigned = _assigned_names(fn)
    exp_calls: dict[str, ast.Call] = {}
    for node in walk(fn):
        if isinstance(node, ast.Assign) and _is_call_to(node.value, {"exp"}):
            exp_calls.update((t.id, node.value) for t in node.targets if isinstance(t, ast.Name))
    def summed_exps(node: ast.AST) -> set[str]:
        """Names of exp results summed inside ``node`` (``"<inline>"`` for an exp call summed in place)."""
        found: set[str] = set()
        for call in ast.walk(node):
            if _is_call_to(call, {"sum", "nansum"}):
                found |= _names_in(call) & set(exp_calls)
                if _contains(call, lambda m: _is_call_to(m, {"exp"})):
                    found.add("<inline>")
        return found

    summed = {name: summed_exps(value) for name, value in assigned.items()}
    normalised: list[ast.Call] = []
    for node in walk(fn):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            numerator, denominator = node.left, node.right
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div):
            numerator, denominator = node.target, node.value
        else:
            continue
        in_sum = summed_exps(denominator).union(*(summed.get(n, set()) for n in _names_in(denominator)))
        if not in_sum:
            continue
        normalised += [exp_calls[name] for name in _names_in(numerator) & in_sum]
        if "<inline>" in in_sum:
            normalised += [n for n in ast.walk(numerator) if _is_call_to(n, {"exp"})]
            normalised += [n for n in ast.walk(denominator) if _is_call_to(n, {"exp"})]
    maxima = {name for name, value in assigned.items() if _contains(value, lambda n: _is_call_to(n, STABILISERS))}
    stabilised = {name for name, value in assigned.items()
                  if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Sub)
                  and _contains(value, lambda n: _is_call_to(n, STABILISERS)
                                or (isinstance(n, ast.Name) and n.id in maxima))}
    found: dict[int, ast.Call] = {}
    for call in normalised:
        argument = call.args[0] if call.args else getattr(call.func, "value", call)
        safe = _contains(argument, lambda n: isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub)) or any(
            isinstance(n, ast.Name) and n.id in stabilised for n in ast.walk(argument))
        if not safe:
            found[id(call)] = call
    return sorted(found.values(), key=lambda c: (c.lineno, c.col_offset))


#: Forms the contract asks for, by module: there the rule would fire on what the item must do.
#: generation: top-k/top-p filtered logits are ``-inf`` (docs/contract.md, #32; a kept argmax means
#: no row is all ``-inf``); retrieval: results past the last hit are padded with ``-inf`` (#45);
#: PPO, GRPO and the capstone's preference stage normalise advantages as ``(A - mean)/(std + eps)``.
CONTRACT_FORMS: dict[str, frozenset[str]] = {
    "transformer/generation": frozenset({"NUM002"}),
    "retrieval/ivf": frozenset({"NUM002"}), "retrieval/hnsw": frozenset({"NUM002"}),
    "retrieval/pq": frozenset({"NUM002"}),
    # DPO's KL-regularised optimum gives actions with pi_ref = 0 probability exactly 0 (log 0 = -inf) and
    # rejects a row without mass (#55): the fill is asked for, however the log's guard is spelled (blind round 36)
    "posttrain/dpo": frozenset({"NUM002"}),
    "rl/ppo": frozenset({"NUM003"}), "posttrain/grpo": frozenset({"NUM003"}),
    "capstone/preference_stage": frozenset({"NUM003"}),
}
#: Where a ``-inf`` fill does its harm: a softmax (or exp) of a row that may be entirely ``-inf``.
NORMALISERS = frozenset({"softmax", "log_softmax", "logsumexp", "exp", "softmin", "scaled_dot_product_attention"})
#: Order-based uses of a ``-inf`` sentinel, which never produce NaN from it (``np.argmax`` of scores).
ORDER_OPS = frozenset({"argmax", "argmin", "argsort", "sort", "topk", "max", "min", "amax", "amin", "nanargmax",
                       "maximum", "minimum", "nonzero", "isfinite", "isinf", "isneginf", "flatnonzero"})


#: Logarithms: ``where(p > 0, log(p), -inf)`` writes the value the log has at zero, not a mask.
LOGS = frozenset({"log", "log2", "log10"})


def _log_of_zero(where: ast.AST, branch: ast.AST) -> bool:
    """``where(cond, log(p) ..., -inf)`` (either order), or ``log(p).masked_fill(cond, -inf)``, with ``p`` read
    in ``cond``: the ``-inf`` is log 0, the log-probability of an impossible entry, which the math asks for
    (a row of them is a row with no mass, a precondition the caller checks)."""
    if _is_call_to(where, {"masked_fill", "masked_fill_"}) and isinstance(where.func, ast.Attribute):
        # log(p).masked_fill(p == 0, -inf): the fill is the log's own value there
        masks = [*where.args[:1], *(k.value for k in where.keywords if k.arg == "mask")]
        condition, other = (masks[0], where.func.value) if masks and branch is not masks[0] else (None, None)
    elif _is_call_to(where, {"where"}) and len(where.args) == 3 and branch is not where.args[0]:
        condition = where.args[0]
        other = where.args[2] if branch is where.args[1] else where.args[1]
    else:
        return False
    if condition is None or other is None:
        return False
    read = {ast.dump(n) for n in ast.walk(condition) if isinstance(n, (ast.Name, ast.Attribute))}
    return any(_is_call_to(n, LOGS) and (taken := _log_argument(n)) is not None and _reads_only_guarded(taken, read)
               for n in ast.walk(other))


def _log_argument(call: ast.Call) -> ast.expr | None:
    """What a log takes: ``p`` in ``np.log(p)`` and in ``p.log()`` (blind round 35's DPO optimum)."""
    if call.args:
        return call.args[0]
    return call.func.value if isinstance(call.func, ast.Attribute) else None


def _reads_only_guarded(argument: ast.expr, read: set[str]) -> bool:
    """The log's argument is ``p`` itself, or a guarded copy of it that reads nothing the condition does
    not (``np.where(w > 0, w, 1.0)``: the safe-log idiom, blind round 35's gmm)."""
    if ast.dump(argument) in read or ast.dump(unguarded(argument)) in read:  # p, p.clamp_min(1e-300), p + eps
        return True
    if not _is_call_to(argument, {"where", "clip", "clamp", "maximum"}):
        return False
    names = {ast.dump(n) for operand in argument.args for n in ast.walk(operand) if isinstance(n, ast.Name)}
    return bool(names) and names <= read


def _with_sources(expr: ast.AST, assigned: dict[str, ast.expr]) -> list[ast.AST]:
    """``expr`` and the values last assigned to the names it reads."""
    return [expr, *(assigned[n.id] for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id in assigned)]


#: Calls whose result is a row's k-th largest value (or the sorted values it is read from).
KTH_VALUE_OPS = frozenset({"topk", "kthvalue", "sort"})


def _below_kth_value(node: ast.AST, assigned: dict[str, ast.expr]) -> bool:
    """``x < kth`` (or ``kth > x``) with ``kth`` read off ``topk``/``kthvalue``/``sort``, inline or through
    a name: a top-k filter. The k-th value itself is never strictly below itself, so every row keeps at
    least one entry and a ``-inf`` fill cannot make a whole row ``-inf`` (blind round, capstone tiny_lm)."""
    if not isinstance(node, ast.Compare) or len(node.ops) != 1:
        return False
    op, right = node.ops[0], node.comparators[0]
    kth = right if isinstance(op, ast.Lt) else node.left if isinstance(op, ast.Gt) else None
    if kth is None:
        return False
    return any(_contains(source, lambda n: _is_call_to(n, KTH_VALUE_OPS)) for source in _with_sources(kth, assigned))


def _top_k_fill(node: ast.AST, assigned: dict[str, ast.expr]) -> bool:
    """A fill whose mask is a top-k comparison: ``masked_fill(x < kth, v)``, ``where(x < kth, v, x)`` or
    ``x[x < kth] = v``."""
    return any(_below_kth_value(m, assigned) for m in _fill_masks(node))


#: Masks with one entry per row: ``sim.masked_fill(torch.eye(n).bool(), -inf)`` (InfoNCE's own pair) or
#: ``logp.masked_fill(F.one_hot(y, C).bool(), -inf)`` (every class but the target, blind round 36's focal
#: loss) leave a row fully masked only when it has one column, never as attention's padding can.
ONE_PER_ROW = frozenset({"eye", "one_hot", "eye_like", "identity"})


def _one_entry_per_row(node: ast.AST, assigned: dict[str, ast.expr]) -> bool:
    """The fill's mask is an identity or a one-hot, directly or through a name assigned one."""
    return any(_is_call_to(n, ONE_PER_ROW) for mask in _fill_masks(node) for source in _with_sources(mask, assigned)
               for n in ast.walk(source))


def _fill_masks(node: ast.AST) -> list[ast.expr]:
    """The mask of a fill: ``masked_fill``'s, the condition of ``where(cond, -inf, x)``, the index of
    ``x[mask] = -inf``."""
    if isinstance(node, ast.Call) and call_name(node) == "where":
        # the fill must be the value taken where the mask holds: where(x < kth, -inf, x)
        masks = node.args[:1] if len(node.args) == 3 and _is_neg_inf(node.args[1]) else []
    elif isinstance(node, ast.Call):
        masks = node.args[:2] if call_name(node) in {"masked_fill", "masked_fill_"} else []
        masks = [*masks, *(k.value for k in node.keywords if k.arg == "mask")]
    elif isinstance(node, ast.Assign):
        masks = [t.slice for t in node.targets if isinstance(t, ast.Subscript)]
    else:
        masks = []
    return masks


@dataclass(frozen=True)
class _Module:
    """Where a returned value goes in its own file: the calls of each function by name, with the
    function each call sits in (a method called as ``self._scan(...)`` counts by its name)."""

    calls: dict[str, list[tuple[ast.Call, ast.AST]]]

    @classmethod
    def of(cls, tree: ast.AST, owner: dict[int, ast.AST]) -> _Module:
        calls: dict[str, list[tuple[ast.Call, ast.AST]]] = {}
        for node in walk(tree):
            if isinstance(node, ast.Call) and id(node) in owner:
                calls.setdefault(call_name(node), []).append((node, owner[id(node)]))
        return cls(calls)


#: How many calls deep a returned ``-inf`` is followed within its file before it is assumed to reach a
#: softmax.
FOLLOWED_CALLS = 3


def _reaches_normaliser(fill: ast.AST, fn: ast.AST | None, module: _Module, depth: int = 0) -> bool:
    """Whether a ``-inf``-filled value can reach a softmax: inside one, or through the names it is
    assigned to (not through an order-based use such as argmax, nor as log 0 beside a log), or
    returned to a caller: one in the same file is followed (a helper whose caller takes the argmax of
    its ``-inf``-marked scores makes no softmax), any other caller may normalise it."""
    if fn is None:
        return True
    parents = {id(child): parent for parent in walk(fn) for child in ast.iter_child_nodes(parent)}
    node: ast.AST = fill
    tainted: set[str] = set()
    while id(node) in parents:
        parent = parents[id(node)]
        if _is_call_to(parent, NORMALISERS):
            return True
        if _is_call_to(parent, ORDER_OPS) or _log_of_zero(parent, node):
            return False
        if isinstance(parent, ast.Return):
            return _returned_reaches(fn, module, depth)
        if isinstance(parent, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            tainted |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, (ast.Name,))}
            break
        if isinstance(parent, ast.stmt):
            break
        node = parent
    return _taint_reaches(fn, tainted, getattr(fill, "lineno", 0), module, depth)


#: Calls that turn a fully masked row's NaN into a number: a ``-inf`` fill whose softmax goes through one
#: (``softmax(scores).nan_to_num(0.0)``, ``torch.where(allow, weights, 0)``, ``weights.masked_fill(~allow,
#: 0)``) is repaired where it is made (blind trials: CrossAttention, attention). A product
#: (``weights * live``) is not: NaN times 0 is NaN.
NAN_REPAIRS = frozenset({"nan_to_num", "nan_to_num_", "where", "masked_fill", "masked_fill_"})


def _nan_repaired(fn: ast.AST | None) -> bool:
    """Whether ``fn`` passes a softmax's result (directly or through a name it was ever assigned to) to a
    ``NAN_REPAIRS`` call."""
    if fn is None:
        return False
    softmaxed = {target.id for node in walk(fn) if isinstance(node, ast.Assign) and _has_softmax(node.value)
                 for target in node.targets if isinstance(target, ast.Name)}
    for node in walk(fn):
        if isinstance(node, ast.Call) and call_name(node) in NAN_REPAIRS:
            repaired = [*node.args, *([node.func.value] if isinstance(node.func, ast.Attribute) else [])]
            if any(_has_softmax(target) or (isinstance(target, ast.Name) and target.id in softmaxed)
                   for target in repaired):
                return True
    return False


def _has_softmax(expr: ast.AST) -> bool:
    return any(_is_call_to(inner, NORMALISERS) or (isinstance(inner, ast.Call) and call_name(inner).endswith("softmax"))
               for inner in ast.walk(expr))


def _returned_reaches(fn: ast.AST, module: _Module, depth: int) -> bool:
    """Whether what ``fn`` returns can reach a softmax: through its calls in the file, or (called from
    nowhere in it: public API) in a caller's code."""
    sites = module.calls.get(getattr(fn, "name", ""), [])
    if not sites or depth >= FOLLOWED_CALLS:
        return True
    return any(_reaches_normaliser(call, owner, module, depth + 1) for call, owner in sites)


def _taint_reaches(fn: ast.AST, tainted: set[str], after: int, module: _Module, depth: int) -> bool:
    statements = sorted((n for n in walk(fn) if isinstance(n, ast.stmt) and n.lineno >= after
                         and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If,
                                                ast.For, ast.While, ast.With, ast.Try))),
                        key=lambda n: (n.lineno, n.col_offset))
    for stmt in statements:
        uses = _tainted_uses(stmt, tainted)
        if not uses:
            continue
        if any(_log_output(n, tainted) for n in ast.walk(stmt)):
            return False
        if any(_is_call_to(n, NORMALISERS) and _tainted_uses(n, tainted) for n in ast.walk(stmt)):
            return True
        if isinstance(stmt, ast.Return) and stmt.value is not None and _tainted_uses(stmt.value, tainted, whole=True):
            return _returned_reaches(fn, module, depth)
        if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and stmt.value is not None \
                and _tainted_uses(stmt.value, tainted, whole=True):
            # a name bound to one element of the filled value (best = float(gain[k])) holds no mask
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            tainted = tainted | {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return False


def _log_output(node: ast.AST, tainted: set[str]) -> bool:
    """``np.log(p, out=filled, where=p > 0)``: the filled array is the log's output, so a ``-inf`` left in
    it is log 0 where the log was not taken (blind round 30, gmm's log-weights of an empty component)."""
    return _is_call_to(node, LOGS) and any(
        k.arg == "out" and isinstance(k.value, ast.Name) and k.value.id in tainted
        for k in getattr(node, "keywords", ()))


def _tainted_uses(node: ast.AST, tainted: set[str], whole: bool = False) -> bool:
    """A tainted name read in ``node`` other than inside an order-based call; with ``whole``, only as
    the value itself (not one element picked by indexing, nor a Python scalar cast from it)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if _is_call_to(current, ORDER_OPS):
            continue
        if _is_call_to(current, {"where"}):
            stack.extend(arg for arg in current.args if not (isinstance(arg, ast.Name) and arg.id in tainted
                                                           and _log_of_zero(current, arg)))
            stack.extend(k.value for k in current.keywords)
            stack.append(current.func)
            continue
        if whole and (_element(current) or _is_call_to(current, {"float", "int", "item", "bool"})):
            continue
        if isinstance(current, ast.Name) and current.id in tainted and isinstance(current.ctx, ast.Load):
            return True
        stack.extend(ast.iter_child_nodes(current))
    return False


#: Calls that make a float32 or float64 copy: a mask constant filled into one is within its range.
UPCASTS = frozenset({"float", "double"})
WIDE_DTYPES = frozenset({"float32", "float64", "double", "float"})


def _upcast_receiver(fill: ast.Call, assigned: dict[str, ast.expr]) -> bool:
    """``scores.float().masked_fill(~allow, -1e9)``, or ``masked_fill`` on a name assigned such an
    upcast (``s = scores.to(torch.float32)``): -1e9 is finite in float32, whatever dtype came in (the C5
    upcast of half-precision scores; stop 28's note)."""
    receiver = fill.func.value if isinstance(fill.func, ast.Attribute) and call_name(fill) != "where" else None
    if receiver is None:
        return False
    return any(_is_upcast(node) for source in _with_sources(receiver, assigned) for node in ast.walk(source))


def _is_upcast(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if node.func.attr in UPCASTS and not node.args:
        return True
    if node.func.attr in {"to", "type"}:
        dtypes = [*node.args, *(k.value for k in node.keywords if k.arg == "dtype")]
        return any(isinstance(d, ast.Attribute) and d.attr in WIDE_DTYPES for d in dtypes)
    return False


def _element(node: ast.AST) -> bool:
    """``x[k]``, ``x[i, j]``: entries picked by index, not a slice (``x[:, :t]``) of the whole value."""
    return isinstance(node, ast.Subscript) and not any(
        isinstance(n, ast.Slice) or (isinstance(n, ast.Constant) and n.value is Ellipsis) for n in ast.walk(node.slice))


@per_source
def static_findings(source: Source) -> list[Finding]:
    """Every static numerics finding in one file (less the forms the contract asks for in its module)."""
    out: list[Finding] = []
    where = source.display
    for fn in functions(source.tree):
        for call in _unstable_exps(fn):
            out.append(finding("NUM001", where, call.lineno))
    assigned_in: dict[int, dict[str, ast.expr]] = {}
    owner: dict[int, ast.AST] = {}
    for fn in functions(source.tree):
        assigned = _assigned_names(fn)
        assigned_in.update((id(node), assigned) for node in walk(fn))
        owner.update((id(node), fn) for node in walk(fn))
    module = _Module.of(source.tree, owner)
    for node in walk(source.tree):
        assigned = assigned_in.get(id(node), {})
        if isinstance(node, ast.Call) and call_name(node) in MASK_FILLERS:
            values = [*node.args, *(k.value for k in node.keywords)]
            if any(_is_neg_inf(v) and not _log_of_zero(node, v) for v in values):
                if (not _top_k_fill(node, assigned) and not _one_entry_per_row(node, assigned)
                        and not _nan_repaired(owner.get(id(node)))
                        and _reaches_normaliser(node, owner.get(id(node)), module)):
                    out.append(finding("NUM002", where, node.lineno, what="mask filled with"))
            elif any(_huge_constant(v) for v in values) and not _upcast_receiver(node, assigned):
                out.append(finding("NUM005", where, node.lineno))
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) for t in node.targets):
            if (_is_neg_inf(node.value) and not _top_k_fill(node, assigned) and not _one_entry_per_row(node, assigned)
                    and not _nan_repaired(owner.get(id(node)))
                    and _reaches_normaliser(node.value, owner.get(id(node)), module)):
                out.append(finding("NUM002", where, node.lineno, what="masked entries set to"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for side, other in ((node.left, node.right), (node.right, node.left)):
                if _is_call_to(side, {"sqrt"}) and _looks_like_eps(other) and _variance_like(side, assigned):
                    out.append(finding("NUM003", where, node.lineno))
                    break
        if isinstance(node, ast.Call) and call_name(node) == "log":
            inner: ast.AST | None = node.args[0] if node.args else getattr(node.func, "value", None)
            if inner is not None and _is_call_to(inner, {"softmax", "sigmoid", "expit"}):
                out.append(finding("NUM004", where, node.lineno, subject=call_name(inner)))
    asked = _contract_forms(source.path)
    return sorted((f for f in out if f.code not in asked), key=lambda f: (f.line, f.code))


def _variance_like(sqrt_call: ast.Call, assigned: dict[str, ast.expr]) -> bool:
    """The sqrt is of a variance or mean square (a norm's denominator), directly or through a name
    assigned one in the same function, not of Adam's second moment ``v_hat``, whose published update
    is ``m_hat / (sqrt(v_hat) + eps)``."""
    argument = sqrt_call.args[0] if sqrt_call.args else getattr(sqrt_call.func, "value", sqrt_call)
    sources = _with_sources(argument, assigned)
    if any(_optimizer_moment(source) for source in sources):
        return False
    return any(_variance_expr(source) for source in sources)


#: Names of an optimizer's running second moment (torch's ``exp_avg_sq``, RMSprop's ``square_avg``,
#: the paper's ``v_hat``), whose published update divides by ``sqrt(v) + eps``: "sq" in the name is not a
#: norm's mean square (blind round, capstone optimizer: ``(self.exp_avg_sq / bias2).sqrt() + self.eps``).
OPTIMIZER_MOMENTS = ("exp_avg", "square_avg", "avg_sq", "v_hat")


def _optimizer_moment(argument: ast.AST) -> bool:
    for node in ast.walk(argument):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        if any(moment in name.lower() for moment in OPTIMIZER_MOMENTS):
            return True
    return False


def _variance_expr(argument: ast.AST) -> bool:
    for node in ast.walk(argument):
        if isinstance(node, ast.Call) and call_name(node) in {"var", "mean", "std"}:
            return True
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        if "var" in name.lower() or "sq" in name.lower():
            return True
    return False


def _looks_like_eps(node: ast.AST) -> bool:
    name = (dotted(node) or "").lower()
    if "eps" in name:
        return True
    return isinstance(node, ast.Constant) and isinstance(node.value, float) and 0 < node.value < 1e-2


def _probe_finding(probe: Outcome) -> Finding:
    """NUM100 at the first learner line that produced NaN/inf, else where the probe failed; the fix
    names the probe's own condition (its test name in words)."""
    condition = _condition(probe.name)
    first = probe.nonfinite
    if first is not None and not _infinite_by_contract(first.file):
        return finding("NUM100", first.file, first.line, test=probe.name, condition=condition,
                       detail=f"first non-finite value here (# {first.comment}); {probe.message}",
                       hint=f"keep this value finite on the probe's input (the probe: {condition})")
    place = probe.where or Location(probe.nodeid, 0)
    return finding("NUM100", place.path, place.line, test=probe.name, condition=condition, detail=probe.message)


def _infinite_by_contract(file: str) -> bool:
    """A module whose contract asks for infinite values (retrieval's ``inf`` padding, generation's
    ``-inf`` filters: ``CONTRACT_FORMS``): its first non-finite value is the asked-for one, not the
    probe's cause (blind rounds 31 and 32: wrong neighbours were blamed on the padding line)."""
    return "NUM002" in _contract_forms(Path(file))


def _contract_forms(path: Path) -> frozenset[str]:
    """The codes whose forms the contract asks for in the module at ``path`` (``retrieval/ivf.py``)."""
    return CONTRACT_FORMS.get("/".join(path.with_suffix("").parts[-2:]), frozenset())


def _condition(test_name: str) -> str:
    """``test_fp16_forward_is_finite[cpu]`` -> ``fp16 forward is finite (cpu)``."""
    base, _, params = test_name.partition("[")
    words = base.split(".")[-1].removeprefix("test_").replace("_", " ").strip()
    return f"{words} ({params.rstrip(']')})" if params else words


def evaluate(sources: Iterable[Source], outcomes: Iterable[Outcome], settings: Settings) -> AxisResult:
    """Passes when no enabled static rule fires and every numerics probe passed."""
    findings = [f for s in sources for f in static_findings(s) if settings.enabled(f.code)]
    probes = [o for o in outcomes if o.probe and not correctness.signature_problem(o)]  # under Correctness
    for probe in probes:
        if probe.failed and probe.reported and settings.enabled("NUM100"):
            findings.append(_probe_finding(probe))
    passed_probes = sum(1 for p in probes if p.outcome == "passed")
    silent = sum(1 for p in probes if not p.reported)  # under Correctness's COR005, once; never a pass
    tail = f" ({silent} never reported)" if silent else ""
    notes = (f"numerics probes passed: {passed_probes}/{len(probes)}{tail}",)
    return AxisResult(not findings and not silent, tuple(findings), notes)
