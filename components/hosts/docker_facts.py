"""What preflight asks of a Docker daemon (this machine's through the Docker API, a remote one's
over SSH with one call): its runtimes, CDI devices, NVIDIA hooks, and the containers it has.
Read-only: nothing here creates or changes anything."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Mapping, Optional

NVIDIA_HOOKS = ("nvidia-container-runtime-hook", "nvidia-container-cli")
TOOLKIT = ("the NVIDIA Container Toolkit (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/"
           "latest/install-guide.html), then restart dockerd")


CPU_BIND = "VLLM_CPU_OMP_THREADS_BIND"      # components.serving.vllm's (this layer cannot import it)


@dataclass(frozen=True)
class Health:
    """How a vLLM container of a stack is (its ``docker inspect``): what preview says of a model that
    is not serving (restarting, OOM-killed, exited) and whether it was made with the CPU binding default."""
    status: str                      # created, running, restarting, exited, dead, paused
    restarts: int = 0                # RestartCount: restarts by its restart policy since it was made
    oom_killed: bool = False         # its last exit was the kernel's OOM kill (Docker keeps it until replaced)
    exit_code: int = 0
    memory: int = 0                  # its memory limit in bytes (0: none)
    cpu_bind: bool = False           # its environment sets VLLM_CPU_OMP_THREADS_BIND
    stop_timeout: int = 0            # its Config.StopTimeout (0: unset, Docker's default 10 s)
    id: str = ""                     # the container's id (a trouble is its own: a new container has none)


def health_of(attrs: Mapping) -> Health:
    """Health from a container's inspect (the Docker API's JSON)."""
    state = attrs.get("State") or {}
    env = (attrs.get("Config") or {}).get("Env") or []
    return Health(status=str(state.get("Status", "")), restarts=int(attrs.get("RestartCount") or 0),
                  oom_killed=bool(state.get("OOMKilled")), exit_code=int(state.get("ExitCode") or 0),
                  memory=int((attrs.get("HostConfig") or {}).get("Memory") or 0),
                  cpu_bind=any(str(e).startswith(CPU_BIND + "=") for e in env),
                  stop_timeout=int((attrs.get("Config") or {}).get("StopTimeout") or 0), id=str(attrs.get("Id") or ""))


@dataclass(frozen=True)
class DockerFacts:
    """What preflight needs to know of one Docker host."""
    runtimes: tuple[str, ...] = ()
    cdi_devices: tuple[str, ...] = ()
    hooks: tuple[str, ...] = ()                                   # NVIDIA hooks on the host's PATH
    containers: Mapping[str, Mapping[str, str]] = field(default_factory=dict)   # name -> labels
    states: Mapping[str, str] = field(default_factory=dict)       # name -> created, running, exited, ...
    health: Mapping[str, Health] = field(default_factory=dict)    # name -> a vLLM container's health
    mem_available: Optional[int] = None                           # the host's MemAvailable in bytes (None: unknown)

    @property
    def gpus(self) -> bool:
        return "nvidia" in self.runtimes or bool(self.hooks) or \
            any(d.startswith("nvidia.com/gpu") for d in self.cdi_devices)


def from_info(info: Mapping, hooks: tuple[str, ...], containers: Mapping[str, Mapping[str, str]],
              states: Optional[Mapping[str, str]] = None, health: Optional[Mapping[str, Health]] = None,
              meminfo: str = "") -> DockerFacts:
    """DockerFacts from `docker info`'s JSON (Runtimes; DiscoveredDevices on daemons with CDI) and the host's
    /proc/meminfo."""
    devices = tuple(str(d.get("ID", "")) for d in (info.get("DiscoveredDevices") or []) if isinstance(d, Mapping))
    return DockerFacts(runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())), cdi_devices=devices,
                       hooks=hooks, containers=containers, states=dict(states or {}), health=dict(health or {}),
                       mem_available=mem_available(meminfo))


def mem_available(meminfo: str) -> Optional[int]:
    """MemAvailable of a /proc/meminfo text, in bytes (None when it has none)."""
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            try:
                return int(line.split()[1]) * 1024
            except (IndexError, ValueError):
                return None
    return None


def _local_meminfo() -> str:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            return fh.read()
    except OSError:
        return ""


def local_facts() -> Optional[DockerFacts]:
    """This machine's Docker daemon, through the Docker API (None when it does not answer)."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        info = client.info()
        listed = client.containers.list(all=True, sparse=False)
        found = {c.name: dict(c.labels or {}) for c in listed}
        states = {c.name: c.status for c in listed}
        health = {c.name: health_of(c.attrs) for c in listed if (c.labels or {}).get("rustfs-vllm.role") == "vllm"}
    except Exception:  # noqa: BLE001 - no daemon here: the image and port checks, or up, say so
        return None
    return from_info(info, tuple(h for h in NVIDIA_HOOKS if shutil.which(h)), found, states, health, _local_meminfo())


def image_label(image: str, key: str) -> str:
    """A label of a local image ("" when the image, the label or the daemon is not there): facts
    that a local build wrote on its image, e.g. where its binary came from."""
    if not image or not LOCAL_IMAGE.match(image):
        return ""
    try:
        import docker

        labels = docker.from_env(timeout=10).images.get(image).labels or {}
    except Exception:  # noqa: BLE001 - no daemon or no image: preflight and up say so
        return ""
    return str(labels.get(key, ""))


# only this project's own local images are asked (rustfs-vllm/...): a remote image is never looked up
LOCAL_IMAGE = re.compile(r"^rustfs-vllm/")


# a vLLM container's health, one line each: its inspect less its environment's values (CPU_BIND's name only)
HEALTH_FORMAT = ("{{json (index (split .Name \"/\") 1)}}\t{{json .State}}\t{{.RestartCount}}\t{{.HostConfig.Memory}}\t"
                 "{{range .Config.Env}}{{if eq (index (split . \"=\") 0) \"" + CPU_BIND + "\"}}bind{{end}}{{end}}\t{{.Id}}")
REMOTE_SCRIPT = ("docker info --format '{{json .}}'; echo '--- hooks'; "
                 + "; ".join(f"command -v {h} >/dev/null 2>&1 && echo {h}" for h in NVIDIA_HOOKS)
                 + "; echo '--- containers'; docker ps -a --format '{{.Names}}\t{{.State}}\t{{.Labels}}'"
                 + "; echo '--- health'; ids=$(docker ps -aq --filter label=rustfs-vllm.role=vllm); "
                 + f"[ -z \"$ids\" ] || docker inspect --format '{HEALTH_FORMAT}' $ids"
                 + "; echo '--- memory'; grep MemAvailable /proc/meminfo")


def parse_health(text: str) -> dict[str, Health]:
    """The health lines of REMOTE_SCRIPT (HEALTH_FORMAT) as {name: Health}; a line it cannot read is skipped."""
    out: dict[str, Health] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        try:
            name, state = json.loads(parts[0]), json.loads(parts[1])
            attrs = {"State": state, "RestartCount": int(parts[2]), "HostConfig": {"Memory": int(parts[3] or 0)},
                     "Config": {"Env": [f"{CPU_BIND}=" for _ in [1] if len(parts) > 4 and parts[4] == "bind"]},
                     "Id": parts[5] if len(parts) > 5 else ""}
        except (ValueError, IndexError):
            continue
        out[str(name)] = health_of(attrs)
    return out


def parse_remote(out: str) -> Optional[DockerFacts]:
    """DockerFacts from REMOTE_SCRIPT's output (None when `docker info` gave none)."""
    info_part, _, rest = out.partition("--- hooks\n")
    hooks_part, _, ps_part = rest.partition("--- containers\n")
    ps_part, _, health_part = ps_part.partition("--- health\n")
    health_part, _, memory_part = health_part.partition("--- memory\n")
    try:
        info = json.loads(info_part.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    containers: dict[str, dict[str, str]] = {}
    states: dict[str, str] = {}
    for line in ps_part.splitlines():
        name, _, rest = line.partition("\t")
        state, _, labels = rest.partition("\t")
        if name:
            containers[name] = dict(kv.split("=", 1) for kv in labels.split(",") if "=" in kv)
            states[name] = state
    return from_info(info, tuple(h for h in hooks_part.split() if h in NVIDIA_HOOKS), containers, states,
                     parse_health(health_part), memory_part)


def remote_facts(argv: list[str], timeout: float = 25) -> Optional[DockerFacts]:
    """A remote host's Docker, asked over SSH with ``argv`` (components.ssh.ssh_argv)."""
    try:
        proc = subprocess.run([*argv, REMOTE_SCRIPT], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_remote(proc.stdout) if proc.returncode == 0 else None
