"""Preflight for target kubernetes: what `up` would fail on, before anything is created.

- the kubeconfig's API server must answer a TCP connection from this machine (else every resource
  would time out after the uploads);
- an https S3 endpoint must be trusted (as on Docker);
- every model's vLLM pod must fit some node by its memory request (components.kube.sizing), read
  from the API server's nodes (skipped when they cannot be read: scheduling then says why).
Nothing is asked of this machine's FUSE, ports or images: the nodes mount and serve.
"""
from __future__ import annotations

import socket
from typing import Callable, Optional
from urllib.parse import urlsplit

from components.config.kube import gpu_count, server_of
from components.config.schema import NAMESPACE
from components.config.spec import StackConfig
from components.kube import sizing
from components.mounting.copy_tool import bytes_in
from components.serving.vllm import shm_megabytes
from components.storage import tls


def connect_problem(host: str, port: int, timeout: float = 5.0) -> Optional[str]:
    """None when ``host:port`` accepts a TCP connection, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return str(exc) or type(exc).__name__


def check(cfg: StackConfig, connect: Callable[[str, int], Optional[str]] = connect_problem,
          tls_problem: Callable[[str, str], Optional[str]] = tls.probe,
          nodes: Callable[[str], Optional[dict[str, int]]] = sizing.node_memory,
          labels: Callable[[str], Optional[dict[str, dict[str, str]]]] = sizing.node_labels) -> list[str]:
    problems: list[str] = []
    assert cfg.kube is not None
    server, _ = server_of(cfg.kube.kubeconfig)
    if server:
        url = urlsplit(server)
        port = url.port or (443 if url.scheme == "https" else 80)
        problem = connect(url.hostname or "", port)
        if problem:
            problems.append(f"{NAMESPACE}:kubeconfig = '<secret>' is invalid: a kubeconfig whose API server this "
                            f"machine reaches: {server} does not answer ({problem})")
    if cfg.rustfs_endpoint.startswith("https://"):
        problem = tls_problem(cfg.rustfs_endpoint, cfg.ca_bundle)
        problems += [problem] if problem else []
    if not problems:
        problems += fit_problems(cfg, nodes(cfg.kube.kubeconfig))
        if cfg.kube.store_node_label:
            problems += placement_problems(cfg.kube.store_node_label, labels(cfg.kube.kubeconfig))
    return problems


def placement_problems(label: str, node_labels: Optional[dict[str, dict[str, str]]]) -> list[str]:
    """kubeStoreNodeLabel must leave RustFS a node and the models a node (nothing when the nodes cannot be read)."""
    if not node_labels:
        return []
    key, _, value = label.partition("=")
    carry = sorted(n for n, lbl in node_labels.items() if lbl.get(key) == value)
    if not carry:
        return [f"{NAMESPACE}:kubeStoreNodeLabel = {label!r} is invalid: a label some node carries (none of "
                f"{', '.join(sorted(node_labels))} does: kubectl label node <node> {label})"]
    if len(carry) == len(node_labels):
        return [f"{NAMESPACE}:kubeStoreNodeLabel = {label!r} is invalid: a label some node does not carry (every node "
                f"does: the models would have no node to run on; kubectl label node <node> {key}- on a serving node)"]
    return []


def fit_problems(cfg: StackConfig, node_sizes: Optional[dict[str, int]]) -> list[str]:
    """A model whose vLLM pod fits no node, by memory request (nothing when the nodes cannot be read)."""
    if not node_sizes:
        return []
    out = []
    for m in cfg.models:
        gpus = gpu_count(m.gpus if m.gpus is not None else cfg.vllm_gpus)
        size = sizing.vllm_pod(bytes_in(m.source), m.kv_cache_space_gib, shm_megabytes(cfg.vllm_shm_size),
                               gpus, m.memory_gib, m.cpus)
        problem = sizing.fit_problem(m.name, size, node_sizes)
        out += [problem] if problem else []
    return out
