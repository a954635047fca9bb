"""Timed coding drills: twenty-two drills at three time tiers, and three 60-minute mock sessions.

Every drill is a canon item written from its stub against a clock (``data/drills.toml``): its check
is the item's reference tests and the rubric, so any correct implementation passes. The drill adds
the task as an interviewer says it, three escalating hints, what a yes looks like on each rubric
axis for this drill, and the narration prompts; the follow-up question is the item's
(:func:`pytest_mlcanon.chapters.explain.follow_up`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from pytest_mlcanon import catalog
from pytest_mlcanon.chapters import DataError, pick, table
from pytest_mlcanon.chapters.explain import WALKTHROUGH_MINUTES
from pytest_mlcanon.rubric.model import AXES

SESSION_MINUTES = 60
AXIS_TITLES = {"correctness": "Correctness", "shapes": "Shapes", "numerics": "Numerics", "api": "API fluency",
               "explanation": "Explanation"}


class DrillError(ValueError):
    """A drill or mock that does not exist; the message is one line."""


@dataclass(frozen=True)
class Tier:
    number: int
    name: str
    minutes: int


@dataclass(frozen=True)
class Drill:
    number: int
    name: str
    item: catalog.Item
    tier: Tier
    task: str
    hints: tuple[str, str, str]
    rubric: tuple[tuple[str, str], ...]  # (axis, what a yes looks like), in AXES order
    setup: tuple[str, ...]
    walkthrough: tuple[str, ...]

    @property
    def minutes(self) -> int:
        return self.tier.minutes

    @property
    def label(self) -> str:
        return f"drill {self.number} {self.name}"


@dataclass(frozen=True)
class Mock:
    number: int
    title: str
    drills: tuple[Drill, ...]

    @property
    def minutes(self) -> int:
        """The session's schedule: each drill's tier minutes plus its walkthrough."""
        return sum(d.minutes + WALKTHROUGH_MINUTES for d in self.drills)


@cache
def tiers() -> tuple[Tier, ...]:
    return tuple(Tier(int(t["number"]), str(t["name"]), int(t["minutes"])) for t in table("drills", "tier"))


@cache
def drills() -> tuple[Drill, ...]:
    by_tier = {t.number: t for t in tiers()}
    parsed = []
    for number, raw in enumerate(table("drills", "drill"), start=1):
        where = f"drills.toml drill {number} ({raw.get('name', '?')})"
        try:
            item = catalog.get(str(raw.get("item")))
        except catalog.UnknownItemError as exc:
            raise DataError(f"{where}: {exc}") from None
        tier = by_tier.get(raw.get("tier", 0))
        hints = raw.get("hints", [])
        rubric = raw.get("rubric", {})
        if tier is None or len(hints) != 3 or set(rubric) != set(AXES) or not raw.get("setup") \
                or not raw.get("walkthrough") or not isinstance(raw.get("task"), str):
            raise DataError(f"{where}: needs a known tier, a task, three hints, a rubric line for each of "
                            f"{', '.join(AXES)}, and set-up and walkthrough prompts")
        parsed.append(Drill(number, str(raw["name"]), item, tier, raw["task"], (hints[0], hints[1], hints[2]),
                            tuple((axis, str(rubric[axis])) for axis in AXES), tuple(raw["setup"]),
                            tuple(raw["walkthrough"])))
    return tuple(parsed)


@cache
def mocks() -> tuple[Mock, ...]:
    by_name = {d.name: d for d in drills()}
    parsed = []
    for raw in table("drills", "mock"):
        missing = [n for n in raw.get("drills", []) if n not in by_name]
        if missing:
            raise DataError(f"drills.toml mock {raw.get('number')}: unknown drill(s) {', '.join(missing)}")
        mock = Mock(int(raw["number"]), str(raw["title"]), tuple(by_name[n] for n in raw["drills"]))
        if mock.minutes > SESSION_MINUTES:
            raise DataError(f"drills.toml mock {mock.number}: {mock.minutes} minutes do not fit in {SESSION_MINUTES}")
        parsed.append(mock)
    return tuple(parsed)


def get(key: str) -> Drill:
    """A drill by number, name, unique part of a name, or the slug of the item it is built on."""
    return pick(key, drills(), lambda d: (d.name, d.item.slug), what="drill", listing="mlcanon drills",
                error=DrillError)


def mock(key: str) -> Mock:
    for session in mocks():
        if str(session.number) == key.strip():
            return session
    raise DrillError(f"unknown mock session {key!r}: they are {', '.join(str(m.number) for m in mocks())}")
