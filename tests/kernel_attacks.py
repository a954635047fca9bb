"""Submissions that go around the audit hook, straight to the kernel (issue 23.7), shared by the root
batch (``test_grade_attacks.py``) and the unprivileged one (``test_grade_attacks_unprivileged.py``).

Each is the wrong IoU plus code, run at import, that tries what only the kernel sandbox can stop:
``resource.prlimit`` on every pid it can name, ``signal.pidfd_send_signal`` SIGKILL to every pid it can
open, ``_posixsubprocess.fork_exec`` of a daemon, ``os.mknod`` of files outside its folder,
``torch.from_file`` of a classmate's file, a read of the grader's environment, and a disk filled with
files each under the per-file limit. What they obtained
is put in every test's failure message (``LOOT:...``), so a wall that gave way shows in the gradebook.
"""

from __future__ import annotations

import os
from pathlib import Path

#: An environment variable of the grader's that no job may see (as a CI token would be).
SECRET_ENV = "MLCANON_FAKE_CI_TOKEN"
SECRET_VALUE = "fake-token-2b7e151628aed2a6"
#: What the victim student's file holds, and where the daemon and the device files leave a trace.
VICTIM_SECRET = "VICTIM-SECRET-5f3c"
DAEMON_SECONDS = "347"
#: The disk attack writes up to this many 1 MB files and this many empty ones; past the bounds it got more
#: than any one job's scratch folder may hold.
DISK_FILES, DISK_BOUND_MB = 400, 256
DISK_INODES, DISK_BOUND_INODES = 20_000, 10_000


def node_mark() -> Path:
    return Path("/tmp") / f"mlcanon-attack-node-{os.getpid()}"


def write_victim(root: Path) -> Path:
    """A classmate's private file (not a module: the victim's row is 'not attempted')."""
    path = root / "victim_classmate" / "notes" / "private.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{VICTIM_SECRET}\n")
    return path


def attacks(victim: Path) -> dict[str, tuple[str, str]]:
    """name -> (code inserted after the imports, code appended) for ``test_grade_attacks._attack_source``."""
    loot = '''

def box_iou(boxes1, boxes2):
    # reports what the import-time attack obtained, in every test's message
    raise ValueError("LOOT:" + ",".join(_LOOT))
'''
    others = '''
def _others():
    return [pid for pid in range(1, 4096) if pid != os.getpid()]

'''
    mark = str(node_mark())
    return {
        "prlimit_every_pid": ("import os\nimport resource\n", others + '''
def _limit_everyone():
    hits = []
    for pid in _others():
        try:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, 3))
            hits.append(f"GOT-PRLIMIT-{pid}")
        except BaseException:
            pass
    return hits


_LOOT = _limit_everyone()
''' + loot),
        "pidfd_kill_every_pid": ("import os\nimport signal\n", others + '''
def _kill_everyone():
    hits = []
    for pid in _others():
        try:
            fd = os.pidfd_open(pid)
        except BaseException:
            continue
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            hits.append(f"SIGNALLED-{pid}")
        except BaseException:
            pass
        finally:
            os.close(fd)
    return hits


_LOOT = _kill_everyone()
''' + loot),
        "fork_exec_daemon": ("import os\nimport _posixsubprocess\n", f'''
def _daemon():
    err_r, err_w = os.pipe()
    command = [b"/bin/sleep", b"{DAEMON_SECONDS}"]
    common = (command, [command[0]], True, (err_w,), None, None, -1, -1, -1, -1, -1, -1, err_r, err_w, True, True)
    for tail in ((-1, None, None, None, -1, None, False), (None, None, None, -1, None, False),
                 (None, None, None, -1, None)):
        try:
            return [f"STARTED-{{_posixsubprocess.fork_exec(*common, *tail)}}"]
        except TypeError:
            continue
        except BaseException as exc:
            return [f"refused-{{type(exc).__name__}}"]
    return ["no-signature"]


_LOOT = _daemon()
''' + loot),
        "mknod_outside": ("import os\nimport stat\n", f'''
def _nodes():
    hits = []
    for path in ({mark!r}, "/dev/shm/mlcanon-attack-node", os.path.expanduser("~/mlcanon-attack-node")):
        try:
            os.mknod(path, 0o644 | stat.S_IFREG)
            hits.append(f"MADE-{{path}}")
        except BaseException:
            pass
    return hits


_LOOT = _nodes()
''' + loot),
        "from_file_reads_a_classmate": ("import torch\n", f'''
def _read():
    try:
        data = torch.from_file({str(victim)!r}, size={len(VICTIM_SECRET)}, dtype=torch.uint8)
    except BaseException as exc:
        return [f"refused-{{type(exc).__name__}}"]
    return ["GOT-" + bytes(data.tolist()).decode("latin-1")]


_LOOT = _read()
''' + loot),
        # Every file under the per-file limit, but no end of them: the disk the batch writes to (its
        # classmates' jobs, the gradebook) is the scratch folder's, unless that folder is bounded.
        "fill_the_disk": ("import os\n", f'''
def _fill():
    folder, written, made = os.environ.get("TMPDIR", "."), 0, 0
    try:
        for n in range({DISK_FILES}):
            with open(os.path.join(folder, f"fill{{n}}"), "wb") as handle:
                handle.write(b"x" * (1 << 20))
            written += 1
    except BaseException:
        pass
    try:
        for n in range({DISK_INODES}):
            open(os.path.join(folder, f"empty{{n}}"), "wb").close()
            made += 1
    except BaseException:
        pass
    return [f"GOT-DISK-{{written}}MB" if written > {DISK_BOUND_MB} else f"disk-{{written}}MB",
            f"GOT-INODES-{{made}}" if made > {DISK_BOUND_INODES} else f"inodes-{{made}}"]


_LOOT = _fill()
''' + loot),
        "grader_environment": ("import os\n", f'''
def _environment():
    hits = [f"GOT-ENV-{{k}}" for k in os.environ if k == {SECRET_ENV!r}]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{{entry}}/environ", "rb") as handle:
                if {SECRET_VALUE.encode()!r} in handle.read():
                    hits.append(f"GOT-PROC-ENV-{{entry}}")
        except BaseException:
            pass
    return hits or ["nothing"]


_LOOT = _environment()
''' + loot),
    }


def loot(messages: list[str]) -> list[str]:
    """What the attacks report having read or changed outside (``GOT-...``). A signal sent, a daemon
    started or a file made inside the job's own namespaces is no loot: the checks after the batch
    (the grader and its zygote lived on, ``daemons``, ``node_mark``) say whether it reached out."""
    return [word.strip() for message in messages for word in message.replace("LOOT:", ",").split(",")
            if word.strip().startswith("GOT-")]


def daemons() -> list[int]:
    """Processes left running ``sleep 347``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if handle.read().split(b"\0")[:2] == [b"/bin/sleep", DAEMON_SECONDS.encode()]:
                        found.append(int(entry))
            except OSError:
                continue
    return found
