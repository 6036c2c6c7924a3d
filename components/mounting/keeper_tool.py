"""Mount keepers: each model's rclone mount kept by a Docker container with a restart policy, so that
the host brings its mounts back after a restart of the host or of its Docker engine, with no
``pulumi`` run (the Docker engine is the one service manager every Docker host has).

The keeper is a container of the stack's ``rcloneImage`` (ours: rclone, fuse3 and util-linux on
Debian minbase; never the vLLM image) that enters the host's mount namespace through its own
parent, the containerd shim, and there runs, with an empty environment, the mount tool that the
``mount`` action installed root-owned outside any checkout (``TOOLS_HOME``: a folder per content
digest, with a copy of the rclone binary) as ``python3 -I mount_tool.py
rustfs-vllm-mount-supervisor MOUNT --keep SPEC``:

1. the mount root made a shared bind mount of itself again when it is not one (a restart lost it);
2. a dead mount at MOUNT removed, rclone started in the foreground (network: the host's);
3. once rclone has mounted, the stack's vLLM containers that read this root and whose start failed
   (Docker refuses a ``rslave`` bind under a root that is not a shared mount, as after a restart
   when they start before their keeper) are started again, in that order;
4. rclone watched: when it exits, or the mount or the root's self-bind is gone, it mounts again
   after a capped exponential backoff (2 s doubling to 60 s; a mount that held for 5 minutes resets
   it); after ``MAX_FAILURES`` failures in a row it gives up: its last line says so with rclone's
   last error, and it exits with status 0 (GAVE_UP), which the restart policy ``on-failure`` does not
   restart: the keeper stays down (``docker ps -a``: Exited (0)) until ``pulumi up``, whose preview
   names the mount and that line (mounts.py), makes it again. On SIGTERM (``docker stop``, the Docker
   engine stopping with the host) it unmounts and exits with status STOPPED (143), so that the engine
   starts it again when it starts (a ``docker stop`` by a person is never restarted). rclone logs to
   the mount's log with its own rotation (``--log-file-max-size``, one older file): bounded while the
   mount is up.

SPEC is a mode-0600 JSON file on the host, root's, outside any checkout (written with
``O_EXCL|O_NOFOLLOW`` under a random name, then renamed), with rclone's argv and environment
(``RCLONE_CONFIG_*``, the keys among them): the keeper's own argv, environment and ``docker
inspect`` hold no credential.

Root's paths (what root runs or writes at every keeper start, with nobody running ``pulumi``): the
spec's folder (under /var/lib/rustfs-vllm) and the log's (LOGS_HOME, /var/log/rustfs-vllm) must be
root's with mode 0700 and every folder above them root's and not writable by group or others; they
are opened one step at a time, never through a symbolic link, and the files in them with
``O_NOFOLLOW`` (a plain file of root's with one link). The spec must be mode 0600 and rclone (its
``cmd``) root's alone. A spec that fails a check is refused with one line in ``docker logs`` and the
keeper stays down.

Privileges (each tried on this project's machines, docs/RELIABILITY.md): every capability dropped
but SYS_ADMIN (mount, setns), SYS_PTRACE (open the shim's namespace: refused without it) and
SYS_CHROOT (setns into a mount namespace: refused without it); ``--pid host`` (the only stable
handle on the host's mount namespace: Docker refuses a bind of /proc/1/ns/mnt); /dev/fuse;
no-new-privileges; Docker's default seccomp profile (it allows setns and mount with SYS_ADMIN);
AppArmor unconfined (docker-default refuses mount on hosts with AppArmor); no init process. CPU weight
FETCH_CPU_SHARES (below): vLLM's boot comes before the fetch when the host's CPUs are all busy.
``--privileged`` is not used: it fails on hosts that withhold a capability from the Docker engine
("unable to apply caps"), as these machines do.

Standard library only, Python 3.9+, nothing from ``components`` (shipped to remote hosts beside
mount_tool.py); helpers it shares with the mounts come from mount_tool, passed in as ``h``.
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.parse
from typing import Any, Dict, List, Mapping, Optional, Tuple

SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")
MOUNT_LABEL = "rustfs-vllm.mount"
CAPABILITIES = ["SYS_ADMIN", "SYS_PTRACE", "SYS_CHROOT"]
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# into the host's mount namespace (the shim's), with an empty environment but the host's usual PATH:
# nothing of the image's environment (LD_PRELOAD, PYTHON*, ...) reaches what runs on the host
# A keeper that cannot enter it (a privilege withheld) says so and stays down (exit 0: not restarted).
ENTER_HOST = ('nsenter -t "$PPID" -m -- true || { echo "rustfs-vllm: refused to start: cannot enter the host\'s '
              'mount namespace (above); the keeper stays down" >&2; exit 0; }; '
              f'exec nsenter -t "$PPID" -m -- /usr/bin/env -i PATH={HOST_PATH} "$@"')
# what root runs at every keeper start, installed by the mount action root-owned, one folder per
# content digest (never in a checkout: its owner could change what root runs, and a moved checkout
# would leave keepers failing after a reboot)
TOOLS_HOME = "/usr/local/lib/rustfs-vllm"
WATCH_SECONDS = 2.0
BACKOFF_FIRST, BACKOFF_MAX = 2.0, 60.0     # seconds between mount attempts: doubled after each failure
HEALTHY_SECONDS = 300.0                    # a mount that held this long resets the backoff
MAX_FAILURES = 6                           # failures in a row before the keeper gives up (and stays down)
LOG_MAX_MB = 8                             # the mount's log: rclone rotates it above this (one older file kept)
LOG_MAX_BYTES = LOG_MAX_MB * 2**20         # our own lines' bound, between attempts
GAVE_UP, STOPPED, REFUSED = 0, 143, 0      # exit statuses: on-failure restarts only STOPPED
RESTART_POLICY = {"Name": "on-failure"}
# The fetch's CPU weight on a serving host (issue 46): the keeper's container (rclone runs in its cgroup:
# tried, /proc/<rclone>/cgroup names the keeper's) and a RustFS container the stack runs there
# (components.docker.s3_server), against Docker's default 1024 for vLLM's containers. A weight counts only
# while every core is busy: then vLLM's boot beside the warm-up comes first. Measured (6.34 GB model, cold,
# real RustFS, docs/PERFORMANCE.md section 17): vLLM began to load 4.3 s after local disk's start at 64,
# 3.6 s at 16, 6.3-7.0 s at 1024 (the same within the noise at 16 and 64). 64 keeps the fetch 64/1152 of
# the cores each against one container that spins (on 2 cores about 90 MB/s, worked out from RustFS's 1.2
# CPU-seconds per GB), never nothing.
FETCH_CPU_SHARES = 64
# root's folder for the mounts' logs (never a checkout: the keeper writes there as root at every start)
LOGS_HOME = "/var/log/rustfs-vllm"


class DockerError(Exception):
    """The Docker engine refused or could not be reached."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = 60) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def docker_socket() -> Optional[str]:
    """The Docker engine's socket on this host, or None when there is none."""
    for path in SOCKETS:
        if os.path.exists(path):
            return path
    return None


def api(method: str, path: str, body: Optional[Mapping[str, Any]] = None,
        sock: Optional[str] = None) -> Tuple[int, Any]:
    """One Docker Engine API call: (status, decoded JSON or text)."""
    where = sock or docker_socket()
    if where is None:
        raise DockerError("no Docker engine socket on this host (" + ", ".join(SOCKETS) + ")")
    conn = _UnixConnection(where)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        resp = conn.getresponse()
        raw = resp.read()
    except OSError as exc:
        raise DockerError(f"the Docker engine at {where} did not answer: {exc}") from None
    finally:
        conn.close()
    text = raw.decode("utf-8", "replace")
    try:
        return resp.status, json.loads(text) if text.strip() else None
    except ValueError:
        return resp.status, text


def _message(answer: Any) -> str:
    return answer.get("message", "") if isinstance(answer, dict) else str(answer)


def containers(labels: Mapping[str, str], sock: Optional[str] = None) -> List[Dict[str, Any]]:
    """Every container (running or not) with all of ``labels``."""
    filters = json.dumps({"label": [f"{k}={v}" for k, v in sorted(labels.items())]})
    status, answer = api("GET", "/containers/json?all=1&filters=" + urllib.parse.quote(filters), sock=sock)
    if status != 200:
        raise DockerError(f"listing containers failed: {_message(answer)}")
    return list(answer or [])


def remove_keepers(point: str) -> List[str]:
    """Force-remove the keeper container(s) of the mount at ``point`` (none when there is no Docker
    engine here); their names."""
    if docker_socket() is None:
        return []
    removed = []
    for c in containers({MOUNT_LABEL: point}):
        status, answer = api("DELETE", f"/containers/{c['Id']}?force=1")
        if status not in (204, 404):
            raise DockerError(f"removing the mount keeper {c['Names']} failed: {_message(answer)}")
        removed.append((c.get("Names") or [c["Id"][:12]])[0].lstrip("/"))
    return removed


def _new_file(path: str, data: bytes, mode: int) -> None:
    """``data`` into a file that did not exist (``O_EXCL|O_NOFOLLOW``: never through a link planted
    there), with ``mode``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)


def write_spec(path: str, spec: Mapping[str, Any]) -> None:
    """The keeper's SPEC, readable by root only (it holds rclone's credentials)."""
    write_root_file(path, json.dumps(spec).encode())


def write_root_file(path: str, data: bytes) -> None:
    """``data`` as ``path``, mode 0600, in its root_folder (NotRoots says why not): written under a new
    random name (never through a link), then renamed over ``path``."""
    os.close(root_folder(os.path.dirname(path)))
    tmp = f"{path}.{secrets.token_hex(8)}.tmp"
    try:
        _new_file(tmp, data, 0o600)
        os.replace(tmp, path)
    except OSError:
        if os.path.lexists(tmp):
            os.remove(tmp)
        raise


def remove_spec(path: str) -> None:
    """The keeper's SPEC gone (unmount, a failed mount): no file with the keys is left behind; its
    folder and the stack's folder above it too when nothing else is in them."""
    if path and os.path.lexists(path):
        os.remove(path)
        for folder in (os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
            try:
                os.rmdir(folder)
            except OSError:
                break


def _root_only(path: str) -> bool:
    """``path`` is root's and nobody else can write it (what root runs must be)."""
    st = os.lstat(path)
    return st.st_uid == 0 and not st.st_mode & 0o022 and not stat.S_ISLNK(st.st_mode)


class NotRoots(OSError):
    """A path that root must not use: not root's alone, or a symbolic link."""


def root_folder(path: str, make: bool = True) -> int:
    """An open descriptor of the folder ``path``: every folder above it root's and not writable by
    group or others, ``path`` itself root's with mode 0700 (made so when missing and ``make``), each
    opened in turn without following a symbolic link. NotRoots says which folder is wrong and how."""
    if not os.path.isabs(path):
        raise NotRoots(f"{path} is not an absolute path")
    names = [n for n in path.split("/") if n]
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    walked = ""
    try:
        for i, name in enumerate(names):
            walked += "/" + name
            last = i == len(names) - 1
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                inner = os.open(name, flags, dir_fd=fd)
            except FileNotFoundError:
                if not make:
                    raise
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                inner = os.open(name, flags, dir_fd=fd)
            except OSError as exc:
                if os.path.islink(walked):
                    raise NotRoots(f"{walked} is a symbolic link (to {os.readlink(walked)})") from None
                raise NotRoots(f"{walked} is not a folder ({exc.strerror})") from None
            os.close(fd)
            fd = inner
            st = os.fstat(fd)
            if st.st_uid != 0:
                raise NotRoots(f"{walked} is owned by uid {st.st_uid}, not root")
            if st.st_mode & (0o077 if last else 0o022):
                raise NotRoots(f"{walked} has mode {stat.S_IMODE(st.st_mode):04o}"
                               f" ({'not 0700' if last else 'others can write it'})")
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_root_file(path: str, flags: int, mode: int = 0o600, private: bool = False) -> int:
    """``path`` opened with ``flags`` in its root_folder, never through a link (O_NOFOLLOW): a plain
    file of root's with one link (``private``: no bit for group or others either)."""
    folder = root_folder(os.path.dirname(path))
    try:
        try:
            fd = os.open(os.path.basename(path), flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder)
        except OSError as exc:
            if os.path.islink(path):
                raise NotRoots(f"{path} is a symbolic link (to {os.readlink(path)})") from None
            raise
    finally:
        os.close(folder)
    st = os.fstat(fd)
    why = ("not a plain file" if not stat.S_ISREG(st.st_mode) else f"owned by uid {st.st_uid}, not root"
           if st.st_uid != 0 else f"{st.st_nlink} links" if st.st_nlink != 1 else
           f"mode {stat.S_IMODE(st.st_mode):04o}, not 0600" if private and st.st_mode & 0o077 else "")
    if why:
        os.close(fd)
        raise NotRoots(f"{path} is {why}")
    return fd


def append_line(path: str, line: str) -> None:
    """One line at the end of the log ``path`` in root's folder (best effort: a log that cannot be
    written, or is not root's alone, is skipped)."""
    try:
        fd = open_root_file(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    except OSError:
        return
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(line.rstrip("\n") + "\n")


def log_flags(log: str, max_mb: int = 0) -> List[str]:
    """rclone's own log file and its rotation: the log stays under about 2 x ``max_mb`` (LOG_MAX_MB)
    while the mount is up (rclone rotates it in whole MiB; one older file kept)."""
    return ["--log-file", log, "--log-file-max-size", f"{max_mb or LOG_MAX_MB}M", "--log-file-max-backups", "1"]


def _install(name: str, blobs: Mapping[str, bytes], mode: int) -> str:
    """``blobs`` ({file: bytes}) as TOOLS_HOME/<name>-<digest>/, root-owned; reused when it is there
    with those bytes. Its path."""
    digest = hashlib.sha256()
    for file in sorted(blobs):
        digest.update(file.encode() + b"\0" + hashlib.sha256(blobs[file]).digest())
    target = os.path.join(TOOLS_HOME, f"{name}-{digest.hexdigest()[:16]}")
    os.makedirs(TOOLS_HOME, mode=0o755, exist_ok=True)
    if not _root_only(TOOLS_HOME):
        raise OSError(f"{TOOLS_HOME} is not root's alone (owner or mode): refusing to install what root runs there")

    def intact() -> bool:
        try:
            for file, data in blobs.items():
                with open(os.path.join(target, file), "rb") as fh:
                    if fh.read() != data or not _root_only(os.path.join(target, file)):
                        return False
            return _root_only(target)
        except OSError:
            return False

    if os.path.isdir(target) and intact():
        return target
    tmp = f"{target}.{secrets.token_hex(8)}.tmp"
    os.mkdir(tmp, 0o755)
    try:
        for file, data in blobs.items():
            _new_file(os.path.join(tmp, file), data, mode)
        if os.path.lexists(target):
            shutil.rmtree(target) if os.path.isdir(target) and not os.path.islink(target) else os.remove(target)
        os.rename(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not intact():     # not another mount installing the same bytes at the same time
            raise
    return target


def install(tool_dir: str, rclone: str) -> Tuple[str, str]:
    """The mount tool (every ``*.py`` of ``tool_dir``) and the ``rclone`` binary installed root-owned
    under TOOLS_HOME: (the tool's folder, the installed rclone)."""
    tools = {}
    for file in sorted(os.listdir(tool_dir)):
        if file.endswith(".py") and file != "__init__.py":
            with open(os.path.join(tool_dir, file), "rb") as fh:
                tools[file] = fh.read()
    with open(rclone, "rb") as fh:
        binary = fh.read()
    return _install("tools", tools, 0o644), os.path.join(_install("rclone", {"rclone": binary}, 0o755), "rclone")


def host_python() -> str:
    """The host's own python3 (on its usual PATH, never a virtualenv's)."""
    found = shutil.which("python3", path=HOST_PATH)
    if not found:
        raise OSError(f"python3 is not on the host's PATH ({HOST_PATH}); the mount keepers run the mount tool with it")
    return found


def rotate_log(path: str) -> None:
    """The log moved to ``<path>.1`` in its root folder when it is above LOG_MAX_BYTES (one older
    file kept; never through a link)."""
    try:
        folder = root_folder(os.path.dirname(path))
    except OSError:
        return
    name = os.path.basename(path)
    try:
        if os.stat(name, dir_fd=folder, follow_symlinks=False).st_size > LOG_MAX_BYTES:
            os.replace(name, f"{name}.1", src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        pass
    finally:
        os.close(folder)


def keeper_body(image: str, point: str, stack: str, argv: List[str]) -> Dict[str, Any]:
    """The keeper container's create request: its image, the least it needs (see the module's text)."""
    return {
        "Image": image, "Entrypoint": ["/bin/sh", "-c", ENTER_HOST, "rustfs-vllm-keeper"], "Cmd": argv,
        "Env": [], "Labels": {MOUNT_LABEL: point, "rustfs-vllm.role": "mount", "rustfs-vllm.stack": stack},
        "HostConfig": {
            "PidMode": "host", "NetworkMode": "host", "CapDrop": ["ALL"], "CapAdd": CAPABILITIES,
            "SecurityOpt": ["apparmor=unconfined", "no-new-privileges"], "Init": False,
            "Devices": [{"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse", "CgroupPermissions": "rwm"}],
            "RestartPolicy": RESTART_POLICY, "CpuShares": FETCH_CPU_SHARES,
            "LogConfig": {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "2"}},
        },
    }


def start_keeper(name: str, image: str, point: str, stack: str, argv: List[str],
                 body: Optional[Dict[str, Any]] = None) -> str:
    """Create and start the keeper container ``name`` running ``argv`` in the host's mount
    namespace (``body``: keeper_body's, or one given); its id. An older container of that name is
    removed first."""
    api("DELETE", f"/containers/{urllib.parse.quote(name)}?force=1")
    body = body or keeper_body(image, point, stack, argv)
    status, answer = api("POST", "/containers/create?name=" + urllib.parse.quote(name), body)
    if status == 404:
        raise DockerError(f"the keeper's image {image} is not on this host (pulumi up pulls it: rcloneImage)")
    if status != 201:
        raise DockerError(f"creating the mount keeper {name} failed: {_message(answer)}")
    cid = answer["Id"]
    status, answer = api("POST", f"/containers/{cid}/start")
    if status not in (204, 304):
        raise DockerError(f"starting the mount keeper {name} failed: {_message(answer)}")
    return cid


def keeper_trouble(name: str) -> Optional[str]:
    """Why the keeper ``name`` is not running (with the last lines it printed), or None."""
    status, answer = api("GET", f"/containers/{urllib.parse.quote(name)}/json")
    if status != 200:
        return f"the mount keeper {name} is gone ({_message(answer)})"
    state = answer.get("State") or {}
    if state.get("Running") and not state.get("Restarting"):
        return None
    status, raw = api("GET", f"/containers/{urllib.parse.quote(name)}/logs?stdout=1&stderr=1&tail=15")
    lines = _demux(raw if isinstance(raw, str) else json.dumps(raw))
    return (f"the mount keeper {name} is not running (exit status {state.get('ExitCode')}"
            f"{', ' + state['Error'] if state.get('Error') else ''}); it printed:\n{lines}")


def keeper_down(name: str) -> str:
    """Why the keeper ``name`` is down, in one line (its last words: gave up, refused its spec), or ""
    when it is running, gone or there is no Docker engine here."""
    if docker_socket() is None:
        return ""
    try:
        status, answer = api("GET", f"/containers/{urllib.parse.quote(name)}/json")
        state = (answer or {}).get("State") or {} if status == 200 else {}
        if status != 200 or state.get("Running"):
            return ""
        # (the root step's own lines go to stdout, which Python flushes only at the keeper's exit: they come
        # after its last words, six of them for six tries; tried: tail=5 held none of the keeper's lines)
        status, raw = api("GET", f"/containers/{urllib.parse.quote(name)}/logs?stdout=1&stderr=1&tail=60")
    except DockerError:
        return ""
    lines = [ln.split("rustfs-vllm: ", 1)[-1] for ln in _demux(raw if isinstance(raw, str) else "").splitlines()
             if "rustfs-vllm: " in ln]
    said = next((ln for ln in reversed(lines) if ln.startswith(("gave up", "refused"))), "")
    return f"its keeper {name} is down since {state.get('FinishedAt', '?')[:19]}Z (exit status " \
           f"{state.get('ExitCode')})" + (f": {said}" if said else "")


def _demux(text: str) -> str:
    """Docker's multiplexed log stream (8-byte frame headers) as plain text."""
    return "".join(ch for ch in text if ch == "\n" or ch == "\t" or ch >= " ").strip()


# --------------------------------------------------------------------------- the keeper itself
def start_waiting(root: str, stack: str, say: Any) -> None:
    """Start the stack's vLLM containers that bind ``root`` and whose last start failed."""
    try:
        found = containers({"rustfs-vllm.stack": stack, "rustfs-vllm.role": "vllm"})
    except DockerError as exc:
        say(f"cannot list the stack's vLLM containers: {exc}")
        return
    for c in found:
        if c.get("State") == "running" or not any(m.get("Source") == root for m in c.get("Mounts") or []):
            continue
        status, info = api("GET", f"/containers/{c['Id']}/json")
        state = (info or {}).get("State") or {} if status == 200 else {}
        policy = (((info or {}).get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name", "no")
        if not state.get("Error") or state.get("Running") or policy in ("", "no"):
            continue   # stopped by a person, or never meant to restart: left alone
        name = (c.get("Names") or [c["Id"][:12]])[0].lstrip("/")
        status, answer = api("POST", f"/containers/{c['Id']}/start")
        say(f"started {name}, whose start had failed ({state['Error']})" if status in (204, 304)
            else f"could not start {name}: {_message(answer)}")


class Keeper:
    """One mount kept: rclone in the foreground, mounted again whenever it or the mount is lost."""

    def __init__(self, spec: Mapping[str, Any], h: Any) -> None:
        self.spec, self.h = spec, h
        self.point, self.root = spec["mount"], spec["root"]
        self.proc: Optional[subprocess.Popen] = None
        self.stopping = False
        self.held_since: Optional[float] = None     # when the current mount was seen mounted
        self.log_from = 0                           # where this attempt's lines begin in the log
        self.last_error = ""                        # rclone's last error line (or ours)

    def say(self, text: str) -> None:
        """To the container's log and to rclone's (where ``mount`` looks for "exited")."""
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} rustfs-vllm: {text}"
        print(line, file=sys.stderr, flush=True)
        append_line(self.spec["log"], line)

    def stop(self, *_: Any) -> None:
        self.stopping = True
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()

    def intact(self) -> bool:
        return self.h.is_self_bind(self.root) and self.h.mounted_at(self.point) == self.h.FUSE

    def _clear(self) -> None:
        if self.h.mounted_at(self.point) == self.h.FUSE:
            self.h._quiet(["fusermount3", "-uz", self.point])

    def once(self) -> None:
        """Mount once and watch until rclone or the mount is lost."""
        self.h.root_up({"RV_ROOT": self.root})
        self._clear()
        os.makedirs(self.point, exist_ok=True)
        env = self.h.without(self.spec["env"], self.h.DROPPED_FROM_RCLONE)
        log = os.fdopen(open_root_file(self.spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND), "ab")
        self.log_from = log.tell()
        with log:        # what rclone prints outside its --log-file (a crash) lands there too
            self.proc = subprocess.Popen(self.spec["cmd"], stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=env, close_fds=True)
        started, announced = time.monotonic(), False
        while self.proc.poll() is None and not self.stopping:
            time.sleep(0.2 if not announced else WATCH_SECONDS)
            if not announced and self.intact():
                announced, self.held_since = True, time.monotonic()
                slow = self.h.set_read_ahead(self.point, int(self.spec.get("read_ahead_kb") or 0))
                self.say(f"{self.point} mounted" + (f" ({slow})" if slow else ""))
                threading.Thread(target=self.read_ahead, daemon=True).start()
                start_waiting(self.root, self.spec["stack"], self.say)
            elif announced and not self.intact():
                self.say(f"the mount at {self.point} (or the root's shared bind) is gone; mounting again")
                self.proc.terminate()
            elif not announced and time.monotonic() - started > 120:
                self.say(f"rclone did not mount {self.point} within 120 s; starting it again")
                self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._clear()

    def read_ahead(self) -> None:
        """rclone's cache of this mount read into the page cache (vfs_cache.read_cache_ahead), beside the
        vLLM container's boot; best effort, one line when it read something or failed."""
        cmd = [str(x) for x in self.spec["cmd"]]
        cache = cmd[cmd.index("--cache-dir") + 1] if "--cache-dir" in cmd[:-1] else ""
        if not cache:
            return
        try:
            n, done, took, why = self.h.read_cache_ahead(cache)
        except Exception as exc:     # noqa: BLE001 - best effort: one line, never a traceback
            n, done, took, why = 0, 0, 0.0, str(exc) or type(exc).__name__
        if n or why:
            self.say(f"read rclone's cache of {self.point} ahead: {n} files, {done / 1e9:.2f} GB in {took:.1f} s"
                     + (f" ({why})" if why else ""))

    def _pause(self, seconds: float) -> None:
        """Sleep, cut short by SIGTERM."""
        end = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < end:
            time.sleep(min(0.5, end - time.monotonic()))

    def _last_error(self) -> str:
        """rclone's last error line of this attempt (its level ERROR or CRITICAL, a Fatal error), or
        its last line; "" when it wrote none."""
        try:
            fd = open_root_file(self.spec["log"], os.O_RDONLY)
            with os.fdopen(fd, "rb") as fh:
                fh.seek(self.log_from if os.fstat(fh.fileno()).st_size >= self.log_from else 0)
                lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines()
                         if ln.strip() and "rustfs-vllm:" not in ln]
        except OSError:
            return ""
        errors = [ln for ln in lines if any(w in ln for w in ("ERROR", "CRITICAL", "Fatal error", "panic:"))]
        return ((errors or lines or [""])[-1])[-400:]

    def run(self) -> int:
        """Mount and watch until stopped (STOPPED); after MAX_FAILURES failed attempts in a row, give up
        (GAVE_UP: the restart policy leaves the keeper down until ``pulumi up``)."""
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        failures, delay = 0, BACKOFF_FIRST
        while not self.stopping:
            rotate_log(self.spec["log"])
            self.held_since = None
            try:
                self.once()
                self.last_error = self._last_error() or self.last_error
            except Exception as exc:     # a failed root or mount step: say it, try again (the host heals)
                self.last_error = f"mounting {self.point} failed: {exc}"
                self.say(self.last_error)
            if self.stopping:
                break
            if self.held_since is not None and time.monotonic() - self.held_since >= HEALTHY_SECONDS:
                failures, delay = 0, BACKOFF_FIRST
            failures += 1
            if failures >= MAX_FAILURES:
                self.say(f"gave up keeping {self.point} after {failures} failures in a row; last error: "
                         f"{self.last_error or 'none logged'}; the keeper stays down until pulumi up mounts it again")
                return GAVE_UP
            self.say(f"rclone for {self.point} exited; mounting again in {delay:.0f} s")
            self._pause(delay)
            delay = min(delay * 2, BACKOFF_MAX)
        self.say(f"stopped keeping {self.point}; unmounted")
        return STOPPED


def read_spec(spec_path: str) -> Dict[str, Any]:
    """The keeper's spec, if root may follow it: the file mode 0600 in a root folder (root_folder),
    never through a link; rclone (``cmd[0]``) root's alone; the log in a root folder. NotRoots or
    ValueError says why not."""
    fd = open_root_file(spec_path, os.O_RDONLY, private=True)
    with os.fdopen(fd, encoding="utf-8") as fh:
        spec = json.load(fh)
    if not isinstance(spec, dict) or not isinstance(spec.get("cmd"), list) or not spec["cmd"] \
            or not all(isinstance(spec.get(k), str) and spec[k] for k in ("mount", "root", "log")):
        raise ValueError("it lacks mount, root, log or cmd")
    if os.path.islink(spec["log"]):
        raise NotRoots(f"its log {spec['log']} is a symbolic link (to {os.readlink(spec['log'])})")
    rclone = str(spec["cmd"][0])
    if not os.path.isabs(rclone) or not _root_only(rclone) or not _root_only(os.path.dirname(rclone)):
        raise NotRoots(f"its rclone {rclone} is not root's alone")
    os.close(root_folder(os.path.dirname(spec["log"])))
    return spec


def keep(spec_path: str, h: Any) -> int:
    """The keeper's entry point (inside the host's mount namespace). A spec that root must not follow
    is refused in one line; the keeper then stays down (REFUSED)."""
    try:
        spec = read_spec(spec_path)
    except (OSError, ValueError) as exc:
        print(f"rustfs-vllm: refused the mount spec {spec_path}: {exc}; root reads specs and writes logs only in "
              "root's own folders (pulumi up writes them again)", file=sys.stderr, flush=True)
        return REFUSED
    return Keeper(spec, h).run()
