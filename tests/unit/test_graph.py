"""The resource graph under Pulumi mocks: components, parents, dependency edges, the real provider
resource types and their inputs (the vLLM argv, ports, mounts), and where secrets go."""
from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from components import config
from tests.helpers import ROOT, make_model
from tests.unit.graph import build, unwrap

GUIDE_ARGV = ["--model", "/models/opt-125m", "--served-model-name", "opt-125m", "--dtype", "float32",
              "--max-model-len", "256", "--gpu-memory-utilization", "0.15"]
SECRETS = ("prod-access-key-0001", "prod-secret-key-0001", "the-api-key-0001")
CONTAINER = "docker:index/container:Container"
IMAGE = "docker:index/remoteImage:RemoteImage"
VOLUME = "docker:index/volume:Volume"
COMMAND = "command:local:Command"


def dev_config(tmp_path):
    """Pulumi.dev.yaml as it is, with its model folder pointed at a local stand-in folder."""
    raw = {k.split(":", 1)[1]: v for k, v in yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"].items()}
    make_model(tmp_path / "opt-125m")
    raw["models"][0]["source"] = str(tmp_path / "opt-125m")
    raw["mountPath"] = str(tmp_path / "mnt" / "vllm-models")
    return config.load(raw, "dev", str(ROOT))


def prod_config(tmp_path):
    make_model(tmp_path / "a")
    make_model(tmp_path / "b", seed=2)
    raw = {"environment": "production", "s3Server": "external", "rustfsEndpoint": "http://rustfs.internal:9000",
           "rustfsAccessKey": SECRETS[0], "rustfsSecretKey": SECRETS[1], "vllmApiKey": SECRETS[2],
           "vllmGpus": "all", "mountPath": str(tmp_path / "mnt"),
           "models": [{"name": "a", "source": str(tmp_path / "a"), "port": 8100, "loadFormat": "mount"},
                      {"name": "b", "source": str(tmp_path / "b"), "port": 8101, "kvCacheSpaceGib": 2,
                       "loadFormat": "mount"}]}
    return config.load(raw, "prod", str(ROOT))


@pytest.fixture
def dev(tmp_path):
    return build(dev_config(tmp_path))


@pytest.fixture
def prod(tmp_path):
    return build(prod_config(tmp_path), stack="prod")


def labels(r) -> dict[str, str]:
    return {lab["label"]: lab["value"] for lab in r.plain("labels")}


def test_components_and_real_provider_types(dev):
    types = sorted({r.typ for r in dev.resources if not r.typ.startswith("pulumi:")})
    assert types == sorted([
        "rustfs-vllm:index:ServingStack", "rustfs-vllm:storage:S3Server", "rustfs-vllm:storage:Bucket",
        "rustfs-vllm:storage:ModelUpload", "rustfs-vllm:serving:RcloneMount", "rustfs-vllm:serving:VllmServer",
        "rustfs-vllm:serving:SmokeTest", "rustfs-vllm:serving:ReadinessWait", "rustfs-vllm:serving:MountRoot",
        "rustfs-vllm:serving:MountCache", "rustfs-vllm:serving:Router", CONTAINER, IMAGE, VOLUME, COMMAND,
        "pulumi-python:dynamic/rustfs-vllm:Bucket", "pulumi-python:dynamic/rustfs-vllm:ModelUpload",
        "pulumi-python:dynamic/rustfs-vllm:Completion", "pulumi-python:dynamic/rustfs-vllm:CredentialCheck",
        # readKeys scoped: the default with s3Server rustfs
        "pulumi-python:dynamic/rustfs-vllm:ReadKey", "pulumi-python:dynamic/rustfs-vllm:ReadGrant",
        # what destroy tells each host about purgeOnDestroy before its copies and caches go
        "pulumi-python:dynamic/rustfs-vllm:PurgeOrder"])
    # no hand-written container or command provider is left
    assert not [r for r in dev.resources if r.typ.endswith(("rustfs-vllm:Container", "rustfs-vllm:LocalCommand"))]
    # every custom resource sits inside a component of ours, inside the stack component
    for r in dev.resources:
        if not r.typ.startswith(("rustfs-vllm:", "pulumi:")):
            assert "rustfs-vllm" in dev.ancestors(r), r.name
            assert dev.by_urn(r.parent).typ.startswith("rustfs-vllm:"), r.name
    # (the root Stack resource is registered once per test process, by whichever graph is built first)
    assert dev.ancestors(dev.one(CONTAINER, "vllm-opt-125m"))[:2] == ["vllm-opt-125m", "rustfs-vllm"]


def test_dependency_chain(dev):
    bucket = dev.one("dynamic/rustfs-vllm:Bucket")
    upload = dev.one("dynamic/rustfs-vllm:ModelUpload")
    mount = dev.one(COMMAND, "mount-opt-125m")
    root = dev.one(COMMAND, "mount-root")
    vllm = dev.one(CONTAINER, "vllm")
    smoke = dev.one(":Completion")
    # depends_on a component reaches the custom resources inside it
    s3_ready = dev.one(COMMAND, "s3-ready-wait")
    vllm_ready = dev.one(COMMAND, "vllm-opt-125m-ready-wait")
    assert s3_ready.urn in bucket.dependencies          # server answering -> bucket (depends_on, no value)
    assert s3_ready.urn in upload.dependencies
    assert bucket.urn in upload.dependencies            # bucket -> upload
    assert upload.urn in mount.dependencies             # upload -> its mount (the revision flows in)
    assert root.urn in mount.dependencies               # the shared root before any model mount
    assert bucket.urn in root.dependencies              # and only once the storage works
    assert mount.urn in vllm.dependencies and root.urn in vllm.dependencies   # ordering only
    assert vllm_ready.urn in smoke.dependencies         # vLLM answering -> smoke test
    assert vllm.urn in vllm_ready.dependencies and vllm_ready.plain("triggers") == [f"{vllm.name}-id"]


def test_credentials_are_proven_before_the_bucket(dev, prod):
    """The check runs after the server answers and before the bucket and uploads, with the keys
    as secrets; it may accept RustFS's defaults only on a dev stack that uses them."""
    check = dev.one("dynamic/rustfs-vllm:CredentialCheck")
    assert dev.one(COMMAND, "s3-ready-wait").urn in check.dependencies
    assert check.urn in dev.one("dynamic/rustfs-vllm:Bucket").dependencies
    assert check.urn in dev.one("dynamic/rustfs-vllm:ModelUpload").dependencies
    assert check.plain("defaults_allowed") is True and check.plain("kind") == "rustfs"
    assert check.is_secret("access_key") and check.is_secret("secret_key")
    ext = prod.one("dynamic/rustfs-vllm:CredentialCheck")       # an external server is checked too
    assert ext.plain("defaults_allowed") is False and ext.plain("server") == "external"
    assert ext.plain("endpoint") == "http://rustfs.internal:9000"
    assert ext.urn in prod.one("dynamic/rustfs-vllm:Bucket").dependencies


def test_server_value_never_flows_into_bucket_or_upload(dev):
    """A replaced server container must not replace the bucket or an upload: their inputs hold
    the endpoint as configured, not a value of the server."""
    for r in (dev.one("dynamic/rustfs-vllm:Bucket"), dev.one("dynamic/rustfs-vllm:ModelUpload")):
        assert r.plain("endpoint") == "http://127.0.0.1:9000"
        # ... and where the objects live: another volume behind that endpoint is another store
        assert r.plain("store") == "rustfs volume rvllm-dev-data"


def test_dev_stack_reproduces_the_guide(dev):
    image = dev.one(IMAGE, "vllm-image")
    assert image.plain("name") == "vllm/vllm-openai-cpu:v0.30.0" and image.plain("keepLocally") is True
    vllm = dev.one(CONTAINER, "vllm")
    # the guide's argv, then vLLM's drain (vllmDrainSeconds, issue 58): a stopped server finishes what it serves
    assert vllm.plain("command") == GUIDE_ARGV + ["--shutdown-timeout", "60"]
    assert vllm.plain("stopTimeout") == vllm.plain("destroyGraceSeconds") == 90
    assert vllm.plain("image") == "sha256:mock-vllm/vllm-openai-cpu:v0.30.0"   # the RemoteImage's image id
    assert vllm.plain("shmSize") == 2048                                     # --shm-size=2g, in MB
    assert vllm.plain("ports") == [{"internal": 8000, "external": 8000, "ip": "0.0.0.0"}]
    assert vllm.plain("restart") == "unless-stopped"
    # the image's `vllm serve`, behind a wait for the mount (a host restart may start it first)
    assert vllm.plain("entrypoints")[:2] == ["/bin/sh", "-c"] and vllm.plain("entrypoints")[-2:] == ["vllm", "serve"]
    assert "RV_MODEL_DIR=/models/opt-125m" in vllm.plain("envs")           # what the wait polls
    [mount] = vllm.plain("mounts")             # the guide's read path (loadFormat: mount, no compile cache)
    assert mount == {"type": "bind", "target": "/models", "readOnly": True, "source": mount["source"],
                     "bindOptions": {"propagation": "rslave"}}      # mounts re-made under it reach it
    assert mount["source"].endswith("vllm-models")
    assert labels(vllm)["rustfs-vllm.model"] == "opt-125m" and labels(vllm)["rustfs-vllm.stack"] == "dev"
    # new weights replace the container; nothing about the mount does
    assert labels(vllm)["rustfs-vllm.revision"] == dev.stack.store.uploads["opt-125m"].revision_digest
    assert "rustfs-vllm.mount" not in labels(vllm)
    server = dev.one(CONTAINER, "s3-container")
    assert dev.one(IMAGE, "s3-image").plain("name") == "rustfs/rustfs-x86-musl:v2.3.1"
    assert "RUSTFS_VOLUMES=/data" in server.plain("envs")
    assert "RUSTFS_ACCESS_KEY_FILE=/run/rustfs-vllm/secrets/RUSTFS_ACCESS_KEY" in server.plain("envs")
    assert {u["file"]: u["content"] for u in server.plain("uploads")} == {
        "/run/rustfs-vllm/secrets/RUSTFS_ACCESS_KEY": "rustfsadmin",
        "/run/rustfs-vllm/secrets/RUSTFS_SECRET_KEY": "rustfsadmin"}
    assert {u["permissions"] for u in server.plain("uploads")} == {"0444"}   # readable by the image's user
    assert server.is_secret("uploads") and not any("rustfsadmin" in e for e in server.plain("envs"))
    assert server.plain("mounts") == [{"type": "volume", "source": "rvllm-dev-data", "target": "/data"}]
    volume = dev.one(VOLUME, "s3-data")
    assert volume.plain("name") == "rvllm-dev-data"
    assert dev.one(COMMAND, "s3-ready-wait").plain("environment")["RV_URL"].endswith(":9000/health/ready")
    assert dev.one("dynamic/rustfs-vllm:Bucket").plain("bucket") == "vllm-models"
    assert dev.one("dynamic/rustfs-vllm:ModelUpload").plain("prefix") == "opt-125m"
    mount_cmd = dev.one(COMMAND, "mount-opt-125m")
    assert mount_cmd.plain("create").endswith("scripts/rclone-mount mount")
    assert mount_cmd.plain("delete").endswith("scripts/rclone-mount unmount")
    env = mount_cmd.plain("environment")
    assert env["RV_SOURCE"] == "vllm-models/opt-125m" and env["RV_MOUNT"].endswith("vllm-models/opt-125m")
    root = dev.one(COMMAND, "mount-root")
    assert root.plain("create").endswith("scripts/rclone-mount root-up") and root.plain("triggers") == [
        env["RV_ROOT"]]
    smoke = dev.one(":Completion")
    assert smoke.plain("prompt") == "RustFS is" and smoke.plain("max_tokens") == 12


def test_volume_is_retained_and_containers_replace_delete_first(tmp_path):
    """retain_on_delete and delete_before_replace are resource options: read them from the
    registrations the mocks saw."""
    import pulumi
    from pulumi.runtime import mocks

    seen: dict[str, object] = {}

    class Monitor(mocks.MockMonitor):
        def RegisterResource(self, request):  # noqa: N802
            seen[request.name] = (request.retainOnDelete, request.deleteBeforeReplace)
            return super().RegisterResource(request)

    from tests.unit.graph import Mocks
    pulumi.runtime.set_mocks(Mocks(), project="rustfs-vllm", stack="dev", preview=False, monitor=Monitor(Mocks()))
    from components.core.plan import Plan
    from components.targets.docker import DockerTarget
    cfg = dev_config(tmp_path)

    @pulumi.runtime.test
    def construct():
        s = Plan("rustfs-vllm", DockerTarget(cfg))
        return s.exports()["mount_path"]

    construct()
    assert seen["s3-data"][0] is True                        # destroy keeps the data volume
    assert seen["s3-container"][1] is True and seen["vllm-opt-125m-container"][1] is True
    assert seen["mount-opt-125m-command"][1] is True         # one mount point: unmount first
    assert seen["mount-root-command"][1] is True
    assert seen["mount-cache-command"][1] is True


def test_the_cache_is_purged_or_reported_after_every_mount_is_gone(dev, tmp_path):
    cfg = dev_config(tmp_path)
    cache = dev.one(COMMAND, "mount-cache")
    assert cache.plain("delete").endswith("rclone-mount cache-down")
    assert cache.plain("environment") == {"RV_CACHE_ROOT": cfg.mount_cache_dir, "RV_PURGE": "0"}
    assert cache.plain("triggers") == [cfg.mount_cache_dir]
    [model_mount] = [m for m in dev.by_type(COMMAND) if m.name == "mount-opt-125m-command"]
    assert cache.urn in model_mount.dependencies          # destroy removes the mounts first
    purged = build(dataclasses.replace(cfg, purge_on_destroy=True))
    assert purged.one(COMMAND, "mount-cache").plain("environment")["RV_PURGE"] == "1"

def test_manifest_is_an_input(dev, tmp_path):
    upload = dev.one("dynamic/rustfs-vllm:ModelUpload")
    manifest = upload.plain("manifest")
    assert sorted(manifest) == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    assert manifest["model.safetensors"]["size"] == 4096 and len(manifest["model.safetensors"]["sha256"]) == 64


def test_prod_example_shape(prod):
    assert not [r for r in prod.by_type(CONTAINER) if "s3" in r.name], "external endpoint: no server container"
    # no server volume (external endpoint); one compile-cache volume per model (vllmCompileCache,
    # default on), named by the image and the revision, mounted with the cache variables
    assert sorted(r.name for r in prod.by_type(VOLUME)) == ["vllm-a-compile-cache", "vllm-b-compile-cache"]
    volume = prod.one(VOLUME, "vllm-a-compile-cache")
    assert volume.plain("name").startswith("rvllm-prod-vllm-a-compile-")
    a = prod.one(CONTAINER, "vllm-a-container")
    assert {"type": "volume", "source": volume.plain("name"), "target": "/vllm-cache"} in a.plain("mounts")
    assert "VLLM_CACHE_ROOT=/vllm-cache/vllm" in a.plain("envs")
    assert "TORCHINDUCTOR_CACHE_DIR=/vllm-cache/inductor" in a.plain("envs")
    vllms = prod.by_type(CONTAINER)
    vllms = [r for r in vllms if r.plain("name").startswith("rvllm-prod-vllm-")]
    assert sorted(r.plain("name") for r in vllms) == ["rvllm-prod-vllm-a", "rvllm-prod-vllm-b"]
    assert {r.plain("gpus") for r in vllms} == {"all"}
    b = next(r for r in vllms if r.plain("name").endswith("-b"))
    assert "VLLM_CPU_KVCACHE_SPACE=2" in b.plain("envs") and "--gpu-memory-utilization" not in b.plain("command")
    # the API key: a --config file uploaded as a secret, never argv or environment
    assert b.plain("command")[-4:] == ["--config", "/run/rustfs-vllm/secrets/vllm-api-key.yaml", "--shutdown-timeout", "60"]
    assert b.plain("uploads") == [{"file": "/run/rustfs-vllm/secrets/vllm-api-key.yaml",
                                   "content": f'api-key: "{SECRETS[2]}"\n', "permissions": "0444"}]
    assert b.is_secret("uploads")
    wait = prod.one(COMMAND, "vllm-b-ready-wait")
    assert wait.plain("environment")["RV_AUTH"] == f"Bearer {SECRETS[2]}" and wait.is_secret("environment")
    assert prod.one("dynamic/rustfs-vllm:Bucket").plain("endpoint") == "http://rustfs.internal:9000"


def test_gpu_and_shm_translation():
    from components.serving.vllm import docker_gpus, shm_megabytes

    assert [docker_gpus(g) for g in ("", "all", "count=2", "0,1")] == [None, "all", "count=2", '"device=0,1"']
    assert [shm_megabytes(s) for s in ("2g", "512m", "1.5g", "2048k")] == [2048, 512, 1536, 2]


def test_credentials_are_secret_everywhere(prod):
    checked = 0
    for r in prod.resources:
        for key, value in r.inputs.items():
            text = json.dumps(unwrap(value), default=str)
            if any(s in text for s in SECRETS):
                assert r.is_secret(key), f"{r.name}.{key} carries a credential but is not secret"
                checked += 1
    assert checked >= 8  # bucket, uploads, mount, containers, waits, smoke tests all carry one


def test_no_credential_in_any_command_or_argv(prod):
    for r in prod.resources:
        for key in ("command", "entrypoints", "envs", "labels", "create", "update", "delete", "triggers",
                    "base_url"):
            text = json.dumps(unwrap(r.inputs.get(key)), default=str)
            for s in SECRETS:
                assert s not in text, f"{r.name}.{key} contains a credential"


def test_mount_gets_credentials_through_environment_only(prod):
    mount = prod.one(COMMAND, "mount-a")
    env = mount.plain("environment")
    remote = env["RV_REMOTE"]
    assert env[f"RCLONE_CONFIG_{remote}_ACCESS_KEY_ID"] == SECRETS[0]
    assert env[f"RCLONE_CONFIG_{remote}_SECRET_ACCESS_KEY"] == SECRETS[1]
    assert env[f"RCLONE_CONFIG_{remote}_FORCE_PATH_STYLE"] == "true"
    assert env[f"RCLONE_CONFIG_{remote}_PROVIDER"] == "Other"
    assert mount.is_secret("environment")


def test_remount_triggers(dev, tmp_path):
    mount = dev.one(COMMAND, "mount-opt-125m")
    triggers = mount.plain("triggers")
    assert mount.plain("environment")["RV_MOUNT"] in triggers
    assert "http://127.0.0.1:9000" in triggers and "vllm-models" in triggers and "opt-125m" in triggers
    assert "generation-0" in triggers
    # endpoint, bucket, prefix, path, cache dir, flags, rclone, generation, this model's revision
    assert len(triggers) == 9 and triggers[-1] == dev.stack.store.uploads["opt-125m"].revision_digest


def test_each_model_has_its_own_chain(prod):
    """Nothing of model a holds anything of model b: adding, changing or removing b cannot change
    a's inputs (the shape that makes per-model independence true)."""
    a = {r.name: r for r in prod.resources if "-a" in r.name or r.name.endswith("a-ready-wait")}
    b_values = [prod.stack.store.uploads["b"].revision_digest, "rvllm-prod-vllm-b", "mount-b"]
    for name, r in a.items():
        text = json.dumps(unwrap(r.inputs), default=str)
        assert not any(v in text for v in b_values), f"{name} holds something of model b"
    mounts = prod.by_type(COMMAND)
    assert sorted(m.name for m in mounts if m.name.startswith("mount-")) == [
        "mount-a-command", "mount-b-command", "mount-cache-command", "mount-root-command"]
    for m in ("a", "b"):
        assert prod.one(COMMAND, f"mount-{m}").plain("environment")["RV_SOURCE"].endswith(f"/{m}")
    # the root holds no model at all
    assert prod.one(COMMAND, "mount-root").plain("triggers") == [prod.one(COMMAND, "mount-root")
                                                                 .plain("environment")["RV_ROOT"]]


def test_dead_mount_asks_for_the_next_generation(tmp_path):
    from components.docker.mounts import generation

    marker = tmp_path / "m.json"
    assert generation(str(marker), "/x", lambda p: False) == 0          # never mounted
    marker.write_text('{"generation": 3}')
    assert generation(str(marker), "/x", lambda p: True) == 3           # alive: unchanged plan
    assert generation(str(marker), "/x", lambda p: False) == 4          # dead: remount


def test_smoke_test_off(tmp_path):
    cfg = dev_config(tmp_path)
    import dataclasses
    g = build(dataclasses.replace(cfg, smoke_test=False))
    assert not g.by_type(":Completion")


def test_model_env_and_gpus_override_the_stack_wide_ones(tmp_path):
    """Per model: ``env`` is laid over ``vllmEnv`` and ``gpus`` replaces ``vllmGpus``, for that model's
    container only (how two CPU models get cores of their own, or two GPU models GPUs of their own)."""
    make_model(tmp_path / "a")
    make_model(tmp_path / "b", seed=2)
    raw = {k.split(":", 1)[1]: v for k, v in yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"].items()}
    raw |= {"vllmEnv": {"VLLM_CPU_OMP_THREADS_BIND": "auto", "X": "1"}, "vllmGpus": "all",
            "mountPath": str(tmp_path / "mnt"),
            "models": [{"name": "a", "source": str(tmp_path / "a"), "env": {"VLLM_CPU_OMP_THREADS_BIND": "0"}},
                      {"name": "b", "source": str(tmp_path / "b"), "gpus": "1", "port": 8101}]}
    g = build(config.load(raw, "dev", str(ROOT)))
    a, b = g.one(CONTAINER, "vllm-a-container"), g.one(CONTAINER, "vllm-b-container")
    assert "VLLM_CPU_OMP_THREADS_BIND=0" in a.plain("envs") and "X=1" in a.plain("envs")
    assert "VLLM_CPU_OMP_THREADS_BIND=auto" in b.plain("envs")
    assert a.plain("gpus") == "all" and b.plain("gpus") == '"device=1"'
