"""The stack's rclone VFS cache folder (RV_CACHE_ROOT, mountCacheDir: one rclone --cache-dir per
model in it): ``cache-up`` makes it; ``cache-down`` removes what rclone and the local copies made in
it when RV_PURGE is "1" (purgeOnDestroy), else says where it is and how big.

Standard library only, Python 3.9+, nothing from the ``components`` package: a part of the mount
tool, shipped with mount_tool.py to remote serving hosts (HostTools). It is loaded as
``components.mounting.vfs_cache`` in the program and, where mount_tool.py runs as a file, from beside it
(mount_tool.PARTS).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Mapping

from .tool_base import _rmdir


def cache_up(env: Mapping[str, str]) -> None:
    os.makedirs(env["RV_CACHE_ROOT"], exist_ok=True)
    print(f"rclone VFS caches under {env['RV_CACHE_ROOT']}")


def _size_of(path: str) -> str:
    """``du -sh``'s size of ``path`` ("" when du cannot tell)."""
    try:
        out = subprocess.run(["du", "-sh", path], capture_output=True, text=True, check=False).stdout
    except OSError:
        return ""
    return out.split("\t", 1)[0].strip()


def cache_down(env: Mapping[str, str]) -> None:
    """Only what rclone and the local copies made is removed: each model's --cache-dir holds vfs/,
    vfsMeta/ and copy/ (loadFormat local_copy) and nothing else; a folder with anything else in it,
    or files at the top, are left alone."""
    root = env["RV_CACHE_ROOT"]
    if not os.path.isdir(root):
        print(f"no rclone VFS cache at {root}")
        return
    size = _size_of(root)
    if env.get("RV_PURGE", "0") != "1":
        print(f"kept the rclone VFS cache at {root} ({size} on disk): remove it with rm -rf {root}, or set "
              "purgeOnDestroy to remove it with the stack")
        return
    for name in sorted(os.listdir(root)):
        d = f"{root}/{name}/"
        if name.startswith(".") or not os.path.isdir(d):
            continue
        other = next((e for e in os.listdir(d) if e not in ("vfs", "vfsMeta", "copy")), None)
        if other is not None:
            print(f"left {d} alone: it holds files rclone did not make ({d}{other})")
        elif os.path.islink(d.rstrip("/")):
            os.remove(d.rstrip("/"))
        else:
            shutil.rmtree(d)
    _rmdir(root)
    print(f"removed the rclone VFS cache at {root} ({size}), as purgeOnDestroy asks")
