"""The mount root (RV_ROOT, mountPath), which makes the models' mounts visible to containers: root-up
makes it a bind mount of itself with shared propagation (``mount --bind`` and ``--make-rshared``),
so that a mount made, re-made or removed under it after a container started (containers bind it
``rslave``) reaches that container; root-down removes it with whatever is left under it (mounts,
keepers, supervisors, rclone processes).

Standard library only, Python 3.9+, nothing from the ``components`` package: a part of the mount
tool, shipped with mount_tool.py to remote serving hosts (HostTools). It is loaded as
``components.mounting.mount_root`` in the program and, where mount_tool.py runs as a file, from beside it
(mount_tool.PARTS).
"""
from __future__ import annotations

import os
from typing import Mapping

from .mount_procs import _kill, mount_state, rclone_pids, supervisor_pids, unmount_one
from .mountinfo import FUSE, is_self_bind, mount_table, mounted_at
from .tool_base import Fail, _checked, _quiet, _remote, _rmdir, sibling


def root_up(env: Mapping[str, str]) -> None:
    """Make RV_ROOT a shared bind mount of itself (idempotent)."""
    raw = env["RV_ROOT"]
    root = os.path.realpath(raw)
    if os.path.exists(root) and not os.path.isdir(root):
        raise Fail(f"{raw} exists and is not a folder")
    os.makedirs(root, exist_ok=True)
    if mounted_at(root) == FUSE:
        unmount_one(root, _remote(env))   # a whole-bucket mount made by an older version of this program
    if not is_self_bind(root):
        fstype = mounted_at(root)
        if fstype:
            raise Fail(f"{raw} already has a {fstype} filesystem mounted; choose another rustfs-vllm:mountPath")
        _checked(["mount", "--bind", root, root])
    _checked(["mount", "--make-rshared", root])
    print(f"mount root {raw} ready (shared)")


def root_down(env: Mapping[str, str]) -> None:
    """Remove the mount root. Model mounts go first (they depend on the root); a leftover one goes
    too, dead or alive (a mount whose ``up`` failed or was killed is in no state), and so does an
    rclone or a supervisor left for a path under the root with nothing mounted."""
    raw = env["RV_ROOT"]
    root = os.path.realpath(raw)
    for m in [m.point for m in mount_table() if m.fstype == FUSE and m.point.startswith(root + "/")]:
        state = mount_state(m, _remote(env))
        unmount_one(m, _remote(env))
        print(f"removed a leftover {state or 'stale'} rclone mount at {m} (not in the stack's state)")
    keepers = sibling("keeper_tool")
    if keepers.docker_socket():
        for c in keepers.containers({"rustfs-vllm.role": "mount"}):
            point = (c.get("Labels") or {}).get(keepers.MOUNT_LABEL, "")
            if point.startswith(root + "/"):
                print(f"removed a leftover mount keeper for {point}: {keepers.remove_keepers(point)}")
    for pid in sorted(set(supervisor_pids(root, under=True) + rclone_pids(root, under=True))):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")[:160]
        except OSError:
            cmdline = ""
        print(f"stopped a leftover rclone process {pid} for a mount under {raw}: {cmdline}")
        _kill([pid])
    if is_self_bind(root) and not _quiet(["umount", root]):
        _checked(["umount", "-l", root])
    try:
        entries = list(os.scandir(root))
    except OSError:
        entries = []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _rmdir(entry.path)
    _rmdir(root)                          # only when empty: never anything with files
    print(f"mount root {raw} removed")
