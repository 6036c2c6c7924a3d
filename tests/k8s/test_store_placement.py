"""RustFS kept off the serving nodes (issue 45, kubeStoreNodeLabel) on the real two-node test cluster:
node a carries the label (the test cluster's local volumes are on a: RustFS's claim binds only there), so
RustFS's pod runs on a and the serving pods (vLLM, the mount DaemonSet) only on b; the model serves through a
NodePort; destroy; the label removed. Preview first refuses a
label that no node carries, naming the nodes.

And the mount pods by digest (issue 45): rcloneImage names the cluster's registry by tag; preview says the
digest this machine's Docker engine got from that registry, the DaemonSet's pods run ``<repo>@sha256:...``
and the kubelet reports that very digest as the image it runs."""
from __future__ import annotations

import secrets

import pytest

from tests.helpers import ROOT
from tests.k8s.cluster import NODES, kget, kubectl, pods
from tests.k8s.test_cluster import (MODEL, RUSTFS_IMAGE, VLLM_IMAGE, cluster, image_present,  # noqa: F401
                                    served, smollm2)
from tests.pulumi_cli import Stack

# NodePorts apart from the other k8s tests' ranges (test_cluster 31000-32599, test_big_model 32620-32754)
PORT, S3_PORT, ROUTER_PORT = (30100 + 3 * secrets.randbelow(60) + i for i in range(3))
LABEL = "rustfs-vllm.test/role"
REGISTRY = "10.232.0.1:5000"        # the test cluster's registry (scripts/k8s_cluster/config.py: HOST_IP, reg_port)
RCLONE_IMAGE = f"{REGISTRY}/rustfs-vllm/rclone-mount:1.75.2"   # scripts/test-k8s load-image pushed it there


def node_names() -> dict[str, str]:
    """{a, b: the node's name}, by its InternalIP."""
    out = {}
    for n in kget("nodes")["items"]:
        ips = {a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP"}
        out.update({k: n["metadata"]["name"] for k, ip in NODES.items() if ip in ips})
    return out


def test_rustfs_runs_apart_from_the_serving_pods(cluster, tmp_path):
    if not MODEL.joinpath("model.safetensors").exists() or not image_present(RUSTFS_IMAGE):
        pytest.skip("needs SmolLM2 and the RustFS image (scripts/test-k8s makes them)")
    names = node_names()
    stack = Stack(ROOT, f"k8p-{secrets.token_hex(3)}")
    stack.init()
    ns = f"rvllm-{stack.name}"
    stack.write_config({
        "target": "kubernetes", "environment": "test", "kubeNodeAddress": NODES["a"], "kubeS3NodePort": S3_PORT,
        "kubeRouterNodePort": ROUTER_PORT, "s3Server": "rustfs", "rustfsImage": RUSTFS_IMAGE,
        "kubeStorageClass": "rustfs-vllm-local", "rustfsStorageSize": "10Gi", "bucket": "k8p-models",
        "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 900, "models": [smollm2(port=PORT)],
        "kubeStoreNodeLabel": f"{LABEL}=store", "mountCacheDir": f"/mnt/{ns}-cache", "rcloneImage": RCLONE_IMAGE})
    stack.set("kubeconfig", cluster, secret=True)
    stack.set("rustfsAccessKey", f"k8p-access-{secrets.token_hex(6)}", secret=True)
    stack.set("rustfsSecretKey", secrets.token_urlsafe(18), secret=True)
    try:
        refused = stack.run("preview", check=False)
        said = refused.stdout + refused.stderr
        assert refused.returncode != 0 and f"kubeStoreNodeLabel = '{LABEL}=store' is invalid: a label some node " \
            "carries" in said, said[-3000:]
        kubectl("label", "node", names["a"], f"{LABEL}=store", "--overwrite")
        said = stack.run("preview").stdout
        [pin] = [ln for ln in said.splitlines() if "mount pods run rcloneImage" in ln][:1]
        assert f"mount pods run rcloneImage {RCLONE_IMAGE} as {REGISTRY}/rustfs-vllm/rclone-mount@sha256:" in pin, said
        digest = pin.split("@")[-1].strip()
        stack.run("up", "--yes", "--skip-preview", label="up_apart", timeout=2400)
        where = {p["metadata"]["labels"]["app.kubernetes.io/component"]: p["spec"]["nodeName"]
                 for p in kget("pods", "-n", ns)["items"] if p["status"].get("phase") == "Running"}
        [s3] = [p["spec"]["nodeName"] for p in pods(ns, "app.kubernetes.io/component=s3-server")]
        assert s3 == names["a"], where
        serving = pods(ns, "app.kubernetes.io/component=vllm") + pods(ns, "app.kubernetes.io/component=mount")
        assert serving and {p["spec"]["nodeName"] for p in serving} == {names["b"]}, where
        mounts = pods(ns, "app.kubernetes.io/component=mount")
        assert {c["image"] for p in mounts for c in p["spec"]["containers"]} == \
            {f"{REGISTRY}/rustfs-vllm/rclone-mount@{digest}"}, mounts
        assert all(st["imageID"].endswith(f"@{digest}") for p in mounts for st in p["status"]["containerStatuses"]), \
            [st["imageID"] for p in mounts for st in p["status"]["containerStatuses"]]
        served(f"http://{NODES['a']}:{PORT}/v1", "smollm2")
        stack.run("preview", "--expect-no-changes")
    finally:
        stack.run("destroy", "--yes", "--skip-preview", check=False, timeout=1200)
        stack.remove()
        kubectl("label", "node", names.get("a", "a"), f"{LABEL}-", check=False)
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
