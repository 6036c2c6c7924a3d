"""What the policy pack (policy/) judges a stack by: the settings its rules are about, in plain words,
recorded as the inputs of the stack's root component (rustfs-vllm:index:ServingStack or KubeStack).

A policy pack sees every resource's inputs at preview; no secret is among these facts (whether a key
is set, never the key), so the state and the pack's process hold nothing to hide. Each fact is keyed by
the config key a user changes to fix it (``hosts[gpu].bindAddress``, ``vllmImage``), so a violation can
name it.
"""
from __future__ import annotations

from typing import Any

from components.config.spec import StackConfig

VERSION = 1           # what policy/ expects; a pack newer than a stack's program says so, naming the fix


def images(cfg: StackConfig) -> dict[str, str]:
    """{config key: image reference} of every image the stack runs or may run (the mounts' image even
    where no model mounts today: a model moved to the mount changes no fact)."""
    out: dict[str, str] = {"vllmImage": cfg.vllm_image}
    if cfg.s3_server != "external":
        out["rustfsImage"] = cfg.rustfs_image
    out["rcloneImage"] = cfg.kube.rclone_image if cfg.kube is not None else cfg.rclone_image
    if cfg.router and cfg.kube is None:
        out["routerImage"] = cfg.router_image
    for h in cfg.hosts:
        if h.implicit:
            continue
        if h.vllm_image and h.vllm_image != cfg.vllm_image:
            out[f"hosts[{h.name}].vllmImage"] = h.vllm_image
        if h.rclone_image and h.rclone_image != cfg.rclone_image:
            out[f"hosts[{h.name}].rcloneImage"] = h.rclone_image
    return out


def exposure(cfg: StackConfig) -> dict[str, str]:
    """{config key: where vLLM's ports listen}: each Docker host's bind address; on Kubernetes the
    models' NodePorts, open on every node."""
    if cfg.kube is not None:
        return {"target": "kubernetes (NodePorts on every node)"}
    out = {("bindAddress" if h.implicit else f"hosts[{h.name}].bindAddress"): h.bind_address for h in cfg.hosts}
    if cfg.router:      # the stack's one endpoint listens on bindAddress of this machine
        out["routerPort"] = cfg.bind_address
    return out


def facts(cfg: StackConfig) -> dict[str, Any]:
    return {"version": VERSION, "stack": cfg.stack, "environment": cfg.environment,
            "defaultCredentials": cfg.uses_default_credentials, "readKeys": cfg.read_keys,
            "apiKeySet": bool(cfg.vllm_api_key), "exposure": exposure(cfg), "images": images(cfg)}
