#!/usr/bin/env python3
"""The read-only rclone FUSE mounts of the models, and their VFS cache: the one implementation of
``scripts/rclone-mount root-up|root-down|mount|unmount|cache-up|cache-down [--env-stdin]``, and of
the checks the program makes on them (what is mounted at a path, the mount root's self-bind, a
live mount).

Standard library only, Python 3.9 or newer, and nothing from the ``components`` package: HostTools
ships this file alone (beside the ``rclone-mount`` launcher) to remote serving hosts, which only
have ``python3``.

Layout: the mount root RV_ROOT (mountPath) is a bind mount of itself with shared propagation;
each model's prefix is mounted read-only at RV_ROOT/<prefix> by its own rclone. Containers bind
RV_ROOT with rslave propagation, so a mount made, re-made or removed under it after a container
started reaches that container: re-mounting one model (rclone died, new credentials, new
flags) never needs its container replaced, and adding a model never touches the others.

Called by the program's pulumi-command Commands. Everything comes from the environment, never
from argv, so ``ps`` shows no credential:

- RV_ROOT: the mount root (root-up, root-down, mount, unmount)
- RV_RCLONE: rclone binary; RV_REMOTE: remote name (RCLONE_CONFIG_<REMOTE>_* hold the endpoint
  and credentials); RV_SOURCE: bucket/prefix to mount; RV_MOUNT: mount point (RV_ROOT/<prefix>);
  RV_CACHE_DIR: rclone --cache-dir for this mount; RV_FLAGS: extra mount flags, one per line
- RV_CA_CERT: PEM CA bundle that verifies an https endpoint (rclone --ca-cert); rclone ignores
  AWS_CA_BUNDLE, and the supervisor's environment drops it anyway
- RV_EXPECT: JSON {file: [size, sha256 or ""]} that must be visible, with that content, before
  ``mount`` returns (sha256 is checked for files it is given for); RV_WAIT_SECONDS: how long to
  wait for them (default 60)
- RV_LOG: rclone's log file
- RV_MARKER: file recording the mount's generation RV_GENERATION (written on mount, removed on
  unmount): the program compares it with what is mounted to notice a dead mount
- RV_KEEPER_IMAGE, RV_KEEPER_NAME, RV_SPEC, RV_STACK: the mount's keeper container (keeper_tool.py):
  its image, its name, the mode-0600 spec it reads (rclone's argv and credentials) and the stack
  whose vLLM containers it starts once mounted; without them rclone runs under the supervisor
  below instead (a mount that a host restart does not bring back)
- RV_CACHE_ROOT: the stack's cache folder (mountCacheDir), one rclone --cache-dir per model in it;
  RV_PURGE: "1": cache-down removes the caches (purgeOnDestroy); else it says where they are

rclone runs in the foreground under a small supervisor (this file, run as
``mount_tool.py rustfs-vllm-mount-supervisor MOUNT RCLONE mount ...`` in its own session): when
rclone dies the supervisor unmounts the dead mount and mounts again within seconds, without
waiting for ``pulumi up``.

On a remote serving host the program runs the launcher's copy there (HostTools installs it) as
``rclone-mount ACTION --env-stdin``: the variables above then come on stdin, one NAME=<base64>
line each, so neither the SSH command line nor sshd's AcceptEnv ever sees a credential.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, TextIO, Tuple

SUPERVISOR = "rustfs-vllm-mount-supervisor"
FUSE = "fuse.rclone"
USAGE = "usage: rclone-mount root-up|root-down|mount|unmount|cache-up|cache-down|copy-up|copy-down [--env-stdin]"
DROPPED_FROM_RCLONE = ("AWS_CA_BUNDLE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")

# What a user does about an S3 error; shared with components/providers/s3.explain (boto3's errors)
CA_HINT = "set rustfs-vllm:rustfsCaBundle to the PEM file of the CA that signed"
AUTH_HINT = "check rustfs-vllm:rustfsAccessKey and rustfs-vllm:rustfsSecretKey"
ENDPOINT_HINT = "check rustfs-vllm:rustfsEndpoint and that the server is running"
AUTH_CODES = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "InvalidToken")
TLS_WORDS = ("x509", "certificate")
UNREACHABLE_WORDS = ("connection refused", "no such host", "timeout")


class Fail(Exception):
    """The action failed: ``rclone-mount: <message>`` on stderr, exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- mount table
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


# --------------------------------------------------------------------------- processes
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
    """``argv`` is ``.../rclone mount REMOTE:<source> TARGET <flags>`` (any remote when None;
    ``under``: at a path below ``target``). A supervisor is not one, though its argv holds rclone's."""
    if SUPERVISOR in argv:
        return False
    for i in range(len(argv) - 4):
        source, point = argv[i + 2], argv[i + 3]
        if argv[i].endswith("rclone") and argv[i + 1] == "mount" and _is_at(point, target, under) and \
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


# --------------------------------------------------------------------------- mount state
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


def _quiet(cmd: Sequence[str]) -> bool:
    """Run ``cmd`` with its errors hidden; did it succeed?"""
    try:
        return subprocess.run(list(cmd), stderr=subprocess.DEVNULL, check=False).returncode == 0
    except OSError:
        return False


def _checked(cmd: Sequence[str]) -> None:
    """Run ``cmd`` (its errors shown); a failure fails the action."""
    try:
        code = subprocess.run(list(cmd), check=False).returncode
    except OSError as exc:
        raise Fail(f"cannot run {cmd[0]}: {exc.strerror}") from None
    if code != 0:
        raise Fail(f"{' '.join(cmd)} failed (exit status {code})", code)


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


def _rmdir(path: str) -> None:
    """Remove ``path`` if it is an empty folder; never anything with files."""
    try:
        os.rmdir(path)
    except OSError:
        pass


def fail_mount(path: str, message: str, remote: Optional[str] = None) -> Fail:
    """A mount step that fails leaves nothing: its supervisor and rclone stopped, the mount (even a
    dead one) gone, the empty mount point removed; the Fail to raise reports the failure."""
    unmount_one(path, remote)
    _rmdir(path)
    return Fail(message)


# --------------------------------------------------------------------------- model visibility
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


# --------------------------------------------------------------------------- the rclone preflight
def lsf_cause(err: str) -> str:
    """The cause in rclone's error output: its last 'last error was: ...', else its last line."""
    lines = err.rstrip("\n").split("\n")
    causes = [ln.rsplit("last error was: ", 1)[1] for ln in lines if "last error was: " in ln]
    return causes[-1] if causes else lines[-1]


def lsf_hint(cause: str, log: str) -> str:
    """What to do about a failed listing's cause."""
    if any(w in cause for w in TLS_WORDS):
        return f"{CA_HINT} the endpoint's certificate"
    if any(c in cause for c in AUTH_CODES):
        return AUTH_HINT
    if any(w in cause for w in UNREACHABLE_WORDS):
        return ENDPOINT_HINT
    return f"see {log}"


def without(env: Mapping[str, str], names: Sequence[str]) -> Dict[str, str]:
    return {k: v for k, v in env.items() if k not in names}


def preflight(env: Mapping[str, str], ca_flags: List[str], log: str) -> Optional[str]:
    """One listing with the same remote (about 50 ms), so a TLS or credential problem fails here in
    rclone's own words, instead of as a mount that never shows the model. None when it lists."""
    remote, source = env["RV_REMOTE"], env["RV_SOURCE"]
    cmd = [env.get("RV_RCLONE") or "rclone", "lsf", f"{remote}:{source}", "--config", "/dev/null",
           "--max-depth", "1", "--low-level-retries", "2", "--retries", "1", "--contimeout", "10s", *ca_flags]
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env=without(env, ("AWS_CA_BUNDLE",)), check=False)
    except OSError as exc:
        err = f"cannot run {cmd[0]}: {exc.strerror}"
    else:
        if proc.returncode == 0:
            return None
        err = proc.stderr.decode("utf-8", "replace")
    cause = lsf_cause(err)
    endpoint = env.get(f"RCLONE_CONFIG_{remote}_ENDPOINT") or "the endpoint"
    return f"rclone cannot list {source} at {endpoint}: {cause}; {lsf_hint(cause, log)}"


# --------------------------------------------------------------------------- the supervisor
def supervise(mount: str, cmd: List[str]) -> int:
    """rclone in the foreground; when it exits (killed, crashed), the dead mount is removed and
    rclone starts again after 2 s. Runs until it is killed (unmount stops it)."""
    while True:
        try:
            subprocess.run(cmd, check=False)
        except OSError as exc:
            print(f"rustfs-vllm: cannot run {cmd[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        _quiet(["fusermount3", "-uz", mount])
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        print(f"{stamp} rustfs-vllm: rclone for {mount} exited; mounting again in 2 s", file=sys.stderr, flush=True)
        time.sleep(2)


def start_supervisor(mount: str, cmd: List[str], log: str, env: Mapping[str, str]) -> None:
    """The supervisor of ``cmd`` in a session of its own: it outlives the Pulumi run that started
    it. Its environment holds rclone's config variables and none of the AWS ones (AWS_CA_BUNDLE in
    particular breaks some rclone builds); its output goes to the log, never to our caller, and it
    keeps no other file of ours open."""
    argv = [sys.executable or "python3", os.path.realpath(__file__), SUPERVISOR, mount, *cmd]
    with open(log, "ab") as out:
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, close_fds=True,
                         start_new_session=True, env=without(env, DROPPED_FROM_RCLONE))


class Log:
    """rclone's log file, read from where this attempt started."""

    def __init__(self, path: str) -> None:
        self.path = path
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        try:
            with open(path, "ab"):
                pass
        except OSError:
            pass
        self.start = self._size()

    def _size(self) -> int:
        try:
            return os.path.getsize(self.path) if os.path.isfile(self.path) else 0
        except OSError:
            return 0

    def text(self) -> str:
        """What this attempt wrote."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.start)
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def lines(self, keep: Callable[[str], bool] = lambda line: True, last: int = 15) -> str:
        """The last ``last`` lines this attempt wrote that ``keep`` accepts."""
        return "\n".join([ln for ln in self.text().splitlines() if keep(ln)][-last:])


# --------------------------------------------------------------------------- actions
def _need(env: Mapping[str, str], *names: str) -> None:
    for name in names:
        if not env.get(name):
            raise Fail(f"{name}: parameter null or not set")


def _remote(env: Mapping[str, str]) -> Optional[str]:
    return env.get("RV_REMOTE") or None


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


def start_keeper(env: Mapping[str, str], point: str, cmd: List[str], log: str) -> str:
    """The mount's keeper container (RV_KEEPER_IMAGE, RV_KEEPER_NAME, RV_SPEC, RV_STACK: keeper_tool),
    its spec written first; "" when no keeper is asked for (the supervisor is started instead)."""
    image, name, spec = env.get("RV_KEEPER_IMAGE"), env.get("RV_KEEPER_NAME"), env.get("RV_SPEC")
    if not image or not name or not spec:
        return ""
    tools = sibling("keeper_tool")
    tools.write_spec(spec, {"mount": point, "root": os.path.realpath(env["RV_ROOT"]), "cmd": cmd, "log": log,
                            "stack": env.get("RV_STACK") or "",
                            "env": {k: v for k, v in env.items() if k.startswith("RCLONE_CONFIG_")}})
    argv = [sys.executable or "python3", os.path.realpath(__file__), SUPERVISOR, point, "--keep", spec]
    tools.start_keeper(name, image, point, env.get("RV_STACK") or "", argv)
    return name


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


def mount(env: Mapping[str, str]) -> None:
    """Mount RV_SOURCE read-only at RV_MOUNT under its supervisor; return when the model is visible."""
    _need(env, "RV_MOUNT", "RV_REMOTE", "RV_SOURCE")
    point = os.path.realpath(env["RV_MOUNT"])
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
    cmd = [rclone, "mount", f"{env['RV_REMOTE']}:{env['RV_SOURCE']}", point, "--read-only", "--allow-other",
           "--config", "/dev/null", "--cache-dir", env["RV_CACHE_DIR"], *flags]
    deadline = time.monotonic() + wait
    try:
        keeper = start_keeper(env, point, cmd, log.path)
        if not keeper:
            start_supervisor(point, cmd, log.path, env)
    except OSError as exc:
        raise fail_mount(point, f"cannot start rclone's supervisor: {exc}", _remote(env)) from None
    except sibling("keeper_tool").DockerError as exc:
        raise fail_mount(point, f"cannot start the mount's keeper container: {exc}", _remote(env)) from None
    _wait_mounted(env, point, deadline, log, keeper)
    unseen = wait_visible(point, int(deadline - time.monotonic()), expect)
    if unseen:
        print(unseen, file=sys.stderr)
        raise fail_mount(point, f"the model is not visible through the mount at {env['RV_MOUNT']} with the uploaded "
                                f"content (was it uploaded?); last lines of rclone's log {log.path}:\n{log.lines()}",
                         _remote(env))
    marker = env.get("RV_MARKER")
    if marker:
        os.makedirs(os.path.dirname(marker) or ".", exist_ok=True)
        with open(marker, "w", encoding="utf-8") as fh:
            fh.write(f'{{"generation": {env.get("RV_GENERATION") or 0}, "mount": {json.dumps(point)}}}\n')
    print(f"mounted {env['RV_SOURCE']} read-only at {env['RV_MOUNT']}")


def unmount(env: Mapping[str, str]) -> None:
    """Stop RV_MOUNT's rclone and supervisor and unmount it, saying what was there."""
    _need(env, "RV_MOUNT")
    point = os.path.realpath(env["RV_MOUNT"])
    state = mount_state(point, _remote(env))
    unmount_one(point, _remote(env))
    _rmdir(point)                         # the mount point, if empty; never anything with files
    remove_marker(env)
    if env.get("RV_SPEC") and os.path.exists(env["RV_SPEC"]):
        os.remove(env["RV_SPEC"])         # the keeper's spec: it holds the keys
    if state == "live":
        print(f"unmounted {env['RV_MOUNT']}")
    elif state == "dead":
        print(f"removed the dead rclone mount at {env['RV_MOUNT']} (its rclone had died)")
    else:
        print(f"nothing was mounted at {env['RV_MOUNT']}")


def remove_marker(env: Mapping[str, str]) -> None:
    """RV_MARKER gone (a mount's or a copy's): the program then asks for no next generation."""
    marker = env.get("RV_MARKER")
    if marker:
        try:
            os.remove(marker)
        except FileNotFoundError:
            pass


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


ACTIONS: Dict[str, Callable[[Mapping[str, str]], None]] = {
    "root-up": root_up, "root-down": root_down, "mount": mount, "unmount": unmount,
    "cache-up": cache_up, "cache-down": cache_down,
}


# --------------------------------------------------------------------------- entry point
def read_env_stdin(stream: TextIO, env: Dict[str, str]) -> None:
    """``NAME=<base64 of the value>`` lines into ``env``: RV_* and RCLONE_CONFIG_* only."""
    for line in stream:
        name, _, value = line.rstrip("\n").partition("=")
        if name.startswith(("RV_", "RCLONE_CONFIG_")):
            try:
                env[name] = base64.b64decode(value).decode("utf-8", "surrogateescape")
            except (binascii.Error, ValueError):
                raise Fail(f"{name} on stdin is not base64") from None
        elif name:
            print(f"rclone-mount: ignoring unexpected variable {name} on stdin", file=sys.stderr)


_SIBLINGS: Dict[str, Any] = {}


def sibling(name: str) -> Any:
    """``<name>.py`` beside this file (here and in a host's tools folder): copy_tool (the node-local
    copies), keeper_tool (the mount keepers)."""
    if name in _SIBLINGS:
        return _SIBLINGS[name]
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.realpath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"rustfs_vllm_{name}", path)
    if spec is None or spec.loader is None or not os.path.exists(path):
        raise Fail(f"{path} is missing: the host's tools are incomplete (run pulumi up again)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _SIBLINGS[name] = module
    return module


def run(action: str, env: Dict[str, str]) -> None:
    """Run one action with ``env`` (the process environment, or what came on stdin on top of it)."""
    if action.startswith("copy-"):
        sibling("copy_tool").run(action, env, SimpleNamespace(**globals()))   # this module's helpers
        return
    if action.startswith("cache-"):
        _need(env, "RV_CACHE_ROOT")
        env["RV_ROOT"] = env.get("RV_ROOT") or "/nonexistent"
    _need(env, "RV_ROOT")
    handler = ACTIONS.get(action)
    if handler is None:
        raise Fail(f"unknown action {action}")
    handler(env)


def main(argv: Sequence[str]) -> int:
    """``ACTION [--env-stdin]``, or the supervisor's ``rustfs-vllm-mount-supervisor MOUNT CMD...``."""
    if len(argv) == 4 and argv[0] == SUPERVISOR and argv[2] == "--keep":
        return sibling("keeper_tool").keep(argv[3], SimpleNamespace(**globals()))
    if len(argv) >= 3 and argv[0] == SUPERVISOR:
        return supervise(argv[1], list(argv[2:]))
    try:
        if not argv or not argv[0]:
            raise Fail(USAGE)
        env = dict(os.environ)
        if len(argv) > 1 and argv[1] == "--env-stdin":
            read_env_stdin(sys.stdin, env)
        run(argv[0], env)
    except Fail as exc:
        sys.stdout.flush()
        print(f"rclone-mount: {exc}", file=sys.stderr)
        return exc.code
    except (OSError, ValueError) as exc:     # a folder it cannot make, a bad RV_EXPECT or RV_WAIT_SECONDS
        sys.stdout.flush()
        print(f"rclone-mount: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
