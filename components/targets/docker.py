"""DockerTarget: the stack on Docker hosts (this machine, or hosts reached over SSH).

    S3Server (a container here, or external) -> [core: check, bucket, uploads] -> per host:
    MountRoot, MountCache, vLLM image -> per model on that host: RcloneMount (or ModelCopy, or
    nothing with the streamer) -> VllmServer -> [core: smoke completion]; the stack's Router (one
    OpenAI endpoint over every model on every host), its routes set once every server answers.

A host is this machine (local commands, the local Docker socket) or a remote one: then its Docker
is a pulumi-docker provider over ``ssh://``, its mounts are pulumi-command ``remote.Command``s,
and HostTools puts the mount script there first. Every name of a host's resources starts with
the host's name, except the implicit local host's (a stack without ``hosts`` keeps its URNs).

Each model's chain is its own: adding, removing or changing one model replaces only that model's
resources. Readiness and ordering are ``depends_on`` edges, not values threaded into inputs, so
replacing the server container never replaces the bucket or an upload, and re-mounting a model
never replaces its container.
"""
from __future__ import annotations

import os

from typing import Any, Optional

import pulumi

from components.config.spec import StackConfig
from components.core.target import Keys, S3Side, Served, Store, Target
from components.docker import change_order, preflight, serving_state
from components.docker.host_plan import HostPlan
from components.core.outputs import router_outputs
from components.docker.outputs import hosts_outputs, one_host_outputs
from components.docker.router import Router, RouterArgs
from components.docker.s3_server import S3Server, S3ServerArgs
from components.hosts.docker_facts import DockerFacts
from components.hosts.types import Host, hosts_of
from components.storage import read_policy


class DockerTarget(Target):
    name = "docker"
    component_type = "rustfs-vllm:index:ServingStack"

    def __init__(self, cfg: StackConfig, hosts: Optional[list[Host]] = None) -> None:
        super().__init__(cfg)
        # one list (and one write of the SSH files) for preflight and the stack
        self.hosts: list[Host] = hosts if hosts is not None else hosts_of(cfg)
        self.on_host: dict[str, HostPlan] = {}
        self.router: Optional[Router] = None
        self.facts: dict[str, Optional[DockerFacts]] = {}       # each host's Docker, as preflight saw it
        self.troubles: dict[tuple[str, str], serving_state.Trouble] = {}

    @classmethod
    def accepts(cls, cfg: StackConfig) -> bool:
        return cfg.kube is None

    def preflight(self) -> list[str]:
        """Ports, images, FUSE, TLS, SSH, GPUs, names: what `up` would fail on once started."""
        machines = preflight.Machines(self.cfg, self.hosts)
        problems = preflight.check(self.cfg, machines)
        if not problems:     # the hosts answered: each says how its mounts are (a lost keeper is mounted again)
            for host in self.hosts:
                host.look_at_mounts()
        # each host's Docker as preflight saw it (this machine's under preflight's name for it)
        here = preflight.here(self.cfg)
        self.facts = {h.name: machines.seen.get(here if h.local else h.name) for h in self.cfg.hosts}
        # a model that is not serving (restarting, OOM-killed, exited): said, and waited for again by up
        self.troubles = serving_state.troubles(self.cfg, self.facts, here)
        for trouble in self.troubles.values():
            if trouble.line:
                pulumi.log.warn(trouble.line)
        line = endpoint_down(self.cfg, machines.seen.get(here))
        if line:
            pulumi.log.warn(line)
        return problems

    def s3_server(self, owner: pulumi.ComponentResource, keys: Keys) -> S3Side:
        cfg = self.cfg
        server = S3Server("s3", S3ServerArgs(
            kind=cfg.s3_server, stack=cfg.stack, name_prefix=cfg.name_prefix, image=cfg.rustfs_image,
            endpoint=cfg.rustfs_endpoint, port=cfg.rustfs_port, console_port=cfg.rustfs_console_port,
            console_enable=cfg.rustfs_console_enable, volume=cfg.rustfs_volume, bind_address=cfg.bind_address,
            access_key=keys.access_key, secret_key=keys.secret_key), pulumi.ResourceOptions(parent=owner))
        # where the objects live: a new volume or server kind behind the same endpoint is another store
        store = f"external {cfg.rustfs_endpoint}" if cfg.s3_server == "external" else \
            f"{cfg.s3_server} volume {cfg.rustfs_volume}"
        return S3Side(component=server, ready=list(server.ready),
                      instance=server.container.id if server.container else "external",
                      endpoint=server.endpoint, kind=server.kind, store=store)

    def serve(self, owner: pulumi.ComponentResource, store: Store, keys: Keys) -> list[Served]:
        self._say_read_keys(store)
        served: list[Served] = []
        rolls: dict = {}        # one host at a time: a model's change on a host waits for the previous host's
        for host in self.hosts:
            plan = self.on_host[host.name] = HostPlan(
                owner, host, self.cfg, store, keys, self.facts.get(host.name),
                {m: t for (h, m), t in self.troubles.items() if h == host.name}, rolls)
            served += [Served(model=name, place=None if host.spec.implicit else host.name, name_prefix=host.prefix,
                              base_url=server.base_url, instance=server.container_id, ready=[server.ready])
                       for name, server in plan.servers.items()]
        self.router = self._endpoint(owner)
        return served

    def _say_read_keys(self, store: Store) -> None:
        """Preview says which key the hosts read with; a stack deployed before readKeys (its mounts or copies
        have markers) is told once what the new default changes."""
        cfg = self.cfg
        if store.read_key is None:
            return
        deployed = any(os.path.exists(p) for h in self.hosts for m in cfg.models
                       for p in (h.marker_file(m.prefix), h.marker_file(f"{m.prefix}.copy")) if p)
        made = os.path.exists(read_policy.made_record(cfg.state_dir, read_policy.user_base(cfg.stack, cfg.bucket)))
        if deployed and not cfg.read_keys_given and not made:     # said only while this update makes the key
            pulumi.log.warn("readKeys now defaults to scoped with s3Server rustfs: the serving hosts read the models "
                            "with a read-only key of this stack's prefixes instead of the root keys; this update "
                            "makes that key (ReadKey) and gives it to each model's mount or copy (a mount is "
                            "remounted). To keep the root keys on the hosts, set readKeys: shared")
        pulumi.log.info(f"read key: serving hosts read s3://{cfg.bucket}/ prefixes "
                        f"{', '.join(sorted(m.prefix for m in cfg.models))} with a read-only key (readKeys scoped); "
                        "the root keys stay on this machine and the S3 server")

    def _endpoint(self, owner: pulumi.ComponentResource) -> Optional[Router]:
        """The stack's one OpenAI endpoint: every model, over every host that serves it."""
        cfg = self.cfg
        for m in cfg.models:
            if m.balancer_port is not None:
                pulumi.log.warn(f"models[{m.name}].balancerPort ({m.balancer_port}) is no longer used: every model is "
                                f"served at the stack's one endpoint (routerPort {cfg.router_port}, with "
                                f"\"model\": \"{m.name}\"); its nginx entry point is removed by this update. "
                                "Remove the key from the stack's config")
        if not cfg.router or not cfg.models:
            return None
        by_name = {h.name: h for h in cfg.hosts}
        # each server where it is this `up` (its slot's port: components/docker/change_order.py)
        routes = {m.name: [f"http://{by_name[h].address}:{self.on_host[h].servers[m.name].port}" for h in m.hosts]
                  for m in cfg.models}
        ready = [self.on_host[h].servers[m.name].ready for m in cfg.models for h in m.hosts]
        return Router("router", RouterArgs(
            stack=cfg.stack, name_prefix=cfg.name_prefix, image=cfg.router_image, bind_address=cfg.bind_address,
            port=cfg.router_port, policy=cfg.router_policy, routes=routes,
            api_key=pulumi.Output.secret(cfg.vllm_api_key) if cfg.vllm_api_key else ""),
            pulumi.ResourceOptions(parent=owner, depends_on=ready))

    def outputs(self, store: Store) -> dict[str, Any]:
        first = self.on_host[self.cfg.hosts[0].name]
        out: dict[str, Any] = {"mount_path": first.mount_root.path}
        out.update(router_outputs(self.cfg, self.router))
        # per model and host: serving once its readiness wait passed (preview names one that is not)
        out["model_states"] = {m.name: {h: self.on_host[h].servers[m.name].state for h in m.hosts}
                               for m in self.cfg.models}
        # where each model's server is and what it was made of: the next `up` judges its change by it (a secret:
        # one part is a digest of vllmApiKey)
        out[change_order.OUTPUT] = pulumi.Output.secret(
            {f"{h}/{m}": slot for h, plan in self.on_host.items() for m, slot in plan.slots.items()})
        if self.cfg.hosts[0].implicit:
            return {**out, **one_host_outputs(self.cfg, store, first)}
        return {**out, **hosts_outputs(self.cfg, store, self.on_host)}


def endpoint_down(cfg: StackConfig, facts: Optional[DockerFacts]) -> str:
    """One line when the stack's endpoint (its router or nginx container, on this machine) was not running as this run
    started (a container stopped by hand, or one that keeps failing), else ""."""
    if facts is None or not cfg.router or not cfg.models:
        return ""
    down = [(name, facts.states[name]) for name in (f"{cfg.name_prefix}-endpoint", f"{cfg.name_prefix}-router")
            if facts.containers.get(name, {}).get("rustfs-vllm.stack") == cfg.stack
            and facts.states.get(name) not in (None, "running")]
    if not down:
        return ""
    which = ", ".join(f"{name} is {state}" for name, state in down)
    return (f"the stack's endpoint is down: {which}, so no model is reachable at routerPort {cfg.router_port} (each "
            "model's own port still answers). `pulumi up --refresh` starts it again and writes its routes")
