"""Issue 17 as a learner meets it in their own repo: one state from any subfolder (17.3), strict
pytest configurations (17.4), and the installed command (17.7)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from _pytest.assertion.rewrite import AssertionRewritingHook

import pytest_mlcanon
from pytest_mlcanon import cli, progress

REPO = Path(__file__).resolve().parents[1]
GOOD = REPO / "examples" / "learners" / "good"
STRICT_PYPROJECT = '[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n'


def mlcanon(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_mlcanon.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def state_folders(root: Path) -> list[str]:
    """Every ``.mlcanon`` and ``practice`` folder under ``root``, relative to it."""
    return sorted(str(p.relative_to(root)) for name in (".mlcanon", "practice") for p in root.rglob(name))


# -- 17.3 one state per learner repo ------------------------------------------------------------------------

def test_following_the_advice_from_a_subfolder_keeps_one_state(from_subfolder: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = from_subfolder
    assert cli.main(["check", "posttrain/dpo"]) == 2
    err = capsys.readouterr().err
    assert "no practice directory at ../practice/: `mlcanon drill ITEM` creates it" in err  # the repo's, shown from here
    assert cli.main(["drill", "posttrain/dpo"]) == 0  # the advice, followed from the subfolder
    assert "edit    ../practice/posttrain/dpo.py" in capsys.readouterr().out
    assert cli.main(["stubs", "--item", "transformer/attention"]) == 0
    assert "stubs in ../practice/" in capsys.readouterr().out
    assert cli.main(["reset", "posttrain/dpo"]) == 0
    assert "reset #55 posttrain/dpo: ../practice/posttrain/dpo.py is the clean stub again" in capsys.readouterr().out
    assert cli.main(["drill", "posttrain/dpo"]) == 0
    assert cli.main(["hint", "posttrain/dpo", "--level", "2"]) == 0
    assert state_folders(root) == [".mlcanon", "practice"]
    entry = json.loads((root / ".mlcanon" / "progress.json").read_text())["items"]["posttrain/dpo"]
    assert entry["clock"]["hints"] == 2  # the hint is noted on the attempt the drill started
    assert (root / "practice" / "transformer" / "attention.py").is_file()
    capsys.readouterr()
    assert cli.main(["list", "posttrain/dpo"]) == 0
    assert "running" in capsys.readouterr().out
    assert cli.main(["misslog"]) == 0
    assert "no miss log yet (../.mlcanon/misslog.md)" in capsys.readouterr().out
    assert cli.main(["plan"]) == 0
    # the rest of the practice commands, from the subfolder too: none starts a second .mlcanon/ there
    for argv in (["today"], ["dashboard"], ["shapes", "9"], ["makefile"]):
        assert cli.main(argv) == 0, argv
    assert cli.main(["diff", "posttrain/dpo"]) == 2  # drilling, the stub untouched: nothing to diff yet
    assert "nothing written yet for #55 posttrain/dpo" in capsys.readouterr().err
    assert state_folders(root) == [".mlcanon", "practice"]
    assert (root / ".mlcanon" / "dashboard.html").is_file() and (root / "Makefile").is_file()


def test_the_nearest_drill_state_wins_over_the_git_root(from_subfolder: Path) -> None:
    notes = from_subfolder / "notes"
    (notes / ".mlcanon").mkdir()
    (notes / "deeper").mkdir()
    assert mlcanon("drill", "posttrain/dpo", cwd=notes / "deeper").returncode == 0
    assert state_folders(from_subfolder) == ["notes/.mlcanon", "notes/practice"]


def test_a_typed_practice_path_means_what_it_says_from_where_it_was_typed(
        from_subfolder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = from_subfolder
    assert cli.main(["drill", "posttrain/dpo", "--practice", "work"]) == 0
    assert (root / "notes" / "work" / "posttrain" / "dpo.py").is_file()
    assert json.loads((root / ".mlcanon" / "progress.json").read_text())["practice"] == "notes/work"
    monkeypatch.chdir(root)  # the remembered directory is the repo's notes/work from anywhere
    capsys.readouterr()
    assert cli.main(["reset", "posttrain/dpo"]) == 0
    assert "reset #55 posttrain/dpo: notes/work/posttrain/dpo.py is the clean stub again" in capsys.readouterr().out
    assert cli.main(["reset", "posttrain/dpo", "--practice", "notes/work"]) == 0
    assert not (root / "practice").exists() and not (root / "notes" / "notes").exists()


def test_a_timed_pytest_run_from_a_subfolder_finds_the_repos_practice_and_state(
        pytester: pytest.Pytester, learner, monkeypatch: pytest.MonkeyPatch) -> None:
    learner(copy=["posttrain/dpo"])
    (pytester.path / ".git").mkdir()
    (pytester.path / "notes").mkdir()
    monkeypatch.chdir(pytester.path / "notes")
    result = pytester.runpytest("--canon-item=55", "--timed", "-q", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["learner: *practice (discovered)", "*#55 posttrain/dpo attempt 1: passed in *"])
    assert state_folders(pytester.path) == [".mlcanon", "practice"]
    (attempt,) = json.loads((pytester.path / ".mlcanon" / "progress.json").read_text())["items"]["posttrain/dpo"][
        "attempts"]
    assert attempt["passed"] is True


def test_no_learner_directory_from_a_subfolder_points_at_the_repo_root(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    (pytester.path / ".git").mkdir()
    (pytester.path / "notes").mkdir()
    monkeypatch.chdir(pytester.path / "notes")
    result = pytester.runpytest("--canon-item=55")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no learner directory found under * or the repo root *: create "
                                 "../practice/<area>/<module>.py*"])


# -- 17.3 + 17.4: the scenario, end to end ------------------------------------------------------------------

def test_check_from_a_subfolder_of_a_strict_repo(git_repo: Path) -> None:
    """A repo whose pytest config turns warnings into errors; the learner works in ``notes/``."""
    (git_repo / "pyproject.toml").write_text(STRICT_PYPROJECT)
    notes = git_repo / "notes"
    notes.mkdir()
    assert mlcanon("drill", "transformer/attention", cwd=notes).returncode == 0
    shutil.copy(GOOD / "transformer" / "attention.py", git_repo / "practice" / "transformer" / "attention.py")
    checked = mlcanon("check", "transformer/attention", "-q", "-p", "no:cacheprovider", "-W", "error", cwd=notes)
    out = checked.stdout + checked.stderr
    assert checked.returncode == 0, out
    assert "#25 transformer/attention attempt 1: passed in " in out
    assert "Warning" not in out and "Traceback" not in out
    assert state_folders(git_repo) == [".mlcanon", "practice"]
    summary = progress.summarize(json.loads((git_repo / ".mlcanon" / "progress.json").read_text())["items"][
        "transformer/attention"])
    assert summary.attempts == 1 and summary.passes == 1


def test_a_check_from_a_subfolder_keeps_pytests_cache_at_the_repo_root(git_repo: Path) -> None:
    """A repo without a pytest configuration: pytest's rootdir is the folder the check runs in, and
    its cache (``.pytest_cache``, which ``--lf`` reads) went there; it belongs at the repo root, beside
    ``.mlcanon/``, whichever folder the check runs from."""
    notes = git_repo / "notes"
    notes.mkdir()
    assert mlcanon("drill", "detection/boxes", cwd=notes).returncode == 0
    boxes = (GOOD / "detection" / "boxes.py").read_text()  # a wrong box area: some tests fail
    assert "return size.prod(dim=-1)" in boxes
    boxes = boxes.replace("return size.prod(dim=-1)", "return 2 * size.prod(dim=-1)")
    (git_repo / "practice" / "detection" / "boxes.py").write_text(boxes)
    checked = mlcanon("check", "detection/boxes", "--tb=no", cwd=notes)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "rootdir: " + str(notes.resolve()) in checked.stdout  # pytest's own choice, kept
    assert not (notes / ".pytest_cache").exists()
    assert json.loads((git_repo / ".pytest_cache" / "v" / "cache" / "lastfailed").read_text())
    again = mlcanon("check", "detection/boxes", "--tb=no", "--lf", cwd=git_repo)  # the same cache from the root
    assert "run-last-failure: rerun previous" in again.stdout, again.stdout
    assert sorted(p.name for p in git_repo.rglob(".pytest_cache")) == [".pytest_cache"]


def test_pytest_may_mark_our_package_for_rewriting_after_mlcanon_imported_it(pytester: pytest.Pytester) -> None:
    """The cause of the strict-repo crash: pytest marks every top-level package of a plugin's
    distribution for assertion rewriting (a non-editable install lists ``pytest_mlcanon``) and warns
    about one imported already, as ``mlcanon check`` imports it before ``pytest.main``."""
    pytester.makepyprojecttoml(STRICT_PYPROJECT)
    hook = AssertionRewritingHook(pytester.parseconfig("-W", "error"))
    assert "pytest_mlcanon" in sys.modules
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hook.mark_rewrite("pytest_mlcanon")  # PytestAssertRewriteWarning, an error here, before the fix


# -- 17.7 install as a user would -------------------------------------------------------------------------

def test_version_comes_from_the_installed_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"mlcanon {version('pytest-mlcanon')}"
    assert version("pytest-mlcanon") == pytest_mlcanon.__version__  # one source for both


def test_the_license_is_the_one_the_metadata_names() -> None:
    from importlib.metadata import metadata

    assert "MIT" in (metadata("pytest-mlcanon")["License"] or "")
    assert (REPO / "LICENSE").read_text().startswith("MIT License")


# -- hangs and floods in learner mode-----------------------------------------------------------------------

RAG_LOOP = '''    for start in range(0, len(words), step):
        chunks.append(" ".join(words[start : start + chunk_size]))
        if start + chunk_size >= len(words):
            break
    return chunks'''


def rag_with(body: str) -> tuple[str, range]:
    """The reference RAG pipeline with ``chunk_text``'s loop replaced by ``body``; returns the source
    and the lines of ``body`` (the alarm lands on whichever the loop is at)."""
    source = (REPO / "canon_refs" / "retrieval" / "rag.py").read_text()
    assert source.count(RAG_LOOP) == 1
    first = source[:source.index(RAG_LOOP)].count("\n") + 1
    return source.replace(RAG_LOOP, body), range(first, first + body.count("\n") + 1)


def verdict_lines(output: str, verdict: str) -> set[int]:
    """The line numbers ``verdict ... (practice/retrieval/rag.py:N)`` names in ``output``."""
    return {int(n) for n in re.findall(re.escape(verdict) + r" \(practice/retrieval/rag\.py:(\d+)\)", output)}


def test_an_infinite_loop_is_a_timeout_naming_the_function_and_line(pytester: pytest.Pytester, learner) -> None:
    source, lines = rag_with('''    start = 0
    while start < len(words):  # forgot to advance start, and the list grows for ever
        chunks.append(" ".join(words[start : start + chunk_size]))
        if start + chunk_size >= len(words):
            break
    return chunks''')
    learner(files={"retrieval/rag": source})
    began = time.monotonic()
    result = pytester.runpytest("--canon-item=retrieval/rag", "--canon-test-timeout=1", "-p", "no:cacheprovider")
    assert time.monotonic() - began < 30  # one limit for the item, not one per test
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    # 1 s of CPU time, or on a machine too busy to give the loop that, 5 s of wall-clock time
    verdict = next(v for v in ("timeout: chunk_text did not return within 1 s of CPU time",
                               "timeout: chunk_text did not return within 5 s") if verdict_lines(out, v))
    (line,) = verdict_lines(out, verdict)
    assert line in lines
    result.stdout.fnmatch_lines([f"E * {verdict} (practice/retrieval/rag.py:{line})*"])
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) <= 1 and outcomes["failed"] >= 10  # the item's other tests: not run
    result.stdout.fnmatch_lines([f"not run: test_chunk_* stopped this item ({verdict} "
                                 f"(practice/retrieval/rag.py:{line}))"])
    result.stdout.fnmatch_lines(["#46 retrieval/rag  NO *"])


SLEEPS_IN_A_TRY = '''    import time

    while True:
        try:
            time.sleep(10)  # the alarm lands here, inside the try
        except {caught}:
            pass
    return chunks'''


def test_a_loop_that_swallows_every_exception_still_times_out(pytester: pytest.Pytester, learner) -> None:
    source, lines = rag_with(SLEEPS_IN_A_TRY.format(caught="Exception"))
    learner(files={"retrieval/rag": source})
    result = pytester.runpytest("--canon-item=retrieval/rag", "--canon-test-timeout=1", "-p", "no:cacheprovider",
                                "-k", "chunk_250")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert verdict_lines(out, "timeout: chunk_text did not return within 5 s") <= set(lines)
    assert "did not return within 5 s (" in out  # a sleep burns no CPU: the wall limit


def test_code_no_signal_can_stop_ends_the_run_with_the_verdict(pytester: pytest.Pytester, learner) -> None:
    source, lines = rag_with(SLEEPS_IN_A_TRY.format(caught="BaseException"))
    learner(files={"retrieval/rag": source})
    pytester.makeconftest("import pytest_mlcanon.watchdog as w\nw.GRACE_S = 1.0\n")
    result = pytester.runpytest_subprocess("--canon-item=retrieval/rag", "--canon-test-timeout=1",
                                           "-p", "no:cacheprovider", timeout=120)
    assert result.ret == 3
    err = result.stderr.str()
    assert "test_chunk_250_words_size_100_overlap_20: timeout: chunk_text did not return within 5 s" in err
    assert "could not be interrupted, so the run ends here" in err and "Thread" in err  # the stacks follow
    assert verdict_lines(err, "timeout: chunk_text did not return within 5 s") \
        <= set(lines)


def test_a_flood_of_output_is_stopped_and_cut(pytester: pytest.Pytester, learner) -> None:
    source, lines = rag_with('''    while True:
        print("debug", words[:50])
    return chunks''')
    learner(files={"retrieval/rag": source})
    result = pytester.runpytest("--canon-item=retrieval/rag", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert verdict_lines(out, "flood: chunk_text printed more than 16 MiB of output") <= set(lines)
    assert "characters cut by mlcanon" in out
    assert len(out) < 200_000  # the terminal gets the head and the tail, not 16 MiB


def test_a_timed_check_that_timed_out_is_a_failed_attempt(pytester: pytest.Pytester, learner) -> None:
    source, _ = rag_with('''    while True:
        pass
    return chunks''')
    learner(files={"retrieval/rag": source})
    with progress.session(pytester.path) as current:
        progress.start_clock(current.entry("retrieval/rag"), progress.now())
    result = pytester.runpytest("--canon-item=retrieval/rag", "--canon-test-timeout=1", "--timed", "-q",
                                "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*#46 retrieval/rag attempt 1: not passing yet*"])
    (attempt,) = json.loads((pytester.path / ".mlcanon" / "progress.json").read_text())["items"]["retrieval/rag"][
        "attempts"]
    assert attempt["passed"] is False and "correctness" in attempt["axes_failed"]


def test_a_debugger_at_work_is_not_a_hang() -> None:
    import bdb

    from pytest_mlcanon.watchdog import _debugging

    class Quiet(bdb.Bdb):  # traces like pdb, never stops
        def stop_here(self, frame):  # type: ignore[no-untyped-def]
            return False

        def break_here(self, frame):  # type: ignore[no-untyped-def]
            return False

    seen: list[bool] = []
    debugger = Quiet()
    debugger.reset()
    sys.settrace(debugger.trace_dispatch)
    try:
        seen.append(_debugging())
    finally:
        sys.settrace(None)
    assert seen == [True] and not _debugging()
