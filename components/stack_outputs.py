"""The stack's outputs, shaped from a ServingStack: one local host keeps the outputs stacks had
before ``hosts``; several hosts give, per model, every host's base URL and curl line."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pulumi

if TYPE_CHECKING:
    from components.stack import ServingStack


def curl(stack: "ServingStack", base_url: pulumi.Output[str], model: str) -> pulumi.Output[str]:
    """The request an OpenAI client sends by default (no temperature: sampled), as a curl line."""
    cfg = stack.cfg
    return base_url.apply(
        lambda url: f"curl -s {url}/completions -H 'Content-Type: application/json'"
                    + (" -H \"Authorization: Bearer $VLLM_API_KEY\"" if cfg.vllm_api_key else "")
                    + f" -d '{{\"model\": \"{model}\", \"prompt\": \"{cfg.smoke_prompt}\", \"max_tokens\": "
                      f"{cfg.smoke_max_tokens}}}'")


def metrics(base_url: pulumi.Output[str]) -> pulumi.Output[str]:
    """vLLM's Prometheus endpoint beside its OpenAI API."""
    return base_url.apply(lambda url: url.removesuffix("/v1") + "/metrics")


def exports(stack: "ServingStack") -> dict[str, Any]:
    cfg = stack.cfg
    out: dict[str, Any] = {
        "s3_server": stack.server.kind, "s3_endpoint": stack.server.endpoint, "bucket": stack.bucket.name,
        "bucket_adopted": stack.bucket.adopted, "mount_path": stack.mount_root.path}
    return {**out, **(_one_host(stack) if cfg.hosts[0].implicit else _hosts(stack))}


def _prefix(stack: "ServingStack", name: str) -> str:
    return f"s3://{stack.cfg.bucket}/{stack.uploads[name].prefix_value}/"


def weights(stack: "ServingStack", name: str) -> str:
    """How the model's vLLM reads its weights: ``mount`` (its read-only rclone mount) or
    ``runai_streamer`` (streamed from its prefix in the bucket)."""
    return next(m.load_format for m in stack.cfg.models if m.name == name)


def _one_host(stack: "ServingStack") -> dict[str, Any]:
    cfg, first = stack.cfg, stack.cfg.models[0]
    servers = stack.servers[cfg.hosts[0].name]
    out: dict[str, Any] = {
        "models": {name: {"base_url": s.base_url, "served_name": s.served_name, "metrics_url": metrics(s.base_url),
                          "prefix": _prefix(stack, name), "load_format": weights(stack, name),
                          **({"weights_dir": stack.copies[cfg.hosts[0].name][name].path}
                             if name in stack.copies.get(cfg.hosts[0].name, {}) else {})}
                   for name, s in servers.items()},
        "curl": curl(stack, servers[first.name].base_url, first.name)}
    if cfg.smoke_test:
        out["smoke_completions"] = {name: t.text for name, t in stack.smoke[cfg.hosts[0].name].items()}
    return out


def _hosts(stack: "ServingStack") -> dict[str, Any]:
    cfg, first = stack.cfg, stack.cfg.models[0]
    url = lambda h, m: stack.servers[h][m].base_url  # noqa: E731
    out: dict[str, Any] = {
        "models": {m.name: {
            "served_name": m.name, "prefix": _prefix(stack, m.name), "load_format": m.load_format,
            "hosts": list(m.hosts),
            "base_urls": [url(h, m.name) for h in m.hosts],
            "metrics_urls": [metrics(url(h, m.name)) for h in m.hosts],
            "curls": {h: curl(stack, url(h, m.name), m.name) for h in m.hosts},
            **({"entry_url": stack.balancer.urls[m.name]} if m.balancer_port and stack.balancer else {})}
            for m in cfg.models},
        "hosts": {h.name: {"docker": h.docker_host or "local", "address": h.address, "mount_path": h.mount_path,
                           "models": [m.name for m in cfg.models if h.name in m.hosts]} for h in cfg.hosts},
        "curl": curl(stack, url(first.hosts[0], first.name), first.name)}
    if cfg.smoke_test:
        out["smoke_completions"] = {m.name: {h: stack.smoke[h][m.name].text for h in m.hosts} for m in cfg.models}
    return out
