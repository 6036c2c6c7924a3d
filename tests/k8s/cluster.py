"""The test cluster of scripts/k8s-cluster, as the tests use it: kubectl with its admin kubeconfig,
and its two nodes (a 10.232.0.11, b 10.232.0.12)."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.helpers import ROOT

KUBECONFIG = ROOT / ".state" / "k8s" / "admin.kubeconfig"
CACHE = Path(os.environ.get("RUSTFS_VLLM_CACHE") or Path.home() / ".cache" / "rustfs-vllm")
KUBECTL = CACHE / "toolchain" / "k8s-v1.34.4" / "bin" / "kubectl"
SCRIPT = ROOT / "scripts" / "k8s-cluster"
NODES = {"a": "10.232.0.11", "b": "10.232.0.12"}


def kubectl(*args: str, check: bool = True, timeout: int = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(KUBECTL), f"--kubeconfig={KUBECONFIG}", *args], capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc


def kget(*args: str) -> Any:
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


def cluster_problem() -> str:
    """Why the cluster cannot be used ("" when both nodes are Ready)."""
    if not KUBECONFIG.exists() or not KUBECTL.exists():
        return "no test cluster: `make test-k8s` (scripts/test-k8s) builds the toolchain and brings it up"
    proc = kubectl("get", "nodes", "-o", "json", check=False, timeout=20)
    if proc.returncode != 0:
        return f"the test cluster does not answer (scripts/k8s-cluster up): {proc.stderr.strip()[-300:]}"
    ready = [n["metadata"]["name"] for n in json.loads(proc.stdout)["items"]
             if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])]
    return "" if len(ready) >= 2 else f"the test cluster has {len(ready)} Ready nodes of 2 (scripts/k8s-cluster up)"


def pods(namespace: str, selector: str) -> list[dict]:
    return kget("pods", "-n", namespace, "-l", selector)["items"]


def wait_for(what: str, check, timeout: float = 600, every: float = 2.0) -> Any:
    """Poll ``check()`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
