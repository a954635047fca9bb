"""The rotation of ``mlcanon plan``, simulated: 36 weeks of a learner who passes everything and of one who
fails often, each doing every item the week proposes."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_mlcanon import catalog, plan, progress

DAY = progress.DAY_S
START = 1_750_000_000.0  # a Sunday in June 2025; any epoch does
WEEKS = 36
RL_CHAIN = (47, 48, 49, 50, 51, 52, 53)


@dataclass
class Simulation:
    """What the plan proposed each week, and what became of each attempt."""

    weeks: list[plan.Plan] = field(default_factory=list)
    entries: dict[int, dict[str, Any]] = field(default_factory=dict)
    first_week: dict[int, int] = field(default_factory=dict)
    failed_in: dict[int, list[int]] = field(default_factory=dict)  # item -> weeks an attempt failed
    premature: list[tuple[int, int]] = field(default_factory=list)  # (week, item) proposed before its prerequisites


def simulate(fails: Callable[[int, int], bool], weeks: int = WEEKS) -> Simulation:
    """Run the plan week by week; ``fails(item, attempt)`` says whether that attempt fails.

    Each week's items are done one a day over five days (a sixth and seventh pick share a day), so
    every record carries real start and end times and the plan reads them back like a learner's.
    """
    sim = Simulation(entries={i.number: {"clock": None, "attempts": []} for i in catalog.all_items()})
    for week_number in range(1, weeks + 1):
        now = START + (week_number - 1) * 7 * DAY
        state = {n: progress.summarize(entry) for n, entry in sim.entries.items()}
        week = plan.weekly(state, now, available=lambda item: True)
        sim.weeks.append(week)
        earlier: set[int] = set()
        for slot, pick in enumerate(week.picks):
            number = pick.item.number
            sim.first_week.setdefault(number, week_number)
            if pick.kind == "new" and not all(state[n].passes or n in earlier for n in plan.prerequisites(pick.item)):
                sim.premature.append((week_number, number))
            earlier.add(number)
            attempts = sim.entries[number]["attempts"]
            start = now + (slot % 5) * DAY + 3600.0 * (slot // 5)
            passed = not fails(number, len(attempts) + 1)
            attempts.append({"attempt": len(attempts) + 1, "start": progress.iso(start),
                             "end": progress.iso(start + 1800.0), "passed": passed, "elapsed_min": 30.0,
                             "over_time": False})
            if not passed:
                sim.failed_in.setdefault(number, []).append(week_number)
    return sim


def passes_everything(item: int, attempt: int) -> bool:
    return False


def fails_often(seed: int = 19, rate: float = 0.5) -> Callable[[int, int], bool]:
    """Every attempt fails with probability ``rate``, fixed per (item, attempt) by the seed."""
    rng = random.Random(seed)
    drawn: dict[tuple[int, int], bool] = {}

    def fails(item: int, attempt: int) -> bool:
        return drawn.setdefault((item, attempt), rng.random() < rate)

    return fails


def first_weeks_table(sim: Simulation) -> str:
    """``#n:week`` for every item, in canon order: the acceptance figure of issue 19."""
    return " ".join(f"#{n}:{sim.first_week.get(n, '-')}" for n in range(1, len(catalog.all_items()) + 1))


@pytest.fixture(scope="module")
def strong() -> Simulation:
    return simulate(passes_everything)


@pytest.fixture(scope="module")
def struggling() -> Simulation:
    return simulate(fails_often())


def test_a_learner_who_passes_everything_sees_every_item_within_twelve_weeks(strong: Simulation) -> None:
    assert sorted(strong.first_week) == list(range(1, 61))
    assert max(strong.first_week.values()) == 12, first_weeks_table(strong)
    for week in strong.weeks[:12]:
        assert len(week.of_kind("new")) == plan.WEEKLY_ITEMS
        assert week.pass_number == 1


def test_reviews_keep_coming_back_during_the_first_pass_but_take_at_most_two_slots(strong: Simulation) -> None:
    for week in strong.weeks[1:12]:
        reviews = week.of_kind("review", "retry")
        assert 1 <= len(reviews) <= plan.REVIEW_SLOTS
        assert all(p.reason.startswith("due ") for p in reviews)
    assert strong.weeks[0].of_kind("review", "retry") == ()


def test_the_second_pass_restarts_at_number_one_and_takes_a_third_of_the_time(strong: Simulation) -> None:
    second = strong.weeks[12]
    assert second.pass_number == 2
    passes = second.of_kind("pass")
    assert passes[0].item.number == 1
    assert [p.item.number for p in passes] == sorted(p.item.number for p in passes)
    # every item comes round again within four weeks: a third of the first pass's twelve
    again = {p.item.number for week in strong.weeks[12:16] for p in week.picks}
    assert again == set(range(1, 61))
    assert strong.weeks[16].pass_number == 3 and strong.weeks[16].of_kind("pass")[0].item.number == 1


def test_nothing_new_is_proposed_before_what_it_builds_on(strong: Simulation, struggling: Simulation) -> None:
    assert strong.premature == []
    assert struggling.premature == []


def test_the_rl_chain_and_the_capstone_come_in_the_seeds_order(strong: Simulation, struggling: Simulation) -> None:
    for sim in (strong, struggling):
        order = [p.item.number for week in sim.weeks for p in week.of_kind("new")]
        assert [n for n in order if n in RL_CHAIN] == list(RL_CHAIN)
        assert order.index(60) > max(order.index(n) for n in (31, 39, 42, 54, 55, 56, 59))
        assert order.index(20) > order.index(19) > order.index(18)  # IoU before NMS before anchors


def test_a_learner_who_fails_often_still_covers_the_canon_and_retries_what_failed(struggling: Simulation) -> None:
    assert sorted(struggling.first_week) == list(range(1, 61)), first_weeks_table(struggling)
    assert max(struggling.first_week.values()) > 12  # failures hold back what builds on them
    # a failed item keeps coming back: each failure is followed by another proposal within six weeks
    proposals = {n: [w for w, week in enumerate(struggling.weeks, 1) for p in week.picks if p.item.number == n]
                 for n in struggling.failed_in}
    for number, failed_weeks in struggling.failed_in.items():
        for failed in failed_weeks:
            if failed <= WEEKS - 6:
                assert any(failed < w <= failed + 6 for w in proposals[number]), (number, failed)
    # while new items remain, the week still holds five items of the pass plus at most two due ones
    for week in struggling.weeks:
        assert len(week.picks) <= plan.WEEKLY_ITEMS + plan.REVIEW_SLOTS or week.pass_number > 1


def test_rotation_restarts_only_when_every_item_has_passed() -> None:
    items = catalog.all_items()
    now = START
    state = {i.number: progress.ItemProgress(attempts=1, passes=1, last_passed=True, last_end=now,
                                             passed_at=(now,)) for i in items}
    state[7] = progress.ItemProgress(attempts=2, passes=0, last_passed=False, last_end=now)
    number, todo = plan.rotation(state, items)
    assert number == 1 and [i.number for i in todo] == [7]
    state[7] = progress.ItemProgress(attempts=3, passes=1, last_passed=True, last_end=now + DAY,
                                     passed_at=(now + DAY,))
    number, todo = plan.rotation(state, items)
    assert number == 2 and todo[0].number == 1 and len(todo) == 60  # #7's pass ended pass 1; nothing counts yet


def test_the_seeds_order_sits_beside_the_imports_and_points_back() -> None:
    for item in catalog.all_items():
        assert all(1 <= n < item.number for n in item.after), item.label
        assert not set(item.after) & set(item.depends_on), item.label  # an order no import already states
    assert [plan.prerequisites(catalog.get(n)) for n in RL_CHAIN[1:]] == [(n,) for n in RL_CHAIN[:-1]]
    assert set(plan.prerequisites(catalog.get(60))) == {31, 39, 42, 54, 55, 56, 59}
    assert catalog.get(2).depends_on == ()  # logistic regression imports nothing: the order is not an import
