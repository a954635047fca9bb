"""The 90-minute day (``mlcanon today``), the diff step (``mlcanon diff``), and the state found from any
subfolder of the learner's repo."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pytest_mlcanon import catalog, cli, diffview, drill, plan, progress, state
from pytest_mlcanon.catalog import hints
from pytest_mlcanon.chapters import explain

REPO = Path(__file__).resolve().parents[1]
GOOD_DPO = REPO / "examples" / "learners" / "good" / "posttrain" / "dpo.py"


@pytest.fixture
def repo(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repo as the current directory."""
    monkeypatch.chdir(git_repo)
    return git_repo


def write_history(root: Path, items: dict[str, list[tuple[datetime, bool]]], clocks: dict[str, datetime]) -> None:
    """A progress.json with the given (end, passed) attempts and running clocks."""
    data: dict = {"version": 1, "items": {}}
    for slug, attempts in items.items():
        data["items"][slug] = {"clock": None, "attempts": [
            {"attempt": n, "start": (end - timedelta(minutes=20)).astimezone().isoformat(timespec="seconds"),
             "end": end.astimezone().isoformat(timespec="seconds"), "passed": passed, "elapsed_min": 20.0,
             "score": 5 if passed else 2, "over_time": False} for n, (end, passed) in enumerate(attempts, 1)]}
    for slug, start in clocks.items():
        entry = data["items"].setdefault(slug, {"attempts": []})
        entry["clock"] = {"attempt": len(entry["attempts"]) + 1, "start": start.astimezone().isoformat(timespec="seconds"),
                          "source": "drill"}
    (root / ".mlcanon").mkdir(exist_ok=True)
    (root / ".mlcanon" / "progress.json").write_text(json.dumps(data))


# -- finding the repo -----------------------------------------------------------------------------------

def test_the_state_is_found_by_walking_up(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert state.find_root(deep) == deep.resolve()  # nothing above: where you are
    (tmp_path / ".git").mkdir()
    assert state.find_root(deep) == tmp_path.resolve()  # the repository root
    (tmp_path / "a" / ".mlcanon").mkdir()
    assert state.find_root(deep) == (tmp_path / "a").resolve()  # the nearest drill state wins


# -- today ------------------------------------------------------------------------------------------------

def test_today_for_a_new_learner_starts_at_the_plans_first_item(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["today"]) == 0
    out = capsys.readouterr().out
    assert "nothing checked before today" in out
    assert "Read today's item, then close the book: #1 classical/linear_regression" in out
    assert "Target: 30 min on a first attempt (twice the 15-minute target)" in out
    assert "mlcanon diff classical/linear_regression" in out
    assert explain.follow_up(catalog.get(1)) .split(",")[0] in out
    assert not (repo / ".mlcanon").exists()  # reading the day creates nothing


def test_today_re_derives_yesterdays_item_and_drills_the_next_one(
        repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    yesterday = datetime.now().replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(days=1)
    write_history(repo, {"classical/linear_regression": [(yesterday - timedelta(days=1), True)],
                         "posttrain/dpo": [(yesterday, True)]}, {})
    (repo / "src" / "deep").mkdir(parents=True)
    monkeypatch.chdir(repo / "src" / "deep")  # from a subfolder: the same state
    assert cli.main(["today"]) == 0
    out = capsys.readouterr().out
    assert "Re-derive yesterday's item on paper, no code: #55 posttrain/dpo (checked " in out
    assert "margin = beta * [(log pi(y_c) - log pi_ref(y_c))" in out  # its one equation
    assert hints.hint(catalog.get(55), 1).splitlines()[-1][:40] in out  # and its shapes
    today = out.split("Read today's item, then close the book: ")[1].split(",")[0]
    assert today == "#1 classical/linear_regression"  # passed two days ago: due for its first review
    assert "why today: due " in out and ": review after 1 pass(es) in a row" in out
    assert "clock: not started" in out


def test_today_follows_the_clock_started_today(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    now = datetime.now()
    started = max(now - timedelta(minutes=10), now.replace(hour=0, minute=0, second=1, microsecond=0))
    write_history(repo, {}, {"detection/nms": started})
    assert cli.main(["today"]) == 0
    out = capsys.readouterr().out
    assert "#19 detection/nms" in out and "why today: its clock started today" in out
    assert "clock: attempt 1 running since" in out
    # already drilling: a drill now would do nothing, so the day says what to do instead
    assert "already drilling (attempt 1): write it, then mlcanon check detection/nms" in out
    assert "mlcanon drill detection/nms" not in out
    assert explain.follow_up(catalog.get(19))[:40] in out


# -- diff -------------------------------------------------------------------------------------------------

def test_diff_shows_the_kept_attempt_beside_the_reference_from_a_subfolder(
        repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.main(["drill", "posttrain/dpo"]) == 0
    shutil.copy(GOOD_DPO, repo / "practice" / "posttrain" / "dpo.py")
    assert cli.main(["reset", "posttrain/dpo"]) == 0  # the attempt moves to .mlcanon/attempts/
    (kept,) = (repo / ".mlcanon" / "attempts").glob("*/posttrain/dpo.py")
    capsys.readouterr()
    (repo / "notes").mkdir()
    monkeypatch.chdir(repo / "notes")
    assert cli.main(["diff", "posttrain/dpo", "--width", "160"]) == 0
    out = capsys.readouterr().out
    assert f"#55 posttrain/dpo: your attempt (../{kept.relative_to(repo)}, kept " in out  # as reached from notes/
    assert "beside the reference (canon_refs/posttrain/dpo.py)" in out
    rows = out.splitlines()
    assert any(" | " in r for r in rows) and any(r.rstrip().endswith(" >") or " > " in r for r in rows)
    assert "from __future__ import annotations" in out and "equal line(s)" in out
    assert "line(s) changed" in out and "Write down the differences" in out
    assert max(len(r) for r in rows if "|" in r[:80]) <= 160


def test_diff_prefers_the_practice_file_while_it_holds_work(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["drill", "55"]) == 0
    target = repo / "practice" / "posttrain" / "dpo.py"
    target.write_text(GOOD_DPO.read_text().replace("def dpo_loss(", "def dpo_loss_mine("))
    capsys.readouterr()
    assert cli.main(["diff", "55", "--unified"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("--- practice/posttrain/dpo.py\n+++ canon_refs/posttrain/dpo.py")
    assert "-def dpo_loss_mine(" in out
    assert cli.main(["diff", "55", "--archived"]) == 2  # nothing archived yet
    assert "no attempt of #55 posttrain/dpo in .mlcanon/attempts/" in capsys.readouterr().err


def test_diff_of_an_item_under_way_whose_stub_is_untouched_says_so(repo: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["drill", "55"]) == 0
    shutil.copy(GOOD_DPO, repo / "practice" / "posttrain" / "dpo.py")
    assert cli.main(["reset", "55"]) == 0 and cli.main(["drill", "55"]) == 0  # an older attempt is kept
    start = progress.clock(progress.snapshot(repo).peek("posttrain/dpo"))
    assert start is not None
    capsys.readouterr()
    assert cli.main(["diff", "55"]) == 2
    err = capsys.readouterr().err
    assert err == (f"mlcanon diff: nothing written yet for #55 posttrain/dpo; its stub is untouched (attempt 1, "
                   f"drilling since {datetime.fromtimestamp(start.start):%H:%M}): write it, then "
                   "`mlcanon check posttrain/dpo`; `--archived` shows your last kept attempt\n")
    assert "mlcanon drill" not in err
    assert cli.main(["diff", "55", "--archived"]) == 0  # the kept attempt, when asked for
    (repo / "practice" / "posttrain" / "dpo.py").write_text(GOOD_DPO.read_text().replace("def dpo_loss(", "def x("))
    assert cli.main(["diff", "55", "--unified"]) == 0  # once written, the attempt under way is diffed


@pytest.mark.parametrize("argv", [["diff", "posttrain/dpo"], ["diff", "posttrain/dop"], ["diff", "55", "--width", "10"],
                                  ["diff", "55", "--context", "-1"], ["diff", "transformer/*"]])
def test_diff_bad_input_is_one_line_and_exit_2(repo: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mlcanon diff: ") and err.count("\n") == 1


def test_side_by_side_marks_and_folds() -> None:
    mine = ["a", "b", "c", "d", "e", "f", "g", "h", "x"]
    ref = ["a", "b", "c", "d", "e", "f", "g", "h", "y", "z"]
    rows = diffview.side_by_side(mine, ref, width=80, context=2)
    assert rows[0].strip().startswith("... 6 equal line(s)")
    assert rows[-2].split()[-3:] == ["|", "9", "y"] and rows[-1].split() == [">", "10", "z"]
    assert diffview.counts(mine, ref) == diffview.Counts(changed=1, only_yours=0, only_reference=1)
    long = ["q" * 300]
    assert all(len(r) <= 80 for r in diffview.side_by_side(long, ["w"], width=80))
    assert progress.now() > 0


def test_today_is_the_item_worked_on_last_and_a_pass_ends_its_clock(repo: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    now = datetime.now()
    early = max(now - timedelta(minutes=30), now.replace(hour=0, minute=0, second=1, microsecond=0))
    later = max(now - timedelta(minutes=5), early + timedelta(seconds=30))
    write_history(repo, {"posttrain/dpo": [(later, True)]}, {"detection/nms": early, "posttrain/dpo": early})
    data = json.loads((repo / ".mlcanon" / "progress.json").read_text())
    data["items"]["posttrain/dpo"]["clock"]["attempt"] = 1  # the clock of the attempt that passed keeps idling
    (repo / ".mlcanon" / "progress.json").write_text(json.dumps(data))
    assert cli.main(["today"]) == 0
    out = capsys.readouterr().out
    # DPO passed after the NMS clock started: DPO is done for the day; NMS, still running, is today's
    assert "Read today's item, then close the book: #19 detection/nms" in out
    assert "why today: its clock started today" in out and "clock: attempt 1 running since" in out
    assert "passed today: #55 posttrain/dpo at " in out and "mlcanon drill posttrain/dpo" not in out


def test_an_item_passed_today_is_not_drilled_again_today(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The learner drilled and passed DPO this morning, then asks for the day: the day moves on to the
    plan's next item (it said `mlcanon drill posttrain/dpo` again, a re-drill of what just passed)."""
    now = datetime.now()
    passed = max(now - timedelta(minutes=5), now.replace(hour=0, minute=0, second=1, microsecond=0))
    write_history(repo, {"posttrain/dpo": [(passed, True)]}, {})
    summaries = {i.number: progress.summarize(progress.snapshot(repo).peek(i.slug)) for i in catalog.all_items()}
    week = plan.weekly(summaries, now.timestamp(), drill.drillable)
    assert [p.item.slug for p in week.picks][:1] == ["posttrain/dpo"]  # the week lists it: a review in 2 days
    expected = next(p.item for p in week.picks if p.item.slug != "posttrain/dpo")
    assert cli.main(["today"]) == 0
    out = capsys.readouterr().out
    assert f"Read today's item, then close the book: {expected.label}," in out
    assert f"mlcanon drill {expected.slug}    write it    mlcanon check {expected.slug}" in out
    assert "mlcanon drill posttrain/dpo" not in out and "clock: not started" in out
    assert f"passed today: #55 posttrain/dpo at {passed:%H:%M}, done for the day" in out


def test_a_failed_check_today_keeps_its_item_for_today(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    now = datetime.now()
    failed = max(now - timedelta(minutes=5), now.replace(hour=0, minute=0, second=1, microsecond=0))
    write_history(repo, {"posttrain/dpo": [(failed, False)]}, {})
    assert cli.main(["today"]) == 0
    out = capsys.readouterr().out
    assert "Read today's item, then close the book: #55 posttrain/dpo" in out
    assert "why today: you checked it today" in out and "not passed yet" in out and "passed today" not in out
