"""Run a command as an unprivileged user (uid ``TEACHER``), from root: ``python unprivileged.py [--no-userns] CMD...``.

The command runs in a user namespace of its own whose uid and gid map is the identity, so the teacher's uid
inside is the same outside, and in a mount namespace where the folders of this machine that hide the
Python installation from other users (``/root`` is 0700) are replaced by a tmpfs showing only the way
to it. With ``--no-userns`` the namespace allows no further user namespace
(``user.max_user_namespaces = 0`` in it): the command sees a kernel that refuses unprivileged user
namespaces, as some distributions configure. Nothing outside the namespaces changes.

Used by the grading tests to run ``mlcanon grade`` as a teacher without root would.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 4096, 8192, 16384, 1 << 18
#: The teacher's uid. Not the kernel's overflow uid (65534, ``nobody``): in a fresh user namespace an
#: unmapped id reads as 65534, so a grader running as ``nobody`` hid a map written with the ids read
#: after the unshare, which no other teacher could make (the fresh-user trial of stop 32, uid 1000).
TEACHER = 4321


def _mount(libc: ctypes.CDLL, source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    encoded = [s.encode() if s is not None else None for s in (source, target, fstype, data)]
    if libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]) != 0:
        raise OSError(ctypes.get_errno(), f"mount {target}")


def _reach_python(libc: ctypes.CDLL) -> None:
    """Cover each ancestor of the interpreter that others cannot enter with a tmpfs holding only the
    next folder on the way (bound back from a staging point)."""
    parts = os.path.realpath(sys.executable).split("/")
    for index in range(2, len(parts)):
        ancestor, child = "/".join(parts[:index]), "/".join(parts[:index + 1])
        if os.stat(ancestor).st_mode & 0o001:
            continue
        stage = f"/tmp/.unprivileged-stage-{os.getpid()}"
        os.makedirs(stage, exist_ok=True)
        _mount(libc, child, stage, None, MS_BIND | MS_REC)
        _mount(libc, "tmpfs", ancestor, "tmpfs", 0, "mode=755")
        os.makedirs(child, exist_ok=True)
        _mount(libc, stage, child, None, MS_MOVE)
        os.rmdir(stage)


def main(argv: list[str]) -> int:
    if os.geteuid() != 0:
        raise SystemExit("unprivileged.py must be started by root")
    no_userns = bool(argv) and argv[0] == "--no-userns"
    command = argv[1:] if no_userns else argv
    libc = ctypes.CDLL(None, use_errno=True)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
                raise OSError(ctypes.get_errno(), "unshare")
            os.write(ready_w, b"x")
            os.read(go_r, 1)  # the parent has written the uid and gid maps
            _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
            _reach_python(libc)
            if no_userns:
                with open("/proc/sys/user/max_user_namespaces", "w", encoding="ascii") as handle:
                    handle.write("0")
            os.setgroups([])
            os.setresgid(TEACHER, TEACHER, TEACHER)
            os.setresuid(TEACHER, TEACHER, TEACHER)
            os.execvp(command[0], command)
        except BaseException as exc:  # noqa: BLE001 - reported, then the child ends
            print(f"unprivileged.py: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            os._exit(127)
    os.read(ready_r, 1)
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w", encoding="ascii") as handle:
            handle.write("0 0 65536\n")
    os.write(go_w, b"x")
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
