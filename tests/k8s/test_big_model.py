"""The 3.36 GB model through the mount on the real test cluster (issue 36, item 5): the random-weight
Llama of bench.big_model, 2 replicas, read by vLLM through each node's rclone mount (the DaemonSet,
the default read path), the S3 server RustFS 1.0.1 in the cluster (the stand-in where RustFS's image is
not built, said in the output and in the results).

1. `up` with both nodes' VFS caches empty: per pod, the seconds from scheduled to ready and the
   warm-up's line from its log (the entrypoint fetches the model into the node's cache while vLLM boots).
2. One rolling step (maxModelLen changes: the Deployment adds a pod beside an old one, waits for it to be
   ready, removes the old one, twice) under the OpenAI client polling the Service on node a: 0 failed
   requests; per new pod, scheduled to ready (the caches are warm now).
3. destroy keeps the bucket.

The figures go to bench/results-k8s.json under "big_model" (the rest of that file is test_cluster's).
"""
from __future__ import annotations

import calendar
import json
import re
import secrets
import time

import pytest

from bench import big_model
from bench.weights import BIG_FIELDS
from tests.helpers import ROOT
from tests.k8s.cluster import NODES, kubectl, pods
from tests.k8s.poller import Poller
from tests.k8s.test_cluster import (RUSTFS_IMAGE, STANDIN_IMAGE, VLLM_IMAGE, changes, cluster,  # noqa: F401
                                    image_present, served)
from tests.pulumi_cli import Stack

RESULTS = ROOT / "bench" / "results-k8s.json"
# NodePorts (30000-32767) apart from the other k8s tests' ranges (test_cluster 31000-32499, test_upgrade 32000-32599)
PORT, S3_PORT, ROUTER_PORT = (32620 + 3 * secrets.randbelow(45) + i for i in range(3))
WARM_LINE = re.compile(r"rustfs-vllm: warm-up of \S+.*")


def big(**over) -> dict:
    model = {"name": "big", "source": str(big_model.cache_dir() / big_model.NAME), "prefix": "big", "port": PORT,
             "dtype": BIG_FIELDS["dtype"], "maxModelLen": BIG_FIELDS["maxModelLen"],
             "extraArgs": BIG_FIELDS["extraArgs"], "kvCacheSpaceGib": 1, "replicas": 2}
    return {**model, **over}


def stamp(text: str) -> float:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))


def pod_times(ns: str, since: float = 0.0) -> dict[str, dict]:
    """Each ready vLLM pod scheduled at or after ``since``: its node, the seconds from scheduled to ready
    (the conditions' times, whole seconds) and its warm-up's line."""
    out = {}
    for p in pods(ns, "app.kubernetes.io/component=vllm"):
        cond = {c["type"]: c for c in p["status"].get("conditions", [])}
        if cond.get("Ready", {}).get("status") != "True" or stamp(cond["PodScheduled"]["lastTransitionTime"]) < since:
            continue
        name = p["metadata"]["name"]
        log = kubectl("logs", "-n", ns, name, "-c", "vllm", check=False).stdout
        warm = WARM_LINE.search(log)
        out[name] = {"node": p["spec"]["nodeName"],
                     "scheduled_to_ready_s": stamp(cond["Ready"]["lastTransitionTime"])
                     - stamp(cond["PodScheduled"]["lastTransitionTime"]),
                     "warm_up": warm.group(0) if warm else "(no warm-up line in the log)"}
    return out


def test_the_big_model_rolls_one_step_through_the_mount_with_no_failed_request(cluster, tmp_path):  # noqa: F811
    source = big_model.build(big_model.cache_dir() / big_model.NAME, big_model.cache_dir() / big_model.SMOLLM2)
    size = sum(p.stat().st_size for p in source.glob("*.safetensors"))
    stack = Stack(ROOT, f"k8big-{secrets.token_hex(3)}")
    stack.init()
    ns = f"rvllm-{stack.name}"
    server = "rustfs" if image_present(RUSTFS_IMAGE) else "rclone-serve-s3"
    print(f"S3 server on the cluster: {server}" + ("" if server == "rustfs" else " (rclone serve s3: NOT RustFS)"))
    cfg = {"target": "kubernetes", "environment": "test", "kubeNodeAddress": NODES["a"], "kubeS3NodePort": S3_PORT,
           "kubeRouterNodePort": ROUTER_PORT,
           "s3Server": server, "rustfsImage": RUSTFS_IMAGE if server == "rustfs" else STANDIN_IMAGE,
           "kubeStorageClass": "rustfs-vllm-local", "rustfsStorageSize": "10Gi", "bucket": "k8big-models",
           "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 1800, "mountCacheDir": f"/mnt/{ns}-cache", "models": [big()]}
    stack.write_config(cfg)
    stack.set("kubeconfig", cluster, secret=True)
    stack.set("rustfsAccessKey", f"k8big-access-{secrets.token_hex(6)}", secret=True)
    stack.set("rustfsSecretKey", secrets.token_urlsafe(18), secret=True)
    url = f"http://{NODES['a']}:{PORT}/v1"
    result: dict = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "server": server,
                    "model": f"{big_model.NAME} ({size / 1e9:.2f} GB of safetensors), 2 replicas, loadFormat mount"}
    try:
        # 1. up from empty VFS caches: both pods boot while their entrypoints warm the nodes' caches
        assert all(m.get("loadFormat") is None for m in cfg["models"])     # the default read path: the mount
        started = time.time()
        stack.run("up", "--yes", "--skip-preview", label="big_up_create", timeout=3600)
        result["up_create_s"] = round(time.time() - started, 1)
        result["cold_pods"] = pod_times(ns)
        assert sorted(p["node"] for p in result["cold_pods"].values()) == ["a", "b"], result["cold_pods"]
        served(url, "big", count=4)

        # 2. one rolling step under a polling client: a new pod beside each old one in turn
        stack.write_config({**cfg, "models": [big(maxModelLen=BIG_FIELDS["maxModelLen"] - 64)]}, keep_secrets=True)
        plan = changes(stack)
        assert set(plan) <= {"vllm-big-deployment", "smoke-big-completion"}, plan
        poll = Poller(url, "big", timeout=60).start()
        started = time.time()
        stack.run("up", "--yes", "--skip-preview", label="big_up_rolling_step", timeout=3600)
        result["rolling_step_up_s"] = round(time.time() - started, 1)
        time.sleep(5)
        result["rolling_step_client"] = poll.stop().summary()
        result["rolling_step_pods"] = pod_times(ns, since=started - 1)
        assert result["rolling_step_client"]["failed"] == 0 and result["rolling_step_client"]["requests"] > 10, result
        assert len(result["rolling_step_pods"]) == 2, result["rolling_step_pods"]
        assert all("GB in" in p["warm_up"] for p in result["rolling_step_pods"].values()), result["rolling_step_pods"]

        # 3. destroy keeps the bucket (its claim stays)
        stack.run("destroy", "--yes", "--skip-preview", label="big_destroy", timeout=1200)
        assert len(json.loads(kubectl("get", "pvc", "-n", ns, "-o", "json").stdout)["items"]) == 1
    finally:
        result["timings"] = stack.timings
        recorded = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        RESULTS.write_text(json.dumps({**recorded, "big_model": result}, indent=2) + "\n")
        print(json.dumps(result, indent=2))
        stack.run("destroy", "--yes", "--skip-preview", check=False, timeout=1200)
        stack.run("stack", "rm", "--yes", "--force", check=False)
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
