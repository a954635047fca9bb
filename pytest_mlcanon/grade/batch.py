"""One batch of ``mlcanon grade``: from a submissions folder to a gradebook.

1. find the submissions (``discover``) and keep this shard's share (``shard``);
2. copy each student's ``<area>/<module>.py`` files into a root-only snapshot (``snapshot``): the
   parent scans (``scan``) and later scores exactly these bytes, whatever a job does to its own
   working copy; the scan and the scoring run in limited worker processes (``worker``), since the
   files are untrusted input to them;
3. start the zygote (it imports torch and compiles the tests, never a reference) and the verifier (a
   separate trusted process: its reference run gives the expected tests and the re-check cases, which
   the parent keeps in memory);
4. run every (student, item) job on ``workers`` threads, each in a fresh job folder (a read-only
   working copy, a scratch folder, a trusted ``pytest.ini``) under a sandbox uid of its own;
5. assess each job (``assess``) into its gradebook cell; a job that fails for any reason becomes a
   one-line verdict and the batch goes on.

Every per-student step (the snapshot, the scan, the job, the assessment) is fenced: what goes wrong
in it becomes that student's ``error`` (or ``harness error``) verdict, never the batch's end. Every
cell is ``gradebook.cleaned`` before it is kept, so no output shows a control character a submission
chose.
"""

from __future__ import annotations

import functools
import os
import queue
import secrets
import shutil
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_mlcanon import catalog, rubric, stubs
from pytest_mlcanon.evidence import Status
from pytest_mlcanon.grade import (
    answers,
    discover,
    forbidden,
    interrupt,
    recheck,
    sandbox,
    scan,
    snapshot,
    uids,
    verifier,
)
from pytest_mlcanon.grade import shard as shard_mod
from pytest_mlcanon.grade.assess import assess, not_run
from pytest_mlcanon.grade.child import JobRequest
from pytest_mlcanon.grade.config import GradeConfig, workers
from pytest_mlcanon.grade.gradebook import Gradebook, ItemResult, StudentResult, cleaned
from pytest_mlcanon.grade.progress import Progress
from pytest_mlcanon.grade.runner import STALL_FACTOR, JobRun, Limits, Zygote, run_job
from pytest_mlcanon.grade.sandbox import SandboxSpec
from pytest_mlcanon.grade.text import clean, readable
from pytest_mlcanon.grade.verifier import Calibration
from pytest_mlcanon.grade.worker import WorkerError, WorkerPool
from pytest_mlcanon.impl import Impl
from pytest_mlcanon.layout import tests_dir
from pytest_mlcanon.redirect import reference_dir
from pytest_mlcanon.rubric.model import Finding

#: The grader's own folder in the batch's root: the zygote's and the verifier's logs and scratch, 0700.
PRIVATE = "private"
#: How long an interrupted batch waits for its workers to kill and sweep their running jobs.
STOP_S = 30.0


class BatchError(RuntimeError):
    """The batch cannot run at all (no zygote, no calibration); the message says why."""


@dataclass
class Job:
    index: int
    student: str
    item: catalog.Item
    snapshot: Path
    scan: list[Finding]


def grade(submissions: Path, config: GradeConfig, *, shard: tuple[int, int] | None = None,
          progress: bool = True, on_result: Callable[[str, ItemResult], None] | None = None,
          seed: int | None = None, keep: Mapping[tuple[str, str], ItemResult] | None = None,
          only: Collection[str] | None = None, on_calibrated: Callable[[Calibration], None] | None = None,
          on_start: Callable[[], None] | None = None) -> Gradebook:
    """Grade every submission under ``submissions`` (this shard's share) on ``config.items``.

    ``seed`` overrides the config's (else a new one); ``keep`` holds cells already graded (a resumed
    batch: their jobs do not run); with ``only``, only those students' jobs run, and a cell neither
    kept nor run is ``not graded (interrupted)``. ``on_start()`` runs once the batch is sure to run
    (its submissions found, its sandbox probed), ``on_result(student, cell)`` sees each assessed job and
    ``on_calibrated`` the reference run, before any job starts (it may refuse the batch by raising).

    Interrupted (``interrupt.Interrupted``, or Ctrl-C without a trap), the batch kills its running
    jobs, keeps what finished, and returns the gradebook with every other cell ``not graded
    (interrupted)``; interrupted before it knew its students, it raises."""
    if not sys.platform.startswith("linux"):
        raise BatchError("mlcanon grade needs Linux (/proc, namespaces, resource limits)")
    started = time.monotonic()
    graded_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if not config.assignment:
        config = replace(config, assignment=readable(submissions.resolve().name))
    items = catalog.select(config.items)
    subs = discover.find(submissions, items, single=config.single)
    if shard is not None:
        subs = shard_mod.select(subs, *shard)
    unknown = sorted(set(only or ()) - {sub.student for sub in subs})
    if unknown:
        raise BatchError(f"--only: no submission of {', '.join(unknown)} in {readable(str(submissions))}"
                         f"{' (this shard)' if shard else ''}")
    keep = dict(keep or {})
    seed = seed if seed is not None else config.seed if config.seed is not None else secrets.randbits(31)
    settings = config.settings()
    students = [StudentResult(sub.student, readable(str(sub.folder)), readable(str(sub.impl or "")),
                              clean(sub.problem, 400)) for sub in subs]
    cells: dict[tuple[str, str], ItemResult] = {}
    count = 0
    notes: list[str] = []
    confinement: sandbox.Confinement | None = None
    warm: _Warm | None = None
    undumpable = False
    pool: WorkerPool | None = None
    uid_pool: uids.UidPool | None = None
    root = Path(tempfile.mkdtemp(prefix="mlcanon-grade-"))
    try:
        try:
            os.chmod(root, 0o711)  # the jobs' folders are inside; nothing else in it is readable by a job
            (root / PRIVATE).mkdir(mode=0o700)
            undumpable = _undumpable()  # the calibration will be in this process's memory: no same-user reader
            pool = WorkerPool(workers(config))
            uid_pool = uids.UidPool(config.uid_base, workers(config)) if os.geteuid() == 0 and config.user else None
            confinement = probe(root, config, uid_pool, items)
            if on_start is not None:
                on_start()
            if any(sub.impl is not None for sub in subs):
                warm = _Warm(root, items, seed, config)  # the zygote imports torch and calibrates meanwhile
            jobs, slots = _plan(subs, students, cells, items, root / "snapshots", config, pool, keep, only)
            count = min(workers(config), max(1, slots))  # as many as the whole class's jobs would have
            if warm is not None and (jobs or keep):  # a resumed batch checks its reference run too
                notes = _run_all(jobs, cells, root, warm, config, settings, count, confinement.mode != "none",
                                 Progress(len(jobs), enabled=progress), on_result, pool, uid_pool, on_calibrated)
        except (interrupt.Interrupted, KeyboardInterrupt):
            pass  # the jobs that finished are in ``cells``; the rest are marked not graded below
    finally:
        with interrupt.held():  # the sandbox users, their processes and the job folders go, whatever comes
            if warm is not None:
                warm.close()
            if pool is not None:
                pool.close()
            if uid_pool is not None:
                uid_pool.close()
            remove_tree(root)
            if undumpable:
                _set_dumpable(True)
    unsandboxed = confinement.missing if confinement is not None else []
    for student in students:
        student.items = [_marked(cells.get((student.student, item.slug)) or not_graded(item, config), unsandboxed)
                         for item in items]
    sandbox_notes = [*(confinement.notes if confinement is not None else []), _time_limits(config), _policy(config)]
    if unsandboxed:
        sandbox_notes = [f"UNSANDBOXED (--unsafe-no-sandbox): missing walls, which a job could reach past: "
                         f"{'; '.join(unsandboxed)}", *sandbox_notes]
    return Gradebook([i.slug for i in items], {i.slug: i.title for i in items}, students, [seed],
                     [f"{shard[0]}/{shard[1]}"] if shard else [], sandbox_notes, notes, config.to_dict(),
                     round(time.monotonic() - started, 2), count, unsandboxed=list(unsandboxed),
                     graded_at=graded_at)



PR_SET_DUMPABLE = 4


def _undumpable() -> bool:
    """Make this process undumpable while it holds the calibration: without root, the jobs run as
    its user, and another process of a user may read a dumpable process's memory (``/proc/PID/mem``,
    ``ptrace``). Returns whether it was done (restored when the batch ends)."""
    return _set_dumpable(False)


def _set_dumpable(dumpable: bool) -> bool:
    import ctypes

    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, int(dumpable), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _marked(cell: ItemResult, unsandboxed: list[str]) -> ItemResult:
    """A cell of an unsandboxed batch says so in its verdict (so in every output and row, a cell that
    did not run included) and its notes."""
    if not unsandboxed:
        return cell
    cell.verdict = f"unsandboxed; {cell.verdict}"
    cell.outcome = f"unsandboxed; {cell.outcome}"
    cell.sandbox = [f"unsandboxed: {', '.join(unsandboxed)}", *cell.sandbox]
    return cell


def _plan(subs: list[discover.Submission], students: list[StudentResult], cells: dict[tuple[str, str], ItemResult],
          items: tuple[catalog.Item, ...], snapshots: Path, config: GradeConfig, pool: WorkerPool,
          keep: Mapping[tuple[str, str], ItemResult], only: Collection[str] | None) -> tuple[list[Job], int]:
    """Snapshot and scan every submission; fill ``cells`` with the items that will not run (and the
    ``keep`` cells of jobs already graded); returns the jobs to run and the class's number of jobs
    (kept ones, and those ``only`` leaves out, included). The scans run side
    by side on the pool's workers, so a file that takes a scan to its deadline holds up one worker,
    not the class. ``cells`` fills as it goes: an interrupted plan keeps what it decided."""
    snapshots.mkdir(mode=0o700)
    wanted: list[tuple[int, str, catalog.Item, Path]] = []
    slots = 0  # the class's jobs, kept ones included: a job's number is its place among them, resumed or not
    for sub, student in zip(subs, students):
        if sub.impl is None:
            for item in items:
                cells[(sub.student, item.slug)] = cleaned(not_run(item, Status.NOT_ATTEMPTED, sub.problem, config))
            continue
        folder = snapshots / sub.student
        try:
            skipped = snapshot.take(sub.impl, folder, sub.placed)
        except Exception as exc:  # noqa: BLE001 - one student's files never stop the batch
            for item in items:
                cells[(sub.student, item.slug)] = cleaned(not_run(
                    item, Status.ERROR, f"the files could not be copied: {type(exc).__name__}: {exc}", config))
            continue
        if skipped:
            more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
            student.problem = clean(f"files not graded: {', '.join(skipped[:5])}{more}", 600)
        for item in items:
            key = (sub.student, item.slug)
            impl = Impl(folder, "--impl")
            missing = impl.missing_modules(item)
            stub = "" if missing else still_stub(impl, item)
            if missing:
                cells[key] = not_run(item, Status.NOT_ATTEMPTED, _absent(missing, skipped), config)
            elif stub:
                cells[key] = not_run(item, Status.NOT_IMPLEMENTED, stub, config)
            else:
                slots += 1
                if key in keep:
                    cells[key] = keep[key]
                elif only is None or sub.student in only:
                    wanted.append((slots, sub.student, item, folder))
    jobs: list[Job] = []
    with ThreadPoolExecutor(max_workers=pool.size, thread_name_prefix="mlcanon-scan") as scans:
        futures = [scans.submit(pool.call, scan.scan, item, folder, snapshots) for _, _, item, folder in wanted]
        for (number, student_id, item, folder), future in zip(wanted, futures):
            try:
                found = future.result()
            except WorkerError as exc:
                cells[(student_id, item.slug)] = cleaned(not_run(
                    item, Status.ERROR, f"the files could not be read for the integrity scan: {exc}", config))
                continue
            jobs.append(Job(number, student_id, item, folder, found))
    return jobs, slots


def not_graded(item: catalog.Item, config: GradeConfig) -> ItemResult:
    """The cell of a job the batch did not finish (it was interrupted, or ``--only`` left it out)."""
    return not_run(item, Status.INTERRUPTED, "the batch stopped before this job finished; "
                   "mlcanon grade --resume grades it", config)


def _absent(missing: tuple[str, ...], skipped: list[str]) -> str:
    """Why an item's modules are not there: ``no posttrain/dpo.py``, or, for a file the snapshot
    refused, what it is (``detection/boxes.py is not graded (a FIFO)``)."""
    def one(module: str) -> str:
        refused = next((s for s in skipped if s.startswith(f"{module}.py (")), None)
        return f"{module}.py is not graded {refused[len(module) + 4:]}" if refused else f"no {module}.py"

    return "; ".join(one(m) for m in missing)


def still_stub(impl: Impl, item: catalog.Item) -> str:
    """Why ``item`` is not implemented yet in ``impl`` although its files are there: every one is still
    the stub ``mlcanon stubs`` wrote (its docstrings are the reference's, worth nothing); else ''. One
    test with the learner's run (``stubs.all_unimplemented``); a file too deep to parse goes on to the
    job and the scan, which say what is wrong with it."""
    if stubs.all_unimplemented(impl.files(item)):
        return f"{', '.join(f'{m}.py' for m in item.modules)} still the stub (every function raises NotImplementedError)"
    return ""


class _Warm:
    """The zygote and the verifier, started on a thread of their own while the parent snapshots and
    scans the class: the zygote imports torch and compiles the items' tests; the verifier, a separate
    process, runs the reference tests (the calibration) and builds the re-check cases."""

    def __init__(self, root: Path, items: tuple[catalog.Item, ...], seed: int, config: GradeConfig) -> None:
        self.zygote: Zygote | None = None
        self.calibration: Calibration | None = None
        self.error: BaseException | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._start, args=(root, items, seed, config), name="mlcanon-warm",
                                        daemon=True)
        self._thread.start()

    def _start(self, root: Path, items: tuple[catalog.Item, ...], seed: int, config: GradeConfig) -> None:
        try:
            try:
                self.zygote = Zygote(root, wait=False, private=root / PRIVATE)
            finally:
                self._started.set()
            self.calibration = _calibrate(root, items, seed, config)
            self.zygote.wait_ready()
            self.zygote.warm(_test_files(items), dispatch=any(forbidden.uses_dispatch(i.forbidden) for i in items),
                             references=readable_references(items))
        except BaseException as exc:  # noqa: BLE001 - re-raised on the main thread by ``ready``
            self.error = exc

    def ready(self) -> tuple[Zygote, Calibration]:
        """The warm zygote and the calibration; raises what went wrong (as ``BatchError``)."""
        self._thread.join()
        if self.error is not None:
            if isinstance(self.error, (BatchError, KeyboardInterrupt, SystemExit)):
                raise self.error
            raise BatchError(f"the zygote could not start: {self.error}") from self.error
        if self.zygote is None or self.calibration is None:
            raise BatchError("the zygote was stopped before the batch began")
        return self.zygote, self.calibration

    def close(self) -> None:
        """Stop the zygote, at once if it is still starting (the batch was interrupted)."""
        self._started.wait()
        busy = self._thread.is_alive()
        zygote, self.zygote = self.zygote, None
        if zygote is not None:
            zygote.close(now=busy)
        self._thread.join()



def readable_references(items: tuple[catalog.Item, ...]) -> list[str]:
    """The reference modules every job of the batch may read (its sandbox hides only its item's own):
    every one but the ``items``' modules, which the zygote may compile for the jobs (never import)."""
    base = reference_dir()
    hidden = {base / f"{module}.py" for item in items for module in answers.answer_modules(item)}
    return [str(path) for path in sorted(base.rglob("*.py")) if path not in hidden and "__pycache__" not in path.parts]


def _test_files(items: tuple[catalog.Item, ...]) -> list[str]:
    base = tests_dir()
    return [str(base / "conftest.py"), *dict.fromkeys(str(base / name) for item in items for name in item.test_files)]


def _run_all(jobs: list[Job], cells: dict[tuple[str, str], ItemResult], root: Path, warm: _Warm, config: GradeConfig,
             settings: Any, count: int, namespaces: bool, bar: Progress,
             on_result: Callable[[str, ItemResult], None] | None,
             pool: WorkerPool, uid_pool: uids.UidPool | None,
             on_calibrated: Callable[[Calibration], None] | None = None) -> list[str]:
    """Wait for the calibrated zygote and run the jobs on ``count`` workers (in namespaces of their own
    unless the probe found none to make, ``namespaces``); returns the batch's notes.

    Interrupted, it stops: no worker takes a new job, each running job is killed and swept as on a
    timeout (and not assessed), the runs that had finished are assessed and kept; then it re-raises.
    Nothing reaches ``cells`` (or ``on_result``) once it has returned."""
    lock = threading.Lock()
    pending: queue.Queue[Job] = queue.Queue()
    stop = threading.Event()
    closed = False

    def record(job: Job, cell: ItemResult) -> None:
        cell = cleaned(cell)
        with lock:
            if closed:
                return
            cells[(job.student, job.item.slug)] = cell
            bar.advance(f"{job.student} {job.item.slug}: {cell.verdict}")
            if on_result is not None:
                on_result(job.student, cell)

    try:
        zygote, calibration = warm.ready()
        if on_calibrated is not None:
            on_calibrated(calibration)
        runner = _Runner(zygote, root, root / "snapshots", calibration, config, settings, uid_pool, workers_pool=pool,
                         stop=stop, namespaces=namespaces)
        for job in jobs:
            pending.put(job)
        results: list[Future[None]] = []
        with ThreadPoolExecutor(max_workers=count, thread_name_prefix="mlcanon-assess") as assessor:
            threads = [threading.Thread(target=runner.work, args=(pending, assessor, results, record), daemon=True)
                       for _ in range(count)]
            for thread in threads:
                thread.start()
            try:
                for thread in threads:
                    thread.join()
            except BaseException:
                stop.set()  # interrupted (Ctrl-C, SIGTERM): the workers take no new job and kill their running one
                _drain(pending)
                with interrupt.held():
                    for thread in threads:
                        thread.join(timeout=STOP_S)
                raise
        for result in results:
            result.result()
        return _reference_notes(calibration)
    finally:
        with lock:
            closed = True
        bar.close()
        warm.close()  # kills a child still running (the batch was interrupted) and stops the zygote


def _drain(pending: queue.Queue[Job]) -> None:
    while True:
        try:
            pending.get_nowait()
        except queue.Empty:
            return


def _calibrate(root: Path, items: tuple[catalog.Item, ...], seed: int, config: GradeConfig) -> Calibration:
    """The verifier's reference run, in the grader's private folder; its result stays in memory."""
    folder = root / PRIVATE / "calibration"
    folder.mkdir(mode=0o700)
    ini = folder / "pytest.ini"
    ini.write_text(_ini(config), encoding="utf-8")
    try:
        return verifier.calibrate(
            root / PRIVATE, timeout=config.limits.wall_s * len(items) + 300, items=",".join(i.slug for i in items),
            seed=seed, skip=list(config.recheck_skip), recheck=config.recheck, dir=str(folder), ini=str(ini),
            tests_dir=str(tests_dir()), options=[])
    except verifier.VerifierError as exc:
        raise BatchError(str(exc)) from exc


def _reference_notes(calibration: Calibration) -> list[str]:
    notes = []
    for slug, failed in calibration.failed.items():
        if failed:
            notes.append(f"{slug}: the reference itself fails {len(failed)} test(s) on this machine "
                         f"({', '.join(f.split('::')[-1] for f in failed[:3])}); every student fails them too")
    for slug, nodeids in calibration.nodeids.items():
        if not nodeids:
            notes.append(f"{slug}: the reference run collected no test")
    return notes


def _ini(config: GradeConfig) -> str:
    """A trusted ini file: the teacher's rubric settings as ``mlcanon_<key>`` ini keys, nothing else.

    Line coverage of the learner's files is off unless the teacher turns it on: the parent grades
    from its own rubric and takes only test outcomes and run-time shapes from a child, so a job would
    measure it for nothing (coverage.py's tracer cost ~0.3 s CPU per DPO job). A job grades exactly
    its own items (``whole_module`` off: the teacher chose them)."""
    lines = ["[pytest]"]
    rubric = {"coverage": False, "whole_module": False, **config.rubric}
    for key, value in rubric.items():
        text = ",".join(map(str, value)) if isinstance(value, list) else str(value).lower() if isinstance(
            value, bool) else str(value)
        lines.append(f"mlcanon_{key} = {text}")
    return "\n".join(lines) + "\n"


class _Runner:
    """The work of the worker threads (prepare a job folder, run the job, clean up) and of the
    assessor threads (turn a finished run into its gradebook cell)."""

    def __init__(self, zygote: Zygote, root: Path, snapshots: Path, calibration: Calibration, config: GradeConfig,
                 settings: Any, pool: uids.UidPool | None, workers_pool: WorkerPool,
                 stop: threading.Event | None = None, namespaces: bool = True) -> None:
        self.zygote = zygote
        self.namespaces = namespaces
        self.stop = stop or threading.Event()
        self.root = root
        self.snapshots = snapshots
        self.calibration = calibration
        self.config = config
        self.settings = settings
        self.pool = pool
        self.scorer = functools.partial(workers_pool.call, rubric.score)
        self.limits = Limits(config.limits.wall_s, config.limits.test_timeout_s, config.limits.memory_mb)

    def work(self, pending: queue.Queue[Job], assessor: ThreadPoolExecutor, results: list[Future[None]],
             record: Callable[[Job, ItemResult], None]) -> None:
        """A worker thread: run jobs until none is left. Each finished run is handed to ``assessor``
        once the next job's child is forked: the assessment (the rubric, pure Python) would otherwise
        hold the GIL while this thread prepares the next job folder and asks the zygote to fork."""
        finished: list[tuple[Job, JobRun]] = []

        def hand_over() -> None:
            while finished:
                done, run = finished.pop()
                try:
                    results.append(assessor.submit(self.assess, done, run, record))
                except RuntimeError:  # the batch was interrupted and the assessor shut down
                    return

        try:
            while not self.stop.is_set():
                try:
                    job = pending.get_nowait()
                except queue.Empty:
                    return
                uid = self.pool.acquire() if self.pool is not None else None
                try:
                    run = self.run(job, uid, on_forked=hand_over)
                    if run.killed != "interrupted":  # a job the batch's end killed is not graded
                        finished.append((job, run))
                except Exception as exc:  # noqa: BLE001 - one job's failure never stops the batch
                    if not self.stop.is_set():  # the batch's end may break a job: it is then not graded
                        record(job, not_run(job.item, Status.HARNESS_ERROR, f"{type(exc).__name__}: {exc}",
                                            self.config))
                finally:
                    if self.pool is not None and uid is not None:
                        self.pool.release(uid)
        finally:
            hand_over()

    def assess(self, job: Job, run: JobRun, record: Callable[[Job, ItemResult], None]) -> None:
        try:
            cell = assess(job.item, job.snapshot, self.snapshots, run, self.calibration, job.scan, self.config,
                          self.settings, self.scorer)
        except Exception as exc:  # noqa: BLE001 - one job's failure never stops the batch
            cell = not_run(job.item, Status.HARNESS_ERROR, f"assessing: {type(exc).__name__}: {exc}", self.config)
        record(job, cell)

    def run(self, job: Job, uid: int | None, on_forked: Callable[[], None] | None = None) -> JobRun:
        """Run one job in a fresh job folder, removed afterwards."""
        job_dir = self.root / f"job-{job.index:04d}"
        work, scratch, ini = self._prepare(job, job_dir, uid)
        limits = self.config.limits
        hidden = reference_files(job.item)
        spec = SandboxSpec(str(job_dir), str(work), str(scratch), uid, uid, self.config.network,
                           self.config.filesystem, limits.cpu_s, limits.memory_mb, limits.output_mb, limits.processes,
                           hidden, self.namespaces, self.config.user)
        cases = self.calibration.cases.get(job.item.slug, []) if self.config.recheck else []
        request = JobRequest(job.index, job.student, job.item.slug, spec, str(ini), str(tests_dir()),
                             recheck.child_cases(cases), (str(tests_dir()), str(self.snapshots)), hidden)
        try:
            return run_job(self.zygote, request, job_dir / "request.pickle", self.limits,
                           lambda pid: uids.sweep(uid, pid), on_forked, self.stop)
        finally:
            remove_tree(job_dir)

    def _prepare(self, job: Job, job_dir: Path, uid: int | None) -> tuple[Path, Path, Path]:
        return job_folder(job_dir, job.student, job.snapshot, uid, _ini(self.config))


def job_folder(job_dir: Path, name: str, source: Path | None, uid: int | None, ini_text: str) -> tuple[Path, Path, Path]:
    """A job folder readable by the job's user, with a read-only working copy of ``source`` (empty for
    None) and its scratch folder; returns the working copy, the scratch folder and the ini file."""
    work, scratch, ini = job_dir / name, job_dir / "scratch", job_dir / "pytest.ini"
    job_dir.mkdir(mode=0o700)
    if source is not None:
        shutil.copytree(source, work, copy_function=shutil.copyfile)
    else:
        work.mkdir()
    ini.write_text(ini_text, encoding="utf-8")
    scratch.mkdir(mode=0o700)
    if uid is not None:
        os.chown(scratch, uid, uid)
    for path in [job_dir, ini, *work.rglob("*"), work]:
        if path == scratch:
            continue
        readable = stat.S_IRUSR | stat.S_IRGRP | (stat.S_IXUSR | stat.S_IXGRP if path.is_dir() else 0)
        if uid is not None:
            os.chown(path, 0, uid)
            os.chmod(path, readable)
        else:
            os.chmod(path, readable | stat.S_IWUSR if path == job_dir else readable)
    return work, scratch, ini



def reference_files(item: catalog.Item) -> tuple[str, ...]:
    """The item's own reference modules, the other references that define its answers
    (``answers.answer_modules``), and their compiled copies: what a job must not read."""
    base = reference_dir()
    found = []
    for module in answers.answer_modules(item):
        source = base / f"{module}.py"
        found.append(str(source))
        found += sorted(str(p) for p in (source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"))
    return tuple(found)


def probe(root: Path, config: GradeConfig, uid_pool: uids.UidPool | None,
          items: tuple[catalog.Item, ...] = ()) -> sandbox.Confinement:
    """Confine a throwaway process as every job will be (``sandbox.probe``): the batch's own account of
    its sandbox, from a process that ran none of a submission's code (it covers the ``items``' reference
    files as a job covers its item's). Where the sandbox would leave a job something to reach
    (``Confinement.missing``), the batch refuses (``BatchError``, one line) unless the teacher passed
    ``--unsafe-no-sandbox``."""
    uid = uid_pool.acquire() if uid_pool is not None else None
    folder = root / "probe"
    try:
        work, scratch, _ = job_folder(folder, "work", None, uid, "")
        limits = config.limits
        spec = SandboxSpec(str(folder), str(work), str(scratch), uid, uid, config.network, config.filesystem,
                           limits.cpu_s, limits.memory_mb, limits.output_mb, limits.processes,
                           tuple(path for item in items for path in reference_files(item)), user=config.user)
        confinement = sandbox.probe(spec)
    except sandbox.ProbeError as exc:
        if not config.unsafe_no_sandbox:
            raise BatchError(f"{exc}; run as root (sudo -E), or pass --unsafe-no-sandbox to grade anyway, marked "
                             "unsandboxed") from exc
        return sandbox.unconfined(str(exc))  # the jobs skip the namespaces the probe could not set up
    else:
        if confinement.missing and not config.unsafe_no_sandbox:
            raise BatchError(refusal(confinement))
        return confinement
    finally:
        if uid_pool is not None and uid is not None:
            uids.sweep(uid, 0)
            uid_pool.release(uid)
        remove_tree(folder)


def _policy(config: GradeConfig) -> str:
    """What correctness the re-check could not verify earned in this batch (the fresh-teacher trial found
    the policy only in gradebook.json)."""
    earned = {"review": "held for the teacher's review (the points column leaves them out)",
              "award": "awarded as the tests claim", "zero": "no points"}[config.unverified]
    return f"unverified correctness ([recheck] unverified = {config.unverified}): {earned}"


def _time_limits(config: GradeConfig) -> str:
    """The parent's clocks, beside the sandbox's limits in "How this batch ran" (the fresh-teacher trial
    of stop 33 found the test timeout it had set nowhere in the outputs)."""
    limits = config.limits
    return (f"time: {limits.test_timeout_s:g} s of CPU time per test (a test that stalls for {STALL_FACTOR:g} times "
            f"that on the clock ends too), {limits.wall_s:g} s on the clock per job")


def refusal(confinement: sandbox.Confinement) -> str:
    """The one line that says why a batch will not run without ``--unsafe-no-sandbox``, and what would
    make it run: the ``[sandbox]`` keys of the teacher's config that turned a wall off, root or user
    namespaces for a grader without root whose machine refused a wall."""
    refused = confinement.mode == "none" and os.geteuid() != 0
    if refused:
        why = "the grader is not root and this kernel refuses unprivileged user namespaces"
    elif len(confinement.missing) == len(confinement.switched_off):  # only the teacher's own keys
        why = f"the grade config turns off [sandbox] {' and '.join(confinement.switched_off)}"
    else:
        why = f"no isolation of {'; '.join(confinement.missing)}"
    fixes = []
    if confinement.switched_off:
        keys = " and ".join(f"{key} = true" for key in confinement.switched_off)
        fixes.append(f"set {keys} under [sandbox] in the grade config")
    if os.geteuid() != 0 and len(confinement.missing) > len(confinement.switched_off):  # as root, the reason
        # each other wall gave (in ``why``) is the fix
        fixes += ["run as root (sudo -E)", "allow unprivileged user namespaces (sysctl user.max_user_namespaces="
                  "10000, and kernel.unprivileged_userns_clone=1 where it exists)"]
    fixes.append("pass --unsafe-no-sandbox to grade anyway, marked unsandboxed")
    return f"no sandbox for the jobs ({why}); {', '.join(fixes[:-1])}, or {fixes[-1]}"


def remove_tree(path: Path | str) -> None:
    """``rmtree`` that also removes the read-only working copies (without root they stop their owner)."""
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=_force_remove)
    else:  # pragma: no cover - exercised on 3.10 and 3.11
        shutil.rmtree(path, onerror=_force_remove)


def _force_remove(function: Any, path: str, excinfo: Any) -> None:
    """Make the folder writable and try again."""
    try:
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            remove_tree(path)
        else:
            os.unlink(path)
    except OSError:
        pass
