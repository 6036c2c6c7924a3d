"""Preflight: what `up` would fail on once it had started, checked against the machines before
anything is created (at preview, and at the start of every `up`). It takes a validated
configuration and the probes that look at the machines (``Probes``; the real ones are
``Machines``), and returns problems in the config's form (key, value, what is allowed, the fix):

- an https endpoint whose certificate the CA bundle (or the system) does not trust;
- remote hosts that cannot be logged in to, or lack what serving needs;
- this machine: no FUSE, local-only images missing, a volume of the other S3 server's format,
  ports another process listens on, a KV cache larger than its memory, a model streamed from the
  bucket (``loadFormat: runai_streamer``) whose vLLM image lacks the Run:ai Model Streamer;
- GPUs asked for (``vllmGpus``, ``hosts[].gpus`` or ``models[].gpus``) on a Docker host that cannot
  give containers GPUs: no NVIDIA runtime, no CDI GPU device, and no NVIDIA container hook for
  `--gpus` (dockerd registers its ``nvidia`` device driver only when ``nvidia-container-runtime-hook``,
  or with older daemons ``nvidia-container-cli``, is on its PATH);
- a container name this stack will create that exists and does not carry this stack's label
  (``rustfs-vllm.stack``): `up` would upload and mount first and then fail with Docker's Conflict.

A host whose Docker cannot be asked is skipped by the last two (the SSH probe, or `up`, names it).
"""
from __future__ import annotations

from typing import Mapping, Optional, Protocol, Sequence

import pulumi

from components.docker import change_order
from components.hosts import machine, ssh
from components.serving import streamer
from components.storage import tls
from components.config.schema import NAMESPACE
from components.config.spec import HostSpec, StackConfig
from components.hosts.docker_facts import TOOLKIT, DockerFacts
from components.hosts.types import Host


class Probes(Protocol):
    """The looks preflight takes; each answers for this machine unless it says otherwise."""

    def port_in_use(self, address: str, port: int) -> bool: ...
    def memory_bytes(self) -> int: ...
    def image_present(self, image: str) -> Optional[bool]: ...     # None: cannot tell (or pulled by up)
    def image_has_module(self, image: str, module: str) -> Optional[bool]: ...   # None: cannot tell
    def fuse_available(self) -> bool: ...
    def volume_format(self, name: str) -> Optional[str]: ...
    def tls_problem(self, endpoint: str, ca_bundle: str) -> Optional[str]: ...
    def ssh_problems(self) -> list[str]: ...                       # every remote host
    def docker_facts(self, host: str) -> Optional[DockerFacts]: ...


class Machines:
    """The real probes: this machine (components.machine, the Docker API), the endpoint
    (components.tls) and the remote hosts over SSH (components.ssh, one call each)."""

    def __init__(self, cfg: StackConfig, hosts: Sequence[Host]) -> None:
        self.cfg, self.hosts = cfg, {h.name: h for h in hosts}
        self.seen: dict[str, Optional[DockerFacts]] = {}       # what docker_facts answered, per host
        self._in_use = machine.port_checker(cfg.stack)
        self.memory_bytes, self.image_present = machine.memory_bytes, machine.image_present
        self.image_has_module = machine.image_has_module
        self.fuse_available, self.volume_format = machine.fuse_available, machine.volume_format

    def port_in_use(self, address: str, port: int) -> bool:
        return self._in_use(address, port)

    def tls_problem(self, endpoint: str, ca_bundle: str) -> Optional[str]:
        return tls.probe(endpoint, ca_bundle)

    def ssh_problems(self) -> list[str]:
        remote = [h for h in self.hosts.values() if not h.spec.local]
        if not remote:
            return []
        return ssh.probe_all(tuple(h.spec for h in remote), remote[0].files)  # type: ignore[attr-defined]

    def docker_facts(self, host: str) -> Optional[DockerFacts]:
        h = self.hosts.get(host)
        if h is None or h.spec.local:
            from components.hosts.docker_facts import local_facts

            found = local_facts()
        else:
            found = h.docker_facts()
        self.seen[host] = found
        return found


def check(cfg: StackConfig, probes: Probes) -> list[str]:
    """Every preflight problem of ``cfg`` ([] when `up` can go ahead)."""
    problems: list[str] = []
    if cfg.rustfs_endpoint.startswith("https://"):
        problem = probes.tls_problem(cfg.rustfs_endpoint, cfg.ca_bundle)
        problems += [problem] if problem else []
    remote_ok = True
    if any(not h.local for h in cfg.hosts):
        found = probes.ssh_problems()
        problems += found
        remote_ok = not found
    problems += this_machine(cfg, probes)
    facts: dict[str, Optional[DockerFacts]] = {here(cfg): probes.docker_facts(here(cfg))}
    for h in cfg.hosts:
        if not h.local:
            facts[h.name] = probes.docker_facts(h.name) if remote_ok else None
    for line in never_started(cfg, facts):
        pulumi.log.warn(line)
    return problems + gpu_problems(cfg, facts) + name_problems(cfg, facts)


def never_started(cfg: StackConfig, facts: Mapping[str, Optional[DockerFacts]]) -> list[str]:
    """This stack's containers that were made but never started: the docker provider keeps a container whose
    start failed (a port taken after preview) and a plain `up` does not start it; a refresh replaces it."""
    lines = []
    for host, names in planned_containers(cfg).items():
        f = facts.get(host)
        for name in names:
            if f is not None and f.states.get(name) == "created" and \
                    f.containers.get(name, {}).get("rustfs-vllm.stack") == cfg.stack:
                where = "" if host == here(cfg) else f" on host {host!r}"
                lines.append(f"container {name}{where} was made but never started (its start failed in an earlier "
                             "`up`); run `pulumi up --refresh`: the refresh finds it stopped and it is made again")
    return lines


def this_machine(cfg: StackConfig, probes: Probes) -> list[str]:
    """FUSE, images, the S3 volume and memory of this machine (ports: ``port_problems``)."""
    out: list[str] = []
    bad = lambda key, value, allowed: out.append(f"{NAMESPACE}:{key} = {value!r} is invalid: {allowed}")  # noqa: E731
    local = [h for h in cfg.hosts if h.local]
    if local and cfg.models and not probes.fuse_available():
        bad("mountPath", cfg.mount_path, "a path on a host with FUSE: /dev/fuse is missing or not a character "
                                         "device (load the fuse module, or run the container with --device /dev/fuse)")
    images = ([("vllmImage", cfg.vllm_image)] if cfg.models and any(h.vllm_image == cfg.vllm_image for h in local)
              else []) \
        + ([("rustfsImage", cfg.rustfs_image)] if cfg.s3_server != "external" else []) \
        + ([("routerImage", cfg.router_image)] if cfg.router and cfg.models else []) \
        + ([("rcloneImage", cfg.rclone_image)] if any(
            h.rclone_image == cfg.rclone_image and any(m.mounted for m in cfg.models_on(h.name)) for h in local) else [])
    for key, image in images:
        if probes.image_present(image) is False:
            script = "scripts/build-rustfs-image" if image.startswith("rustfs-vllm/rustfs:") else "scripts/build-images"
            bad(key, image, "an image present on this Docker host: it is built locally (no registry "
                            f"serves it, so `up` cannot pull it); run {script}")
    if cfg.s3_server != "external":
        found = probes.volume_format(cfg.rustfs_volume)
        if cfg.s3_server == "rustfs" and found == "files":
            bad("rustfsVolume", cfg.rustfs_volume,
                "a volume RustFS can use: this one holds objects another S3 server (rclone serve s3) kept as "
                "plain files, which RustFS cannot read or overwrite; set a new rustfsVolume (the old volume "
                "and its data are kept)")
        elif cfg.s3_server == "rclone-serve-s3" and found == "rustfs":
            bad("rustfsVolume", cfg.rustfs_volume,
                "a volume the rclone serve s3 stand-in can use: this one holds RustFS's own data format; "
                "set a new rustfsVolume (the old volume and its data are kept)")
    out += streamer_problems(cfg, probes)
    for m in cfg.models:
        if m.kv_cache_space_gib is not None and m.kv_cache_space_gib * 2**30 > probes.memory_bytes():
            bad(f"models[{m.name}].kvCacheSpaceGib", m.kv_cache_space_gib,
                f"at most this machine's memory, {probes.memory_bytes() / 2**30:.1f} GiB")
    return out + port_problems(cfg, probes)


def streamer_problems(cfg: StackConfig, probes: Probes) -> list[str]:
    """A streamed model whose vLLM image (on this machine's hosts) has no Run:ai Model Streamer S3
    backend: vLLM would fail at start, after the upload. Remote hosts' images are not asked."""
    out: list[str] = []
    for h in cfg.hosts:
        streamed = [m for m in cfg.models if h.name in m.hosts and m.load_format == streamer.LOAD_FORMAT]
        if h.local and streamed and probes.image_has_module(h.vllm_image, streamer.MODULE) is False:
            out += [f"{NAMESPACE}:models[{m.name}].loadFormat = {m.load_format!r} is invalid: a loader the vLLM "
                    f"image has: {h.vllm_image} lacks the Run:ai Model Streamer's S3 backend (Python module "
                    f"{streamer.MODULE}; the official vllm/vllm-openai-cpu image does not ship it). Install "
                    "runai-model-streamer and runai-model-streamer-s3 of one version in the image (the local "
                    "image of scripts/build-images has them), or use loadFormat: mount" for m in streamed]
    return out


def port_problems(cfg: StackConfig, probes: Probes) -> list[str]:
    """Ports this stack publishes on this machine that another process listens on."""
    out = []
    local = next((h for h in cfg.hosts if h.local), None)
    if cfg.s3_server != "external" and probes.port_in_use(cfg.bind_address, cfg.rustfs_port):
        out.append(f"{NAMESPACE}:rustfsPort = {cfg.rustfs_port!r} is invalid: a free port: another process "
                   "already listens on it")
    for m in cfg.models:
        if local is not None and local.name in m.hosts and probes.port_in_use(local.bind_address, m.port):
            out.append(f"{NAMESPACE}:models[{m.name}].port = {m.port!r} is invalid: a free port: another process "
                       "already listens on it")
    if cfg.router and cfg.models:
        for port, who in ((cfg.router_port, cfg.bind_address), (cfg.router_port + 1, "127.0.0.1"),
                          (cfg.router_port + 2, "127.0.0.1")):
            if probes.port_in_use(who, port):
                out.append(f"{NAMESPACE}:routerPort = {cfg.router_port!r} is invalid: a port whose next two are free "
                           f"too, on this machine: another process listens on {who}:{port} (the endpoint takes "
                           "routerPort on bindAddress, the router routerPort+1 and its metrics routerPort+2 on "
                           "127.0.0.1)")
    return out


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
    if cfg.router and cfg.models:
        names[here(cfg)] += [f"{cfg.name_prefix}-router", f"{cfg.name_prefix}-endpoint"]
    for m in cfg.models:
        for h in m.hosts:
            names[h] += list(change_order.containers(cfg, m))
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
