"""Timed drills and mock interviews: the twenty-two drills, the session runner on a scripted clock, and
``mlcanon mock`` end to end with its clock sped up."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import pytest

from pytest_mlcanon import catalog, cli, drill
from pytest_mlcanon.chapters import drills, explain
from pytest_mlcanon.chapters import mock as sessions
from pytest_mlcanon.commands import mock as mock_command
from pytest_mlcanon.rubric.model import AXES

REPO = Path(__file__).resolve().parents[1]


# -- the data ---------------------------------------------------------------------------------------------

def test_twenty_two_drills_at_three_tiers_built_on_distinct_checkable_items() -> None:
    all_drills = drills.drills()
    assert len(all_drills) == 22
    assert [t.minutes for t in drills.tiers()] == [15, 25, 35]
    assert {d.tier.number for d in all_drills} == {1, 2, 3}
    assert len({d.item.number for d in all_drills}) == 22 and len({d.name for d in all_drills}) == 22
    for d in all_drills:
        assert drill.drillable(d.item), d.name
        assert d.item.minutes <= d.minutes  # the item's from-memory target fits its tier
        assert [axis for axis, _ in d.rubric] == list(AXES)
        assert len(d.hints) == 3 and len(set(d.hints)) == 3 and d.setup and d.walkthrough
        assert explain.follow_up(d.item).endswith("?")


def test_the_three_mock_sessions_fill_sixty_minutes() -> None:
    assert [m.number for m in drills.mocks()] == [1, 2, 3]
    assert all(m.minutes == drills.SESSION_MINUTES for m in drills.mocks())
    assert [d.item.number for d in drills.mock("1").drills] == [25, 19, 55]  # the most asked


def test_every_item_has_a_follow_up_question() -> None:
    assert all(explain.follow_up(item) for item in catalog.all_items())


# -- the runner on a scripted clock --------------------------------------------------------------------------

class ScriptedClock:
    """Jumps to each deadline at once, unless the script has the learner type something first."""

    def __init__(self, script: list[tuple[float, str]]) -> None:
        self.now = 0.0
        self.script = sorted(script)

    def minutes(self) -> float:
        return self.now

    def wait(self, until: float) -> str | None:
        if self.script and self.script[0][0] <= until:
            at, typed = self.script.pop(0)
            self.now = max(self.now, at)
            return typed
        self.now = max(self.now, until)
        return None

    def paused(self) -> nullcontext[None]:
        return nullcontext()


def run(script: list[tuple[float, str]], checked: sessions.Checked, session: str = "1"
        ) -> tuple[sessions.Session, list[str], list[tuple[str, int]]]:
    said: list[str] = []
    hints: list[tuple[str, int]] = []
    runner = sessions.Runner(drills.mock(session), ScriptedClock(script), said.append,
                             begin=lambda d: f"Edit practice/{d.item.modules[0]}.py",
                             check=lambda d: checked, on_hint=lambda d, level: hints.append((d.name, level)))
    return runner.run(), said, hints


def stamped(said: list[str], text: str) -> str:
    """The ``[mm:ss]`` stamp of the first line containing ``text``."""
    return next(line for line in said if text in line).split("]")[0].lstrip("[")


def test_the_prompts_come_at_their_minutes_on_one_clock() -> None:
    passing = sessions.Checked(True, True, 5, ())
    session, said, _ = run([], passing)
    assert stamped(said, "Drill 1 of 3: attention-with-a-mask") == "00:00"
    assert stamped(said, "Write it now") == "02:00"
    assert stamped(said, "Stuck?") == "10:00" and stamped(said, "2 minutes left") == "13:00"
    assert stamped(said, "Walkthrough, 5 minutes") == "15:00"
    assert stamped(said, "The interviewer asks") == "19:00"
    assert stamped(said, "Drill 2 of 3") == "20:00" and stamped(said, "Drill 3 of 3") == "40:00"
    assert session.minutes == 60 and session.passed == 3 and session.points == 15 and session.verdict == "strong"
    assert any(explain.script().setup[0] in line for line in said)
    assert any(explain.follow_up(catalog.get(55)) in line for line in said)


def test_finishing_early_banks_time_hints_escalate_and_quit_ends_the_session() -> None:
    failing = sessions.Checked(True, False, 2, ("correctness", "numerics", "api"))
    script = [(3.0, "h"), (4.0, "h"), (5.0, "h"), (6.0, "h"), (7.0, ""), (12.0, ""), (13.0, "x"), (30.0, "q")]
    session, said, hints = run(script, failing)
    assert hints == [("attention-with-a-mask", 1), ("attention-with-a-mask", 2), ("attention-with-a-mask", 3),
                     ("attention-with-a-mask", 3)]
    assert any(drills.get("attention-with-a-mask").hints[2] in line for line in said)
    first, second, third = session.outcomes
    assert first.finished_early and first.used_min == 7.0 and first.hints == 3
    assert stamped(said, "Drill 2 of 3") == "12:00"  # the walkthrough ended early on Enter: time is banked
    assert any(sessions.KEYS in line for line in said)  # an unknown key is answered with the keys
    assert second.reached and not third.reached and session.ended_early
    assert session.points == 4 and session.verdict == "no: correctness failed in drill 1, 2"
    text = "\n".join(sessions.summary(session))
    assert "not passing in 7.0 min, 2/5 no: correctness failed; numerics and API fluency failed, 3 hint(s)" in text
    assert "Correctness  no " in text and "Shapes       yes" in text
    assert "3. dpo-loss (#55 posttrain/dpo), 15 min: not reached" in text
    record = session.record()
    assert record["drills_passed"] == 0 and record["ended_early"] and record["drills"][2]["reached"] is False


def test_a_drill_whose_code_fails_is_never_strong_nor_is_its_session() -> None:
    """Issue 17.2 in the mock: 4/5 with Correctness no is ``no``, and the session says which drill held it back."""
    wrong = sessions.Checked(True, False, 4, ("correctness",))
    session, _, _ = run([], wrong)
    assert session.points == 12 and session.verdict == "hire with reservations: correctness failed in drill 1, 2, 3"
    text = "\n".join(sessions.summary(session))
    assert "not passing in 15.0 min, 4/5 no: correctness failed" in text and "strong" not in text.split("Session:")[0]
    assert sessions.Checked(True, True, 4, ("explanation",)).verdict == "strong: explanation failed"


def test_speed_comes_from_the_option_or_the_environment() -> None:
    assert mock_command._speed(None, None) == 1.0
    assert mock_command._speed(None, "600") == 600.0 and mock_command._speed(30.0, "600") == 30.0
    for bad in ((0.0, None), (None, "fast"), (-2.0, None)):
        with pytest.raises(ValueError):
            mock_command._speed(*bad)


# -- the command, as a learner runs it -----------------------------------------------------------------------

@pytest.fixture
def repo(git_repo: Path) -> Path:
    (git_repo / "notes").mkdir()
    return git_repo


def mlcanon(*args: str, cwd: Path, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "pytest_mlcanon.cli", *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)  # type: ignore[call-overload]


def items_state(root: Path) -> dict:
    return json.loads((root / ".mlcanon" / "progress.json").read_text())["items"]


def test_mock_1_sped_up_runs_to_its_summary_and_records_only_the_session(repo: Path) -> None:
    """The trial: a dry run left the drills' clocks running (they drove `today` and the dashboard) and
    called an untouched stub "not attempted" where `mlcanon check` says "not implemented yet"."""
    assert cli_in(repo, "drill", "posttrain/dpo") == 0  # drilling DPO for real before the dry run
    assert cli_in(repo, "hint", "posttrain/dpo", "--level", "2") == 0
    before = items_state(repo)
    process = mlcanon("mock", "1", "--speed", "3600", cwd=repo / "notes", stdin=subprocess.DEVNULL)
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    assert re.search(r"\[\d\d:\d\d\] Drill 1 of 3: attention-with-a-mask", out), out  # 1 s is an hour at 3600x
    for text in ("Write it now", "Walkthrough, 5 minutes",
                 "The interviewer asks:", "Drill 3 of 3: dpo-loss", "Mock 1 summary",
                 "1. attention-with-a-mask (#25 transformer/attention), 15 min: not implemented yet (",
                 "Session: 0 of 3 drills passed, 0 of 15 rubric points: no",
                 "Recorded as mock 1, session 1 (a dry run at 3600x speed: nothing recorded in the items' histories)"):
        assert text in out, text
    assert "not attempted" not in out and "in another terminal" not in out
    (session,) = json.loads((repo / ".mlcanon" / "progress.json").read_text())["mocks"]["1"]["attempts"]
    assert session["speed"] == 3600 and [d["drill"] for d in session["drills"]] == [
        "attention-with-a-mask", "iou-and-nms", "dpo-loss"]
    assert not any(d["attempted"] for d in session["drills"])  # untouched stubs are not attempts
    assert {d["status"] for d in session["drills"]} == {"not implemented yet"}
    assert (repo / "practice" / "posttrain" / "dpo.py").is_file()  # the repo root, found from notes/
    assert items_state(repo) == before  # no clock started or stopped, DPO's running clock and hints as they were
    assert not (repo / ".mlcanon" / "misslog.md").exists()


def cli_in(root: Path, *args: str) -> int:
    return subprocess.run([sys.executable, "-m", "pytest_mlcanon.cli", *args], cwd=root, capture_output=True,
                          timeout=600).returncode


@pytest.mark.parametrize("speed", ["60", "1"])
def test_a_drill_written_during_the_mock_is_checked_and_scored(repo: Path, speed: str) -> None:
    """At 60x (the trial's dry run) the check scores the drill and the item's history stays empty; at
    real speed it is the item's attempt, and its clock stops with the drill."""
    process = mlcanon("mock", "1", "--speed", speed, cwd=repo, stdin=subprocess.PIPE)
    target = repo / "practice" / "transformer" / "attention.py"
    deadline = time.monotonic() + 120
    while not target.is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    shutil.copy(REPO / "canon_refs" / "transformer" / "attention.py", target)
    assert process.stdin is not None
    out, err = process.communicate("\nq\n", timeout=600)  # done with drill 1, then end the session
    assert process.returncode == 0, err
    assert "1. attention-with-a-mask (#25 transformer/attention), 15 min: passed in " in out
    assert "5/5 strong" in out and "2. iou-and-nms (#19 detection/nms), 15 min: not reached" in out
    progress = json.loads((repo / ".mlcanon" / "progress.json").read_text())
    (session,) = progress["mocks"]["1"]["attempts"]
    assert session["ended_early"] and session["drills"][0]["passed"] and session["drills"][0]["score"] == 5
    if speed != "1":
        assert progress["items"] == {}  # no attempt, best time or review date from a dry run
        return
    entry = progress["items"]["transformer/attention"]
    (attempt,) = entry["attempts"]  # the drill is the item's attempt too
    assert attempt["passed"] and attempt["score"] == 5
    assert entry["clock"] is None  # stopped with the drill: it does not run on after the session


@pytest.mark.parametrize("argv", [["mock", "4"], ["mock", "1", "--speed", "0"], ["drills", "nope"],
                                  ["drills", "--hint", "2"], ["drills", "3", "--tier", "1"]])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mlcanon {argv[0]}: ") and err.count("\n") == 1


def test_drills_lists_the_drills_and_shows_a_card_and_its_hints(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["drills", "--tier", "3"]) == 0
    listing = capsys.readouterr().out
    assert "mlp-backward" in listing and "dpo-loss" not in listing.split("Mock sessions")[0]
    assert cli.main(["drills", "posttrain/dpo"]) == 0
    card = capsys.readouterr().out
    assert "drill 3 dpo-loss: #55 posttrain/dpo" in card and "15 minutes" in card
    assert explain.follow_up(catalog.get(55)) in card and "API fluency" in card
    assert drills.get("dpo-loss").hints[0] not in card  # hints only on request
    assert cli.main(["drills", "dpo", "--hint", "2"]) == 0
    assert drills.get("dpo-loss").hints[1] in capsys.readouterr().out
