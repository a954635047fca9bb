"""Confinement of one grading child, applied before any learner code is imported.

How much isolation the kernel grants decides the *mode*, the same for every job of a batch and learnt
before any job runs (``probe``):

* **root**: the grader is root. The job gets namespaces of its own, then a sandbox uid of its own
  (``uids``), which holds no capability.
* **user namespace**: the grader is not root, and the kernel lets unprivileged users create user
  namespaces (``/proc/sys/user/max_user_namespaces`` above 0, and neither
  ``kernel.unprivileged_userns_clone = 0`` nor an AppArmor or SELinux policy forbidding it). The job's
  user namespace maps only the grader's uid and gid; the job sets up its namespaces in it, then drops
  every capability, so it is the grader's uid with no privilege, inside walls it cannot move.
* **none**: neither. No namespace can be made: the audit hook and the resource limits are all there
  is, ``Confinement.missing`` says what is missing, and ``mlcanon grade`` refuses to run unless the
  teacher passes ``--unsafe-no-sandbox``.

In the first two modes ``enter`` does, in this order:

1. its own session, no inherited file descriptor but the result pipe, output to a log in scratch;
2. new mount, PID, network (unless the config turns it off), IPC and UTS namespaces, and (without
   root) the user namespace they belong to, all in one ``unshare``;
3. a fork. The process that called ``enter`` stays outside the new PID namespace as the job's
   *supervisor*: it waits and then ends exactly as the job ended (the same exit status, or the same
   signal), so the zygote and the parent's watch see one process, and killing it kills the job. Its
   child, the job, is PID 1 of the namespace: it dies with the supervisor (``PR_SET_PDEATHSIG``), and
   when it dies the kernel kills every process of the namespace, so nothing it starts (a daemon, a
   fork bomb) outlives it. As PID 1 it ignores the kernel's SIGXCPU and SIGXFSZ unless it handles
   them: the CPU limit kills it at the hard limit (reported as SIGXCPU), and a handler ends it at the
   file-size limit (reported as SIGXFSZ). A separate init would spare that, at the cost of a second
   fork of the zygote-sized process (~20 ms of CPU);
4. a **minimal root**: an empty tmpfs holding read-only binds of the system folders (``/usr``,
   ``/etc``...), the Python installation (without the folders of a source checkout beside our three
   packages) and the job folder, whose scratch folder alone is writable (a bounded tmpfs of its own,
   ``SCRATCH_MB``); a private ``/dev`` (null,
   zero, full, random, urandom and a small ``/dev/shm``), a small ``/tmp``, a fresh ``/proc`` that
   shows the job's processes only, ``/sys`` read-only; ``pivot_root`` into it and the old root
   detached. Other students' folders, the submissions, the outputs, home folders, the grader's
   processes and their environment do not exist for the job;
5. resource limits the kernel enforces by killing or refusing: CPU seconds, address space, size of a
   file written, processes, no core dumps;
6. as root, the job's own sandbox uid; without root, no capability left;
7. ``no_new_privs``, and an environment holding nothing of the grader's but ``PATH``, the locale and
   the Python variables (``environment``).

A step the OS refuses is said in the notes, which reach the row; what the refusal leaves open is in
``Confinement.missing``. The wall-clock and per-test limits are the parent's job (``runner``).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import json
import os
import platform
import resource
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18)
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
#: ``pivot_root`` has no C library wrapper; its system call number by machine (others use ``chroot``).
SYS_PIVOT_ROOT = {"x86_64": 155, "amd64": 155, "aarch64": 41, "arm64": 41, "riscv64": 41, "ppc64le": 203,
                  "ppc64": 203, "s390x": 217, "i686": 217, "i386": 217}
#: System folders every job sees, read-only (those that are links on this machine stay links).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
DEVICES = ("null", "zero", "full", "random", "urandom")
#: The packages a job needs from a source checkout (an editable install): the checkout's other
#: folders (its tests, the example learners' solutions) are not shown.
OUR_PACKAGES = ("pytest_mlcanon", "canon_refs", "canon_tests")
#: What the grader's environment may pass on to the processes that run learner code: no token, no CI
#: variable, nothing but the paths, the locale and how to find Python.
KEEP_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "LC_MESSAGES", "TZ", "PYTHONPATH",
            "PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "CONDA_PREFIX")
LOG_NAME = "output.log"
#: How the job (PID 1) tells its supervisor it passed the file-size limit (128 + SIGXFSZ).
OUTPUT_LIMIT_EXIT = 128 + int(signal.SIGXFSZ)
ROOT_NAME = ".root"
SHM_MB = 64
#: The job's scratch folder is a tmpfs of its own this large (at least; four files of the per-file limit
#: if that is more) with this many files: a job writing file after file, each under the per-file limit,
#: or a million empty ones, fills its own mount, never the disk its classmates and the grader write to.
SCRATCH_MB = 64
SCRATCH_INODES = 4096


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
    memory_mb: int = 4096
    output_mb: int = 16
    processes: int = 64
    hidden: tuple[str, ...] = ()  # files shown empty (the item's reference and its compiled copies)
    namespaces: bool = True  # False: the batch's probe could not confine a process here (unsandboxed)
    user: bool = True  # False: the teacher's config turns the user wall off ([sandbox] user)


@dataclass
class Confinement:
    """What ``enter`` obtained: ``notes`` say it (one line each, for people), ``missing`` lists what a
    job could reach because a step was refused or turned off (empty: fully isolated)."""

    notes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    mode: str = "none"  # root, user namespace, none
    switched_off: list[str] = field(default_factory=list)  # the ``[sandbox]`` keys of the config behind a missing wall

    def note(self, text: str, missing: str = "", switched_off: str = "") -> None:
        self.notes.append(text)
        if missing:
            self.missing.append(missing)
        if switched_off:
            self.switched_off.append(switched_off)


def enter(spec: SandboxSpec, keep_fd: int) -> list[str]:
    """Confine the calling process (the freshly forked child). Returns human-readable notes."""
    return confine(spec, keep_fd).notes


def confine(spec: SandboxSpec, keep_fd: int) -> Confinement:
    """Confine the calling process; in the namespaced modes it returns in the job (PID 1 of its own
    PID namespace) while the calling process supervises it and never returns."""
    done = Confinement()
    os.setsid()
    os.umask(0o022)  # the minimal root's mount points must be enterable by the sandbox user, whatever the
    # teacher's umask (under 077 every job found Python unreadable); the job's own files stay in its 0700 scratch
    _isolate_fds(spec, keep_fd)
    root = os.geteuid() == 0
    dropping = root and spec.uid is not None
    host_processes = 0 if dropping else _processes_of(os.getuid())  # before /proc shows the job's only
    ids = os.getuid(), os.getgid()  # read before the unshare: in the new user namespace they show as unmapped
    flags = (CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | (CLONE_NEWNET if spec.network else 0)
             | (0 if root else CLONE_NEWUSER))
    refused = _unshare(flags) if spec.namespaces else "the batch's sandbox probe could not confine a process here"
    if refused:
        done.note(f"namespaces: none ({refused}); the audit hook and the limits are the only walls",
                  f"no namespaces ({refused})")
        done.note("network: not isolated; sockets are blocked by the audit hook", "network")
        done.note("file system: the whole machine is visible; writes outside scratch are blocked by the audit "
                  "hook", "file system")
        if spec.hidden:
            done.note("reference: readable (no mount namespace); opening it is blocked by the audit hook",
                      "the item's reference files")
    else:
        done.mode = "root" if root else "user namespace"
        if not root:
            _map_user(*ids)
        _supervise(keep_fd, spec.cpu_s)  # returns in the job, PID 1 of the new PID namespace
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        if spec.network:
            done.note(_network(spec))
        else:
            done.note(_network(spec), "network (turned off in the teacher's config)", "network")
        if spec.filesystem:
            _minimal_root(spec, done)
        else:
            _hide(spec, "", done)
            _fresh_proc("/proc", done)
            done.note("file system: the whole machine is visible (turned off in the teacher's config)",
                      "file system (turned off in the teacher's config)", "filesystem")
    _limits(spec, host_processes, dropping)
    done.note(f"limits: {spec.cpu_s:g} s CPU, {spec.memory_mb} MB memory, {spec.output_mb} MB per file written, "
              f"{spec.processes} processes")
    if dropping:
        note, hidden = _drop_privileges(spec)
        done.note(note, f"a user of its own ({hidden})" if hidden else "")
    elif root:
        done.note("user: root (sandbox user off)", "a user of its own (turned off in the teacher's config)", "user")
    elif done.mode == "user namespace":
        _drop_capabilities()
        if spec.user:
            done.note("user: the grader's uid, with no capability, in a user namespace of its own")
        else:  # nothing to give up without root, but the teacher asked for no user wall: the batch says so
            done.note("user: the grader's uid, with no capability, in a user namespace of its own ([sandbox] user "
                      "= false: counted as off)", "a user of its own (turned off in the teacher's config)", "user")
    else:
        done.note("user: the grader's own (not root, no user namespace)", "a user of its own")
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _environment(spec)
    return done


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
    lib.capset.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.syscall.restype = ctypes.c_long
    return lib


def _prctl(option: int, value: int) -> bool:
    return _libc().prctl(option, value, 0, 0, 0) == 0


def _unshare(flags: int) -> str:
    """Unshare every namespace of ``flags`` at once; '' on success, else why not (all or nothing)."""
    if _libc().unshare(flags) == 0:
        return ""
    code = ctypes.get_errno()
    return f"unshare refused: {errno.errorcode.get(code, code)}"


def _map_user(uid: int, gid: int) -> None:
    """In a fresh user namespace: map the grader's uid and gid (read before it was made: inside, until
    mapped, they read as the overflow id 65534) to themselves, and nothing else."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1\n"), ("gid_map", f"{gid} {gid} 1\n")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as handle:
            handle.write(text)


def _supervise(keep_fd: int, cpu_s: float) -> None:
    """Fork the job into the new PID namespace, where it is PID 1; returns in the job. The calling
    process stays outside as the job's supervisor: it waits, then ends as the job ended, and the job
    dies with it (``PR_SET_PDEATHSIG``). When PID 1 of a namespace dies, the kernel kills every other
    process in it."""
    alive_r, alive_w = os.pipe()  # the supervisor never writes to it: EOF means it is gone
    job = os.fork()
    if job:
        os.close(alive_r)
        os.close(keep_fd)
        _end_as(_as_ended(job, cpu_s))
    os.close(alive_w)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if select.select([alive_r], [], [], 0)[0]:  # the supervisor was killed before the line above
        os._exit(1)
    os.close(alive_r)


def _as_ended(job: int, cpu_s: float) -> int:
    """The job's wait status as any process would have ended. PID 1 of a namespace ignores the
    kernel's SIGXCPU, so past its CPU limit it is killed at the hard limit by SIGKILL; that is
    reported as the SIGXCPU it would have been (SIGKILL from outside kills this supervisor first)."""
    while True:
        try:
            _, status, usage = os.wait4(job, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            return 1 << 8
    if (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
            and usage.ru_utime + usage.ru_stime >= max(1, int(cpu_s))):
        return int(signal.SIGXCPU)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == OUTPUT_LIMIT_EXIT:
        return int(signal.SIGXFSZ)
    return status


def _end_as(status: int) -> None:
    """End this process as a process with wait status ``status`` ended: by its signal, or its code."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default is to be ignored
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _network(spec: SandboxSpec) -> str:
    if not spec.network:
        return "network: not isolated (turned off in the teacher's config); sockets are blocked by the audit hook"
    _loopback_up()
    return "network: isolated (own network namespace, loopback only)"


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


# -- the minimal root --------------------------------------------------------------------------------------


def exposed_paths(job_dir: str) -> list[str]:
    """The folders of the machine a job sees (read-only), besides its own folder: the system folders
    and what Python needs. Never ``/``, the batch's folder or one holding it, nor a source checkout's
    other folders (only ``OUR_PACKAGES`` of it)."""
    batch = os.path.realpath(os.path.dirname(job_dir.rstrip("/")))
    system = [p for p in SYSTEM_PATHS if os.path.lexists(p)]
    return _outermost([*system, *(p for p in _python_paths() if not _shows_too_much(p, batch))])


def warm() -> None:
    """Compute once, in the zygote before it forks, what every job's confinement needs."""
    _libc()
    _python_paths()


@functools.cache
def _python_paths() -> tuple[str, ...]:
    """The folders Python needs (its prefixes, standard library, site folders, ``sys.path`` and our
    packages), each as written and as resolved; of a source checkout, only ``OUR_PACKAGES``."""
    python = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    python |= {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
               os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))}
    python |= {p for p in sys.path if p}
    python |= {found for package in OUR_PACKAGES if (found := _find_package(package))}
    wanted: list[str] = []
    for path in sorted(python):
        if not os.path.isdir(path):
            continue
        for variant in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
            if all(os.path.isdir(os.path.join(variant, p)) for p in OUR_PACKAGES[:2]) and "-packages" not in variant:
                wanted += [os.path.join(variant, p) for p in OUR_PACKAGES if os.path.isdir(os.path.join(variant, p))]
            else:
                wanted.append(variant)
    return tuple(wanted)


def _find_package(name: str) -> str | None:
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(next(iter(spec.submodule_search_locations)))


def _shows_too_much(path: str, batch: str) -> bool:
    """``/``, the batch's folder, anything in it, or a folder holding it (``/tmp``)."""
    return path == "/" or path == batch or path.startswith(batch + "/") or batch.startswith(path.rstrip("/") + "/")


def _outermost(paths: Iterable[str]) -> list[str]:
    """The paths without those inside another one of them (binding the outer folder shows both)."""
    kept: list[str] = []
    for path in sorted(dict.fromkeys(p.rstrip("/") or "/" for p in paths), key=len):
        if not any(path == k or path.startswith(k + "/") for k in kept):
            kept.append(path)
    return sorted(kept)


def _minimal_root(spec: SandboxSpec, done: Confinement) -> None:
    """Build the job's root file system and move into it (``pivot_root``), or say what failed."""
    new = os.path.join(spec.job_dir, ROOT_NAME)
    os.makedirs(new, exist_ok=True)
    if not _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096"):
        done.note("file system: the whole machine is visible (the kernel refused a tmpfs root)", "file system")
        _fresh_proc("/proc", done)
        return
    _private_dev(new, spec)
    _small_tmpfs(os.path.join(new, "tmp"), 0o1777, spec.output_mb)  # before the binds: the job folder may be in /tmp
    _show("/sys", new, read_only=True)
    _fresh_proc(os.path.join(new, "proc"), done)
    failed: list[str] = []
    for path in exposed_paths(spec.job_dir):
        if not _show(path, new, read_only=True):
            failed.append(path)
    if not _show(spec.job_dir, new, read_only=True, recursive=False) or not _scratch(spec, new):
        done.note("file system: the whole machine is visible (the job folder could not be shown)", "file system")
        return
    _hide(spec, new, done)
    if not _pivot(new):
        done.note("file system: the whole machine is visible (pivot_root and chroot were refused)", "file system")
        return
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(spec.job_dir)
    skipped = f"; not shown: {', '.join(failed)}" if failed else ""
    done.note(f"file system: a minimal root (system folders, Python and the job folder, read-only except "
              f"scratch; nothing else of the machine){skipped}")


def _hide(spec: SandboxSpec, new: str, done: Confinement) -> None:
    """Cover each of ``spec.hidden`` (under the root being built at ``new``, '' for the machine's) with
    an empty read-only file: the item's own reference and its compiled copies read as empty, while the
    other references its items build on still load."""
    if not spec.hidden:
        return
    empty = os.path.join(spec.job_dir, ".empty")
    os.close(os.open(empty, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o444))
    left = [target for target in spec.hidden
            if os.path.isfile(new + target) and not _mount(empty, new + target, None, MS_BIND)]
    if left:
        done.note(f"reference: readable ({len(left)} file(s) could not be covered); opening it is blocked by the "
                  f"audit hook", "the item's reference files")
    else:
        done.note("reference: the item's reference files show empty (own mount namespace)")


def _show(path: str, new: str, read_only: bool, recursive: bool = True) -> bool:
    """Bind ``path`` at the same place under the new root (a link stays a link)."""
    target = new + path
    if os.path.islink(path) and os.path.dirname(path) == "/":
        os.symlink(os.readlink(path), target)
        return True
    if os.path.isdir(path):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
    if not _mount(path, target, None, MS_BIND | (MS_REC if recursive else 0)):
        return False
    return not read_only or all(_remount_ro(point) for point in _mounts_under(target))


def _mounts_under(target: str) -> list[str]:
    points = [target]
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as handle:
            points += [line.split()[4] for line in handle]
    except OSError:
        pass
    return [p for p in dict.fromkeys(points) if p == target or p.startswith(target + "/")]


def _remount_ro(point: str) -> bool:
    """Remount a bind mount read-only, keeping the flags a user namespace may not clear."""
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    try:
        st = os.statvfs(point)
    except OSError:
        return False
    for bit, mount_bit in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
                           (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME),
                           (getattr(os, "ST_RELATIME", 4096), MS_RELATIME)):
        if st.f_flag & bit:
            flags |= mount_bit
    return _mount(None, point, None, flags)


def _scratch(spec: SandboxSpec, new: str) -> bool:
    """The job's writable scratch folder under the new root: a bounded tmpfs owned by the job's user (its
    log, opened before, stays in the grader's folder), or the grader's folder itself where the kernel
    refuses the tmpfs."""
    target = new + spec.scratch
    os.makedirs(target, exist_ok=True)
    owner = ""
    if spec.uid is not None and os.geteuid() == 0:
        owner = f",uid={spec.uid},gid={spec.gid if spec.gid is not None else spec.uid}"
    size = max(SCRATCH_MB, 4 * spec.output_mb)
    if _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV,
              f"mode=0700,size={size}m,nr_inodes={SCRATCH_INODES}{owner}"):
        return True
    return _show(spec.scratch, new, read_only=False)


def _small_tmpfs(target: str, mode: int, size_mb: int) -> bool:
    os.makedirs(target, exist_ok=True)
    return _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode:o},size={size_mb}m,nr_inodes=4096")


def _private_dev(new: str, spec: SandboxSpec) -> None:
    """``/dev`` with the harmless devices only, and ``/dev/shm`` (multiprocessing's semaphores)."""
    dev = os.path.join(new, "dev")
    if not _small_tmpfs(dev, 0o755, 1):
        return
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            _show(f"/dev/{name}", new, read_only=False, recursive=False)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, os.path.join(dev, name))
    _small_tmpfs(os.path.join(dev, "shm"), 0o1777, min(SHM_MB, spec.memory_mb))


def _fresh_proc(target: str, done: Confinement) -> None:
    os.makedirs(target, exist_ok=True)
    if not _mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC):
        done.note("processes: the machine's /proc is visible (mounting a new one was refused)", "processes")
    else:
        done.note("processes: own PID namespace (the job sees its own processes only)")


def _pivot(new: str) -> bool:
    old = os.path.join(new, ".old")
    os.makedirs(old, exist_ok=True)
    number = SYS_PIVOT_ROOT.get(platform.machine().lower())
    if number is not None and _libc().syscall(number, new.encode(), old.encode()) == 0:
        os.chdir("/")
        _libc().umount2(b"/.old", MNT_DETACH)
        os.rmdir("/.old")
        return True
    try:
        os.chroot(new)
    except OSError:
        return False
    os.chdir("/")
    return True


# -- limits and privileges ----------------------------------------------------------------------------------


def _limits(spec: SandboxSpec, host_processes: int, dropping: bool) -> None:
    # Python ignores SIGXFSZ: a flood must end the job, not raise EFBIG. PID 1 of a namespace ignores
    # the default action, so the job ends itself in a handler, and its supervisor reports the signal.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL if os.getpid() != 1 else _output_limit)
    cpu = max(1, int(spec.cpu_s))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    output = spec.output_mb << 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (output, output))
    memory = (_vm_size() + spec.memory_mb) << 20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    processes = spec.processes + (0 if dropping else host_processes)
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    except (ValueError, OSError):
        pass


def _output_limit(signum: int, frame: object) -> None:
    os._exit(OUTPUT_LIMIT_EXIT)


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


def _drop_privileges(spec: SandboxSpec) -> tuple[str, str]:
    """Become the job's sandbox user; (note, the folder that kept it root or '')."""
    assert spec.uid is not None
    gid = spec.gid if spec.gid is not None else spec.uid
    needed = [Path(os.path.realpath(p)) for p in (sys.prefix, os.path.dirname(sys.executable), spec.job_dir)]
    hidden = next((str(p) for p in needed if _blocking_dir(p, spec.uid, gid) is not None), "")
    if hidden:
        return (f"user: root (the sandbox user could not read {hidden}; install Python where other users can "
                f"read it)", f"the sandbox user could not read {hidden}")
    os.setgroups([])
    os.setgid(gid)
    os.setuid(spec.uid)
    return "user: not root (a sandbox uid of its own)", ""


def _drop_capabilities() -> None:
    """Give up every capability held in the user namespace: bounding set, ambient, then the sets."""
    for cap in range(64):
        if not _prctl(PR_CAPBSET_DROP, cap) and ctypes.get_errno() == errno.EINVAL:
            break
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    if _libc().capset(ctypes.addressof(header), ctypes.addressof(data)) != 0:
        raise OSError(ctypes.get_errno(), "capset refused to drop the capabilities")


def environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of ``environ`` a process that runs learner code may inherit (``KEEP_ENV``): the zygote
    is started with it too, since a forked job can read its parent's first environment in
    ``/proc/self/environ``."""
    return {k: v for k, v in environ.items() if k in KEEP_ENV}


def _environment(spec: SandboxSpec) -> None:
    keep = environment(os.environ)
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


def unconfined(why: str) -> Confinement:
    """A batch's account of a sandbox its probe could not set up (``why``), graded anyway
    (``--unsafe-no-sandbox``): the jobs make no namespace, and every row says it ran unsandboxed."""
    return Confinement([f"namespaces: none ({why}); the audit hook and the limits are the only walls"],
                       [f"no namespaces ({why})"], "none")


def probe(spec: SandboxSpec) -> Confinement:
    """Confine a throwaway process exactly as a job is confined and return what it obtained.

    The class-wide "how this batch ran" and the decision to refuse come from here, from a process that
    ran only the grader's code; a job's own notes are its claims and stay in its row. The probe also
    checks the walls from inside: it must see no process but its own, and must not write to ``/``."""
    read_end, write_end = os.pipe()
    try:
        process = subprocess.Popen([sys.executable, "-m", "pytest_mlcanon.grade.sandbox", str(write_end),
                                    json.dumps(asdict(spec))], pass_fds=(write_end,), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/",
                                   env=environment(os.environ))
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
    return Confinement([str(n) for n in answer["notes"]], [str(m) for m in answer["missing"]], str(answer["mode"]),
                       [str(k) for k in answer["switched_off"]])


def _walls_hold(done: Confinement) -> None:
    """Check from inside what the mode promises (a wall the kernel silently left open is missing)."""
    if done.mode == "none":
        return
    if any(m.startswith(("processes", "file system")) for m in done.missing):
        return  # already known to be open
    others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    if others:
        done.missing.append(f"processes (the probe saw {len(others)} other process(es))")
    try:
        fd = os.open("/mlcanon-probe", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        pass
    else:
        os.close(fd)
        os.unlink("/mlcanon-probe")
        done.missing.append("file system (the probe could write to /)")


def _probe_main(argv: list[str]) -> None:
    fd = int(argv[0])
    answer: dict[str, object]
    try:
        done = confine(SandboxSpec(**json.loads(argv[1])), fd)
        _walls_hold(done)
        answer = asdict(done)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(answer, handle)


if __name__ == "__main__":
    _probe_main(sys.argv[1:])
