"""The Docker target's outputs: one implicit local host keeps the outputs stacks had before
``hosts``; several hosts give, per model, every host's base URL and curl line."""
from __future__ import annotations

from typing import Any, Mapping

from components.config.spec import StackConfig
from components.core.outputs import curl, metrics
from components.core.target import Store
from components.docker.host_plan import HostPlan


def _prefix(cfg: StackConfig, store: Store, name: str) -> str:
    return f"s3://{cfg.bucket}/{store.uploads[name].prefix_value}/"


def load_format(cfg: StackConfig, name: str) -> str:
    """How the model's vLLM reads its weights: ``mount``, ``local_copy`` or ``runai_streamer``."""
    return next(m.load_format for m in cfg.models if m.name == name)


def one_host_outputs(cfg: StackConfig, store: Store, host: HostPlan) -> dict[str, Any]:
    first = cfg.models[0]
    return {
        "models": {name: {"base_url": s.base_url, "served_name": s.served_name, "metrics_url": metrics(s.base_url),
                          "prefix": _prefix(cfg, store, name), "load_format": load_format(cfg, name),
                          **({"weights_dir": host.copies[name].path} if name in host.copies else {})}
                   for name, s in host.servers.items()},
        "curl": curl(cfg, host.servers[first.name].base_url, first.name)}


def hosts_outputs(cfg: StackConfig, store: Store, hosts: Mapping[str, HostPlan]) -> dict[str, Any]:
    first = cfg.models[0]
    url = lambda h, m: hosts[h].servers[m].base_url  # noqa: E731
    return {
        "models": {m.name: {
            "served_name": m.name, "prefix": _prefix(cfg, store, m.name), "load_format": m.load_format,
            "hosts": list(m.hosts),
            "base_urls": [url(h, m.name) for h in m.hosts],
            "metrics_urls": [metrics(url(h, m.name)) for h in m.hosts],
            "curls": {h: curl(cfg, url(h, m.name), m.name) for h in m.hosts}}
            for m in cfg.models},
        "hosts": {h.name: {"docker": h.docker_host or "local", "address": h.address, "mount_path": h.mount_path,
                           "models": [m.name for m in cfg.models if h.name in m.hosts]} for h in cfg.hosts},
        "curl": curl(cfg, url(first.hosts[0], first.name), first.name)}
