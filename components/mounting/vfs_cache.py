"""The stack's rclone VFS cache folder (RV_CACHE_ROOT, mountCacheDir: one rclone --cache-dir per
model in it): ``cache-up`` makes it; ``cache-down`` removes what rclone and the local copies made in
it when RV_PURGE is "1" (purgeOnDestroy), else says where it is and how big.

Standard library only, Python 3.9+, nothing from the ``components`` package: a part of the mount
tool, shipped with mount_tool.py to remote serving hosts (HostTools). It is loaded as
``components.mounting.vfs_cache`` in the program and, where mount_tool.py runs as a file, from beside it
(mount_tool.PARTS).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from typing import Mapping

from .tool_base import _rmdir

# written at the start of `pulumi destroy` (components/providers/purge_order.py): purgeOnDestroy as the
# configuration says then, which the state's RV_PURGE (the last up's) does not know
PURGE_ORDER = ".rustfs-vllm-purge"
PURGE_ORDER_FRESH_S = 6 * 3600       # an order older than this (a destroy that failed long ago) is ignored


def purge_asked(env: Mapping[str, str], cache_root: str) -> bool:
    """purgeOnDestroy for what is under ``cache_root``: the destroy's order when there is a fresh one,
    else RV_PURGE (the value of the last up)."""
    try:
        with open(os.path.join(cache_root, PURGE_ORDER), encoding="utf-8") as fh:
            order = json.load(fh)
        if time.time() - float(order["at"]) < PURGE_ORDER_FRESH_S:
            return bool(order["purge"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return env.get("RV_PURGE", "0") == "1"


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
    if not purge_asked(env, root):
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
    try:
        os.remove(os.path.join(root, PURGE_ORDER))
    except OSError:
        pass
    _rmdir(root)
    print(f"removed the rclone VFS cache at {root} ({size}), as purgeOnDestroy asks")
