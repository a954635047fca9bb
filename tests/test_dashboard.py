"""``mlcanon dashboard``: the page built from a made-up learner history, read as data, as HTML, and as a
headless browser renders it (a screenshot and the DOM), where Debian's ``chromium`` is installed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from browser import chromium, elements, needs_chromium

from pytest_mlcanon import catalog, cli, drill, misslog, plan, progress
from pytest_mlcanon.dashboard import model, page

DAY = progress.DAY_S
NOW = 1_750_000_000.0  # pinned, so due dates in the history are the same on every run


def _attempt(current: progress.Session, slug: str, days_ago: float, minutes: float, passed: bool,
             score: int | None, *, misses: tuple[str, ...] = (), checks: int = 1, stop: bool = True) -> None:
    """One attempt at ``slug`` that began ``days_ago`` days before NOW, recorded as ``mlcanon check`` records it."""
    item = catalog.get(slug)
    entry = current.entry(slug)
    clock = progress.start_clock(entry, NOW - days_ago * DAY)
    first = progress.passes_before(entry, clock.attempt) == 0
    allowed = item.minutes * (2.0 if first else 1.0)
    end = clock.start + minutes * 60
    for index in range(checks):
        last = index == checks - 1
        check = progress.Check(passed and last, score, () if passed and last else ("correctness",), minutes,
                               allowed, item.minutes, minutes > allowed, misses)
        progress.record_check(entry, clock, check, end)
    if misses:
        misslog.upsert(current, item.number, slug, clock.attempt, score, misses, end)
    if stop:
        progress.stop_clock(entry)


# The plan's due items for that history: a pass over time and a failure come back first, the due pass waits.
PLANNED_DUE = [56, 11]
KEEPDIMS = "forgot keepdims (reduced axis did not broadcast back)"
# The state each item of the fixture history is in at NOW (the others are new).
EXPECTED_STATES = {
    4: model.State.SOON,       # three passes in a row, the last 3 days ago: review after 7 days
    5: model.State.DUE,        # one pass 5 days ago: review after 2 days
    11: model.State.FAILED,    # the only attempt failed yesterday
    18: model.State.PASSED,    # four passes in a row, the last 2 days ago: review after 14 days
    19: model.State.SOON,      # three passes, the last yesterday
    25: model.State.SOON,      # a first pass yesterday: due tomorrow
    26: model.State.DRILLING,  # drilled a quarter of an hour ago, never checked
    55: model.State.DRILLING,  # passed once; the running second attempt fails its checks
    56: model.State.DUE,       # passed over time two days ago: due the next day
}


def make_history(root: Path) -> None:
    """A learner three weeks in: passes, a failure, reviews due, two drills running, misses, a mock."""
    with progress.session(root) as current:
        _attempt(current, "classical/knn", 20, 27.0, True, 4, misses=(f"{KEEPDIMS} (test_x)",), checks=3)
        _attempt(current, "classical/knn", 12, 14.0, True, 5)
        _attempt(current, "classical/knn", 3, 9.5, True, 5)
        _attempt(current, "classical/kmeans", 5, 31.0, True, 4, checks=4,
                 misses=(f"{KEEPDIMS} (test_y)", "eps outside sqrt (kmeans.py:41)"))
        _attempt(current, "nn/mlp", 1, 44.0, False, 2, checks=6,
                 misses=("gradient wrong (check the backward against finite differences) (test_grad)",
                         f"{KEEPDIMS} (test_b)"))
        for days, minutes in ((30, 18.0), (25, 12.0), (16, 9.0), (2, 6.0)):
            _attempt(current, "detection/boxes", days, minutes, True, 5)
        for days, minutes in ((18, 29.0), (9, 16.0), (1, 11.5)):
            _attempt(current, "detection/nms", days, minutes, True, 5 if minutes < 20 else 4)
        _attempt(current, "transformer/attention", 1, 17.0, True, 3, checks=5,
                 misses=("-inf padding row (a fully masked row must stay finite) (test_fully_masked_row)",
                         "silent full transpose (.T on 3-D+; transpose(-2, -1) for K) (attention.py:30)"))
        progress.start_clock(current.entry("transformer/multihead"), NOW - 0.01 * DAY)
        _attempt(current, "posttrain/dpo", 10, 26.0, True, 4, misses=("label shift off by one (test_first_token)",))
        _attempt(current, "posttrain/dpo", 0.02, 12.0, False, 1, stop=False,
                 misses=("label shift off by one (test_first_token)", f"{KEEPDIMS} (dpo.py:22)"))
        _attempt(current, "posttrain/grpo", 2, 70.0, True, 4, checks=2, misses=("over time",))
        current.data["mocks"] = {"1": {"clock": None, "attempts": [
            {"attempt": 1, "start": progress.iso(NOW - 3 * DAY), "end": progress.iso(NOW - 3 * DAY + 3500),
             "elapsed_min": 58.3, "passed": False, "drills_passed": 1, "score": 8, "max_score": 10,
             "verdict": "hire with reservations: correctness failed in drill 2"}]}}


@pytest.fixture
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A learner repo (the current directory) holding the fixture history, with the clock pinned at NOW."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(progress, "now", lambda: NOW)
    make_history(tmp_path)
    return tmp_path


# -- the data ------------------------------------------------------------------------------------------

def test_each_item_gets_the_state_its_history_gives_it(history: Path) -> None:
    board = model.gather(history, NOW)
    states = {view.item.number: view.state for view in board.items}
    assert len(states) == 60
    assert {n: s for n, s in states.items() if s is not model.State.NEW} == EXPECTED_STATES
    assert (board.attempted, board.passed, board.count(model.State.DUE, model.State.FAILED)) == (8, 7, 3)


def test_the_attempt_points_are_the_recorded_times(history: Path) -> None:
    views = {view.item.number: view for view in model.gather(history, NOW).items}
    assert [p.elapsed_min for p in views[18].points] == [18.0, 12.0, 9.0, 6.0]
    assert [(p.passed, p.over_time) for p in views[18].points] == [(True, False), (True, True), (True, False),
                                                                  (True, False)]  # 12 min past a 10-min allowance
    assert [(p.attempt, p.passed) for p in views[55].points] == [(1, True), (2, False)]
    assert views[26].points == () and views[11].checks == 6


def test_misses_are_ranked_across_items_and_attempts(history: Path) -> None:
    board = model.gather(history, NOW)
    assert [(r.miss, r.count) for r in board.misses[:2]] == [(KEEPDIMS, 4), ("label shift off by one", 2)]
    assert board.misses[0].items == ["#4 classical/knn", "#5 classical/kmeans", "#11 nn/mlp", "#55 posttrain/dpo"]


def test_the_plan_and_the_mock_sessions_come_from_the_same_state(history: Path) -> None:
    board = model.gather(history, NOW)
    summaries = {view.item.number: view.summary for view in board.items}
    assert board.week == plan.weekly(summaries, NOW, drill.drillable)  # what `mlcanon plan` proposes
    assert [p.item.number for p in board.week.of_kind("retry", "review")] == PLANNED_DUE
    (mock,) = board.mocks
    assert (mock.session, mock.attempt, mock.elapsed_min, mock.score, mock.passed) == ("1", 1, 58.3, "8/10", False)
    assert mock.verdict == "hire with reservations: correctness failed in drill 2"


def test_mock_records_it_cannot_read_are_left_out() -> None:
    assert model.mock_runs(None) == () and model.mock_runs(["1"]) == ()
    runs = model.mock_runs({"2": {"attempts": ["junk", {"attempt": 1, "score": "3 of 4 drills"}, {"score": 4}]},
                            "3": 7})
    assert [(r.session, r.score, r.elapsed_min, r.passed) for r in runs] == [("2", "4/5", None, None),  # by run number
                                                                               ("2", "3 of 4 drills", None, None)]


def test_an_empty_repo_is_sixty_new_items(tmp_path: Path) -> None:
    board = model.gather(tmp_path, NOW)
    assert {view.state for view in board.items} == {model.State.NEW}
    assert board.misses == () and board.mocks == () and len(board.week.picks) == 5
    assert not (tmp_path / ".mlcanon").exists()  # reading creates nothing
    text = page.render(board)
    assert "No timed attempt yet" in text and "No mock session recorded yet" in text
    assert "<b>0 min</b><span>drilled to green</span>" in text  # minutes below an hour, never "0.0 h"
    assert "passed, review later (0)" in text  # the legend's state, not the header's count of passes


# -- the page ------------------------------------------------------------------------------------------

def check_page(html: str) -> None:
    """What the fixture history's page must hold, read from its elements (the source or the browser's DOM)."""
    found = elements(html)
    cells = found.having("div", class_="cell")
    assert len(cells) == 60
    states = {int(c["data-item"]): model.State(c["data-state"]) for c in cells}
    assert {n: s for n, s in states.items() if s is not model.State.NEW} == EXPECTED_STATES
    assert [int(b["data-block"]) for b in found.having("div", class_="block")] == list(range(1, 9))
    charts = found.having("svg", class_="times")
    assert [c["data-item"] for c in charts] == ["classical/knn", "classical/kmeans", "nn/mlp", "detection/boxes",
                                                "detection/nms", "transformer/attention", "posttrain/dpo",
                                                "posttrain/grpo"]
    assert [c["data-target"] for c in charts][:2] == ["15.0", "20.0"]
    dots = found.having("circle", class_="attempt")
    assert len(dots) == 16
    assert Counter(d["data-outcome"] for d in dots) == {"passed": 11, "passed over time": 3, "failed": 2}
    assert [int(g["data-count"]) for g in found.having("g", class_="miss")] == [4, 2, 1, 1, 1, 1, 1]
    planned = [r["data-item"] for r in found.having("tr") if "data-item" in r]
    assert [int(n) for n in planned[:len(PLANNED_DUE)]] == PLANNED_DUE and len(planned) == 7
    assert [r["data-session"] for r in found.having("tr") if "data-session" in r] == ["1"]


def test_the_page_shows_the_history(history: Path) -> None:
    check_page(page.render(model.gather(history, NOW)))


def test_the_page_is_self_contained_and_escapes_what_the_learner_wrote(history: Path) -> None:
    with (history / ".mlcanon" / "misslog.md").open("a") as handle:
        handle.write("- 2025-06-01 · #4 classical/knn · <img src=http://x/y.png onerror=alert(1)>\n")
    html = page.render(model.gather(history, NOW))
    found = elements(html)
    assert not found.having("img") and not found.having("script") and not found.having("link")
    assert not [attrs for _, attrs in found.tags if {"src", "href"} & set(attrs)]  # nothing to fetch
    assert "&lt;img src=http://x/y.png onerror=alert(1)&gt;" in html


def test_mlcanon_dashboard_writes_the_page(history: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["dashboard"]) == 0
    assert capsys.readouterr().out == "wrote .mlcanon/dashboard.html: 8 of 60 items attempted, 7 passed, 3 due now\n"
    check_page((history / ".mlcanon" / "dashboard.html").read_text())
    assert cli.main(["dashboard", "--out", "site/me.html"]) == 0
    assert (history / "site" / "me.html").is_file()


def test_mlcanon_dashboard_from_a_subfolder_uses_the_repos_one_state(
        history: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Run from notes/, it reads and writes the repo root's .mlcanon/: no notes/.mlcanon/ to shadow the history."""
    (history / "notes").mkdir()
    monkeypatch.chdir(history / "notes")
    assert cli.main(["dashboard"]) == 0
    assert capsys.readouterr().out == "wrote ../.mlcanon/dashboard.html: 8 of 60 items attempted, 7 passed, 3 due now\n"
    check_page((history / ".mlcanon" / "dashboard.html").read_text())
    assert not (history / "notes" / ".mlcanon").exists()
    assert cli.main(["dashboard", "--out", "me.html"]) == 0  # a typed path is from where it was typed
    assert (history / "notes" / "me.html").is_file() and not (history / "notes" / ".mlcanon").exists()
    with pytest.raises(SystemExit):
        cli.main(["dashboard", "--help"])
    assert "current directory" not in capsys.readouterr().out


def test_mlcanon_dashboard_bad_input_is_one_line_and_exit_2(history: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    (history / "site").mkdir()
    assert cli.main(["dashboard", "--out", "site"]) == 2
    assert capsys.readouterr().err == "mlcanon dashboard: --out site is a directory; name the HTML file to write\n"
    (history / ".mlcanon" / "progress.json").write_text("{not json")
    assert cli.main(["dashboard", "--out", "x.html"]) == 0  # the corrupt file is backed up and reported
    err = capsys.readouterr().err
    assert err.startswith("mlcanon: warning: ") and "progress.json.corrupt-" in err and err.count("\n") == 1


# -- in a real browser -------------------------------------------------------------------------------------

@needs_chromium
def test_a_headless_browser_renders_the_dashboard(history: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    from PIL import Image  # the test extra's pillow

    assert cli.main(["dashboard", "--out", "dashboard.html"]) == 0
    url = (history / "dashboard.html").as_uri()
    profile = tmp_path_factory.mktemp("chromium-profile")
    dom = chromium(url, "--dump-dom", profile=profile)
    assert dom.returncode == 0, dom.stderr[-2000:]
    check_page(dom.stdout)  # the DOM the browser built holds every mark, in order
    shot = history / "dashboard.png"
    taken = chromium(url, "--window-size=1400,1800", f"--screenshot={shot}", profile=profile)
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1400, 1800)
    colours = Counter({colour: count for count, colour in image.getcolors(image.width * image.height)})
    cell_area = 84 * 52
    for state, count in Counter(EXPECTED_STATES.values()).items():
        background = tuple(int(page.STATE_COLOURS[state][0][i:i + 2], 16) for i in (1, 3, 5))
        # each cell of the state is painted (text covers part of it), and no other state took its colour
        assert 0.5 * count * cell_area < colours[background] < 1.5 * count * cell_area + 2000, state
    new = tuple(int(page.STATE_COLOURS[model.State.NEW][0][i:i + 2], 16) for i in (1, 3, 5))
    assert colours[new] > 0.5 * 51 * cell_area
    white = colours[(255, 255, 255)] / (1400 * 1800)
    assert 0.4 < white < 0.95  # a page with content, not a blank or an error page
