"""What each pod of the stack asks of its node (target kubernetes): memory and CPU requests, and a
memory limit, so that no pod is BestEffort (the first evicted under memory pressure, packed without
regard to fit) and a model that fits no node is refused at preview, naming the model and the nodes.

A vLLM pod's memory, derived from the model (overridable per model with ``memoryGib`` and ``cpus``):

- request = the weights (the upload's bytes) + the KV cache on CPU (``kvCacheSpaceGib``; with GPUs
  the KV cache is GPU memory) + ``RUNTIME_GIB`` for vLLM's processes (measured here: SmolLM2's
  0.5 GiB of weights with a 1 GiB KV cache ran in 1.6-1.7 GiB);
- limit = request + ``vllmShmSize`` (the pod's /dev/shm is a memory volume: what it holds counts
  against the limit).

A CPU model needs ``kvCacheSpaceGib`` (or ``memoryGib``) on Kubernetes: without it vLLM sizes its KV
cache as a fraction of the whole node's memory, past any limit the pod could have.

The rclone mount DaemonSet's pods: ``MOUNT_REQUEST`` (rclone's buffers; its VFS cache is on the
node's disk), limited to ``MOUNT_LIMIT``; the S3 server's pod: ``S3_REQUEST``, limited to ``S3_LIMIT``.
"""
from __future__ import annotations

import base64
import math
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Optional

import requests
import yaml

RUNTIME_GIB = 1.0
# Half a CPU, with no CPU limit (vLLM uses what the node has free). A rolling step runs a new pod of the
# model beside the old one (maxSurge 1, maxUnavailable 0): at 1 CPU each, two of them with the S3
# server's and a mount's 100m (2.2 CPUs) fit no 2-CPU node, and on the test cluster the rollout of a
# 2-replica model waited with its new pod Pending ("0/2 nodes are available: 2 Insufficient cpu").
CPU_REQUEST = 0.5
MOUNT_REQUEST = {"memory": "128Mi", "cpu": "100m"}
MOUNT_LIMIT = {"memory": "1Gi"}
# The S3 server's pod (RustFS or the stand-in): the stand-in ran in 23 MiB here; RustFS's caches grow
# with load, so its limit leaves room.
S3_REQUEST = {"memory": "256Mi", "cpu": "100m"}
S3_LIMIT = {"memory": "4Gi"}
_UNITS = {"": 1, "k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
          "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}


@dataclass(frozen=True)
class PodSize:
    memory_mib: int         # request
    limit_mib: int
    cpus: float

    def requirements(self, gpus: int = 0) -> dict[str, dict[str, str]]:
        """The container's ``resources`` (``nvidia.com/gpu`` limits when it has GPUs)."""
        limits = {"memory": f"{self.limit_mib}Mi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
        return {"requests": {"memory": f"{self.memory_mib}Mi", "cpu": f"{self.cpus:g}"}, "limits": limits}


def vllm_pod(weights_bytes: int, kv_gib: Optional[float], shm_mib: int, gpus: int,
             memory_gib: Optional[float] = None, cpus: Optional[float] = None) -> PodSize:
    """A model's vLLM pod size (see the module's text)."""
    if memory_gib is None:
        kv = 0.0 if gpus else (kv_gib or 0.0)
        memory_gib = weights_bytes / 2**30 + kv + RUNTIME_GIB
    request = math.ceil(memory_gib * 1024)
    return PodSize(memory_mib=request, limit_mib=request + shm_mib, cpus=cpus if cpus is not None else CPU_REQUEST)


def quantity(text: str) -> int:
    """A Kubernetes quantity (``24354500Ki``, ``16Gi``, ``8G``) in bytes."""
    m = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T|)", str(text).strip())
    if not m:
        raise ValueError(f"not a quantity: {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _credentials(user: dict[str, Any], folder: str) -> dict[str, Any]:
    """requests' keyword arguments for a kubeconfig user: a client certificate or a bearer token."""
    if user.get("token"):
        return {"headers": {"Authorization": f"Bearer {user['token']}"}}
    if user.get("client-certificate-data") and user.get("client-key-data"):
        cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
        for path, field in ((cert, "client-certificate-data"), (key, "client-key-data")):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(base64.b64decode(user[field]))
        return {"cert": (cert, key)}
    return {}


def node_memory(kubeconfig: str, get: Callable[..., Any] = requests.get) -> Optional[dict[str, int]]:
    """{node: allocatable memory in bytes} from the cluster's API, or None when it cannot be read
    (preview then checks nothing against the nodes; the pods' own scheduling still says why)."""
    items = node_items(kubeconfig, get)
    try:
        return {n["metadata"]["name"]: quantity(n["status"]["allocatable"]["memory"]) for n in items} \
            if items is not None else None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def node_labels(kubeconfig: str, get: Callable[..., Any] = requests.get) -> Optional[dict[str, dict[str, str]]]:
    """{node: its labels} from the cluster's API, or None when it cannot be read."""
    items = node_items(kubeconfig, get)
    try:
        return {n["metadata"]["name"]: dict(n["metadata"].get("labels") or {}) for n in items} \
            if items is not None else None
    except (KeyError, TypeError, AttributeError):
        return None


def node_items(kubeconfig: str, get: Callable[..., Any] = requests.get) -> Optional[list[dict[str, Any]]]:
    """The cluster's nodes (the API's items), or None when they cannot be read."""
    try:
        doc = yaml.safe_load(kubeconfig) or {}
        ctx_name = doc.get("current-context")
        ctx = next(c["context"] for c in doc.get("contexts", []) if c.get("name") == ctx_name)
        cluster = next(c["cluster"] for c in doc.get("clusters", []) if c.get("name") == ctx["cluster"])
        user = next((u["user"] for u in doc.get("users", []) if u.get("name") == ctx.get("user")), {})
        with tempfile.TemporaryDirectory() as folder:
            verify: Any = True
            if cluster.get("certificate-authority-data"):
                verify = os.path.join(folder, "ca.pem")
                with open(verify, "wb") as fh:
                    fh.write(base64.b64decode(cluster["certificate-authority-data"]))
            elif cluster.get("insecure-skip-tls-verify"):
                verify = False
            resp = get(f"{cluster['server'].rstrip('/')}/api/v1/nodes", verify=verify, timeout=10,
                       **_credentials(user, folder))
        resp.raise_for_status()
        return list(resp.json()["items"])
    except (requests.RequestException, ValueError, KeyError, StopIteration, TypeError, AttributeError,
            OSError, yaml.YAMLError):
        return None


def fit_problem(model: str, size: PodSize, nodes: dict[str, int]) -> Optional[str]:
    """Why no node can hold the model's pod (its memory request over every node's allocatable), or None."""
    if not nodes or any(size.memory_mib * 2**20 <= free for free in nodes.values()):
        return None
    listing = ", ".join(f"{n} {free / 2**30:.1f} GiB" for n, free in sorted(nodes.items()))
    return (f"models[{model}] needs {size.memory_mib / 1024:.1f} GiB of memory (weights, KV cache and vLLM's "
            f"runtime, or its memoryGib) and no node has that much allocatable ({listing}): give the model a "
            "smaller kvCacheSpaceGib or maxModelLen, add a bigger node, or set models[].memoryGib if the estimate "
            "is too high")
