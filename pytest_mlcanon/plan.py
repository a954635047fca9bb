"""The rotation: this week's items, and the short list for the week before an interview.

The seed's schedule is five items a week, "twelve weeks for the canon ... Once through, restart at
#1", each day one item plus its review. :func:`weekly` builds the week from the attempt history:

1. **The first pass** (while some item has never been attempted): ``size`` new items (five), and
   beside them at most :data:`REVIEW_SLOTS` (two) due items: retries first (a failed or over-time
   attempt comes back the next day), then reviews of passed items whose spaced-repetition date (2,
   4, 7, 14, 30, 60 days, see :mod:`pytest_mlcanon.progress`) falls within the coming week. Reviews
   keep coming back, and never push the first pass past twelve weeks.
2. **Interleaving**: the new items alternate between the block you know best (the highest share of
   passed items) and the first block you have not finished, in the seed's block order, so
   retrieval stays hard; when one side has nothing ready the other side, then any block, fills in.
3. **Prerequisites**: a new item is proposed only once every earlier item it builds on (what its
   reference imports, and the seed's orders of section 3, the RL chain among them: the catalog's
   ``depends_on`` and ``after``) has passed or sits earlier in this week's plan. New slots that
   nothing can fill go to more due items.
4. **Later passes** (every item attempted): items of the current pass in canon order, so the
   second pass restarts at #1 (see :func:`rotation`): an item never passed finishes the first pass
   before any second pass begins. "The second pass takes about a third of the time", so a later
   pass proposes three times ``size`` items a week (fifteen), plus at most two due items as before.

Items the installed canon cannot check yet (no reference tests) are left out and counted.

:data:`WEEK_BEFORE` is the seed's week-before checklist: the five items that come up most often in
real loops (attention with a mask, IoU plus NMS, backprop through one layer, k-means, the DPO loss),
the items they stand on, and the follow-up each one invites: eleven items, about four hours.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pytest_mlcanon import catalog
from pytest_mlcanon.progress import DAY_S, ItemProgress, format_due

WEEKLY_ITEMS = 5
REVIEW_SLOTS = 2
# "The second pass takes about a third of the time": later passes propose three times as many items.
LATER_PASS_SPEEDUP = 3
HORIZON_DAYS = 7
BLOCK_NAMES = {
    1: "foundations", 2: "layers, convolution, detection", 3: "sequences and attention", 4: "LLM variants",
    5: "multimodal and generative", 6: "retrieval and RL", 7: "post-training, systems, evaluation",
    8: "the capstone",
}
# (item, role): the week-before checklist in the order to drill it.
WEEK_BEFORE: tuple[tuple[int, str], ...] = (
    (25, "most asked: attention with a mask"),
    (27, "most asked: attention with a mask (the masks)"),
    (26, "follow-up: split the attention into heads"),
    (28, "follow-up: the same attention over a second sequence"),
    (18, "most asked: IoU plus NMS (the IoU)"),
    (19, "most asked: IoU plus NMS"),
    (11, "most asked: backprop through one layer by hand"),
    (4, "prerequisite of k-means: vectorised distances"),
    (5, "most asked: k-means"),
    (55, "most asked: the DPO loss"),
    (56, "follow-up: group-relative advantages and the clip"),
)
# Minutes per item for the paper re-derivation and the two-minute explanation (the seed's daily plan).
WEEK_BEFORE_OVERHEAD_MIN = 5


def block_title(block: int) -> str:
    return f"block {block} {BLOCK_NAMES.get(block, '')}".rstrip()


@dataclass(frozen=True)
class Pick:
    """One proposed item, what kind of slot it fills and why it was chosen.

    ``kind``: ``"new"`` (never attempted), ``"retry"`` (the last attempt failed or ran over time),
    ``"review"`` (a passed item due for spaced repetition) or ``"pass"`` (the next pass through the
    canon, restarted at #1).
    """

    item: catalog.Item
    reason: str
    kind: str


@dataclass(frozen=True)
class Plan:
    picks: tuple[Pick, ...]
    known_block: int | None
    new_block: int | None
    unavailable: tuple[catalog.Item, ...]
    pass_number: int = 1
    waiting: int = 0  # due items left for a later week

    @property
    def minutes(self) -> int:
        return sum(p.item.minutes for p in self.picks)

    def of_kind(self, *kinds: str) -> tuple[Pick, ...]:
        return tuple(p for p in self.picks if p.kind in kinds)


def prerequisites(item: catalog.Item) -> tuple[int, ...]:
    """The earlier items ``item`` waits for: those it imports and those the seed's order puts first
    (a later number in depends-on is an import the item is learned before: the GPT's KV cache)."""
    return tuple(dict.fromkeys(n for n in (*item.depends_on, *item.after) if n < item.number))


def block_shares(state: Mapping[int, ItemProgress]) -> dict[int, float]:
    """Share of each block's items that have passed at least once."""
    shares = {}
    for block in sorted({i.block for i in catalog.all_items()}):
        members = [i for i in catalog.all_items() if i.block == block]
        shares[block] = sum(1 for i in members if state.get(i.number, ItemProgress()).passes) / len(members)
    return shares


class _Week:
    """The week being filled: the picks so far and the progress they are chosen from."""

    def __init__(self, state: Mapping[int, ItemProgress], usable: list[catalog.Item]) -> None:
        self.usable = usable
        self.progress_of = {i.number: state.get(i.number, ItemProgress()) for i in catalog.all_items()}
        self.picks: list[Pick] = []
        self.chosen: set[int] = set()

    def take(self, item: catalog.Item, reason: str, kind: str) -> None:
        self.picks.append(Pick(item, reason, kind))
        self.chosen.add(item.number)

    def ready(self, item: catalog.Item) -> bool:
        """Not chosen yet, and every prerequisite passed or earlier in this week."""
        return item.number not in self.chosen and all(
            self.progress_of[n].passes or n in self.chosen for n in prerequisites(item))

    def fresh(self, item: catalog.Item) -> bool:
        return not self.progress_of[item.number].started and self.ready(item)


def weekly(state: Mapping[int, ItemProgress], now: float, available: Callable[[catalog.Item], bool],
           size: int = WEEKLY_ITEMS, review_slots: int = REVIEW_SLOTS) -> Plan:
    """Propose the week from the attempt history ``state`` (item number -> progress): ``size`` items of
    the current pass and at most ``review_slots`` due items beside them."""
    items = catalog.all_items()
    usable = [i for i in items if available(i)]
    unavailable = tuple(i for i in items if not available(i))
    week = _Week(state, usable)
    due = _due(week, now)
    pass_number, todo = rotation(state, usable)
    slots = size if pass_number == 1 else size * LATER_PASS_SPEEDUP
    for item in due[:review_slots]:
        week.take(item, _due_reason(week.progress_of[item.number], now), _due_kind(week.progress_of[item.number]))
    main_start = len(week.picks)

    def free() -> int:
        return slots - (len(week.picks) - main_start)

    def extra_due() -> None:  # main slots nothing else could fill
        for item in due:
            if free() > 0 and item.number not in week.chosen:
                summary = week.progress_of[item.number]
                week.take(item, _due_reason(summary, now), _due_kind(summary))

    known = new_block = None
    if any(not week.progress_of[i.number].started for i in usable):
        known, new_block = _fill_new(week, state, slots)
        extra_due()
    _fill_pass(week, pass_number, todo, free())
    extra_due()
    waiting = sum(1 for i in due if i.number not in week.chosen)
    return Plan(tuple(week.picks), known, new_block, unavailable, pass_number, waiting)


def _due(week: _Week, now: float) -> list[catalog.Item]:
    """Items due within the coming week: retries first, then reviews, each soonest first."""
    horizon = now + HORIZON_DAYS * DAY_S
    due = [i for i in week.usable if (d := week.progress_of[i.number].due) is not None and d <= horizon]
    return sorted(due, key=lambda i: (_due_kind(week.progress_of[i.number]) != "retry",
                                      week.progress_of[i.number].due or 0.0, i.number))


def _due_kind(summary: ItemProgress) -> str:
    return "review" if summary.last_passed and not _over_time(summary) else "retry"


def _over_time(summary: ItemProgress) -> bool:
    return summary.due is not None and summary.last_end is not None and summary.due - summary.last_end <= DAY_S


def _fill_new(week: _Week, state: Mapping[int, ItemProgress], size: int) -> tuple[int | None, int | None]:
    """Up to ``size`` never-attempted items, interleaving the best-known block with an unfinished one."""
    shares = block_shares(state)
    known = max((b for b, s in shares.items() if s > 0), key=lambda b: (shares[b], -b), default=None)
    new_blocks = [b for b in sorted(shares) if b != known and shares[b] < 1.0]
    anchor, anchor_why = known, "the block you know best"
    if anchor is None and new_blocks:  # nothing passed yet: start where the canon starts
        anchor, anchor_why, new_blocks = new_blocks[0], "where the canon starts", new_blocks[1:]
    start = len(week.picks)
    sides = [((anchor,) if anchor is not None else ()), tuple(new_blocks)]
    why = [anchor_why, "a block you have not finished"]
    side = 0
    while len(week.picks) - start < size:
        found = _first_fresh(week, sides[side]) or _first_fresh(week, sides[1 - side])
        if found is not None:
            block_why = why[side] if found.block in sides[side] else why[1 - side]
        else:
            found = next((i for i in week.usable if week.fresh(i)), None)
            block_why = "the next item whose prerequisites have passed"
        if found is None:
            break
        week.take(found, f"new, from {block_title(found.block)} ({block_why})", "new")
        side = 1 - side
    taken_new = [p.item.block for p in week.picks[start:]]
    return anchor, next((b for b in new_blocks if b in taken_new), None)


def _first_fresh(week: _Week, blocks: tuple[int, ...]) -> catalog.Item | None:
    for block in blocks:
        found = next((i for i in week.usable if i.block == block and week.fresh(i)), None)
        if found is not None:
            return found
    return None


def rotation(state: Mapping[int, ItemProgress], usable: Sequence[catalog.Item]) -> tuple[int, list[catalog.Item]]:
    """The current pass through the canon and its items still to do, in canon order.

    Pass 1 is done for an item once it has passed; pass ``k + 1`` begins when the last item finished
    pass ``k``, and is done for an item at its first pass after that moment. So the second pass
    restarts at #1 however many reviews the first pass held.
    """
    boundary = float("-inf")
    number = 1
    while usable:
        done = {i.number: next((t for t in state.get(i.number, ItemProgress()).passed_at if t > boundary), None)
                for i in usable}
        todo = [i for i in usable if done[i.number] is None]
        if todo:
            return number, todo
        boundary = max(t for t in done.values() if t is not None)
        number += 1
    return number, []


def _fill_pass(week: _Week, number: int, todo: list[catalog.Item], slots: int) -> None:
    """Up to ``slots`` items of pass ``number`` still to do, in canon order, once attempted and with
    their prerequisites ready (a never-attempted item waits for the interleaving of the first pass)."""
    for item in todo:
        if slots <= 0:
            return
        summary = week.progress_of[item.number]
        if not summary.started or not week.ready(item):
            continue
        if summary.passes == 0:
            week.take(item, f"not passed yet: attempt {summary.attempts + 1}", "retry")
        else:
            week.take(item, f"pass {number} through the canon, restarted at #1", "pass")
        slots -= 1


def _due_reason(summary: ItemProgress, now: float) -> str:
    when = format_due(summary.due, now)
    when = "due now" if when == "now" else f"due {when}"
    if not summary.last_passed:
        return f"{when}: the last attempt did not pass"
    if _over_time(summary):
        return f"{when}: passed, but over time"
    return f"{when}: review after {summary.streak} pass(es) in a row"


def week_before() -> list[tuple[catalog.Item, str]]:
    """The week-before checklist: (item, why it is on the list)."""
    return [(catalog.get(number), role) for number, role in WEEK_BEFORE]
