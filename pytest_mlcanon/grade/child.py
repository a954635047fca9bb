"""One grading job in the child the zygote forked for it: confine, guard, re-check, test, report.

Order matters. The sandbox and the audit hook are in place before the learner's first line runs.
The tests run through the plugin as ``pytest --canon-item`` runs them, gathering evidence only,
with ``stream`` sending each start and outcome as it happens and each item's evidence at the end;
the re-check (``replay``) runs in the same session, on the modules it imported, before the first
test, so a submission cannot forge passing tests and then hang or exit before the one check it
cannot forge: if the child dies in the re-check, no test ran.
"""

from __future__ import annotations

import errno
import os
import traceback
from dataclasses import dataclass, field
from typing import Any

from pytest_mlcanon.grade import sandbox
from pytest_mlcanon.grade.channel import ChannelWriter

EXIT_OK = 0
EXIT_HARNESS = 70
#: pytest plugins a job does not need; ``unraisableexception`` alone costs five full ``gc.collect()``
#: passes over torch's heap at exit, and ``logging`` (log capture, which no grade reads) 0.03 s of a
#: DPO job's 0.5 s. The canon's tests use no subtests, and a job never plans or shows its fixtures
#: (``unittest`` stays: it is what turns a ``unittest.SkipTest`` into a skip).
UNUSED_PLUGINS = ("cacheprovider", "unraisableexception", "threadexception", "doctest", "junitxml", "pastebin",
                  "stepwise", "logging", "subtests", "setuponly", "setupplan")


@dataclass(frozen=True)
class JobRequest:
    """Everything a child needs, written by the parent and read by the zygote before forking."""

    job_id: int
    student: str
    item: str
    spec: sandbox.SandboxSpec
    ini: str
    tests_dir: str
    cases: list[dict[str, Any]] = field(default_factory=list)
    protected_dirs: tuple[str, ...] = ()
    protected_files: tuple[str, ...] = ()
    options: tuple[str, ...] = ()


def pytest_argv(ini: str, tests_dir: str, items: str, impl: str, options: tuple[str, ...] = ()) -> list[str]:
    """The pytest command line of a job (and of the zygote's reference run, with ``impl=canon_refs``):
    a trusted empty ini file, so nothing in the submission or the current folder configures pytest;
    ``--canon-gather-only``: the run gathers each item's evidence and scores nothing (the parent does)."""
    quiet = [arg for plugin in UNUSED_PLUGINS for arg in ("-p", f"no:{plugin}")]
    return ["-c", ini, "--rootdir", os.path.dirname(ini), "--confcutdir", tests_dir, *quiet,
            "-p", "pytest_mlcanon.plugin", "-q", "--color=no", f"--canon-item={items}", f"--impl={impl}",
            "--canon-gather-only", *options]


def main(request: JobRequest, fd: int) -> int:
    """Run one job; never raises (a harness failure is reported on the channel)."""
    channel = ChannelWriter(fd)
    try:
        notes = sandbox.enter(request.spec, fd)
        channel.send("hello", notes=notes, pid=os.getpid(), uid=os.getuid())
        return _run(request, channel)
    except OSError as exc:
        if exc.errno != errno.EFBIG:
            return _harness_error(channel, exc)
        channel.send("limit", name="output")  # the learner ignored SIGXFSZ and filled the log
        return EXIT_HARNESS
    except BaseException as exc:  # noqa: BLE001 - whatever happens, say so and exit
        return _harness_error(channel, exc)


def _harness_error(channel: ChannelWriter, exc: BaseException) -> int:
    channel.send("harness-error", error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc()[-2000:])
    return EXIT_HARNESS


def _run(request: JobRequest, channel: ChannelWriter) -> int:
    import pytest

    from pytest_mlcanon import catalog
    from pytest_mlcanon.grade.guard import Guard
    from pytest_mlcanon.grade.replay import ReplayPlugin
    from pytest_mlcanon.grade.stream import StreamPlugin

    work = request.spec.work_dir
    guard = Guard(channel, work, request.spec.scratch, request.spec.job_dir, request.protected_dirs,
                  request.protected_files)
    guard.snapshot()
    guard.install()
    argv = pytest_argv(request.ini, request.tests_dir, request.item, work, request.options)
    replay = ReplayPlugin(request.cases, channel, catalog.get(request.item).forbidden)
    pytest.main(argv, plugins=[replay, StreamPlugin(channel, guard)])
    replay.run()  # pytest stopped before its test loop (a usage error): the cases still get their answers
    channel.send("done", left_running=left_running())
    return EXIT_OK


def left_running() -> int:
    """How many other processes are alive in this job's PID namespace as it ends (0 outside one). The
    kernel kills them when the job, PID 1 of the namespace, exits, before the parent's sweep could see
    them; this count (the child's word: a tripwire) is how they are still flagged."""
    if os.getpid() != 1:
        return 0
    try:
        return sum(1 for entry in os.listdir("/proc") if entry.isdigit() and entry != "1")
    except OSError:
        return 0
