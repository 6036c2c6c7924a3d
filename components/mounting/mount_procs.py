"""The processes behind a model's mount: finding its rclone and its supervisor (by their command
lines in /proc), telling a live mount from a dead one (``mount_state``), and stopping them to unmount
it (``unmount_one``: its keeper container first, then the supervisor and rclone, then the mount).

Standard library only, Python 3.9+, nothing from the ``components`` package: a part of the mount
tool, shipped with mount_tool.py to remote serving hosts (HostTools). It is loaded as
``components.mounting.mount_procs`` in the program and, where mount_tool.py runs as a file, from beside it
(mount_tool.PARTS).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Iterator, List, Optional, Sequence, Tuple

from .mountinfo import FUSE, mounted_at
from .supervisor import SUPERVISOR
from .tool_base import Fail, _checked, _quiet, sibling


def processes() -> Iterator[Tuple[int, List[str]]]:
    """(pid, argv) of every other process whose command line can be read now."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        parts = raw.split(b"\0")
        if parts and not parts[-1]:
            parts.pop()
        argv = [a.decode("utf-8", "surrogateescape") for a in parts]
        if argv:
            yield int(entry), argv


def _is_at(arg: str, target: str, under: bool) -> bool:
    return arg.startswith(target + "/") if under else arg == target


def is_supervisor(argv: Sequence[str], target: str, under: bool = False) -> bool:
    """``argv`` is the supervisor of the mount at ``target`` (``under``: of one below it); also one
    of the bash script this module replaced (``bash -c ... rustfs-vllm-mount-supervisor MOUNT``)."""
    return any(a == SUPERVISOR and i + 1 < len(argv) and _is_at(argv[i + 1], target, under)
               for i, a in enumerate(argv))


def is_rclone_mount(argv: Sequence[str], target: str, remote: Optional[str] = None, under: bool = False) -> bool:
    """``argv`` is ``.../rclone mount|mount2 REMOTE:<source> TARGET <flags>`` (any remote when None;
    ``under``: at a path below ``target``). A supervisor is not one, though its argv holds rclone's."""
    if SUPERVISOR in argv:
        return False
    for i in range(len(argv) - 4):
        source, point = argv[i + 2], argv[i + 3]
        if argv[i].endswith("rclone") and argv[i + 1] in ("mount", "mount2") and _is_at(point, target, under) and \
                (source.startswith(remote + ":") if remote else ":" in source):
            return True
    return False


def supervisor_pids(path: str, under: bool = False) -> List[int]:
    """Supervisors of the mount at ``path`` (``under``: of any mount below ``path``)."""
    target = os.path.realpath(path)
    return [pid for pid, argv in processes() if is_supervisor(argv, target, under)]


def rclone_pids(path: str, remote: Optional[str] = None, under: bool = False) -> List[int]:
    """rclone processes mounting at ``path`` (see ``is_rclone_mount``)."""
    target = os.path.realpath(path)
    return [pid for pid, argv in processes() if is_rclone_mount(argv, target, remote, under)]


def _kill(pids: Sequence[int], sig: int = signal.SIGTERM) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def answers(path: str, timeout: float = 5) -> bool:
    """A listing of ``path`` succeeds within ``timeout`` s (a dead FUSE mount answers 'Transport
    endpoint is not connected', or hangs). In a child process: a hang never blocks this one."""
    try:
        return subprocess.run(["ls", "-A", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=timeout, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def mount_state(path: str, remote: Optional[str] = None, timeout: float = 5) -> str:
    """What is at ``path`` now: "live", "dead" (an rclone mount whose rclone is gone or not
    answering) or "" (no rclone mount)."""
    if mounted_at(path) != FUSE:
        return ""
    return "live" if rclone_pids(path, remote) and answers(path, timeout) else "dead"


def unmount_one(path: str, remote: Optional[str] = None) -> None:
    """Stop the keeper (or the supervisor) and rclone of the mount at ``path`` and unmount it (also
    a dead one). The keeper container goes first: its restart policy would start it again."""
    keepers = sibling("keeper_tool")
    try:
        keepers.remove_keepers(os.path.realpath(path))
    except keepers.DockerError as exc:
        raise Fail(f"cannot remove the keeper of the mount at {path}: {exc}") from None
    _kill(supervisor_pids(path))
    _kill(rclone_pids(path, remote))
    for _ in range(50):
        if not rclone_pids(path, remote) and not supervisor_pids(path):
            break
        time.sleep(0.1)
    _kill(rclone_pids(path, remote) + supervisor_pids(path), signal.SIGKILL)
    fstype = mounted_at(path)
    if fstype:
        if fstype != FUSE:
            raise Fail(f"{path} has a {fstype} filesystem mounted, not our rclone mount; leaving it alone")
        if not _quiet(["fusermount3", "-u", path]) and not _quiet(["fusermount3", "-uz", path]):
            _checked(["umount", "-l", path])
