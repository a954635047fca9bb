"""The trusted verifier: the one process that holds the answers, and in which no learner code ever runs.

Started once per batch by the grading parent (``python -m pytest_mlcanon.grade.verifier FD``), it
reads its request on stdin, imports torch and the references, and runs the selected items' reference
tests against the references (the calibration). ``recheck.Recorder`` records, while they run, the
calls the tests make to each item's public functions and classes, and builds this run's re-check
cases: fresh inputs, and the reference's answers to them (for training functions, the parameters
after a trusted replay of the first steps from the same start). The expected test ids, the reference
failures and the cases go back to the parent on the pipe ``FD``, pickled, and the process exits.

Nothing of it reaches a job: the zygote that forks the jobs never imports a reference, the parent
keeps the calibration in its own memory (never in a file), and a job receives only a case's inputs.
The verifier's scratch folder and log are the parent's private (``0700``) folder.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The request's keys, as ``calibrate`` sends them.
REQUEST_KEYS = ("items", "seed", "skip", "recheck", "dir", "ini", "tests_dir", "options")


class VerifierError(RuntimeError):
    """The verifier could not run the reference tests; the message says why."""


@dataclass
class Calibration:
    """What the reference run established: per item, the expected test ids, which of them are numerics
    probes and input checks, which failed or skipped on the reference itself, and the re-check cases
    (inputs and expected answers). Held by the parent only."""

    nodeids: dict[str, list[str]] = field(default_factory=dict)
    failed: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, list[str]] = field(default_factory=dict)  # what this machine lacks (importorskip)
    cases: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    log: str = ""
    probes: dict[str, list[str]] = field(default_factory=dict)
    contract: dict[str, list[str]] = field(default_factory=dict)
    coverage: dict[str, dict[str, str]] = field(default_factory=dict)  # slug -> public name -> what covers it
    #: slug -> test -> the public names of its calls no case verifies (``Recorder.held``): paid by the policy
    held: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    cpu_s: float = 0.0


# -- the parent's side ------------------------------------------------------------------------------------


def calibrate(private: Path, timeout: float, **request: Any) -> Calibration:
    """Run the verifier on ``request`` (the keys of ``REQUEST_KEYS``) and return its calibration.

    ``private`` is a folder only the grader can read: the verifier's working folder and log."""
    read_end, write_end = os.pipe()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    temp = private / "verifier-tmp"
    temp.mkdir(mode=0o700, exist_ok=True)
    env.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TMPDIR=str(temp))
    log_path = private / "verifier.log"
    try:
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "pytest_mlcanon.grade.verifier", str(write_end)], pass_fds=(write_end,),
                cwd=private, env=env, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
    finally:
        os.close(write_end)
    chunks: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(read_end, chunks), daemon=True)
    reader.start()
    try:
        assert process.stdin is not None
        process.stdin.write(pickle.dumps({key: request[key] for key in REQUEST_KEYS}))
        process.stdin.close()
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise VerifierError(f"the reference run took over {timeout:.0f} s: {_tail(log_path)}") from None
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        reader.join(timeout=10)
    data = b"".join(chunks)
    if process.returncode != 0 or not data:
        raise VerifierError(f"the reference run failed (exit status {process.returncode}): {_tail(log_path)}")
    try:
        result = pickle.loads(data)  # noqa: S301 - written by the verifier, a trusted process, on a private pipe
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise VerifierError(f"the reference run sent a malformed result: {exc}") from exc
    return Calibration(**result)


def _read_all(fd: int, chunks: list[bytes]) -> None:
    try:
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return
            chunks.append(chunk)
    finally:
        os.close(fd)


def _tail(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-1500:].strip() or "(no output)"
    except OSError:
        return "(no log)"


# -- the verifier process ------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    out = int(argv[0])
    request = pickle.loads(sys.stdin.buffer.read())  # noqa: S301 - from the grading parent, on our stdin
    result = run(request)
    data = memoryview(pickle.dumps(result))
    while data:
        written = os.write(out, data)
        data = data[written:]
    os.close(out)
    return 0


def run(request: dict[str, Any]) -> dict[str, Any]:
    """The reference run: expected test ids, reference failures and re-check cases per item."""
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    import torch

    torch.set_num_threads(1)
    import pytest

    from pytest_mlcanon import catalog
    from pytest_mlcanon.grade import child, recheck
    from pytest_mlcanon.redirect import REF_PACKAGE

    items = catalog.select(request["items"])
    recorder = recheck.Recorder(items, frozenset(request["skip"]))
    os.chdir(request["dir"])
    argv = child.pytest_argv(request["ini"], request["tests_dir"], request["items"], REF_PACKAGE,
                             tuple(request["options"]))
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        status = pytest.main(argv, plugins=[recorder])
    cases = recorder.cases(int(request["seed"])) if request["recheck"] else {}
    times = os.times()
    return {"nodeids": recorder.nodeids, "probes": recorder.probes, "contract": recorder.contract,
            "failed": recorder.failed, "skipped": recorder.skipped, "cases": cases, "coverage": recorder.coverage(cases),
            "held": recorder.held(cases),
            "log": f"reference run exit status {int(status)}\n{sink.getvalue()[-4000:]}",
            "cpu_s": round(times.user + times.system, 3)}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
