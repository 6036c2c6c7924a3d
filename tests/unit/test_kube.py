"""target kubernetes: the configuration's rules and the resource graph under Pulumi mocks (the
objects, their specs, where the keys go, per-model independence). The real cluster: tests/k8s."""
from __future__ import annotations

import json

import pytest

from components import config
from components.kube import preflight as kube_preflight
from components.serving import streamer
from tests.helpers import ROOT, make_model
from tests.unit.graph import READ_SECRET, READ_USER, build, unwrap

KEYS = ("kube-access-key-0001", "kube-secret-key-0001", "kube-api-key-0001")
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.9.8.7:6443", certificate-authority-data: Q0E=}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
current-context: ctx
users: [{name: u, user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}}]
"""
NS, STS, SVC, DS, DEPLOY, SECRET, PROVIDER = (
    "kubernetes:core/v1:Namespace", "kubernetes:apps/v1:StatefulSet", "kubernetes:core/v1:Service",
    "kubernetes:apps/v1:DaemonSet", "kubernetes:apps/v1:Deployment", "kubernetes:core/v1:Secret",
    "pulumi:providers:kubernetes")


def raw(tmp_path, **over):
    make_model(tmp_path / "a")
    make_model(tmp_path / "b", seed=2)
    out = {"target": "kubernetes", "kubeconfig": KUBECONFIG, "environment": "production",
           "rustfsAccessKey": KEYS[0], "rustfsSecretKey": KEYS[1], "vllmApiKey": KEYS[2],
           "rustfsImage": "rustfs-vllm/rustfs:1.0.1-local",
           "models": [{"name": "a", "source": str(tmp_path / "a"), "replicas": 2, "kvCacheSpaceGib": 1},
                      {"name": "b", "source": str(tmp_path / "b"), "loadFormat": "runai_streamer",
                       "gpus": "count=1"}]}
    out.update(over)
    return out


def load(r, stack="k8s"):
    return config.load(r, stack, str(ROOT))


def problems(r) -> str:
    with pytest.raises(config.ConfigError) as e:
        load(r)
    return "\n".join(e.value.problems)


# ------------------------------------------------------------------------------------------ config
def test_defaults(tmp_path):
    cfg = load(raw(tmp_path))
    assert cfg.kube is not None
    assert (cfg.kube.namespace, cfg.kube.node_address, cfg.kube.s3_node_port) == ("rvllm-k8s", "10.9.8.7", 30900)
    assert cfg.rustfs_endpoint == "http://10.9.8.7:30900"      # this machine's way to RustFS: the NodePort
    assert [m.port for m in cfg.models] == [30800, 30801]
    assert [m.replicas for m in cfg.models] == [2, 1]
    assert (cfg.kube.storage_class, cfg.kube.storage_size, cfg.kube.rclone_image) == (
        "", "20Gi", "rustfs-vllm/rclone-mount:1.75.2")
    docker = {k: v for k, v in raw(tmp_path).items() if k not in ("target", "kubeconfig")}
    docker["models"] = [{"name": "a", "source": str(tmp_path / "a")}]
    assert load(docker).kube is None


@pytest.mark.parametrize("over, key, allowed", [
    ({"kubeconfig": ""}, "rustfs-vllm:kubeconfig = ''", "required with target: kubernetes"),
    ({"kubeconfig": "clusters: [\n"}, "rustfs-vllm:kubeconfig = '<secret>'", "a kubeconfig in YAML"),
    ({"kubeconfig": "clusters: []\ncontexts: []\n"}, "rustfs-vllm:kubeconfig", "current-context"),
    ({"hosts": [{"name": "a", "docker": "local"}]}, "rustfs-vllm:hosts", "no hosts with target: kubernetes"),
    ({"kubeNamespace": "Bad_NS"}, "rustfs-vllm:kubeNamespace = 'Bad_NS'", "a Kubernetes namespace name"),
    ({"kubeS3NodePort": 9000}, "rustfs-vllm:kubeS3NodePort = 9000", "NodePort 30000-32767"),
    ({"vllmGpus": "all"}, "rustfs-vllm:vllmGpus = 'all'", "'count=N' or empty"),
    ({"rustfsStorageSize": "lots"}, "rustfs-vllm:rustfsStorageSize = 'lots'", "a Kubernetes quantity"),
    ({"rustfsPort": 9100}, "rustfs-vllm:rustfsPort = 9100", "unset with target: kubernetes"),
])
def test_bad_cluster_keys_name_the_key(tmp_path, over, key, allowed):
    found = problems(raw(tmp_path, **over))
    assert key in found and allowed in found, found


def test_bad_model_fields_on_a_cluster(tmp_path):
    r = raw(tmp_path)
    r["models"][0].update(port=8000, balancerPort=9100, gpus="0,1")
    r["models"][1]["port"] = 30900                     # RustFS's NodePort
    found = problems(r)
    assert "models[a].port = 8000 is invalid: a NodePort 30000-32767" in found
    assert "models[a].balancerPort = 9100 is invalid: no balancerPort with target: kubernetes" in found
    assert "models[a].gpus = '0,1' is invalid: 'count=N' or empty" in found
    assert "models[b].port = 30900 is invalid: a NodePort of its own (RustFS's S3 Service" in found


def test_cluster_keys_and_replicas_are_refused_on_docker(tmp_path):
    r = raw(tmp_path, target="docker", kubeNamespace="x")
    del r["models"][1]["gpus"]
    found = problems(r)
    assert "rustfs-vllm:kubeconfig = '<secret>' is invalid: set only with target: kubernetes" in found
    assert "rustfs-vllm:kubeNamespace = 'x' is invalid: set only with target: kubernetes" in found
    assert "models[a].replicas = 2 is invalid: 1 with target: docker" in found
    assert KEYS[0] not in found and "BEGIN" not in found


def test_a_docker_stack_with_the_engines_declared_defaults_is_fine(tmp_path):
    """The engine passes Pulumi.yaml's declared defaults (as strings) like values the user set."""
    from components.config import schema

    declared = {k.name: str(k.default) for k in schema.KEYS
                if k.name in ("kubeS3NodePort", "rustfsStorageSize", "rcloneImage", "kubeStorageClass")}
    cfg = load({**declared, "environment": "dev", "models": [{"name": "a", "source": str(make_model(tmp_path / "a"))}]})
    assert cfg.kube is None
    assert load(raw(tmp_path, rustfsPort="9000")).kube is not None     # the declared default, on a cluster


def test_preflight_names_an_unreachable_api_server(tmp_path):
    cfg = load(raw(tmp_path))
    found = kube_preflight.check(cfg, connect=lambda host, port: f"no route to {host}:{port}")
    assert found == ["rustfs-vllm:kubeconfig = '<secret>' is invalid: a kubeconfig whose API server this machine "
                     "reaches: https://10.9.8.7:6443 does not answer (no route to 10.9.8.7:6443)"]
    assert kube_preflight.check(cfg, connect=lambda host, port: None) == []


# ------------------------------------------------------------------------------------------- graph
@pytest.fixture
def graph(tmp_path):
    return build(load(raw(tmp_path)), stack="k8s")


def spec_of(r) -> dict:
    return unwrap(r.inputs)["spec"]


def test_objects_and_provider(graph):
    assert [r.name for r in graph.by_type(PROVIDER)] == ["cluster-provider"]
    provider = graph.one(PROVIDER)
    assert provider.is_secret("kubeconfig") and provider.plain("enableServerSideApply") in (True, "true")  # providers get strings
    assert sorted(r.name for r in graph.by_type(DS)) == ["mount-a-daemonset"]      # b is streamed: no mount
    assert sorted(r.name for r in graph.by_type(DEPLOY)) == ["router-deployment", "vllm-a-deployment",
                                                             "vllm-b-deployment"]
    assert sorted(r.name for r in graph.by_type(SVC)) == ["router-service", "s3-service", "vllm-a-service",
                                                          "vllm-b-service"]
    for r in graph.resources:
        if r.typ.startswith("kubernetes:"):
            assert r.provider.startswith(provider.urn), r.name     # every object goes to the stack's cluster
            assert unwrap(r.inputs)["metadata"].get("namespace") in ("rvllm-k8s", None)


def test_rustfs_statefulset_keeps_its_claim(graph):
    sts = spec_of(graph.one(STS))
    assert sts["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    assert sts["volumeClaimTemplates"][0]["spec"]["resources"]["requests"] == {"storage": "20Gi"}
    pod = sts["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["RUSTFS_ACCESS_KEY_FILE"].startswith("/run/secrets/") and "RUSTFS_ACCESS_KEY" not in env
    assert pod["securityContext"]["fsGroup"] == 10001
    svc = spec_of(graph.one(SVC, "s3-service"))
    assert svc["type"] == "NodePort" and svc["ports"][0]["nodePort"] == 30900
    ns = graph.one(NS)
    assert ns.plain("metadata")["name"] == "rvllm-k8s"


def test_namespace_is_kept_by_destroy(graph):
    """Deleting a namespace deletes every claim in it: destroy leaves it (and RustFS's claim) alone."""
    assert graph.one(NS).retain_on_delete
    assert not any(r.retain_on_delete for r in graph.resources if r.typ != NS)


def test_mount_daemonset(graph):
    pod = spec_of(graph.one(DS))["template"]["spec"]
    c = pod["containers"][0]
    assert c["securityContext"] == {"privileged": True}
    root = next(m for m in c["volumeMounts"] if m["name"] == "root")
    assert root == {"name": "root", "mountPath": "/mnt/root", "mountPropagation": "Bidirectional"}
    host = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
    assert host["root"] == "/mnt/rvllm-k8s" and host["cache"] == "/var/cache/rustfs-vllm/rvllm-k8s/a"
    assert c["args"][:2] == ["/mnt/root/a", "vllm-models/a"]
    assert "--read-only" in c["command"][2] and c["args"][2:4] == ["--cache-dir", "/cache"]
    env = {e["name"]: e for e in c["env"]}
    assert env["RCLONE_CONFIG_RV_ENDPOINT"]["value"] == "http://10.96.0.10:9000"   # the Service's cluster IP
    assert env["RCLONE_CONFIG_RV_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["key"] == "access-key"
    annotations = spec_of(graph.one(DS))["template"]["metadata"]["annotations"]
    assert set(annotations) == {"rustfs-vllm/revision"}


def test_model_deployment(graph):
    a = spec_of(graph.one(DEPLOY, "vllm-a"))
    assert a["replicas"] == 2
    assert a["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = a["template"]["spec"]
    c = pod["containers"][0]
    assert c["args"][:2] == ["--model", "/models/a"] and "--config" not in c["args"]
    # the mounted model's warm-up on this node's mount starts with the container (issue 36), then vllm serve
    assert c["command"][:2] == ["/bin/sh", "-c"] and c["command"][-2:] == ["vllm", "serve"]
    assert {"name": "RV_MODEL_DIR", "value": "/models/a"} in c["env"]
    models = next(m for m in c["volumeMounts"] if m["name"] == "models")
    assert models["mountPropagation"] == "HostToContainer" and models["readOnly"] is True
    assert pod["initContainers"][0]["name"] == "wait-for-weights"
    assert c["startupProbe"]["httpGet"]["path"] == "/health" and c["startupProbe"]["failureThreshold"] == 180
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    spread = pod["topologySpreadConstraints"][0]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "DoNotSchedule"
    assert spread["matchLabelKeys"] == ["pod-template-hash"] and spread["nodeTaintsPolicy"] == "Honor"
    key = next(e for e in c["env"] if e["name"] == "VLLM_API_KEY")
    assert key["valueFrom"]["secretKeyRef"]["key"] == "vllm-api-key"
    b = spec_of(graph.one(DEPLOY, "vllm-b"))["template"]["spec"]
    cb = b["containers"][0]
    assert cb["args"][:2] == ["--model", "s3://vllm-models/b/"] and cb["args"][-2:] == ["--load-format",
                                                                                       "runai_streamer"]
    assert cb["resources"]["limits"]["nvidia.com/gpu"] == "1"       # and memory: tests/unit/test_kube_sizing.py
    assert cb["resources"]["requests"]["memory"].endswith("Mi")
    env = {e["name"]: e.get("value") for e in cb["env"]}
    assert env["AWS_ENDPOINT_URL"] == "http://10.96.0.10:9000"
    assert env["AWS_SHARED_CREDENTIALS_FILE"] == "/run/secrets/rustfs-vllm/aws-credentials"
    assert "initContainers" not in b and "command" not in cb and "RV_MODEL_DIR" not in env   # streamed: no mount
    svc = spec_of(graph.one(SVC, "vllm-a-service"))
    assert svc["type"] == "NodePort" and svc["ports"][0]["nodePort"] == 30800


def test_keys_only_in_the_secrets(graph):
    """The root keys in the root Secret (RustFS's pod reads it); the read key (readKeys scoped, the default
    with s3Server rustfs) in the readers' Secret, with the streamer's file made of it and the API key."""
    root, readers = graph.one(SECRET, "rvllm-k8s-keys"), graph.one(SECRET, "rvllm-k8s-read-keys")
    assert root.is_secret("stringData") and readers.is_secret("stringData")
    data, read = root.plain("stringData"), readers.plain("stringData")
    assert data["access-key"] == KEYS[0] and data["vllm-api-key"] == KEYS[2]
    user = READ_USER
    assert (read["access-key"], read["secret-key"], read["vllm-api-key"]) == (user, READ_SECRET, KEYS[2])
    assert read["aws-credentials"] == streamer.credentials(user, READ_SECRET)
    assert not any(k in json.dumps(read) for k in KEYS[:2]) and "rclone-auth-key" not in read
    for r in graph.resources:
        if r.typ in (SECRET, PROVIDER) or "dynamic" in r.typ or r.typ.startswith("rustfs-vllm:"):
            continue
        text = json.dumps(unwrap(r.inputs))
        assert not any(k in text for k in (*KEYS, READ_SECRET)), r.name


def test_pods_name_the_secret_pulumi_names(graph):
    """The Secret has no fixed name: new keys make a new one, created before the old one goes, and
    the pod templates that name it roll; a fixed name would make Pulumi delete it first and replace
    every workload that depends on it."""
    assert all("name" not in s.inputs["metadata"] for s in graph.by_type(SECRET))
    named: dict[str, set[str]] = {}
    for r in graph.resources:
        if r.typ in (DS, DEPLOY, "kubernetes:apps/v1:StatefulSet") and r.name != "router-deployment":
            pod = spec_of(r)["template"]["spec"]
            refs = named.setdefault(r.typ, set())
            for c in pod["containers"] + pod.get("initContainers", []):
                refs |= {e["valueFrom"]["secretKeyRef"]["name"] for e in c.get("env", []) if "valueFrom" in e}
            refs |= {v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
    # RustFS reads the root keys; the mounts and vLLM the readers' Secret (readKeys scoped)
    assert named == {"kubernetes:apps/v1:StatefulSet": {"rvllm-k8s-keys-a1b2c3d4"},
                     DS: {"rvllm-k8s-read-keys-a1b2c3d4"}, DEPLOY: {"rvllm-k8s-read-keys-a1b2c3d4"}}, named


def test_adding_a_model_touches_nothing_else(tmp_path):
    one = raw(tmp_path)
    one["models"] = one["models"][:1]
    before = {r.name: unwrap(r.inputs) for r in build(load(one), stack="k8s").resources}
    after = {r.name: unwrap(r.inputs) for r in build(load(raw(tmp_path)), stack="k8s").resources}
    assert set(before) < set(after)
    changed = [n for n in before if before[n] != after[n]]
    # the read key's policy takes the new prefix in place (an update of its grant), and the one endpoint's
    # routes (its Secret's files, and its pod rolls for them); nothing else changes
    assert changed == ["read-grant", "router-files", "router-deployment"], changed
    assert [k for k in before["read-grant"] if before["read-grant"][k] != after["read-grant"][k]] == ["policy"]


def test_the_one_endpoint_routes_each_model_to_its_service(graph):
    """The router's pod: vllm-router (IGW) and nginx from routerImage, its files from a Secret of its own
    (nginx.conf checks the API key), its NodePort kubeRouterNodePort; it reads no S3 key."""
    svc = spec_of(graph.one(SVC, "router-service"))
    assert svc["type"] == "NodePort" and svc["ports"][0]["nodePort"] == 30880
    pod = spec_of(graph.one(DEPLOY, "router-deployment"))["template"]["spec"]
    router, endpoint = pod["containers"]
    assert router["command"][:2] == ["rustfs-vllm-router", "--enable-igw"] and endpoint["command"][0] == "nginx"
    assert endpoint["readinessProbe"]["httpGet"]["path"] == "/health"
    [files] = [v for v in pod["volumes"] if "secret" in v]
    secret = graph.one(SECRET, "router-files")
    assert secret.is_secret("stringData")
    assert "keys" not in files["secret"]["secretName"]
    data = secret.plain("stringData")
    workers = json.loads(data["workers.json"])
    assert sorted(w["model_id"] for w in workers) == ["a", "b"] and all(w["url"].endswith(":8000") for w in workers)
    assert '"id":"a"' in data["nginx.conf"] and '"id":"b"' in data["nginx.conf"]


def test_the_store_node_label_keeps_rustfs_and_the_serving_pods_apart(tmp_path):
    """Issue 45: kubeStoreNodeLabel puts RustFS on the labelled nodes and every serving pod (vLLM, the mount
    DaemonSet) off them; unset, no pod says where it runs (stacks before it: no change)."""
    plain = build(load(raw(tmp_path)), stack="k8s")
    apart = build(load(raw(tmp_path, kubeStoreNodeLabel="rustfs-vllm.io/role=store")), stack="k8s")
    assert "nodeSelector" not in spec_of(plain.one(STS))["template"]["spec"]
    assert spec_of(apart.one(STS))["template"]["spec"]["nodeSelector"] == {"rustfs-vllm.io/role": "store"}
    serving = [*apart.by_type(DS), *(d for d in apart.by_type(DEPLOY) if d.name.startswith("vllm-"))]
    assert len(serving) == 3
    for r in serving:
        terms = spec_of(r)["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [{"key": "rustfs-vllm.io/role", "operator": "NotIn",
                                                "values": ["store"]}]}], r.name
    for r in [*plain.by_type(DS), *plain.by_type(DEPLOY)]:
        assert "affinity" not in spec_of(r)["template"]["spec"], r.name
    assert "kubeStoreNodeLabel = 'no-value'" in problems(raw(tmp_path, kubeStoreNodeLabel="no-value"))
    # preview: a label no node carries, or every node carries, names the nodes and the fix
    cfg = load(raw(tmp_path, kubeStoreNodeLabel="role=store"))
    ok = lambda host, port: None  # noqa: E731
    sizes = lambda _: {"a": 8 * 2**30, "b": 8 * 2**30}  # noqa: E731
    none = kube_preflight.check(cfg, connect=ok, nodes=sizes, labels=lambda _: {"a": {}, "b": {"x": "y"}})
    assert none == ["rustfs-vllm:kubeStoreNodeLabel = 'role=store' is invalid: a label some node carries (none of "
                    "a, b does: kubectl label node <node> role=store)"], none
    every = kube_preflight.check(cfg, connect=ok, nodes=sizes, labels=lambda _: {n: {"role": "store"} for n in "ab"})
    assert len(every) == 1 and "every node does" in every[0], every
    assert kube_preflight.check(cfg, connect=ok, nodes=sizes, labels=lambda _: {"a": {"role": "store"}, "b": {}}) == []


def test_the_mount_pods_run_rclone_image_by_the_digest_its_registry_gives():
    from components.kube import image_pin
    from components.mounting.keeper_tool import DockerError

    digest = "sha256:" + "ab" * 32
    asked = []

    def registry(image):
        asked.append(image)
        return digest
    assert image_pin.pinned("reg.example:5000/rustfs-vllm/rclone-mount:1.75.2", registry) == \
        (f"reg.example:5000/rustfs-vllm/rclone-mount@{digest}", "")
    assert image_pin.pinned("reg.example:5000/rclone-mount", registry)[0] == f"reg.example:5000/rclone-mount@{digest}"
    pinned = f"reg.example/rclone-mount@{digest}"
    assert image_pin.pinned(pinned, registry) == (pinned, "") and len(asked) == 2   # given by digest: not asked

    def unreachable(image):
        raise DockerError("500 Get \"https://reg.example:5000/v2/\": no such host")
    ref, why = image_pin.pinned("reg.example:5000/rclone-mount:1.75.2", unreachable)
    assert ref == "reg.example:5000/rclone-mount:1.75.2" and "no such host" in why
    assert image_pin.line("x:1", ref, why).startswith("mount pods run rcloneImage x:1 by its tag: this machine's Docker")


def test_pinned_means_pinned_a_recorded_digest_is_kept_and_docker_hub_is_never_asked():
    """Issue 57: the digest recorded when first resolved (the last run's mount_image output) is kept without
    asking the registry (a moved tag is not adopted; a registry that is down changes nothing), until the tag in
    the config changes or RUSTFS_VLLM_REPIN_IMAGES=1; a name without a registry host is never looked up."""
    from components.kube import image_pin
    from components.mounting.keeper_tool import DockerError

    old, new = "sha256:" + "01" * 32, "sha256:" + "02" * 32
    image = "reg.example:5000/rclone-mount:1.75.2"
    recorded = image_pin.record(image, f"reg.example:5000/rclone-mount@{old}")
    asked = []

    def moved(name):
        asked.append(name)
        return new

    def down(name):
        asked.append(name)
        raise DockerError("500 registry down")
    assert image_pin.pinned(image, moved, recorded, repin=False) == (recorded["ref"], "") and asked == []
    assert image_pin.pinned(image, down, recorded, repin=True) == (recorded["ref"], "")       # down: kept, not the tag
    assert image_pin.pinned(image, moved, recorded, repin=True)[0].endswith(new)               # the documented step
    other = "reg.example:5000/rclone-mount:1.76.0"                                              # another tag: anew
    assert image_pin.pinned(other, moved, recorded, repin=False)[0] == f"reg.example:5000/rclone-mount@{new}"
    asked.clear()
    for local in ("rustfs-vllm/rclone-mount:1.75.2", "rclone/rclone:1.68", "rclone:latest"):
        ref, why = image_pin.pinned(local, moved, None, repin=False)
        assert ref == local and "no registry host" in why, (local, why)
    assert asked == [], "a name without a registry host was looked up"
    assert image_pin.registry_host("localhost/x:1") == "localhost" and image_pin.registry_host("a.b/c") == "a.b"
