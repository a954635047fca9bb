"""What the grading tests need from the machine: the sandbox ``mlcanon grade`` insists on, learnt
once per session the way the grader learns it (``sandbox.probe``), and, from root, a way to run the
grader as an unprivileged user (``unprivileged.py``)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pytest_mlcanon.grade import batch, config, uids

HARNESS = Path(__file__).with_name("unprivileged.py")


@functools.cache
def refusal() -> str:
    """'' when this machine gives a grading job a full sandbox, else the grader's one-line refusal."""
    root = Path(tempfile.mkdtemp(prefix="mlcanon-sandbox-check-"))
    os.chmod(root, 0o711)
    settings = config.from_table({}, source="the sandbox check")
    pool = uids.UidPool(settings.uid_base + 900, 1) if os.geteuid() == 0 else None
    try:
        batch.probe(root, settings, pool)
    except batch.BatchError as exc:
        return str(exc)
    finally:
        if pool is not None:
            pool.close()
        shutil.rmtree(root, ignore_errors=True)
    return ""


def require() -> None:
    """Skip the calling test where ``mlcanon grade`` would refuse to run (no root, no user namespaces)."""
    why = refusal()
    if why:
        pytest.skip(f"mlcanon grade refuses to run here: {why}")


def run_unprivileged(argv: list[str], *, no_userns: bool = False, env: dict[str, str] | None = None,
                     timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``argv`` as an unprivileged teacher (see ``unprivileged.py``); only root can do this."""
    if os.geteuid() != 0:
        pytest.skip("running the grader as another user needs root")
    harness = [sys.executable, str(HARNESS), *(["--no-userns"] if no_userns else [])]
    return subprocess.run([*harness, *argv], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd="/", check=False)
