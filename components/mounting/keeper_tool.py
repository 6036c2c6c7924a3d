"""Mount keepers: each model's rclone mount kept by a Docker container with a restart policy, so that
the host brings its mounts back after a restart of the host or of its Docker engine, with no
``pulumi`` run (the Docker engine is the one service manager every Docker host has).

The keeper is a container (the host's vLLM image: it has ``sh`` and util-linux's ``nsenter``) that
enters the host's mount namespace through its own parent, the containerd shim (``--pid host``), and
there runs this host's mount tool as ``mount_tool.py rustfs-vllm-mount-supervisor MOUNT --keep SPEC``:

1. the mount root made a shared bind mount of itself again when it is not one (a restart lost it);
2. a dead mount at MOUNT removed, rclone started in the foreground (network: the host's);
3. once rclone has mounted, the stack's vLLM containers that read this root and whose start failed
   (Docker refuses a ``rslave`` bind under a root that is not a shared mount, as after a restart
   when they start before their keeper) are started again, in that order;
4. rclone watched: when it exits, or the mount or the root's self-bind is gone, it mounts again
   after 2 s; on SIGTERM (``docker stop``/``rm``) it unmounts and exits.

SPEC is a mode-0600 JSON file on the host (beside the mount markers) with rclone's argv and
environment (``RCLONE_CONFIG_*``, the keys among them): the keeper's own argv, environment and
``docker inspect`` hold no credential. Capabilities: SYS_ADMIN (mount, setns), SYS_PTRACE (open the
shim's namespace), SYS_CHROOT (setns into a mount namespace), /dev/fuse; seccomp and AppArmor
unconfined (their defaults refuse setns and mount). ``--privileged`` is not used: it fails on hosts
that withhold a capability from the Docker engine ("unable to apply caps"), as these machines do.

Standard library only, Python 3.9+, nothing from ``components`` (shipped to remote hosts beside
mount_tool.py); helpers it shares with the mounts come from mount_tool, passed in as ``h``.
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from typing import Any, Dict, List, Mapping, Optional, Tuple

SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")
MOUNT_LABEL = "rustfs-vllm.mount"
CAPABILITIES = ["SYS_ADMIN", "SYS_PTRACE", "SYS_CHROOT"]
ENTER_HOST = 'exec nsenter -t "$PPID" -m -- "$@"'
WATCH_SECONDS = 2.0
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


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


def write_spec(path: str, spec: Mapping[str, Any]) -> None:
    """The keeper's SPEC, readable by root only (it holds rclone's credentials)."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o700, exist_ok=True)
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(spec, fh)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def start_keeper(name: str, image: str, point: str, stack: str, argv: List[str]) -> str:
    """Create and start the keeper container ``name`` running ``argv`` in the host's mount
    namespace; its id. An older container of that name is removed first."""
    api("DELETE", f"/containers/{urllib.parse.quote(name)}?force=1")
    body = {
        "Image": image, "Entrypoint": ["/bin/sh", "-c", ENTER_HOST, "rustfs-vllm-keeper"], "Cmd": argv,
        # what runs is the host's (python, rclone, mount, fusermount3): the host's usual PATH, not the
        # image's, and not the image's LD_PRELOAD (vLLM's allocators)
        "Env": ["LD_PRELOAD=", f"PATH={HOST_PATH}"], "Labels": {MOUNT_LABEL: point, "rustfs-vllm.role": "mount", "rustfs-vllm.stack": stack},
        "HostConfig": {
            "PidMode": "host", "NetworkMode": "host", "CapAdd": CAPABILITIES,
            "SecurityOpt": ["apparmor=unconfined", "seccomp=unconfined"],
            "Devices": [{"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse", "CgroupPermissions": "rwm"}],
            "RestartPolicy": {"Name": "unless-stopped"},
            "LogConfig": {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "2"}},
        },
    }
    status, answer = api("POST", "/containers/create?name=" + urllib.parse.quote(name), body)
    if status == 404:
        raise DockerError(f"the keeper's image {image} is not on this host (pulumi up pulls it as the vLLM image)")
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

    def say(self, text: str) -> None:
        """To the container's log and to rclone's (where ``mount`` looks for "exited")."""
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} rustfs-vllm: {text}"
        print(line, file=sys.stderr, flush=True)
        try:
            with open(self.spec["log"], "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except OSError:
            pass

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
        with open(self.spec["log"], "ab") as log:
            self.proc = subprocess.Popen(self.spec["cmd"], stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=env, close_fds=True)
        started, announced = time.monotonic(), False
        while self.proc.poll() is None and not self.stopping:
            time.sleep(0.2 if not announced else WATCH_SECONDS)
            if not announced and self.intact():
                announced = True
                self.say(f"{self.point} mounted")
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

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        while not self.stopping:
            try:
                self.once()
            except Exception as exc:     # a failed root or mount step: say it, try again (the host heals)
                self.say(f"mounting {self.point} failed: {exc}")
            if not self.stopping:
                self.say(f"rclone for {self.point} exited; mounting again in 2 s")
                time.sleep(2)
        self.say(f"stopped keeping {self.point}; unmounted")
        return 0


def keep(spec_path: str, h: Any) -> int:
    """The keeper's entry point (inside the host's mount namespace)."""
    try:
        with open(spec_path, encoding="utf-8") as fh:
            spec = json.load(fh)
    except (OSError, ValueError) as exc:
        print(f"rustfs-vllm: cannot read the mount spec {spec_path}: {exc}", file=sys.stderr, flush=True)
        time.sleep(10)     # the restart policy tries again; an unmount removes this container
        return 1
    return Keeper(spec, h).run()
