"""Pods that hold under pressure (issue 29): every pod of a Kubernetes stack declares memory requests
and a memory limit derived from the model, overridable per model; a CPU model without a KV cache size
is refused; a model that fits no node is refused at preview, naming the model and the node sizes."""
from __future__ import annotations

import base64
import json

import pytest

from components.config.spec import ConfigError
from components.kube import preflight, sizing
from tests.unit.test_kube import build, load, problems, raw


def test_the_request_is_weights_plus_kv_plus_runtime_and_the_limit_adds_shm():
    size = sizing.vllm_pod(weights_bytes=3 * 2**30, kv_gib=2, shm_mib=2048, gpus=0)
    assert size.memory_mib == (3 + 2 + 1) * 1024 and size.limit_mib == size.memory_mib + 2048
    on_gpu = sizing.vllm_pod(weights_bytes=3 * 2**30, kv_gib=2, shm_mib=2048, gpus=1)
    assert on_gpu.memory_mib == 4 * 1024                         # the KV cache is GPU memory
    assert on_gpu.requirements(1)["limits"]["nvidia.com/gpu"] == "1"
    given = sizing.vllm_pod(3 * 2**30, 2, 1024, 0, memory_gib=10, cpus=4)
    assert given.requirements() == {"requests": {"memory": "10240Mi", "cpu": "4"}, "limits": {"memory": "11264Mi"}}


def test_a_rolling_step_fits_a_two_cpu_node_beside_the_s3_server_and_a_mount():
    """maxSurge 1, maxUnavailable 0: the old pod and the new one side by side on the node that runs RustFS."""
    cpu = sizing.vllm_pod(2**30, 1, 1024, 0).cpus
    milli = lambda q: float(q[:-1]) / 1000 if q.endswith("m") else float(q)   # noqa: E731
    assert 2 * cpu + milli(sizing.S3_REQUEST["cpu"]) + milli(sizing.MOUNT_REQUEST["cpu"]) <= 2.0


def test_every_pod_of_the_stack_has_memory_requests_and_limits(tmp_path):
    g = build(load(raw(tmp_path, models=[
        {"name": "a", "source": str(tmp_path / "a"), "kvCacheSpaceGib": 1},
        {"name": "b", "source": str(tmp_path / "b"), "memoryGib": 6, "cpus": 2, "kvCacheSpaceGib": 1}])))
    workloads = g.by_type("kubernetes:apps/v1:Deployment") + g.by_type("kubernetes:apps/v1:DaemonSet") + \
        g.by_type("kubernetes:apps/v1:StatefulSet")
    # two models, their mounts, the S3 server, the one endpoint
    assert len(workloads) == 6, [r.name for r in workloads]
    for r in workloads:
        for c in r.plain("spec")["template"]["spec"]["containers"]:
            res = c.get("resources") or {}
            assert res.get("requests", {}).get("memory") and res.get("limits", {}).get("memory"), (r.name, c["name"])
    b = next(r for r in g.by_type("kubernetes:apps/v1:Deployment") if "-b" in r.name)
    assert b.plain("spec")["template"]["spec"]["containers"][0]["resources"]["requests"] == {"memory": "6144Mi", "cpu": "2"}


def test_a_cpu_model_without_a_kv_cache_size_is_refused(tmp_path):
    r = raw(tmp_path)
    del r["models"][0]["kvCacheSpaceGib"]
    assert "models[a].kvCacheSpaceGib = None is invalid: a KV cache size in GiB (or the pod's memoryGib)" in problems(r)


def test_cpus_are_refused_on_docker_and_memory_is_the_container_s_limit(tmp_path):
    r = raw(tmp_path, target="docker")
    del r["kubeconfig"]
    del r["models"][1]["gpus"]
    r["models"] = [{**r["models"][0], "replicas": 1, "memoryGib": 4, "cpus": 2}]
    found = problems(r)
    assert "models[a].cpus = 2.0 is invalid: unset with target: docker" in found
    assert not [p for p in found if "memoryGib" in p], found      # issue 45: the container's memory limit


def test_a_model_that_fits_no_node_fails_at_preview_naming_model_and_nodes(tmp_path):
    cfg = load(raw(tmp_path, models=[{"name": "a", "source": str(tmp_path / "a"), "kvCacheSpaceGib": 1},
                                     {"name": "big", "source": str(tmp_path / "b"), "kvCacheSpaceGib": 64}]))
    nodes = {"node-1": 15 * 2**30, "node-2": 7 * 2**30}
    found = preflight.check(cfg, connect=lambda h, p: None, nodes=lambda kc: nodes)
    assert len(found) == 1 and found[0].startswith("models[big] needs 65.0 GiB of memory"), found
    assert "node-1 15.0 GiB, node-2 7.0 GiB" in found[0]
    assert preflight.check(cfg, connect=lambda h, p: None, nodes=lambda kc: None) == []   # unknown: not checked


def test_node_memory_reads_the_api_with_the_kubeconfig_client_certificate():
    pem = base64.b64encode(b"-----BEGIN X-----\n-----END X-----\n").decode()
    kc = json.dumps({"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                     "clusters": [{"name": "k", "cluster": {"server": "https://10.0.0.1:6443",
                                                            "certificate-authority-data": pem}}],
                     "users": [{"name": "u", "user": {"client-certificate-data": pem, "client-key-data": pem}}]})
    seen = {}

    class Resp:
        def raise_for_status(self):
            pass

        def json(self):
            return {"items": [{"metadata": {"name": "n1"}, "status": {"allocatable": {"memory": "24354500Ki"}}}]}

    def get(url, **kw):
        seen.update(url=url, **kw)
        with open(kw["cert"][0], "rb") as fh:
            assert fh.read().startswith(b"-----BEGIN X")
        return Resp()

    assert sizing.node_memory(kc, get=get) == {"n1": 24354500 * 1024}
    assert seen["url"] == "https://10.0.0.1:6443/api/v1/nodes" and seen["verify"].endswith("ca.pem")
    assert sizing.node_memory("not: [a kubeconfig", get=get) is None


@pytest.mark.parametrize("text,bytes_", [("16Gi", 16 * 2**30), ("8G", 8 * 10**9), ("1024", 1024), ("512Mi", 2**29)])
def test_quantities(text, bytes_):
    assert sizing.quantity(text) == bytes_


def test_cpu_pods_leave_cpu_placement_to_the_kernel_unless_the_model_says(tmp_path):
    """vLLM's "auto" binding pins every pod's worker to the same core; a new pod of a rolling step beside a busy
    one got no CPU time on the test cluster. GPU pods keep vLLM's default; a model's env wins."""
    from tests.unit.test_kube import build, load, raw

    def env_of(g, name):
        d = next(r for r in g.by_type("kubernetes:apps/v1:Deployment") if f"-{name}" in r.name)
        return {e["name"]: e.get("value") for e in d.plain("spec")["template"]["spec"]["containers"][0]["env"]}

    from tests.helpers import make_model

    make_model(tmp_path / "c", seed=3)
    g = build(load(raw(tmp_path, models=[
        {"name": "a", "source": str(tmp_path / "a"), "kvCacheSpaceGib": 1},
        {"name": "b", "source": str(tmp_path / "b"), "kvCacheSpaceGib": 1, "env": {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}},
        {"name": "c", "source": str(tmp_path / "c"), "gpus": "count=1"}])))
    assert env_of(g, "a")["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert env_of(g, "b")["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in env_of(g, "c")
