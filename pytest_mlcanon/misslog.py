"""The miss log, ``.mlcanon/misslog.md``: one line per item per attempt that went wrong.

The seed's advice: after three passes through the canon the log holds about fifteen recurring
entries (transposing K, forgetting keepdims, the ``-inf`` padding row, the off-by-one in the label
shift), and those fifteen are the real study list. A line looks like::

    - 2025-06-03 09:40 · #55 posttrain/dpo · attempt 2 · 3/5 · label shift off by one (test_x); eps outside sqrt (dpo.py:41)

Misses are named in the learner's terms, from two sources: the failing reference tests (their names
say what they probe: ``..._fully_masked_row_...`` is the ``-inf`` padding row) and the rubric's
findings (``NUM003`` is "eps outside sqrt", the rule registry's ``miss`` phrase). The part in parentheses is the evidence; ranking
ignores it, so the same miss on two items counts twice. Every check of one attempt rewrites that
attempt's single line, so checking early and often does not flood the log. Learners may add lines
by hand in the same form (``- date · item · what went wrong; another miss``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_mlcanon.evidence import Outcome, Status
from pytest_mlcanon.rubric import rules
from pytest_mlcanon.rubric.model import ItemScore
from pytest_mlcanon.state import state_dir, write_text

if TYPE_CHECKING:
    from pytest_mlcanon.progress import Session

MISSLOG_FILE = "misslog.md"
SEP = " · "
MAX_MISSES_PER_LINE = 8
HEADER = """# Miss log

One line per item per attempt that went wrong, kept by `mlcanon check` (and `pytest --timed`).
Add your own lines in the same form: `- date · item · what went wrong; another miss`.
`mlcanon misslog` ranks the recurring entries: they are your study list.

"""

# Test-name fragments -> the miss in the learner's terms; the first match wins, so the specific
# patterns come before the generic ones (input validation and edge cases before the masks they
# mention). The name is matched with "_" at both ends, so a fragment written "_tie_" matches the word
# only (not "properties"). Each phrase says what the failing check saw, not a guess at its cause:
# a float16 test that overflowed names the overflow, not "subtract the max" (the max may have been).
_HALF = "half precision: not finite or not close to float32"
_VALIDATION = "input validation (raise ValueError naming the argument)"
_PADDING_ROW = "-inf padding row (a fully masked row was not finite, or not the documented output)"
_REPRO = "not reproducible (the same seed or generator gave different results)"
TEST_MISSES: tuple[tuple[str, str], ...] = (
    ("not_implemented", "left a function unimplemented"),
    ("before_mutation", "mutated state before validating (validate first)"),
    ("untouched", "mutated state before validating (validate first)"),
    ("not_mutated", "mutated the caller's inputs (copy before writing in place)"),
    ("inputs_are", "mutated the caller's inputs (copy before writing in place)"),
    ("_errors_", _VALIDATION),
    ("_raises_", _VALIDATION),
    ("_rejects_", _VALIDATION),
    ("_invalid_", _VALIDATION),
    ("_bad_", _VALIDATION),
    ("first_token", "label shift off by one"),
    ("next_token_targets", "label shift off by one"),
    ("are_shifted", "label shift off by one"),
    ("shift_invarian", "not shift-invariant (adding a constant to every input changed the output)"),
    ("gather", "gathered the wrong positions (indexing or shift)"),
    ("fully_masked", _PADDING_ROW),
    ("fully_padded", _PADDING_ROW),
    ("all_context_masked", _PADDING_ROW),
    ("masked_entries", "masked entries leak into the result"),
    ("cannot_leak", "masked entries leak into the result"),
    ("masked_context_contents", "masked entries leak into the result"),
    ("ignores_masked", "masked entries leak into the result"),
    ("eps_sits_inside", "eps outside sqrt"),
    ("keepdim", "forgot keepdims (reduced axis did not broadcast back)"),
    ("mask_to_bias", "mask-to-bias values wrong (finfo(dtype).min where masked, 0 elsewhere)"),
    ("_empty_", "edge case: empty input"),
    ("batch_of_one", "edge case: batch of one"),
    ("_single_", "edge case: a single element"),
    ("causal", "causal mask wrong (a future token changed the past, or the alignment is off)"),
    ("future_tokens", "causal mask wrong (a future token changed the past, or the alignment is off)"),
    ("padd", "padding handled wrong"),
    ("mask", "masking wrong (which entries a mask keeps: True = may attend / real token)"),
    ("_fp16_", _HALF),
    ("float16", _HALF),
    ("half_precision", _HALF),
    ("half_dtypes", _HALF),
    ("low_precision", _HALF),
    ("overflow", "overflow on extreme inputs"),
    ("extreme", "overflow or underflow on extreme inputs"),
    ("huge", "overflow or underflow on extreme inputs"),
    ("saturat", "overflow or underflow on extreme inputs"),
    ("1e4", "overflow or underflow on extreme inputs"),
    ("gradcheck", "gradient wrong (the backward disagrees with finite differences)"),
    ("finite_diff", "gradient wrong (the backward disagrees with finite differences)"),
    ("grad", "gradient wrong"),
    ("backward", "gradient wrong"),
    ("_tie_", "tie-breaking rule"),
    ("_ties_", "tie-breaking rule"),
    ("mismatch", _VALIDATION),
    ("permut", "a permutation symmetry is broken"),
    ("equivarian", "a permutation symmetry is broken"),
    ("invarian", "an invariance is broken"),
    ("same_seed", _REPRO),
    ("same_generator", _REPRO),
    ("is_deterministic", _REPRO),
    ("deterministic_per_seed", _REPRO),
    ("deterministic_given", _REPRO),
    ("reproducib", _REPRO),
    ("dtype", "dtype not preserved"),
    ("cache", "KV-cache bookkeeping (offset positions and masks by the cache length)"),
    ("speed", "too slow for the test's time limit"),
    ("under_one_second", "too slow for the test's time limit"),
    ("is_fast", "too slow for the test's time limit"),
    ("vectoris", "too slow for the test's time limit"),
    ("_zeros_", "edge case: all-zero input"),  # a whole word: not lambda_zero or zero_area
    ("_all_zero", "edge case: all-zero input"),
    ("closed_form", "closed-form value wrong"),
    ("quoted", "closed-form value wrong"),
    ("worked", "closed-form value wrong"),
    ("seed_0", "closed-form value wrong"),
    ("matches_torch", "disagrees with the torch op"),
    ("manual", "disagrees with the computation written out by hand"),
    ("matches", "disagrees with the reference computation"),
    ("equals", "disagrees with the reference computation"),
    ("agree", "disagrees with the reference computation"),
    ("learn", "training does not converge"),
    ("train", "training does not converge"),
    ("reaches", "training does not converge"),
    ("accuracy", "training does not converge"),
)

def miss_for_test(nodeid: str, raised: str = "", raised_at: str = "") -> str:
    """The miss a failing reference test stands for, with the test as evidence: what the learner's code
    raised, when a raise failed it (the stub's NotImplementedError, a name the test looked up and did
    not find), else what the test checks."""
    name = nodeid.split("::")[-1].split("[")[0]
    if raised == "NotImplementedError" and raised_at == "learner":
        return f"left a function unimplemented ({name})"
    if raised in ("AttributeError", "ImportError") and raised_at == "test":
        return f"missing public name ({name})"
    if raised and raised_at == "learner":
        return f"raised {raised} on the test's input ({name})"
    if raised and raised_at == "library":
        return f"a library call raised {raised} ({name})"
    lowered = f"_{name.lower()}_"  # padded, so "_ties_" matches a whole word
    for fragment, miss in TEST_MISSES:
        if fragment in lowered:
            return f"{miss} ({name})"
    return f"failed {name}"


def misses_for(score: ItemScore, outcomes: Iterable[Outcome], over_time: bool, elapsed_min: float,
               allowed_min: float) -> list[str]:
    """What went wrong in one check of one item, deduplicated by miss, most telling first."""
    found: dict[str, str] = {}

    def add(text: str) -> None:
        found.setdefault(key(text), text)

    if score.status is Status.ERROR:
        importing = "while importing" in score.error or score.error.startswith("SyntaxError")
        add(f"{'file does not import' if importing else 'could not run'} ({_short(score.error)})")
    for outcome in outcomes:
        if outcome.failed:
            add(miss_for_test(outcome.nodeid, outcome.raised, outcome.raised_at))
    for finding in score.findings:
        miss = rules.miss(finding.code)  # the registry's phrase; None: the failing tests or the timer say it
        if miss is not None:
            detail = finding.subject if finding.code == "COR002" else finding.where
            add(f"{miss} ({detail})" if detail else miss)
    if over_time:
        add(f"over time ({elapsed_min:.0f} min of {allowed_min:.0f} allowed)")
    return list(found.values())[:MAX_MISSES_PER_LINE]


def key(miss: str) -> str:
    """The part of a miss that ranking compares: without its evidence in trailing parentheses."""
    return headline(miss).lower()


def headline(miss: str) -> str:
    """A miss without its evidence: the last parenthesised group, when the text ends with one."""
    text = miss.strip()
    if text.endswith(")") and " (" in text:
        text = text[: text.rindex(" (")].rstrip()
    return text


# -- the file -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One line of the miss log."""

    when: str
    item: str
    attempt: str
    score: str
    misses: tuple[str, ...]


def render_line(entry: Entry) -> str:
    fields = [entry.when, entry.item, entry.attempt, entry.score, "; ".join(entry.misses)]
    return "- " + SEP.join(f for f in fields if f)


def parse(text: str) -> list[Entry]:
    """Every ``- ...`` line; hand-written lines with fewer fields are read as ``date · item · misses``."""
    entries = []
    for line in text.splitlines():
        if not line.startswith("- "):
            continue
        fields = [f.strip() for f in re.split(r"\s+·\s+", line[2:].strip())]
        misses = tuple(m.strip() for m in _split_misses(fields[-1]) if m.strip())
        if not misses:
            continue
        head = fields[:-1]
        when = head[0] if head and re.match(r"\d{4}-\d\d-\d\d", head[0]) else ""
        rest = head[1:] if when else head
        item = next((f for f in rest if "/" in f or f.startswith("#")), "")
        attempt = next((f for f in rest if f.startswith("attempt")), "")
        score = next((f for f in rest if re.fullmatch(r"\d/5|-", f)), "")
        entries.append(Entry(when, item, attempt, score, misses))
    return entries


def _split_misses(text: str) -> list[str]:
    """The misses of a line: split at each ``;`` outside parentheses (a miss's own hint may hold one:
    "silent full transpose (.T on 3-D+; transpose(-2, -1) for K)")."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ";" and depth <= 0:
            parts.append(text[start:index])
            start, depth = index + 1, 0
    return [*parts, text[start:]]


def path_of(root: Path) -> Path:
    return state_dir(root) / MISSLOG_FILE


def upsert(current: Session, number: int, slug: str, attempt: int, score: int | None, misses: Sequence[str],
           now: float) -> None:
    """Write the line of ``(item, attempt)``: replaced in place when it exists, appended otherwise.

    Called under the progress session's lock, so concurrent checks take turns; the file is replaced
    atomically.
    """
    path = path_of(current.root)
    text = path.read_text(encoding="utf-8") if path.exists() else HEADER
    item = f"#{number} {slug}"
    label = f"attempt {attempt}"
    line = render_line(Entry(datetime.fromtimestamp(now).strftime("%Y-%m-%d %H:%M"), item, label,
                             f"{score}/5" if score is not None else "-", tuple(misses)))
    lines = text.splitlines()
    marker = f"{SEP}{item}{SEP}{label}{SEP}"
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].startswith("- ") and marker in lines[index]:
            lines[index] = line
            break
    else:
        lines.append(line)
    write_text(path, "\n".join(lines) + "\n")


# -- ranking --------------------------------------------------------------------------------------------

@dataclass
class Recurring:
    """One miss across the log: how often, on which items, and when last."""

    miss: str
    count: int = 0
    items: list[str] = field(default_factory=list)
    last: str = ""


def rank(entries: Iterable[Entry], item_filter: set[str] | None = None) -> list[Recurring]:
    """Misses by how often they recur (then most recent first, then alphabetically)."""
    table: dict[str, Recurring] = {}
    for entry in entries:
        if item_filter is not None and _item_slug(entry.item) not in item_filter:
            continue
        for miss in entry.misses:
            name = key(miss)
            row = table.setdefault(name, Recurring(headline(miss)))
            row.count += 1
            if entry.item and entry.item not in row.items:
                row.items.append(entry.item)
            row.last = max(row.last, entry.when)
    rows = sorted(table.values(), key=lambda r: r.miss)
    return sorted(rows, key=lambda r: (r.count, r.last), reverse=True)


def _item_slug(label: str) -> str:
    return label.split()[-1] if label else ""


def _short(text: str, limit: int = 100) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."

