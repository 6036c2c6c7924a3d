"""Preflight: what `up` would fail on once it had started, checked against the Docker hosts before
anything is created (at preview, and at the start of every `up`). It takes a validated
configuration and each host's Docker facts, and returns problems in the config's form (key,
value, what is allowed, and the fix):

- GPUs asked for (``vllmGpus``, ``hosts[].gpus`` or ``models[].gpus``) on a Docker host that cannot
  give containers GPUs: no NVIDIA runtime, no CDI GPU device, and no NVIDIA container hook for
  `--gpus` (dockerd registers its ``nvidia`` device driver only when ``nvidia-container-runtime-hook``,
  or with older daemons ``nvidia-container-cli``, is on its PATH);
- a container name this stack will create that exists and does not carry this stack's label
  (``rustfs-vllm.stack``): `up` would upload and mount first and then fail with Docker's Conflict.

A host whose Docker cannot be asked is skipped here (the SSH probe, or `up` itself, names it).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from .config import NAMESPACE, StackConfig
from .hosts import HostSpec

NVIDIA_HOOKS = ("nvidia-container-runtime-hook", "nvidia-container-cli")
TOOLKIT = ("the NVIDIA Container Toolkit (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/"
           "latest/install-guide.html), then restart dockerd")


@dataclass(frozen=True)
class DockerFacts:
    """What preflight needs to know of one Docker host."""
    runtimes: tuple[str, ...] = ()
    cdi_devices: tuple[str, ...] = ()
    hooks: tuple[str, ...] = ()                                   # NVIDIA hooks on the host's PATH
    containers: Mapping[str, Mapping[str, str]] = field(default_factory=dict)   # name -> labels

    @property
    def gpus(self) -> bool:
        return "nvidia" in self.runtimes or bool(self.hooks) or \
            any(d.startswith("nvidia.com/gpu") for d in self.cdi_devices)


def from_info(info: Mapping, hooks: tuple[str, ...], containers: Mapping[str, Mapping[str, str]]) -> DockerFacts:
    """DockerFacts from `docker info`'s JSON (Runtimes; DiscoveredDevices on daemons with CDI)."""
    devices = tuple(str(d.get("ID", "")) for d in (info.get("DiscoveredDevices") or []) if isinstance(d, Mapping))
    return DockerFacts(runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())), cdi_devices=devices,
                       hooks=hooks, containers=containers)


def local_facts() -> Optional[DockerFacts]:
    """This machine's Docker daemon, through the Docker API (None when it does not answer)."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        info = client.info()
        found = {c.name: dict(c.labels or {}) for c in client.containers.list(all=True, sparse=False)}
    except Exception:  # noqa: BLE001 - no daemon here: the image and port checks, or up, say so
        return None
    return from_info(info, tuple(h for h in NVIDIA_HOOKS if shutil.which(h)), found)


REMOTE_SCRIPT = ("docker info --format '{{json .}}'; echo '--- hooks'; "
                 + "; ".join(f"command -v {h} >/dev/null 2>&1 && echo {h}" for h in NVIDIA_HOOKS)
                 + "; echo '--- containers'; docker ps -a --format '{{.Names}}\t{{.Labels}}'")


def parse_remote(out: str) -> Optional[DockerFacts]:
    """DockerFacts from REMOTE_SCRIPT's output (None when `docker info` gave none)."""
    info_part, _, rest = out.partition("--- hooks\n")
    hooks_part, _, ps_part = rest.partition("--- containers\n")
    try:
        info = json.loads(info_part.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    containers: dict[str, dict[str, str]] = {}
    for line in ps_part.splitlines():
        name, _, labels = line.partition("\t")
        if name:
            containers[name] = dict(kv.split("=", 1) for kv in labels.split(",") if "=" in kv)
    return from_info(info, tuple(h for h in hooks_part.split() if h in NVIDIA_HOOKS), containers)


def remote_facts(argv: list[str], timeout: float = 25) -> Optional[DockerFacts]:
    """A remote host's Docker, asked over SSH with ``argv`` (components.ssh.ssh_argv)."""
    try:
        proc = subprocess.run([*argv, REMOTE_SCRIPT], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_remote(proc.stdout) if proc.returncode == 0 else None


def gpu_key(cfg: StackConfig, host: HostSpec, model_name: str) -> tuple[str, str]:
    """(config key, value) that gives the model its GPUs on ``host``: the model's, the host's, the stack's."""
    m = next(m for m in cfg.models if m.name == model_name)
    if m.gpus is not None:
        return f"models[{m.name}].gpus", m.gpus
    if host.gpus is not None:
        return f"hosts[{host.name}].gpus", host.gpus
    return "vllmGpus", cfg.vllm_gpus


def gpu_problems(cfg: StackConfig, facts: Mapping[str, Optional[DockerFacts]]) -> list[str]:
    problems = []
    for h in cfg.hosts:
        f = facts.get(h.name)
        if f is None or f.gpus:
            continue
        asked: dict[tuple[str, str], list[str]] = {}
        for m in cfg.models:
            if h.name in m.hosts:
                key, value = gpu_key(cfg, h, m.name)
                if value:
                    asked.setdefault((key, value), []).append(m.name)
        for (key, value), names in asked.items():
            where = "this machine" if h.local else f"host {h.name!r}"
            problems.append(
                f"{NAMESPACE}:{key} = {value!r} is invalid: GPUs on a Docker host that has them: the Docker daemon of "
                f"{where} has no NVIDIA runtime, no CDI GPU device and no NVIDIA container hook, so `up` would fail "
                f"with 'could not select device driver \"\" with capabilities: [[gpu]]' after uploading and "
                f"mounting (model {', '.join(names)}); install {TOOLKIT}, or leave {key} empty to serve on CPU")
    return problems


def here(cfg: StackConfig) -> str:
    """The name facts of this machine go under: its host's, or "local" when every host is remote."""
    return next((h.name for h in cfg.hosts if h.local), "local")


def planned_containers(cfg: StackConfig) -> dict[str, list[str]]:
    """{host name: the container names this stack creates there}; the S3 server and the entry
    points run on this machine."""
    names: dict[str, list[str]] = {h.name: [] for h in cfg.hosts}
    names.setdefault(here(cfg), [])
    if cfg.s3_server != "external":
        names[here(cfg)].append(f"{cfg.name_prefix}-s3")
    if any(m.balancer_port for m in cfg.models):
        names[here(cfg)].append(f"{cfg.name_prefix}-balancer")
    for m in cfg.models:
        for h in m.hosts:
            names[h].append(f"{cfg.name_prefix}-vllm-{m.prefix.lower()}")
    return names


def owner(labels: Mapping[str, str]) -> str:
    """Who made a container, as far as its labels say."""
    if labels.get("rustfs-vllm.stack"):
        return f"it belongs to the rustfs-vllm stack {labels['rustfs-vllm.stack']!r}"
    if labels.get("com.docker.compose.project"):
        return f"it was made by docker compose (project {labels['com.docker.compose.project']!r})"
    return "no label says who made it (made by hand, or by a stack removed with `pulumi stack rm --force`)"


def name_problems(cfg: StackConfig, facts: Mapping[str, Optional[DockerFacts]]) -> list[str]:
    problems = []
    for host, names in planned_containers(cfg).items():
        f = facts.get(host)
        if f is None:
            continue
        for name in names:
            labels = f.containers.get(name)
            if labels is None or labels.get("rustfs-vllm.stack") == cfg.stack:
                continue
            where = "" if host == here(cfg) else f" on host {host!r}"
            problems.append(
                f"{NAMESPACE}:namePrefix = {cfg.name_prefix!r} is invalid: a prefix whose container names are free: "
                f"the container {name!r}{where} exists and is not this stack's ({owner(labels)}); remove it "
                f"(`docker rm -f {name}`) if it is a leftover, or set another {NAMESPACE}:namePrefix")
    return problems


def check(cfg: StackConfig, local: Callable[[], Optional[DockerFacts]] = local_facts,
          remote: Callable[[HostSpec], Optional[DockerFacts]] = lambda h: None) -> list[str]:
    """Every preflight problem of ``cfg`` on its hosts ([] when `up` can go ahead)."""
    facts: dict[str, Optional[DockerFacts]] = {here(cfg): local()}
    for h in cfg.hosts:
        if not h.local:
            facts[h.name] = remote(h)
    return gpu_problems(cfg, facts) + name_problems(cfg, facts)
