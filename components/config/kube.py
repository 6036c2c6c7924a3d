"""``target: kubernetes``: the cluster keys, validated into a KubeSpec, and the rules that differ
from Docker hosts (no ``hosts``, no entry points of ours, NodePorts, GPUs as a count).

    target: kubernetes
    kubeconfig: <secret>           # pulumi config set --secret kubeconfig < ~/.kube/config
    kubeNamespace: rvllm-prod      # default <namePrefix>
    kubeNodeAddress: 10.0.0.11     # where this machine reaches NodePorts (default: the API server's host)
    kubeS3NodePort: 30900          # RustFS's S3 NodePort (s3Server rustfs)
    kubeStorageClass: fast-ssd     # RustFS's volume claim (default: the cluster's default class)
    rustfsStorageSize: 200Gi
    rcloneImage: registry.example/rustfs-vllm/rclone-mount:1.75.2
"""
from __future__ import annotations

import re
from typing import Any, Optional
from urllib.parse import urlsplit

import yaml

from components.config.reader import Reader
from components.config.schema import key as declared
from components.config.spec import KubeSpec, ModelSpec

NODE_PORT_BASE = 30800              # a model's default NodePort: 30800 + its index
NODE_PORTS = (30000, 32767)         # the API server's default --service-node-port-range
KUBE_KEYS = ("kubeconfig", "kubeNamespace", "kubeNodeAddress", "kubeS3NodePort", "kubeStorageClass",
             "rustfsStorageSize", "kubeRouterNodePort", "kubeStoreNodeLabel")
GPU_COUNT_RE = re.compile(r"^count=([0-9]+)$")


def unused(r: Reader) -> None:
    """target docker: the cluster's keys mean nothing; say so rather than ignore them. The engine hands
    over Pulumi.yaml's declared defaults as if they were set: those are not the user's."""
    for k in KUBE_KEYS:
        value, default = r.raw.get(k), declared(k).default
        if value not in (None, "") and str(value) != str(default):
            r.bad(k, "<secret>" if k == "kubeconfig" else value, "set only with target: kubernetes")
    return None


def server_of(kubeconfig: str) -> tuple[Optional[str], str]:
    """(the API server URL of the kubeconfig's current context, or None; the problem when None)."""
    try:
        doc = yaml.safe_load(kubeconfig)
    except yaml.YAMLError as exc:
        return None, f"a kubeconfig in YAML ({str(exc).splitlines()[0]})"
    if not isinstance(doc, dict) or not isinstance(doc.get("clusters"), list):
        return None, "a kubeconfig file's text (a YAML map with clusters, contexts and users)"
    contexts = {c.get("name"): c.get("context") or {} for c in doc.get("contexts") or [] if isinstance(c, dict)}
    current = doc.get("current-context") or (next(iter(contexts)) if len(contexts) == 1 else None)
    if current not in contexts:
        return None, f"a kubeconfig whose current-context names one of its contexts ({current!r} does not)"
    clusters = {c.get("name"): c.get("cluster") or {} for c in doc["clusters"] if isinstance(c, dict)}
    server = clusters.get(contexts[current].get("cluster"), {}).get("server")
    if not server:
        return None, f"a kubeconfig whose context {current!r} names a cluster with a server URL"
    return server, ""


def parse(r: Reader, v: dict[str, Any]) -> Optional[KubeSpec]:
    """The cluster's keys and the keys that do not apply on it."""
    kubeconfig = r.value("kubeconfig")
    server: Optional[str] = None
    if not kubeconfig:
        r.bad("kubeconfig", "", "required with target: kubernetes: the kubeconfig that reaches the cluster, set "
                                "with `pulumi config set --secret kubeconfig < ~/.kube/config`")
    else:
        server, problem = server_of(kubeconfig)
        if server is None:
            r.bad("kubeconfig", "<secret>", problem)
    namespace = r.value("kubeNamespace", re.sub(r"[^a-z0-9-]", "-", v["name_prefix"]).strip("-")[:63] or "rvllm")
    node_address = r.value("kubeNodeAddress", urlsplit(server).hostname or "" if server else "")
    if server is not None and not node_address:
        r.bad("kubeNodeAddress", node_address, "the address of a node this machine reaches NodePorts on")
    if r.raw.get("hosts") not in (None, []):
        r.bad("hosts", r.raw["hosts"], "no hosts with target: kubernetes (the cluster places the pods; "
                                       "use models[].replicas)")
    return KubeSpec(kubeconfig=kubeconfig, namespace=namespace, node_address=node_address,
                    s3_node_port=r.value("kubeS3NodePort"), storage_class=r.value("kubeStorageClass"),
                    storage_size=r.value("rustfsStorageSize"), rclone_image=r.value("rcloneImage"),
                    router_node_port=r.value("kubeRouterNodePort"), store_node_label=r.value("kubeStoreNodeLabel"))


def check_models(r: Reader, v: dict[str, Any]) -> None:
    """What a model may not ask of a cluster, and NodePorts that collide."""
    models: tuple[ModelSpec, ...] = v["models"]
    kube: KubeSpec = v["kube"]
    taken: dict[int, str] = {kube.s3_node_port: "RustFS's S3 Service (kubeS3NodePort)"} \
        if v["s3_server"] != "external" else {}
    if v["router"]:
        if kube.router_node_port in taken:
            r.bad("kubeRouterNodePort", kube.router_node_port, f"a NodePort of its own ({taken[kube.router_node_port]} "
                                                               "uses it)")
        taken.setdefault(kube.router_node_port, "the stack's one endpoint (kubeRouterNodePort)")
    lo, hi = NODE_PORTS
    gpus_key = ("vllmGpus", v["vllm_gpus"])
    if gpus_key[1] and not GPU_COUNT_RE.fullmatch(gpus_key[1]):
        r.bad(*gpus_key, "'count=N' or empty with target: kubernetes (GPUs are the nvidia.com/gpu resource)")
    for m in models:
        key = f"models[{m.name}]"
        if not lo <= m.port <= hi:
            r.bad(f"{key}.port", m.port, f"a NodePort {lo}-{hi} with target: kubernetes (its Service's)")
        elif m.port in taken:
            r.bad(f"{key}.port", m.port, f"a NodePort of its own ({taken[m.port]} uses it)")
        taken.setdefault(m.port, f"model {m.name!r}")
        if m.balancer_port is not None:
            r.bad(f"{key}.balancerPort", m.balancer_port,
                  "no balancerPort with target: kubernetes (the model's Service spreads requests over its pods)")
        if m.gpus and not GPU_COUNT_RE.fullmatch(m.gpus):
            r.bad(f"{key}.gpus", m.gpus, "'count=N' or empty with target: kubernetes (the nvidia.com/gpu resource)")
        if not (m.gpus or v["vllm_gpus"]) and m.kv_cache_space_gib is None and m.memory_gib is None:
            r.bad(f"{key}.kvCacheSpaceGib", None, "a KV cache size in GiB (or the pod's memoryGib) for a model without "
                                                "GPUs with target: kubernetes: otherwise vLLM sizes its KV cache as a "
                                                "fraction of the whole node's memory, past the pod's memory limit")
        if m.load_format == "local_copy":
            r.bad(f"{key}.loadFormat", m.load_format, "mount or runai_streamer with target: kubernetes (the node-local "
                                                      "copy runs on Docker hosts only so far)")
    port = r.raw.get("rustfsPort")
    if v["s3_server"] != "external" and port not in (None, "") and str(port) != str(declared("rustfsPort").default):
        r.bad("rustfsPort", port, "unset with target: kubernetes (the S3 Service listens on 9000 in the cluster; "
                                  "this machine reaches it on kubeS3NodePort)")


def gpu_count(gpus: str) -> int:
    """``count=N`` -> N; "" -> 0."""
    m = GPU_COUNT_RE.fullmatch(gpus or "")
    return int(m.group(1)) if m else 0
