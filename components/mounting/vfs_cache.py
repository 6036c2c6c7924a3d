"""The stack's rclone VFS cache folder (RV_CACHE_ROOT, mountCacheDir: one rclone --cache-dir per
model in it): ``cache-up`` makes it; ``cache-down`` removes what rclone and the local copies made in
it when RV_PURGE is "1" (purgeOnDestroy), else says where it is and how big; ``purge-order`` writes the
order `pulumi destroy` gives (PURGE_ORDERS), which wins over RV_PURGE while it is fresh;
``read_cache_ahead``: a mount's cached files read into the page cache (the keeper, once it has mounted).

Standard library only, Python 3.9+, nothing from the ``components`` package: a part of the mount
tool, shipped with mount_tool.py to remote serving hosts (HostTools). It is loaded as
``components.mounting.vfs_cache`` in the program and, where mount_tool.py runs as a file, from beside it
(mount_tool.PARTS).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import subprocess
import time
from typing import Mapping, Optional, Tuple

from .tool_base import _rmdir, sibling
from .warm import files_of

# written at the start of `pulumi destroy` (components/providers/purge_order.py): purgeOnDestroy as the
# configuration says then, which the state's RV_PURGE (the last up's) does not know. Root's, in root's own
# folder (never in the cache folder, which mountCacheDir may put where others write), one per cache folder.
PURGE_ORDERS = "/var/lib/rustfs-vllm/purge-orders"
PURGE_ORDER = ".rustfs-vllm-purge"   # where versions before issue 45 wrote it (in the cache folder): removed
PURGE_ORDER_FRESH_S = 3600           # an order older than this (a destroy that failed long ago) is ignored


# The read-ahead of a mount's cache (issue 46): after a host restart rclone's cache files are on the disk
# only, and vLLM's load through the mount waits on rclone's reads of them (6.34 GB, real RustFS, 3 rounds:
# load 1.47x local disk, against 1.21x with the files read ahead beside vLLM's boot in 3 s; docs/PERFORMANCE.md
# section 17). One WILLNEED reads no more than the disk's read-ahead size, so it is asked per MiB.
READ_AHEAD_CHUNK = 64 << 20     # waited for at its end, so the reads stay in order
READ_AHEAD_STEP = 1 << 20


def memory_budget() -> int:
    """Half the memory the kernel says is available (MemAvailable), in bytes; 0 when it cannot tell."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except (OSError, ValueError, IndexError):
        pass
    return 0


def read_cache_ahead(cache_dir: str, budget: Optional[int] = None) -> Tuple[int, int, float, str]:
    """The files rclone holds whole in ``cache_dir``/vfs (a mount's --cache-dir) read into the page cache
    by the kernel (POSIX_FADV_WILLNEED: no copy), in the warm-up's order (warm.files_of: the order vLLM
    opens them), up to ``budget`` bytes (default memory_budget(): a cache larger than memory would push
    out its own first files); a file only partly cached is left to the warm-up. (files, bytes, seconds,
    why it stopped short or "")."""
    start, budget = time.monotonic(), memory_budget() if budget is None else budget
    done, count, errors, folder = 0, 0, [], os.path.join(cache_dir, "vfs")
    if not os.path.isdir(folder):       # nothing cached yet (a first mount)
        return 0, 0, 0.0, ""
    for path, size in files_of(folder, errors):
        try:    # never a link's target, and a FIFO put there does not hang the read-ahead (issue 57)
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                continue            # a link: not a file rclone cached
            return count, done, time.monotonic() - start, f"{path}: {exc.strerror or exc}"
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_blocks * 512 < size - 4096:
                continue            # not a regular file, or partly cached (sparse): the warm-up fetches the rest
            if done + size > budget:
                return count, done, time.monotonic() - start, \
                    f"stopped at {budget / 1e9:.1f} GB, half the memory available"
            for off in range(0, size, READ_AHEAD_CHUNK):
                n = min(READ_AHEAD_CHUNK, size - off)
                for at in range(off, off + n, READ_AHEAD_STEP):
                    os.posix_fadvise(fd, at, min(READ_AHEAD_STEP, off + n - at), os.POSIX_FADV_WILLNEED)
                os.pread(fd, 1, off + n - 1)       # waits for the chunk's last page
            done, count = done + size, count + 1
        except OSError as exc:
            return count, done, time.monotonic() - start, f"{path}: {exc.strerror or exc}"
        finally:
            os.close(fd)
    return count, done, time.monotonic() - start, errors[0] if errors else ""


def order_file(cache_root: str) -> str:
    """The purge order of ``cache_root`` (mountCacheDir) on its host."""
    return f"{PURGE_ORDERS}/{hashlib.sha256(cache_root.encode()).hexdigest()[:24]}.json"


def write_order(cache_root: str, purge: bool) -> bool:
    """The order for ``cache_root`` written (when that folder is there: else nothing is cached to
    tell), under a new random name and renamed, never through a link; was it written?"""
    if not os.path.isdir(cache_root):
        return False
    sibling("keeper_tool").write_root_file(
        order_file(cache_root), json.dumps({"purge": purge, "at": time.time(), "cache_root": cache_root}).encode())
    return True


def purge_asked(env: Mapping[str, str], cache_root: str) -> bool:
    """purgeOnDestroy for what is under ``cache_root``: the destroy's order when there is a fresh one
    (root's, in root's folder, for this very folder), else RV_PURGE (the value of the last up)."""
    try:
        fd = sibling("keeper_tool").open_root_file(order_file(cache_root), os.O_RDONLY, private=True)
        with os.fdopen(fd, encoding="utf-8") as fh:
            order = json.load(fh)
        if time.time() - float(order["at"]) < PURGE_ORDER_FRESH_S and order.get("cache_root") == cache_root:
            return bool(order["purge"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return env.get("RV_PURGE", "0") == "1"


def purge_order(env: Mapping[str, str]) -> None:
    """The ``purge-order`` action (a remote host, told by `pulumi destroy`): RV_PURGE for RV_CACHE_ROOT."""
    root, purge = env["RV_CACHE_ROOT"], env.get("RV_PURGE", "0") == "1"
    print(f"purgeOnDestroy {str(purge).lower()} for {root}" if write_order(root, purge)
          else f"no rclone VFS cache at {root}: nothing to tell")


def cache_up(env: Mapping[str, str]) -> None:
    os.makedirs(env["RV_CACHE_ROOT"], exist_ok=True)
    print(f"rclone VFS caches under {env['RV_CACHE_ROOT']}")


def remove_under(root: str, name: str) -> None:
    """``root/name`` removed as what it is (a folder and all in it, or a link as a link), through a descriptor
    of ``root`` opened without following links: this runs as root, and a folder swapped for a link to
    elsewhere between the look and the removal is unlinked, never followed (shutil.rmtree with ``dir_fd``
    opens every folder with O_NOFOLLOW and checks it is the one it looked at)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            shutil.rmtree(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


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
    purge = purge_asked(env, root)
    for order in (order_file(root), os.path.join(root, PURGE_ORDER)):   # read: the destroy's order is done
        try:
            os.remove(order)
        except OSError:
            pass
    if not os.path.isdir(root):
        print(f"no rclone VFS cache at {root}")
        return
    size = _size_of(root)
    if not purge:
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
        else:
            remove_under(root, name)
    _rmdir(root)
    print(f"removed the rclone VFS cache at {root} ({size}), as purgeOnDestroy asks")
