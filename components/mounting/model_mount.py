"""A model's mount: the ``mount`` action (the mount point made ready, the preflight, rclone started
under its keeper or its supervisor, then the wait until the model's files are visible through the
mount with the uploaded content; a step that fails leaves nothing) and the ``unmount`` action.

Standard library only, Python 3.9+, nothing from the ``components`` package: a part of the mount
tool, shipped with mount_tool.py to remote serving hosts (HostTools). It is loaded as
``components.mounting.model_mount`` in the program and, where mount_tool.py runs as a file, from beside it
(mount_tool.PARTS).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

from . import warm
from .mount_hints import preflight
from .mount_procs import mount_state, unmount_one
from .mount_root import root_up
from .mountinfo import FUSE, is_self_bind, mounted_at, set_read_ahead
from .supervisor import Log, start_keeper, start_supervisor
from .tool_base import Fail, _need, _remote, _rmdir, sibling


def fail_mount(path: str, message: str, remote: Optional[str] = None) -> Fail:
    """A mount step that fails leaves nothing: its supervisor and rclone stopped, the mount (even a
    dead one) gone, the empty mount point removed; the Fail to raise reports the failure."""
    unmount_one(path, remote)
    _rmdir(path)
    return Fail(message)


def visibility_problem(root: str, rel: str, size: int, sha: str) -> Optional[str]:
    """Why ``rel`` is not visible under ``root`` with that size (and sha256 when given), or None."""
    path = os.path.join(root, rel)
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{rel}: {exc.strerror}"
    if st.st_size != size:
        return f"{rel}: size {st.st_size}, expected {size} (stale?)"
    if sha:
        h = hashlib.sha256()
        try:
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        except OSError as exc:
            return f"{rel}: {exc.strerror}"
        if h.hexdigest() != sha:
            return f"{rel}: sha256 {h.hexdigest()[:12]}..., expected {sha[:12]}... (stale?)"
    return None


def wait_visible(root: str, seconds: int, expect: Mapping[str, Sequence[Any]]) -> Optional[str]:
    """Wait until a model's files are visible through its mount with the uploaded content.

    ``expect`` is {relative path: [size, sha256 or ""]}: every file must be there with that size,
    and the ones given a sha256 must hash to it (the small files: config and tokenizer; weights are
    checked by size, hashing them would read gigabytes). A stale directory or file cache shows as a
    wrong size or hash, and the wait goes on until the deadline. None when all match, else the
    first mismatch as a ``model-visible: ...`` line."""
    seconds = max(1, int(seconds))
    deadline = time.monotonic() + seconds
    pending = dict(expect)
    while True:
        for rel, (size, sha) in list(pending.items()):
            if visibility_problem(root, rel, int(size), str(sha)) is None:
                del pending[rel]
        if not pending:
            return None
        if time.monotonic() > deadline:
            rel, (size, sha) = next(iter(pending.items()))
            problem = visibility_problem(root, rel, int(size), str(sha))
            return f"model-visible: {problem} through {root} after {seconds} s"
        time.sleep(0.5)


def fuse_device() -> bool:
    """/dev/fuse is here, a character device."""
    try:
        return stat.S_ISCHR(os.stat("/dev/fuse").st_mode)
    except OSError:
        return False


def _mount_point_ready(env: Mapping[str, str], mount: str) -> None:
    """The root is ours, nothing else is mounted at ``mount``, an earlier mount of ours there is
    gone (other flags, other credentials, or dead), FUSE and rclone are here, the point is empty."""
    if not is_self_bind(env["RV_ROOT"]):   # lost with a host restart: made again, as the keepers do
        root_up(env)
    fstype = mounted_at(mount)
    if fstype and fstype != FUSE:
        raise Fail(f"{env['RV_MOUNT']} already has a {fstype} filesystem mounted")
    unmount_one(mount, _remote(env))
    if not fuse_device():
        raise Fail("/dev/fuse is missing: FUSE is unavailable on this host")
    if not shutil.which("fusermount3"):
        raise Fail("fusermount3 not found (install fuse3)")
    rclone = env.get("RV_RCLONE") or "rclone"
    if not shutil.which(rclone):
        raise Fail(f"rclone not found at '{rclone}' (run scripts/bootstrap)")
    _need(env, "RV_CACHE_DIR")
    os.makedirs(mount, exist_ok=True)
    os.makedirs(env["RV_CACHE_DIR"], exist_ok=True)
    try:
        entries = os.listdir(mount)
    except OSError:
        entries = []
    if entries:
        raise Fail(f"{env['RV_MOUNT']} is not empty; the mount would hide its files")


def _ca_flags(env: Mapping[str, str]) -> List[str]:
    ca = env.get("RV_CA_CERT") or ""
    if not ca:
        return []
    if not os.access(ca, os.R_OK):
        raise Fail(f"the CA bundle {ca} (rustfs-vllm:rustfsCaBundle) cannot be read")
    return ["--ca-cert", ca]


def _wait_mounted(env: Mapping[str, str], mount: str, deadline: float, log: Log, keeper: str = "") -> None:
    """Until rclone has mounted at ``mount``: fails at the deadline, or at once when rclone exits
    before mounting (a bad flag, a bad cache folder: no use waiting) or its keeper stops."""
    exited = f"rustfs-vllm: rclone for {mount} exited"
    wait, source, point = env.get("RV_WAIT_SECONDS") or "60", env["RV_SOURCE"], env["RV_MOUNT"]
    while mounted_at(mount) != FUSE:
        trouble = sibling("keeper_tool").keeper_trouble(keeper) if keeper else None
        if trouble:
            raise fail_mount(mount, trouble, _remote(env))
        if time.monotonic() >= deadline:
            raise fail_mount(mount, f"rclone did not mount {source} at {point} within {wait} s; last lines of "
                                    f"{log.path}:\n{log.lines()}", _remote(env))
        if exited in log.text():
            words = log.lines(lambda ln: "rustfs-vllm: rclone for" not in ln)
            raise fail_mount(mount, f"rclone exited instead of mounting {source} at {point}; its own words "
                                    f"(from {log.path}):\n{words}", _remote(env))
        time.sleep(0.2)


def _start_and_wait(env: Mapping[str, str], point: str, cmd: List[str], log: Log, deadline: float,
                    expect: Mapping[str, Sequence[Any]]) -> None:
    """rclone started under its keeper (or supervisor); back when the model is visible through it."""
    try:
        keeper = start_keeper(env, point, cmd, log.path)
        if not keeper:
            start_supervisor(point, cmd, log.path, env)
    except OSError as exc:
        what = "the mount's keeper" if env.get("RV_KEEPER_IMAGE") else "rclone's supervisor"
        raise fail_mount(point, f"cannot start {what}: {exc}", _remote(env)) from None
    except sibling("keeper_tool").DockerError as exc:
        raise fail_mount(point, f"cannot start the mount's keeper container: {exc}", _remote(env)) from None
    _wait_mounted(env, point, deadline, log, keeper)
    slow = set_read_ahead(point, int(env.get("RV_READ_AHEAD_KB") or 0))
    if slow:     # the mount works (at the kernel's read-ahead): said in its log, not a failure
        log.append(f"rustfs-vllm: {slow}")
    unseen = wait_visible(point, int(deadline - time.monotonic()), expect)
    if unseen:
        print(unseen, file=sys.stderr)
        raise fail_mount(point, f"the model is not visible through the mount at {env['RV_MOUNT']} with the uploaded "
                                f"content (was it uploaded?); last lines of rclone's log {log.path}:\n{log.lines()}",
                         _remote(env))


def mount(env: Mapping[str, str]) -> None:
    """Mount RV_SOURCE read-only at RV_MOUNT under its supervisor; return when the model is visible."""
    _need(env, "RV_MOUNT", "RV_REMOTE", "RV_SOURCE")
    point = os.path.realpath(env["RV_MOUNT"])
    again = cached_before(env.get("RV_CACHE_DIR") or "")
    _mount_point_ready(env, point)
    ca_flags = _ca_flags(env)
    flags = ca_flags + [f for f in (env.get("RV_FLAGS") or "").split("\n") if f]
    expect = json.loads(env.get("RV_EXPECT") or "{}")
    wait = int(env.get("RV_WAIT_SECONDS") or 60)
    log = Log(env.get("RV_LOG") or "/dev/null")
    problem = preflight(env, ca_flags, log.path)
    if problem:
        raise fail_mount(point, problem, _remote(env))
    rclone = shutil.which(env.get("RV_RCLONE") or "rclone") or env.get("RV_RCLONE") or "rclone"   # the keeper's PATH differs
    command = env.get("RV_MOUNT_COMMAND") or "mount"
    if command not in ("mount", "mount2"):
        raise fail_mount(point, f"RV_MOUNT_COMMAND={command!r}: mount or mount2", _remote(env))
    cmd = [rclone, command, f"{env['RV_REMOTE']}:{env['RV_SOURCE']}", point, "--read-only", "--allow-other",
           "--config", "/dev/null", "--cache-dir", env["RV_CACHE_DIR"], *flags,
           *(sibling("keeper_tool").log_flags(log.path, int(env.get("RV_LOG_MAX_MB") or 0))
             if log.path != os.devnull else [])]
    deadline = time.monotonic() + wait
    try:
        _start_and_wait(env, point, cmd, log, deadline, expect)
    except Fail:
        sibling("keeper_tool").remove_spec(env.get("RV_SPEC") or "")   # it holds the keys: not left behind
        raise
    marker = env.get("RV_MARKER")
    if marker:
        os.makedirs(os.path.dirname(marker) or ".", exist_ok=True)
        with open(marker, "w", encoding="utf-8") as fh:
            fh.write(f'{{"generation": {env.get("RV_GENERATION") or 0}, "mount": {json.dumps(point)}}}\n')
    print(f"mounted {env['RV_SOURCE']} read-only at {env['RV_MOUNT']}")
    if again and (env.get("RV_WARM") or "1") != "0":
        warm_now(point, log, int(env.get("RV_WARM_SECONDS") or WARM_SECONDS))


# A mount made again over a cache that had this model (a new revision, new keys or flags, a lost mount):
# its container is there and serving, so the warm-up runs before `up` goes on to replace that container;
# a first mount leaves it to the container's start (it overlaps vLLM's boot). At most this long:
WARM_SECONDS = 300


def cached_before(cache_dir: str) -> bool:
    """rclone's VFS cache for this mount holds some file already (the model was mounted here before)."""
    for _here, _dirs, names in os.walk(os.path.join(cache_dir, "vfs")):
        if names:
            return True
    return False


def warm_now(point: str, log: Log, seconds: int) -> None:
    """Warm the mount's files into rclone's VFS cache (warm.py), best effort; the result's one line goes
    to the mount's log and to stdout."""
    line = warm.report(point, warm.warm(point, seconds))
    print(line)
    log.append(line)


def warm_mount(env: Mapping[str, str]) -> None:
    """The ``warm`` action: RV_MOUNT's files into rclone's VFS cache now (at most RV_WARM_SECONDS)."""
    _need(env, "RV_MOUNT")
    warm_now(os.path.realpath(env["RV_MOUNT"]), Log(env.get("RV_LOG") or "/dev/null"),
             int(env.get("RV_WARM_SECONDS") or WARM_SECONDS))


def unmount(env: Mapping[str, str]) -> None:
    """Stop RV_MOUNT's rclone and supervisor and unmount it, saying what was there."""
    _need(env, "RV_MOUNT")
    point = os.path.realpath(env["RV_MOUNT"])
    state = mount_state(point, _remote(env))
    unmount_one(point, _remote(env))
    _rmdir(point)                         # the mount point, if empty; never anything with files
    remove_marker(env)
    for spec in (env.get("RV_SPEC"), env.get("RV_SPEC_BEFORE")):
        sibling("keeper_tool").remove_spec(spec or "")   # the keeper's spec: it holds the keys
    if state == "live":
        print(f"unmounted {env['RV_MOUNT']}")
    elif state == "dead":
        print(f"removed the dead rclone mount at {env['RV_MOUNT']} (its rclone had died)")
    else:
        print(f"nothing was mounted at {env['RV_MOUNT']}")


def mount_states(env: Mapping[str, str]) -> Dict[str, Dict[str, Any]]:
    """RV_MOUNTS ({key: {"marker": file, "mount": path}}) as {key: {"generation": the marker's or
    None, "state": "live", "dead" or ""}}: what the program asks of a remote host's mounts at preview
    (``mount-states``; it changes nothing)."""
    out: Dict[str, Dict[str, Any]] = {}
    for key, where in json.loads(env.get("RV_MOUNTS") or "{}").items():
        try:
            with open(where["marker"], encoding="utf-8") as fh:
                generation: Optional[int] = int(json.load(fh).get("generation", 0))
        except (OSError, ValueError, AttributeError):
            generation = None
        out[key] = {"generation": generation, "state": mount_state(os.path.realpath(where["mount"]), timeout=10)}
    return out


def remove_marker(env: Mapping[str, str]) -> None:
    """RV_MARKER gone (a mount's or a copy's): the program then asks for no next generation."""
    marker = env.get("RV_MARKER")
    if marker:
        try:
            os.remove(marker)
        except FileNotFoundError:
            pass
