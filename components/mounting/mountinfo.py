"""The mount table: what is mounted where, read from ``/proc/self/mountinfo`` (the paths unescaped),
and the checks the program makes with it: the filesystem mounted at a path (``mounted_at``: an rclone
mount is ``fuse.rclone``) and whether the mount root is a bind mount of itself (``is_self_bind``: the
shared bind that root-up makes).

Standard library only, Python 3.9+, nothing from the ``components`` package: a part of the mount
tool, shipped with mount_tool.py to remote serving hosts (HostTools). It is loaded as
``components.mounting.mountinfo`` in the program and, where mount_tool.py runs as a file, from beside it
(mount_tool.PARTS).
"""
from __future__ import annotations

import os
import re
from typing import List, NamedTuple, Optional, Sequence

FUSE = "fuse.rclone"


class Mount(NamedTuple):
    """One line of /proc/self/mountinfo (paths unescaped)."""
    dev: str        # major:minor of the filesystem
    root: str       # the folder of that filesystem shown here
    point: str      # where it is mounted
    fstype: str


_OCTAL = re.compile(r"\\([0-7]{3})")


def unescape(field: str) -> str:
    r"""A mountinfo path field as the path: the kernel writes space, tab, newline and backslash
    as octal escapes (``\040``, ``\011``, ``\012``, ``\134``)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> List[Mount]:
    """The mounts of a mountinfo text, in its order (later lines are mounted on top)."""
    table = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 7 or "-" not in parts[6:]:
            continue
        sep = parts.index("-", 6)
        fstype = parts[sep + 1] if sep + 1 < len(parts) else ""
        table.append(Mount(parts[2], unescape(parts[3]), unescape(parts[4]), unescape(fstype)))
    return table


def mount_table(path: str = "/proc/self/mountinfo") -> List[Mount]:
    """This process's mounts (empty when the table cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            return parse_mountinfo(fh.read())
    except OSError:
        return []


def mounted_at(path: str, table: Optional[Sequence[Mount]] = None) -> Optional[str]:
    """The filesystem type mounted exactly at ``path`` (the topmost one), or None."""
    target = os.path.realpath(path)
    fstype = None
    for m in mount_table() if table is None else table:
        if m.point == target:
            fstype = m.fstype
    return fstype


def is_self_bind(path: str, table: Optional[Sequence[Mount]] = None) -> bool:
    """``path`` is a bind mount of itself (the mount root this program makes shared): the mount at
    ``path`` shows, from the same filesystem, exactly the folder its parent mount has there. (The
    parent can itself be a bind mount, so the folder's path on its filesystem need not be ``path``.)"""
    target = os.path.realpath(path)
    here: Optional[Mount] = None
    parent: Optional[Mount] = None
    for m in mount_table() if table is None else table:
        if m.point == target:
            here = m
            continue
        prefix = "/" if m.point == "/" else m.point + "/"
        if (target + "/").startswith(prefix) and (parent is None or len(m.point) >= len(parent.point)):
            parent = m
    if here is None or parent is None:
        return False
    rel = target if parent.point == "/" else target[len(parent.point):]
    want = rel if parent.root == "/" else parent.root + rel
    return here.dev == parent.dev and here.root == want


def set_read_ahead(path: str, kb: int) -> Optional[str]:
    """The kernel's read-ahead of the filesystem mounted at ``path`` (its bdi, /sys/class/bdi/<major>:<minor>)
    set to ``kb`` KiB; with rclone mount2 this is what lets the kernel ask 1 MiB per FUSE read. None when
    done (or ``kb`` is 0: the kernel's own), else why not (the mount still works, at 128 KiB reads)."""
    if not kb:
        return None
    try:
        dev = os.stat(path).st_dev
        with open(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb", "w", encoding="ascii") as fh:
            fh.write(f"{int(kb)}\n")
    except OSError as exc:
        return f"cannot set the read-ahead of {path} to {kb} KiB: {exc.strerror or exc}"
    return None


def read_ahead(path: str) -> Optional[int]:
    """The read-ahead (KiB) of the filesystem mounted at ``path``, or None."""
    try:
        dev = os.stat(path).st_dev
        with open(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb", encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None
