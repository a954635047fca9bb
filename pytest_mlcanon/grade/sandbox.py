"""Confinement of one grading child, applied before any learner code is imported, in this order:

1. its own session (so the parent can kill the whole group) and no inherited file descriptors but
   the result pipe; its output goes to a log file in its scratch folder;
2. as root: a new network namespace (no interface but a private loopback: no network) and a new
   mount namespace in which the file system is read-only except the scratch folder;
3. resource limits the kernel enforces by killing or refusing: CPU seconds (SIGXCPU, then SIGKILL),
   address space, size of any file written (SIGXFSZ), processes, no core dumps;
4. as root: a non-root user of its own (``uids``), after checking that this user can read the
   Python installation; where a parent folder hides it (``/root`` is 0700), the mount namespace
   shows that folder as an empty tmpfs holding only bind mounts of what Python needs.

A step the OS refuses is skipped and said in the notes, which reach the report; nothing here is
fatal. The wall-clock and per-test limits are the parent's job (``runner``): they need no
cooperation from the child.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import json
import os
import resource
import signal
import socket
import stat
import struct
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS = 38
#: Mount points whose contents anyone may write: they, and ``/``, are remounted read-only.
WRITABLE_MOUNTS = ("/", "/tmp", "/var/tmp", "/dev/shm", "/run/shm", "/run/lock", "/var/lock", "/home")
LOG_NAME = "output.log"


@dataclass(frozen=True)
class SandboxSpec:
    """What to apply; ``uid`` None keeps the current user (a non-root grader cannot change it)."""

    job_dir: str
    work_dir: str
    scratch: str
    uid: int | None
    gid: int | None
    network: bool = True
    filesystem: bool = True
    cpu_s: float = 60.0
    memory_mb: int = 2048
    output_mb: int = 16
    processes: int = 64


def enter(spec: SandboxSpec, keep_fd: int) -> list[str]:
    """Confine the calling process (the freshly forked child). Returns human-readable notes."""
    notes: list[str] = []
    os.setsid()
    _isolate_fds(spec, keep_fd)
    root = os.geteuid() == 0
    wanted = (CLONE_NEWNET if spec.network else 0) | (CLONE_NEWNS if root else 0)
    have = _unshare(wanted) if root and wanted else 0
    notes.append(_network_note(spec, root, have))
    readable = _needed_paths(spec)
    exposed: list[str] = []
    if have & CLONE_NEWNS:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        if spec.uid is not None:
            exposed = _expose(readable, spec)
    if have & CLONE_NEWNS and spec.filesystem:
        notes.append(_read_only_except(spec.scratch, exposed))
    else:
        notes.append("file system: not remounted read-only (needs root and a mount namespace); writes outside "
                     "the scratch folder are blocked by the audit hook")
    _limits(spec, dropping=root and spec.uid is not None)
    notes.append(f"limits: {spec.cpu_s:g} s CPU, {spec.memory_mb} MB memory, {spec.output_mb} MB per file written, "
                 f"{spec.processes} processes")
    notes.append(_drop_privileges(spec, readable) if root and spec.uid is not None else
                 "user: unchanged (the grader does not run as root)" if not root else "user: root (sandbox user off)")
    _prctl_no_new_privs()
    _environment(spec)
    return notes


def _isolate_fds(spec: SandboxSpec, keep_fd: int) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    log = os.open(os.path.join(spec.scratch, LOG_NAME), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    if spec.uid is not None and os.geteuid() == 0:
        os.fchown(log, spec.uid, spec.gid if spec.gid is not None else spec.uid)
    os.dup2(log, 1)
    os.dup2(log, 2)
    for fd in (devnull, log):
        if fd > 2 and fd != keep_fd:
            os.close(fd)
    os.closerange(3, keep_fd)
    os.closerange(keep_fd + 1, 65536)


@functools.cache
def _libc() -> ctypes.CDLL:
    lib = ctypes.CDLL(None, use_errno=True)  # the interpreter's own symbols include libc
    lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    lib.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.unshare.argtypes = [ctypes.c_int]
    lib.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return lib


def _unshare(flags: int) -> int:
    """Unshare what the OS allows of ``flags``; returns the flags obtained."""
    lib = _libc()
    if lib.unshare(flags) == 0:
        return flags
    got = 0
    for flag in (CLONE_NEWNET, CLONE_NEWNS):
        if flags & flag and lib.unshare(flag) == 0:
            got |= flag
    return got


def _network_note(spec: SandboxSpec, root: bool, have: int) -> str:
    if not spec.network:
        return "network: not isolated (turned off in the teacher's config); sockets are blocked by the audit hook"
    if have & CLONE_NEWNET:
        _loopback_up()
        return "network: isolated (own network namespace, loopback only)"
    why = "needs root" if not root else "unshare was refused"
    return f"network: not isolated ({why}); sockets are blocked by the audit hook"


def _loopback_up() -> None:
    """Bring up ``lo`` in the new namespace, so a test using localhost (gloo) still works."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            request = struct.pack("16sH22x", b"lo", 0)
            flags = struct.unpack("16sH22x", fcntl.ioctl(sock, 0x8913, request))[1]  # SIOCGIFFLAGS
            fcntl.ioctl(sock, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))  # SIOCSIFFLAGS, IFF_UP
    except OSError:
        pass


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> bool:
    lib = _libc()
    enc = [s.encode() if s is not None else None for s in (source, target, fstype, data)]
    return lib.mount(enc[0], enc[1], enc[2], flags, enc[3]) == 0


def _needed_paths(spec: SandboxSpec) -> list[Path]:
    """What the sandbox user must be able to read: the interpreter's libraries, the packages, the job."""
    paths = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths |= {p for p in sys.path if p and os.path.isdir(p)}
    paths |= {os.path.dirname(os.path.realpath(sys.executable)), spec.job_dir}
    return sorted({Path(os.path.realpath(p)) for p in paths})


def _blocking_dir(path: Path, uid: int, gid: int) -> Path | None:
    """The highest ancestor of ``path`` the user cannot enter, or None."""
    for ancestor in reversed([path, *path.parents]):
        try:
            st = os.stat(ancestor)
        except OSError:
            return None
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & bit:
            return ancestor
    return None


def _expose(paths: Iterable[Path], spec: SandboxSpec) -> list[str]:
    """Make hidden folders traversable in this mount namespace: cover each blocking folder with an
    empty tmpfs and bind back only the entries Python needs. Returns the mount points made."""
    assert spec.uid is not None
    made: list[str] = []
    gid = spec.gid if spec.gid is not None else spec.uid
    blocked: dict[Path, set[Path]] = {}
    for path in paths:
        block = _blocking_dir(path, spec.uid, gid)
        if block is not None and path != block:
            blocked.setdefault(block, set()).add(block / path.relative_to(block).parts[0])
    if not blocked:
        return made
    stage = Path(tempfile.mkdtemp(prefix=".stage-", dir=spec.job_dir))
    for block, tops in blocked.items():
        staged: list[tuple[Path, Path]] = []
        for index, top in enumerate(sorted(tops)):
            holder = stage / f"{len(staged)}-{index}"
            holder.mkdir()
            if _mount(str(top), str(holder), None, MS_BIND | MS_REC):
                staged.append((top, holder))
        if not _mount("tmpfs", str(block), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m"):
            continue
        made.append(str(block))
        for top, holder in staged:
            (block / top.name).mkdir(exist_ok=True)
            if _mount(str(holder), str(block / top.name), None, MS_BIND | MS_REC):
                made.append(str(block / top.name))
            _libc().umount2(str(holder).encode(), MNT_DETACH)
    return made


def _read_only_except(scratch: str, extra: list[str]) -> str:
    """Bind the scratch folder onto itself, then remount ``/``, the world-writable mounts and the
    ``extra`` mounts read-only."""
    if not _mount(scratch, scratch, None, MS_BIND):
        return "file system: not remounted read-only (binding the scratch folder failed)"
    points = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            points = [line.split()[4] for line in handle]
    except OSError:
        pass
    under = tuple(w + "/" for w in WRITABLE_MOUNTS[1:])
    remounted = [p for p in dict.fromkeys(points) if p in WRITABLE_MOUNTS or p.startswith(under) or p in extra]
    failed = [p for p in remounted if p != scratch and not _remount_ro(p)]
    if "/" in failed:
        return "file system: not remounted read-only (the kernel refused); the audit hook blocks writes"
    return "file system: read-only except the scratch folder (own mount namespace)"


def _remount_ro(point: str) -> bool:
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    try:
        st = os.statvfs(point)
    except OSError:
        return False
    for bit, mount_bit in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV)):
        if st.f_flag & bit:
            flags |= mount_bit
    return _mount(None, point, None, flags)


def _limits(spec: SandboxSpec, dropping: bool) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it: a flood must kill, not raise EFBIG
    cpu = max(1, int(spec.cpu_s))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    output = spec.output_mb << 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (output, output))
    memory = (_vm_size() + spec.memory_mb) << 20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    processes = spec.processes + (0 if dropping else _processes_of(os.getuid()))
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    except (ValueError, OSError):
        pass


def _vm_size() -> int:
    """The current virtual size in MB (the forked child starts with the zygote's)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            pages = int(handle.read().split()[0])
        return pages * os.sysconf("SC_PAGE_SIZE") >> 20
    except (OSError, ValueError):
        return 1024


def _processes_of(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += os.stat(f"/proc/{entry}").st_uid == uid
            except OSError:
                continue
    return count


def _drop_privileges(spec: SandboxSpec, readable: list[Path]) -> str:
    assert spec.uid is not None
    gid = spec.gid if spec.gid is not None else spec.uid
    hidden = [str(p) for p in readable if _blocking_dir(p, spec.uid, gid) is not None]
    if hidden:
        return f"user: root (the sandbox user could not read {hidden[0]}; install Python where other users can read it)"
    os.setgroups([])
    os.setgid(gid)
    os.setuid(spec.uid)
    return "user: not root (a sandbox uid of its own)"


def _prctl_no_new_privs() -> None:
    try:
        _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _environment(spec: SandboxSpec) -> None:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "VIRTUAL_ENV")}
    os.environ.clear()
    os.environ.update(keep)
    os.environ.update(HOME=spec.scratch, TMPDIR=spec.scratch, PYTHONDONTWRITEBYTECODE="1",
                      PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", OMP_NUM_THREADS="1", MPLCONFIGDIR=spec.scratch)
    tempfile.tempdir = spec.scratch
    sys.dont_write_bytecode = True
    os.chdir(spec.job_dir)


# -- the probe: what a job gets on this machine, learnt before any job runs ---------------------------------


PROBE_TIMEOUT_S = 60.0


class ProbeError(RuntimeError):
    """The probe process could not confine itself or report; the message says why."""


def probe(spec: SandboxSpec) -> list[str]:
    """Confine a throwaway process exactly as a job is confined and return its notes.

    The class-wide "how this batch ran" comes from here, from a process that ran only the grader's
    code; a job's own notes are its claims and stay in its row."""
    read_end, write_end = os.pipe()
    try:
        process = subprocess.Popen([sys.executable, "-m", "pytest_mlcanon.grade.sandbox", str(write_end),
                                    json.dumps(asdict(spec))], pass_fds=(write_end,), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/")
    finally:
        os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as answers:
            data = answers.read(1 << 20)
        _, errors = process.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise ProbeError(f"the sandbox probe did not finish within {PROBE_TIMEOUT_S:g} s") from None
    try:
        answer = json.loads(data)
    except ValueError:
        tail = errors.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise ProbeError(f"the sandbox probe failed (exit status {process.returncode}): {tail[0]}") from None
    if "error" in answer:
        raise ProbeError(f"the sandbox probe failed: {answer['error']}")
    return [str(n) for n in answer["notes"]]


def _probe_main(argv: list[str]) -> None:
    fd = int(argv[0])
    answer: dict[str, object]
    try:
        answer = {"notes": enter(SandboxSpec(**json.loads(argv[1])), fd)}
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(answer, handle)


if __name__ == "__main__":
    _probe_main(sys.argv[1:])
