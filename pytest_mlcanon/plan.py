"""The rotation: this week's five items, and the short list for the week before an interview.

The seed's schedule is five items a week, interleaved rather than blocked: one item from a block
you know well, one from a block you do not, so retrieval stays hard. :func:`weekly` fills the week
in this order:

1. **Due items** (spaced repetition on the attempt history, see :mod:`pytest_mlcanon.progress`): a
   failed or over-time attempt comes back the next day, a pass after 2, 4, 7, 14, 30, 60 days.
   Items due within the coming week go first, soonest first.
2. **Interleaving**: the remaining slots alternate between the block you know best (the highest
   share of passed items; a new item from it, else a review of its oldest pass) and the first
   block you have not finished, in the seed's block order.
3. **Dependency order**: a new item is proposed only once every earlier item it builds on
   (``depends_on`` in the catalog, plus the capstone's list) has passed or sits earlier in the plan.

Items the installed canon cannot check yet (no reference tests) are left out and counted.

:data:`WEEK_BEFORE` is the seed's week-before checklist: the five items that come up most often in
real loops (attention with a mask, IoU plus NMS, backprop through one layer, k-means, the DPO loss),
the items they stand on, and the follow-up each one invites: eleven items, about four hours.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pytest_mlcanon import catalog
from pytest_mlcanon.progress import DAY_S, ItemProgress, format_due

WEEKLY_ITEMS = 5
HORIZON_DAYS = 7
BLOCK_NAMES = {
    1: "foundations", 2: "layers, convolution, detection", 3: "sequences and attention", 4: "LLM variants",
    5: "multimodal and generative", 6: "retrieval and RL", 7: "post-training, systems, evaluation",
    8: "the capstone",
}
# The seed's capstone rule ("only after #31, #39, #42, #54, #55, #56 and #59"); the catalog's
# depends_on lists module imports, which the self-contained capstone has none of.
EXTRA_PREREQUISITES: dict[int, tuple[int, ...]] = {60: (31, 39, 42, 54, 55, 56, 59)}

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
    """One proposed item and why it was chosen."""

    item: catalog.Item
    reason: str


@dataclass(frozen=True)
class Plan:
    picks: tuple[Pick, ...]
    known_block: int | None
    new_block: int | None
    unavailable: tuple[catalog.Item, ...]

    @property
    def minutes(self) -> int:
        return sum(p.item.minutes for p in self.picks)


def _prerequisites(item: catalog.Item) -> tuple[int, ...]:
    earlier = tuple(n for n in item.depends_on if n < item.number)
    return earlier + EXTRA_PREREQUISITES.get(item.number, ())


def block_shares(state: Mapping[int, ItemProgress]) -> dict[int, float]:
    """Share of each block's items that have passed at least once."""
    shares = {}
    for block in sorted({i.block for i in catalog.all_items()}):
        members = [i for i in catalog.all_items() if i.block == block]
        shares[block] = sum(1 for i in members if state.get(i.number, ItemProgress()).passes) / len(members)
    return shares


def weekly(state: Mapping[int, ItemProgress], now: float, available: Callable[[catalog.Item], bool],
           size: int = WEEKLY_ITEMS) -> Plan:
    """Propose ``size`` items for the week from the attempt history ``state`` (item number -> progress)."""
    items = catalog.all_items()
    usable = [i for i in items if available(i)]
    unavailable = tuple(i for i in items if not available(i))
    progress_of = {i.number: state.get(i.number, ItemProgress()) for i in items}
    picks: list[Pick] = []
    chosen: set[int] = set()

    def take(item: catalog.Item, reason: str) -> None:
        picks.append(Pick(item, reason))
        chosen.add(item.number)

    horizon = now + HORIZON_DAYS * DAY_S
    due = sorted((i for i in usable if (d := progress_of[i.number].due) is not None and d <= horizon),
                 key=lambda i: (progress_of[i.number].due or 0.0, i.number))
    for due_item in due[:size]:
        take(due_item, _due_reason(progress_of[due_item.number], now))

    def eligible(item: catalog.Item) -> bool:
        return (not progress_of[item.number].started and item.number not in chosen
                and all(progress_of[n].passes or n in chosen for n in _prerequisites(item)))

    shares = block_shares(state)
    known = max((b for b, s in shares.items() if s > 0), key=lambda b: (shares[b], -b), default=None)
    new_blocks = [b for b in sorted(shares) if b != known and shares[b] < 1.0]
    anchor, anchor_why = known, "the block you know best"
    if anchor is None and new_blocks:  # nothing passed yet: start where the canon starts
        anchor, anchor_why, new_blocks = new_blocks[0], "where the canon starts", new_blocks[1:]
    side = 0
    stalled = 0
    while len(picks) < size and stalled < 2:
        if side == 0 and anchor is not None:
            found, reason = _from_known(anchor, anchor_why, usable, eligible, progress_of, chosen)
        else:
            found, reason = _from_new(new_blocks, usable, eligible)
        side = 1 - side
        if found is None:
            stalled += 1
            continue
        stalled = 0
        take(found, reason)
    for review in sorted((i for i in usable if progress_of[i.number].passes and i.number not in chosen),
                         key=lambda i: (progress_of[i.number].last_end or 0.0, i.number)):
        if len(picks) >= size:
            break
        take(review, "review: the oldest pass")
    new_block = next((b for b in new_blocks if any(p.item.block == b for p in picks)), None)
    return Plan(tuple(picks), anchor, new_block, unavailable)


def _due_reason(summary: ItemProgress, now: float) -> str:
    when = format_due(summary.due, now)
    when = "due now" if when == "now" else f"due {when}"
    if not summary.last_passed:
        return f"{when}: the last attempt did not pass"
    if summary.due is not None and summary.last_end is not None and summary.due - summary.last_end <= DAY_S:
        return f"{when}: passed, but over time"
    return f"{when}: review after {summary.streak} pass(es) in a row"


def _from_known(block: int, why: str, usable: list[catalog.Item], eligible: Callable[[catalog.Item], bool],
                progress_of: Mapping[int, ItemProgress], chosen: set[int]) -> tuple[catalog.Item | None, str]:
    title = block_title(block)
    fresh = [i for i in usable if i.block == block and eligible(i)]
    if fresh:
        return fresh[0], f"new, from {title} ({why})"
    passed = sorted((i for i in usable if i.block == block and progress_of[i.number].passes
                     and i.number not in chosen), key=lambda i: (progress_of[i.number].last_end or 0.0, i.number))
    if passed:
        return passed[0], f"review, from {title} ({why})"
    return None, ""


def _from_new(new_blocks: list[int], usable: list[catalog.Item],
              eligible: Callable[[catalog.Item], bool]) -> tuple[catalog.Item | None, str]:
    for block in new_blocks:
        fresh = [i for i in usable if i.block == block and eligible(i)]
        if fresh:
            return fresh[0], f"new, from {block_title(block)} (a block you have not finished)"
    return None, ""


def week_before() -> list[tuple[catalog.Item, str]]:
    """The week-before checklist: (item, why it is on the list)."""
    return [(catalog.get(number), role) for number, role in WEEK_BEFORE]
