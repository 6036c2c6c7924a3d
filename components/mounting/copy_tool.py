"""The node-local copy of a model (``loadFormat: local_copy``): the weights copied once per upload
revision from the bucket to the serving host's disk, verified against the upload manifest, so that
vLLM reads local disk instead of FUSE. The bucket stays the only source of truth: the copy is a
cache, made again when the model's revision changes or when it is lost.

Actions of ``scripts/rclone-mount`` (mount_tool.py dispatches ``copy-*`` here):

- ``copy-up``: ``rclone copy REMOTE:bucket/prefix`` into ``RV_COPY_ROOT/<revision>.partial`` (many
  ranged GETs in flight, straight from S3: no FUSE), then every file checked against RV_EXPECT
  (size and sha256), then renamed to ``RV_COPY_ROOT/<revision>`` with a ``.rustfs-vllm-copy.json``
  marker. A complete copy of that revision is kept as it is (a second ``up`` copies nothing); an
  interrupted one resumes (rclone skips the files it already has, the checks still run). Other
  revisions' folders are removed once the new one is complete (a running vLLM keeps reading the
  files it has open). One copy at a time per folder (``flock``).
- ``copy-down``: with RV_PURGE=1 (purgeOnDestroy) removes RV_COPY_ROOT; else says where the copy
  is and how big, and keeps it (an ``up`` later starts warm).

Variables (environment, or stdin with --env-stdin, like every action): RV_COPY_ROOT, RV_REVISION,
RV_REMOTE and RCLONE_CONFIG_<REMOTE>_*, RV_SOURCE (bucket/prefix), RV_RCLONE, RV_EXPECT
({file: [size, sha256]}), RV_COPY_FLAGS (rclone copy flags, one per line), RV_CA_CERT, RV_LOG,
RV_MARKER and RV_GENERATION (as for mounts: the program notices a lost copy), RV_PURGE, RV_TOKEN
(which copy resource this is: a replaced one's copy-down leaves the folder to its replacement).

Standard library only, Python 3.9+, nothing from the ``components`` package (shipped to remote
hosts beside mount_tool.py); helpers it shares with the mounts come from mount_tool, passed in.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Mapping, Sequence

MARKER = ".rustfs-vllm-copy.json"
LOCK = ".lock"
# the token (RV_TOKEN) of the copy resource that last made or found the copy: a replaced resource's
# delete, which runs after its replacement was made, leaves the folder to that newer one
OWNER = ".owner"
# rclone copy's parallelism when RV_COPY_FLAGS is empty: files in flight, and ranged GETs per big
# file (rclone's multi-thread download). Chosen by `make bench` (docs/PERFORMANCE.md section 14).
DEFAULT_COPY_FLAGS = ("--transfers", "4", "--multi-thread-streams", "8", "--multi-thread-cutoff", "64M")
HASH_WORKERS = 4
CHUNK = 8 * 2**20


class CopyError(Exception):
    """One line: what failed, why, what to do (mount_tool prints it as ``rclone-mount: ...``)."""


def expected(env: Mapping[str, str]) -> Dict[str, List[Any]]:
    return {str(k): list(v) for k, v in json.loads(env.get("RV_EXPECT") or "{}").items()}


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        while True:
            block = fh.read(CHUNK)
            if not block:
                return h.hexdigest()
            h.update(block)


def problems(folder: str, expect: Mapping[str, Sequence[Any]], hashes: bool = True) -> List[str]:
    """What in ``folder`` differs from the manifest: a missing file, a size, a sha256 (``hashes``)."""
    found: List[str] = []
    to_hash: List[str] = []
    for rel, (size, sha) in sorted(expect.items()):
        path = os.path.join(folder, rel)
        try:
            got = os.path.getsize(path)
        except OSError:
            found.append(f"{rel}: missing")
            continue
        if got != int(size):
            found.append(f"{rel}: {got} bytes, the upload has {size}")
        elif hashes and sha:
            to_hash.append(rel)
    with ThreadPoolExecutor(max_workers=HASH_WORKERS) as pool:   # hashlib releases the GIL: one file per core
        sums = dict(zip(to_hash, pool.map(lambda rel: _sha256(os.path.join(folder, rel)), to_hash)))
    found += [f"{rel}: sha256 {sums[rel][:12]}..., the upload has {expect[rel][1][:12]}..."
              for rel in to_hash if sums[rel] != expect[rel][1]]
    return found


def complete(folder: str, revision: str, expect: Mapping[str, Sequence[Any]]) -> bool:
    """A finished copy of ``revision``: its marker names it and every file has the manifest's size."""
    try:
        with open(os.path.join(folder, MARKER), encoding="utf-8") as fh:
            if json.load(fh).get("revision") != revision:
                return False
    except (OSError, ValueError, AttributeError):
        return False
    return not problems(folder, expect, hashes=False)


def _free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def bytes_in(folder: str) -> int:
    """The bytes of the files under ``folder``."""
    total = 0
    for dirpath, _, files in os.walk(folder):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:
                pass
    return total


def _room(root: str, partial: str, need: int) -> None:
    """Fail before copying when the disk cannot hold the model (what a resumed copy has counts)."""
    missing = need - bytes_in(partial)
    free = _free_bytes(root)
    if missing > free:
        raise CopyError(f"not enough disk for the local copy: {missing / 1e9:.2f} GB to copy into {root}, "
                        f"{free / 1e9:.2f} GB free there; free space or point mountCacheDir at a larger disk")


def _rclone_copy(env: Mapping[str, str], dest: str, mt: Any) -> None:
    remote, source = env["RV_REMOTE"], env["RV_SOURCE"]
    flags = [f for f in (env.get("RV_COPY_FLAGS") or "").split("\n") if f] or list(DEFAULT_COPY_FLAGS)
    cmd = [env.get("RV_RCLONE") or "rclone", "copy", f"{remote}:{source}", dest, "--config", "/dev/null",
           "--retries", "3", "--low-level-retries", "5", "--contimeout", "10s", *mt._ca_flags(env), *flags]
    log = mt.Log(env.get("RV_LOG") or "/dev/null")
    try:
        with os.fdopen(log.opened(), "ab") as out:
            proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.PIPE,
                                  env=mt.without(env, mt.DROPPED_FROM_RCLONE), check=False)
    except OSError as exc:
        raise CopyError(f"cannot run {cmd[0]}: {exc.strerror}") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip() or "no output"
        cause = mt.lsf_cause(err)
        endpoint = env.get(f"RCLONE_CONFIG_{remote}_ENDPOINT") or "the endpoint"
        raise CopyError(f"rclone could not copy {source} from {endpoint} to {dest}: {cause}; "
                        f"{mt.lsf_hint(cause, log.path)}")


def _prune(root: str, keep: str) -> List[str]:
    """Remove the other revisions' folders (complete or partial) under ``root``."""
    gone = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name in (keep, LOCK, OWNER) or not os.path.isdir(path) or os.path.islink(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        gone.append(name)
    return gone


def _own(env: Mapping[str, str], root: str) -> None:
    with open(os.path.join(root, OWNER), "w", encoding="utf-8") as fh:
        fh.write(env.get("RV_TOKEN", ""))


def _owner(root: str) -> str:
    try:
        with open(os.path.join(root, OWNER), encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _write_marker(env: Mapping[str, str], folder: str) -> None:
    marker = env.get("RV_MARKER")
    if not marker:
        return
    os.makedirs(os.path.dirname(marker) or ".", exist_ok=True)
    with open(marker, "w", encoding="utf-8") as fh:
        json.dump({"generation": int(env.get("RV_GENERATION") or 0), "copy": folder}, fh)
        fh.write("\n")


def copy_up(env: Mapping[str, str], mt: Any) -> None:
    """The model's revision on local disk at RV_COPY_ROOT/<revision>, verified; see the module doc."""
    root, revision = env["RV_COPY_ROOT"], env["RV_REVISION"]
    expect = expected(env)
    dest, partial = os.path.join(root, revision), os.path.join(root, revision + ".partial")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, LOCK), "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # another stack or run copying the same folder waits here
        if complete(dest, revision, expect):
            pruned = _prune(root, revision)
            _own(env, root)
            _write_marker(env, dest)
            print(f"local copy of {env.get('RV_SOURCE', revision)} at {dest} is complete (revision {revision}); "
                  f"nothing copied{'; removed older revisions ' + ', '.join(pruned) if pruned else ''}")
            return
        need = sum(int(size) for size, _ in expect.values())
        os.makedirs(partial, exist_ok=True)
        _room(root, partial, need)
        start = time.monotonic()
        _rclone_copy(env, partial, mt)
        copied_s = time.monotonic() - start
        found = problems(partial, expect)
        if found:
            shutil.rmtree(partial, ignore_errors=True)    # never keep bytes that differ from the upload
            raise CopyError(f"the copy of {env['RV_SOURCE']} differs from the upload ({'; '.join(found[:3])}"
                            f"{'; ...' if len(found) > 3 else ''}); it was removed: run pulumi up again, and if "
                            "it repeats, check the bucket's objects (were they changed outside pulumi?)")
        with open(os.path.join(partial, MARKER), "w", encoding="utf-8") as fh:
            json.dump({"revision": revision, "source": env["RV_SOURCE"], "files": expect}, fh)
        if os.path.isdir(dest):
            shutil.rmtree(dest)                   # an incomplete or older copy under the same name
        os.rename(partial, dest)
        pruned = _prune(root, revision)
        _own(env, root)
        _write_marker(env, dest)
    total_s = time.monotonic() - start
    print(f"copied {len(expect)} files ({need / 1e9:.2f} GB) of {env['RV_SOURCE']} to {dest} in {copied_s:.1f} s "
          f"({need / 1e6 / max(copied_s, 1e-3):.0f} MB/s), sha256 verified in {total_s - copied_s:.1f} s"
          f"{'; removed older revisions ' + ', '.join(pruned) if pruned else ''}")


def copy_down(env: Mapping[str, str], mt: Any) -> None:
    """purgeOnDestroy: remove the copies; else keep them and say where and how big."""
    root = env["RV_COPY_ROOT"]
    if not os.path.isdir(root):
        mt.remove_marker(env)
        print(f"no local copy at {root}")
        return
    owner = _owner(root)
    if owner and env.get("RV_TOKEN") and owner != env["RV_TOKEN"]:
        print(f"left the local copy at {root} to the copy that replaced this one")   # a replacement, not a destroy
        return
    mt.remove_marker(env)
    size = mt._size_of(root)
    # the stack's cache root is two levels up (<mountCacheDir>/<prefix>/copy): the destroy's order is there
    if mt.purge_asked(env, os.path.dirname(os.path.dirname(os.path.normpath(root)))):
        shutil.rmtree(root)
        print(f"removed the local copy at {root} ({size}), as purgeOnDestroy asks")
        return
    print(f"kept the local copy at {root} ({size} on disk; the next up reuses it): remove it with rm -rf {root}, "
          "or set purgeOnDestroy to remove it with the stack")


ACTIONS = {"copy-up": copy_up, "copy-down": copy_down}


def run(action: str, env: Mapping[str, str], mt: Any) -> None:
    """``action`` with mount_tool's helpers ``mt``; a CopyError becomes mount_tool's one-line Fail."""
    for name in ("RV_COPY_ROOT",) + (("RV_REVISION", "RV_REMOTE", "RV_SOURCE") if action == "copy-up" else ()):
        if not env.get(name):
            raise mt.Fail(f"{name}: parameter null or not set")
    try:
        ACTIONS[action](env, mt)
    except CopyError as exc:
        raise mt.Fail(str(exc)) from None


if __name__ == "__main__":
    sys.exit("copy_tool.py runs through scripts/rclone-mount copy-up|copy-down")
