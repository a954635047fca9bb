"""From what a job's child said to a grade the parent can stand behind.

The child's frames are claims. The parent:

* takes the *expected* tests from its own reference run (the calibration): a test that never
  reported (the process exited, hung or was killed, or its report was suppressed) is a failure,
  named after what happened, and a run with one is unfinished: no correctness points at all (a
  partial run is not an attempt); a test skipped where the reference ran it is a failure;
* scores the rubric once, from its own copy of the submission's files (a root-owned snapshot the
  child never touched) and the child's ``ItemEvidence`` after this policy: from the child it takes
  only the test outcomes (which tests are probes and input checks is its own calibration's call)
  and the run-time shape trace (forging one only costs the student);
* decides correctness with its own seeded re-check: the learner's outputs on fresh inputs, compared
  here with the answers the trusted verifier computed (``compare``). A failed re-check voids the test
  credit, and one that contradicts a clean sweep of passing tests is an integrity flag (INT010); an
  item no case reaches is ``unverified`` and earns what the teacher's ``[recheck] unverified`` says;
* lists every integrity finding: the static scan's, the guard's run-time reports, a forbidden kernel
  the detector saw dispatched during the re-check (INT005), a corrupted or forged channel (INT107)
  and processes left behind (INT110).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from pytest_mlcanon import catalog, rubric
from pytest_mlcanon.evidence import EvidenceError, ItemEvidence, RecheckFailure, ShapeTrace, Status
from pytest_mlcanon.grade import integrity, text
from pytest_mlcanon.grade.compare import Context, compare, proves_nothing
from pytest_mlcanon.grade.config import GradeConfig
from pytest_mlcanon.grade.gradebook import GradedTest, ItemResult, Recheck
from pytest_mlcanon.grade.redact import batch_relative
from pytest_mlcanon.grade.runner import STALL_FACTOR, JobRun
from pytest_mlcanon.grade.text import number
from pytest_mlcanon.grade.values import TAG, CodecError, Unverifiable, decode
from pytest_mlcanon.grade.verifier import Calibration
from pytest_mlcanon.rubric.model import AXES, Finding, ItemScore, Outcome, Verdict, judge
from pytest_mlcanon.settings import Settings

_T = TypeVar("_T")
FRAME_KINDS = frozenset({"hello", "start", "phase", "collected", "outcome", "recheck", "violation", "evidence", "done",
                         "harness-error", "oversize", "limit"})


@dataclass
class Claims:
    """The child's frames, sorted by kind (all of it evidence to check, none of it trusted)."""

    notes: list[str] = field(default_factory=list)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    recheck: dict[int, dict[str, Any]] = field(default_factory=dict)
    violations: list[Finding] = field(default_factory=list)
    evidence: dict[str, ItemEvidence] = field(default_factory=dict)  # by slug
    done: bool = False
    left_running: int = 0  # processes the child says were alive in its PID namespace as it ended
    output_limit: bool = False
    harness_error: str = ""
    protocol: list[str] = field(default_factory=list)


def norm(nodeid: str) -> str:
    """``test_posttrain_dpo.py::test_x[a]`` whatever the rootdir made of the path."""
    path, sep, rest = nodeid.partition("::")
    return f"{Path(path).name}{sep}{rest}"


def test_name(nodeid: str) -> str:
    return nodeid.partition("::")[2] or nodeid


def read_frames(frames: list[dict[str, Any]]) -> Claims:
    claims = Claims()
    counts: dict[str, int] = {}
    for frame in frames:
        kind = frame.get("kind", "")
        counts[kind] = counts.get(kind, 0) + 1
        if kind not in FRAME_KINDS:
            claims.protocol.append(f"an unknown frame {str(kind)[:40]!r}")
        elif kind == "hello":
            claims.notes = [str(n)[:300] for n in frame.get("notes", []) if isinstance(n, str)]
        elif kind == "outcome":
            outcome = _decoded(Outcome.from_json, frame.get("outcome"), "a malformed test outcome", claims)
            if outcome is not None:
                claims.outcomes[norm(outcome.nodeid)] = outcome
        elif kind == "recheck" and isinstance(frame.get("index"), int):
            if frame["index"] in claims.recheck:
                claims.protocol.append("two answers to one re-check case")
            claims.recheck[frame["index"]] = frame
        elif kind == "violation":
            claims.violations.append(_violation(frame))
        elif kind == "evidence":
            evidence = _decoded(ItemEvidence.from_json, frame.get("evidence"), "malformed item evidence", claims)
            if evidence is not None and evidence.slug in claims.evidence:
                claims.protocol.append("two evidence frames for one item")
            if evidence is not None:
                claims.evidence[evidence.slug] = evidence
        elif kind == "done":
            claims.done = True
            left = frame.get("left_running")
            claims.left_running = min(left, 10_000) if isinstance(left, int) and left > 0 else 0
        elif kind == "limit":
            claims.output_limit = frame.get("name") == "output"
        elif kind == "harness-error":
            claims.harness_error = str(frame.get("error", ""))[:500]
    for kind in ("hello", "done"):
        if counts.get(kind, 0) > 1:
            claims.protocol.append(f"{counts[kind]} {kind} frames")
    return claims


def _decoded(decode: Callable[[object], _T], data: object, what: str, claims: Claims) -> _T | None:
    """A frame's payload through its codec; a payload that does not decode is a protocol problem."""
    try:
        return decode(data)
    except EvidenceError as exc:
        claims.protocol.append(f"{what} ({exc})")
        return None


def _violation(frame: dict[str, Any]) -> Finding:
    code = str(frame.get("code", ""))
    if code not in integrity.RULES or not code.startswith("INT1"):
        return integrity.finding("INT107", "", 0, f"an unknown violation code {code[:20]!r}")
    line = frame.get("line")
    return integrity.finding(code, str(frame.get("path", ""))[:300], line if isinstance(line, int) else 0,
                             str(frame.get("detail", ""))[:300])


# -- the assessment -----------------------------------------------------------------------------------------


#: How the rubric is computed from the evidence: ``rubric.score`` itself, or the same call in a
#: limited worker process (the batch passes ``WorkerPool.call``-based scoring: the files are untrusted).
Scorer = Callable[[ItemEvidence, rubric.ItemSources, Settings], ItemScore]


def assess(item: catalog.Item, impl_dir: Path, display_root: Path, run: JobRun, calibration: Calibration,
           scan_findings: list[Finding], config: GradeConfig, settings: Settings,
           scorer: Scorer = rubric.score) -> ItemResult:
    """The gradebook cell of one job that ran."""
    claims = read_frames(run.frames)
    result = ItemResult(item.slug, item.number, item.title, Status.SCORED, sandbox=claims.notes,
                        time_s=round(run.wall_s, 3), cpu_s=round(run.exit.cpu_s, 3) if run.exit else 0.0,
                        peak_mb=round(run.peak_mb, 1), max_points=config.points.item(item.slug))
    sources = rubric.ItemSources(item, impl_dir, display_root)
    result.files = [sources.display(f) for f in sources.files]
    result.status, ending = _status(run, claims, item, config)
    outcomes, result.tests = _tests(item, calibration, claims, run, result.status, ending, config)
    result.unfinished = _unfinished(result, outcomes, claims)
    result.recheck = (_recheck(item, calibration, claims, config) if result.status is not Status.ERROR
                      else Recheck("not run", "the item's code did not import, so no call could be made"))
    _mark_unverified(item, calibration, result, config)
    outcomes += [Outcome(f"re-check on a numerics probe's inputs ({i + 1})", "failed", probe=True, message=problem,
                         recheck=True)
                 for i, problem in enumerate(result.recheck.numerics)]
    result.integrity = _integrity(scan_findings, claims, run) + _dispatched(item, calibration, claims, result.files)
    broken, judged = "", None
    if result.status.scored:
        broken, judged = _score(result, sources, outcomes, claims, settings, scorer)
    _award(result, config)
    result.verdict = _verdict(result, broken or ending, judged)
    return result


def _unfinished(result: ItemResult, outcomes: list[Outcome], claims: Claims) -> int:
    """How many expected tests never reported: a run that did not finish (a timeout, a crash, an exit
    or interrupt mid-run, a killed job) is no attempt, and earns no correctness points whatever
    passed before it ended (``_award``)."""
    if not result.status.scored:
        return 0
    return sum(1 for outcome in outcomes if norm(outcome.nodeid) not in claims.outcomes)


def _status(run: JobRun, claims: Claims, item: catalog.Item, config: GradeConfig) -> tuple[Status, str]:
    """(status, what ended it) from the parent's own observations first, the child's claims last
    (a claimed import error or missing canon tests only costs the student)."""
    limits = config.limits
    where = f" (in {test_name(run.killed_in)})" if run.killed_in and run.killed_in != "starting" else ""
    if run.killed == "test":
        return Status.TIMEOUT, f"{test_name(run.killed_in)} ran over {limits.test_timeout_s:g} s of CPU time"
    if run.killed == "stalled":
        return Status.TIMEOUT, (f"{test_name(run.killed_in)} did not finish in {STALL_FACTOR * limits.test_timeout_s:g} s "
                                f"on the clock ({run.killed_cpu_s:.1f} s of CPU time)")
    if run.killed == "wall":
        return Status.TIMEOUT, f"the job ran over {limits.wall_s:g} s{where}"
    if run.killed == "memory":
        return Status.KILLED, f"memory over {limits.memory_mb} MB{where}"
    if run.killed == "channel":
        return Status.KILLED, text.clean(f"the result channel was forged or corrupted: {run.channel_error}", 300)
    if run.exit is not None and run.exit.signal == signal.SIGXCPU:
        return Status.TIMEOUT, f"CPU limit of {limits.cpu_s:g} s{where}"
    if (run.exit is not None and run.exit.signal == signal.SIGXFSZ) or claims.output_limit:
        return Status.KILLED, f"wrote more than {limits.output_mb} MB (output limit){where}"
    if claims.harness_error:
        return Status.HARNESS_ERROR, claims.harness_error
    if not claims.done:
        current = _last_started(run)
        ended = run.exit.describe() if run.exit else "no exit status"
        during = f" during {test_name(current)}" if current else ""
        return Status.CRASHED, f"the process ended{during} ({ended})"
    claimed = claims.evidence.get(item.slug)
    if claimed is not None and claimed.status is Status.ERROR:
        return Status.ERROR, claimed.detail or "the module could not be imported"
    if claimed is not None and claimed.status is Status.NO_TESTS:
        return Status.NO_TESTS, "the canon has no reference tests for this item"
    return Status.SCORED, ""


def _last_started(run: JobRun) -> str:
    for frame in reversed(run.frames):
        if frame.get("kind") in ("start", "phase"):
            return str(frame.get("test") or frame.get("name") or "")
    return ""


def _tests(item: catalog.Item, calibration: Calibration, claims: Claims, run: JobRun, status: Status, ending: str,
           config: GradeConfig) -> tuple[list[Outcome], list[GradedTest]]:
    """Every expected test with its outcome; a test that never reported is failed, and says why."""
    known = [norm(n) for n in calibration.nodeids.get(item.slug, [])]
    expected = known or list(claims.outcomes)
    stuck = norm(run.killed_in or _last_started(run)) if status.stopped else ""
    probes = {norm(n) for n in calibration.probes.get(item.slug, [])}
    contract = {norm(n) for n in calibration.contract.get(item.slug, [])}
    skips = {norm(n) for n in calibration.skipped.get(item.slug, [])}
    outcomes: list[Outcome] = []
    tests: list[GradedTest] = []
    for nodeid in expected:
        outcome = claims.outcomes.get(nodeid)
        label = said = ""  # said: what the test's line shows after its label, where the outcome's message repeats it
        if outcome is None:
            if status is Status.ERROR:
                continue
            if nodeid == stuck:
                label = str(status)
                message = ending
            else:
                label, said = "not run", ending or "no result was reported"
                message = f"not run: {ending}" if ending else said
            outcome = Outcome(nodeid, "error", probe=nodeid in probes, contract=nodeid in contract, message=message,
                              reported=False)
        elif known:  # which tests are probes and input checks is the parent's call
            outcome = replace(outcome, probe=nodeid in probes, contract=nodeid in contract)
            if outcome.outcome == "skipped" and nodeid not in skips:  # only the machine may skip a test
                outcome = replace(outcome, outcome="failed", message=f"skipped, where the reference ran it: "
                                                                     f"{outcome.message}"[:300])
        outcomes.append(outcome)
        message = text.clean(batch_relative(said or outcome.message), 300, lines=True)
        tests.append(GradedTest(test_name(nodeid), label or outcome.outcome, message, outcome.probe,
                                config.points.test_weight(test_name(nodeid)), contract=outcome.contract))
    return outcomes, tests


def _recheck(item: catalog.Item, calibration: Calibration, claims: Claims, config: GradeConfig) -> Recheck:
    """The parent's verification of the item's correctness: each case's answer compared with the
    verifier's; ``unverified`` (and the teacher's policy for it) where no case reaches the item."""
    policy = config.unverified
    if not config.recheck:
        return Recheck("unverified", "the re-check is turned off in the teacher's config", policy=policy)
    if item.slug in config.recheck_skip:
        return Recheck("unverified", "the re-check skips this item in the teacher's config", policy=policy)
    cases = calibration.cases.get(item.slug, [])
    coverage = calibration.coverage.get(item.slug, {})
    uncovered = [name for name, how in coverage.items() if how.startswith("unverified")]
    if not cases:
        why = "; ".join(f"{name}: {how.removeprefix('unverified: ')}" for name, how in coverage.items()
                        if how.startswith("unverified")) or "the reference tests make no call the re-check can carry"
        return Recheck("unverified", why[:300], unverified=uncovered, policy=policy)
    found: dict[bool, list[str]] = {False: [], True: []}  # is a probe's case -> differences
    missing = 0
    unsure: dict[str, str] = {}
    for index, case in enumerate(cases):
        answer = claims.recheck.get(index)
        if answer is None:
            missing += 1
            continue
        call = f"{_case_label(case)}(case {index + 1})"
        try:
            got = decode(answer.get("result"))
            probe = bool(case.get("probe"))
            if isinstance(got, Unverifiable) and gives_parameters(case):
                if not probe:
                    unsure.setdefault(case["function"], got.why)
                continue
            if isinstance(got, Unverifiable):  # only giving a module the verifier's parameters can fail so
                found[probe].append(f"{call}: said it could not be set up ({got.why[:120]}), where the case "
                                    "gives no module the verifier's parameters")
                continue
            context = Context.of(item.slug, case)
            problems = found[probe]
            problems += _closest(case, got, call, context)
            mutated = answer.get("mutated")
            after: dict[str, Any] = mutated if isinstance(mutated, dict) else {}
            for key, value in case["mutated"].items():
                problems += compare(decode(value), decode(after.get(key)), f"{call} {_argument(key)} after the call",
                                    context.for_argument())
        except CodecError as exc:
            claims.protocol.append(f"an undecodable re-check answer ({exc})")
            found[False].append(f"{call}: the answer could not be decoded")
    check = _verdict_of_cases(cases, found[False], missing, unsure, uncovered, policy)
    check.numerics = found[True][:4]
    return check


def _closest(case: dict[str, Any], got: Any, call: str, context: Context) -> list[str]:
    """The differences of ``got`` from the reference's answer, or none where it matches the answer under
    another choice the function's contract accepts (``recheck.CHOICES``: the sample std for the population
    std that normalises PPO's advantages)."""
    problems = compare(decode(case["expected"]), got, call, context)
    for other in case.get("alternatives", []) if problems else []:
        if not compare(decode(other), got, call, context):
            return []
    return problems


def _mark_unverified(item: catalog.Item, calibration: Calibration, result: ItemResult, config: GradeConfig) -> None:
    """On an item whose re-check passed, mark each test that makes a call (itself, or through a fixture) of a
    kind no case verified (``Recorder.held``): the child alone says it passed, so ``_award`` pays it by the
    policy, and the re-check names what it holds (``held``)."""
    check = result.recheck
    if check.status != "passed":
        return
    held: dict[str, set[str]] = {}
    for nodeid, names in calibration.held.get(item.slug, {}).items():
        held.setdefault(test_name(norm(nodeid)), set()).update(names)
    for test in result.tests:
        test.unverified = test.name in held and _earns_points(test, config)
    check.held = sorted({name for test in result.tests if test.unverified and test.outcome == "passed"
                         for name in held[test.name]})
    check.policy = config.unverified if check.held or check.unverified else ""


def gives_parameters(case: dict[str, Any]) -> bool:
    """Whether the case gives a module the verifier's parameters (its script's object, or an ``instance``
    among its inputs): the one setup a submission can fail with ``unverifiable`` (its parameters are
    named otherwise). Any other case can always be run, so that answer is a forged excuse, a difference."""
    if case.get("kind") == "script" and case.get("state") is not None:
        return True
    stack: list[Any] = [case.get("init"), case.get("steps")]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, dict):
            if value.get(TAG) == "instance" and value.get("state") is not None:
                return True
            stack.extend(value.values())
    return False


def _verdict_of_cases(cases: list[dict[str, Any]], problems: list[str], missing: int, unsure: dict[str, str],
                      uncovered: list[str], policy: str) -> Recheck:
    """The re-check's status from the differences on the correctness cases (the probes' are Numerics')."""
    if missing:
        return Recheck("not run", f"{missing} of {len(cases)} calls never answered", len(cases), problems[:4])
    if problems:
        return Recheck("failed", f"{len(problems)} difference(s) on fresh inputs", len(cases), problems[:4])
    # a case whose answer is an object compared by its type's name only (a Value) verifies nothing
    verified = sum(1 for c in cases if c["function"] not in unsure and not c.get("probe") and not proves_nothing(c))
    names = uncovered + sorted(unsure)
    if not verified or unsure:  # a module the verifier could not give its parameters: the item is unverified
        # for this student (README), whatever else passed: its own layers are what the tests would vouch for
        hollow = next((held for c in cases if not c.get("probe") and (held := proves_nothing(c))), "")
        why = "; ".join(f"{k}: {v}" for k, v in unsure.items()) or hollow or "only numerics probes' calls reach it"
        return Recheck("unverified", why[:300], len(cases), unverified=names, policy=policy)
    tail = f"; not verified: {', '.join(names)}" if names else ""
    return Recheck("passed", f"{verified} calls agree with the reference on fresh inputs{tail}"[:300], len(cases),
                   unverified=names)


def _case_label(case: dict[str, Any]) -> str:
    if case.get("kind") == "script":
        return f"{case['function']}.{'/'.join(dict.fromkeys(step['method'] for step in case['steps']))}"
    return str(case["function"])


def _argument(key: str) -> str:
    if key == "state":
        return "its parameters"
    if key == "fitted":
        return "its fitted attributes"
    name = key.removeprefix("init.")
    prefix = "constructor argument" if key.startswith("init.") else "argument"
    return f"{prefix} {name}"


def _dispatched(item: catalog.Item, calibration: Calibration, claims: Claims, files: list[str]) -> list[Finding]:
    """INT005 for each forbidden shortcut the job's detector saw run during a re-check case (by its
    kernels or its code, whatever name reached it)."""
    cases = calibration.cases.get(item.slug, [])
    found: dict[str, str] = {}
    for index, answer in sorted(claims.recheck.items()):
        hits = answer.get("forbidden")
        for name in hits if isinstance(hits, list) else []:
            if name in item.forbidden and name not in found:
                label = _case_label(cases[index]) if 0 <= index < len(cases) else "a re-check case"
                found[name] = f"`{name}` ran during the re-check of {label}"
    return [integrity.finding("INT005", files[0] if files else "", 0, detail) for detail in found.values()]


def _integrity(scan_findings: list[Finding], claims: Claims, run: JobRun) -> list[Finding]:
    """The flags, what the job did first (a forged channel, a blocked act, a process left behind), then
    what the scan read in its files: the verdict names the first (the third fresh-teacher trial saw a
    forged result listed as '+1 more' after a static import of os)."""
    problems = claims.protocol + ([run.channel_error] if run.channel_error else [])
    found = [integrity.finding("INT107", "", 0, problem) for problem in dict.fromkeys(problems)]
    found += claims.violations
    leftovers = max(run.leftovers, claims.left_running)
    if leftovers:
        found.append(integrity.finding("INT110", "", 0, f"{leftovers} process(es) still ran after the job "
                                                        "ended; all were killed"))
    return found + list(scan_findings)


def _score(result: ItemResult, sources: rubric.ItemSources, outcomes: list[Outcome], claims: Claims,
           settings: Settings, scorer: Scorer) -> tuple[str, Verdict | None]:
    """Score the rubric once, from the parent's files and the evidence it trusts: the outcomes of
    ``_tests``, the child's shape trace, and its own re-check, which voids the tests' credit when it
    failed or never answered. Returns why the item could not be scored ('' when it was) and its
    verdict."""
    item = sources.item
    claimed = claims.evidence.get(item.slug)
    check = result.recheck
    voided = check.status in ("failed", "not run")
    evidence = ItemEvidence(
        item.slug, result.status, files=tuple(sources.files), outcomes=tuple(outcomes),
        shapes=claimed.shapes if claimed is not None else ShapeTrace(),
        recheck=RecheckFailure(check.status, tuple(check.problems) or (check.detail,)) if voided else None)
    try:
        score = scorer(evidence, sources, settings)
    except Exception as exc:  # noqa: BLE001 - the grader must survive whatever the files contain
        result.status = Status.ERROR
        return f"the rubric could not score this item: {type(exc).__name__}: {exc}", None
    tests = [o for o in outcomes if not o.probe]
    clean = any(o.outcome == "passed" for o in tests) and not any(o.failed for o in tests)
    if check.status == "failed" and clean:
        detail = "; ".join(check.problems) or check.detail
        result.integrity.append(integrity.finding("INT010", result.files[0] if result.files else "", 0, detail[:200]))
    result.axes = {axis: score.axes[axis].passed for axis in AXES}
    result.score = score.score
    result.findings = score.findings
    result.notes = [note for axis in AXES for note in score.axes[axis].notes]
    return "", judge(score.axes)


def _award(result: ItemResult, config: GradeConfig) -> None:
    """Points: each axis's share of the item; correctness split over the tests by weight, and only for a
    run that finished (every expected test reported; a job stopped by a limit, or one that exited or
    was interrupted mid-run, earns none: a partial run is not an attempt)."""
    points = config.points
    full = result.max_points
    result.axis_points = {axis: 0.0 for axis in AXES}
    result.axis_max = {axis: round(full * points.share(axis), 4) for axis in AXES}
    check = result.recheck
    finished = result.status is Status.SCORED and not result.unfinished
    graded = [t for t in result.tests if _earns_points(t, config)]
    total = sum(t.weight for t in graded)
    for test in graded:
        test.max_points = full * points.share("correctness") * test.weight / total if total else 0.0
        held = check.status == "unverified" or test.unverified  # the child's word only: the policy's call
        vouched = check.policy == "award" if held else check.status == "passed"
        test.points = test.max_points if finished and test.outcome == "passed" and vouched else 0.0
    result.axis_points["correctness"] = sum(t.points for t in graded)
    if finished and check.policy == "review" and check.status in ("passed", "unverified"):
        check.withheld = round(sum(t.max_points for t in result.held_tests()), 4)
    for axis in AXES[1:]:
        result.axis_points[axis] = full * points.share(axis) if result.axes.get(axis) else 0.0
    if result.flagged and config.on_flag == "zero":
        for test in graded:
            test.points = 0.0
        result.axis_points = {axis: 0.0 for axis in AXES}
    result.points = round(sum(result.axis_points.values()), 4)


def _earns_points(test: GradedTest, config: GradeConfig) -> bool:
    """Whether a test carries correctness points: not a numerics probe, not skipped by the machine, not an
    input check while the rubric's contract is advice."""
    return (not test.probe and test.outcome != "skipped"
            and not (test.contract and not config.settings().contract_required))


def _verdict(result: ItemResult, ending: str, judged: Verdict | None) -> str:
    """One line: the flag first when there is one, then what happened."""
    base = result.outcome = _outcome_line(result, ending, judged)
    if not result.flagged:
        return base
    first = result.integrity[0]
    more = f" (+{len(result.codes) - 1} more)" if len(result.codes) > 1 else ""
    where = f" at {first.where}" if first.path else ""
    return text.clean(f"flagged: {first.code} {integrity.RULES[first.code].title}{where}{more}; {base}", 400)


def _outcome_line(result: ItemResult, ending: str, judged: Verdict | None) -> str:
    """``no 4/5: correctness failed (8 of 39 tests failed)`` for a scored item (and what its unverified
    correctness earned), else what stopped it."""
    if result.status is Status.SCORED and result.score is not None and judged is not None:
        line = judged.with_score(result.score)
        if result.unfinished:
            line += f"; {_unfinished_line(result.unfinished, len(result.tests))}"
        elif result.recheck.status == "unverified":
            line += f"; {_unverified_line(result.recheck)}"
        elif partly := result.held_tests():
            line += f"; {_partly_line(result.recheck, len(partly))}"
        return text.clean(line, 300)
    passed = result.tests_count("passed")
    tail = f"; {passed} of {len(result.tests)} tests had passed" if result.tests else ""
    if result.status.stopped:
        tail += f"; {_unfinished_line(result.unfinished, len(result.tests))}"
    return text.clean(f"{result.status}: {batch_relative(ending)}{tail}", 300)  # an import error names the job's
    # folder (the third fresh-teacher trial)


def _unfinished_line(never: int, tests: int) -> str:
    """Why a run that did not finish earned no correctness points."""
    counted = f" ({never} of {tests} tests never reported)" if never else ""
    return f"no correctness points: the run did not finish{counted}"


def _unverified_line(check: Recheck) -> str:
    earned = {"award": "awarded as the tests claim", "zero": "no points",
              "review": f"{number(check.withheld)} points held for review"}.get(check.policy, "")
    return f"correctness unverified ({earned}): {check.detail}"


def _partly_line(check: Recheck, tests: int) -> str:
    earned = {"award": "awarded as the tests claim", "zero": "no points for them",
              "review": f"{number(check.withheld)} points held for review"}.get(check.policy, "")
    names = ", ".join(check.held)
    called = f"one of {names}" if len(check.held) > 1 else names
    return (f"correctness partly verified: {tests} passing test(s) call {called} in a way no fresh-input case "
            f"checks ({earned})")


def not_run(item: catalog.Item, status: Status, message: str, config: GradeConfig) -> ItemResult:
    """The cell of an item that never ran: not attempted, no tests, or a grader failure."""
    line = text.clean(f"{status}: {batch_relative(message)}", 400)
    return ItemResult(item.slug, item.number, item.title, status, verdict=line, outcome=line,
                      max_points=config.points.item(item.slug))
