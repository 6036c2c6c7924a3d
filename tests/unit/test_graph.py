"""The resource graph under Pulumi mocks: components, parents, dependency edges, the vLLM argv,
and where secrets go."""
from __future__ import annotations

import json

import pytest
import yaml

from components import config
from tests.helpers import ROOT, make_model
from tests.unit.graph import build, unwrap

GUIDE_ARGV = ["--model", "/models/opt-125m", "--served-model-name", "opt-125m", "--dtype", "float32",
              "--max-model-len", "256", "--gpu-memory-utilization", "0.15"]
SECRETS = ("prod-access-key-0001", "prod-secret-key-0001", "the-api-key-0001")


def dev_config(tmp_path):
    """Pulumi.dev.yaml as it is, with its model folder pointed at a local stand-in folder."""
    raw = {k.split(":", 1)[1]: v for k, v in yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"].items()}
    make_model(tmp_path / "opt-125m")
    raw["models"][0]["source"] = str(tmp_path / "opt-125m")
    raw["mountPath"] = str(tmp_path / "mnt" / "vllm-models")
    return config.load(raw, "dev", str(ROOT), port_in_use=lambda a, p: False, memory_bytes=lambda: 24 * 2**30)


def prod_config(tmp_path):
    make_model(tmp_path / "a")
    make_model(tmp_path / "b", seed=2)
    raw = {"environment": "production", "s3Server": "external", "rustfsEndpoint": "http://rustfs.internal:9000",
           "rustfsAccessKey": SECRETS[0], "rustfsSecretKey": SECRETS[1], "vllmApiKey": SECRETS[2],
           "vllmGpus": "all", "mountPath": str(tmp_path / "mnt"),
           "models": [{"name": "a", "source": str(tmp_path / "a"), "port": 8100},
                      {"name": "b", "source": str(tmp_path / "b"), "port": 8101, "kvCacheSpaceGib": 2}]}
    return config.load(raw, "prod", str(ROOT), port_in_use=lambda a, p: False, memory_bytes=lambda: 24 * 2**30)


@pytest.fixture
def dev(tmp_path):
    return build(dev_config(tmp_path))


@pytest.fixture
def prod(tmp_path):
    return build(prod_config(tmp_path), stack="prod")


def test_components_and_parents(dev):
    types = sorted({r.typ for r in dev.resources if not r.typ.startswith("pulumi:")})
    assert types == sorted([
        "rustfs-vllm:index:ServingStack", "rustfs-vllm:storage:S3Server", "rustfs-vllm:storage:Bucket",
        "rustfs-vllm:storage:ModelUpload", "rustfs-vllm:serving:RcloneMount", "rustfs-vllm:serving:VllmServer",
        "rustfs-vllm:serving:SmokeTest",
        "pulumi-python:dynamic/rustfs-vllm:Container", "pulumi-python:dynamic/rustfs-vllm:Bucket",
        "pulumi-python:dynamic/rustfs-vllm:ModelUpload", "pulumi-python:dynamic/rustfs-vllm:LocalCommand",
        "pulumi-python:dynamic/rustfs-vllm:Completion"])
    # every custom resource sits inside its component, inside the stack component
    for r in dev.resources:
        if r.typ.startswith("pulumi-python:dynamic"):
            assert dev.ancestors(r)[-2:] == ["rustfs-vllm", "rustfs-vllm-dev"], r.name
            assert dev.by_urn(r.parent).typ.startswith("rustfs-vllm:"), r.name
    assert dev.ancestors(dev.one(":Container", "vllm-opt-125m")) == ["vllm-opt-125m", "rustfs-vllm", "rustfs-vllm-dev"]


def test_dependency_chain(dev):
    server = dev.one(":Container", "s3-container")
    bucket = dev.one("dynamic/rustfs-vllm:Bucket")
    upload = dev.one("dynamic/rustfs-vllm:ModelUpload")
    mount = dev.one(":LocalCommand", "mount")
    vllm = dev.one(":Container", "vllm")
    smoke = dev.one(":Completion")
    assert server.urn in bucket.dependencies          # server ready -> bucket
    assert bucket.urn in upload.dependencies          # bucket -> upload
    assert upload.urn in mount.dependencies           # upload -> mount (waits for files, remounts on change)
    assert mount.urn in vllm.dependencies or any(     # mount -> vLLM (depends_on the mount component)
        dev.by_urn(d).typ == "rustfs-vllm:serving:RcloneMount" for d in vllm.dependencies)
    assert vllm.urn in smoke.dependencies             # vLLM -> smoke test


def test_dev_stack_reproduces_the_guide(dev):
    vllm = dev.one(":Container", "vllm")
    assert vllm.plain("command") == GUIDE_ARGV
    assert vllm.plain("image") == "vllm/vllm-openai-cpu:v0.30.0"
    assert vllm.plain("shm_size") == "2g"
    assert vllm.plain("ports") == [{"internal": 8000, "external": 8000, "ip": "0.0.0.0"}]
    [mount] = vllm.plain("mounts")
    assert mount["target"] == "/models" and mount["read_only"] is True and mount["source"].endswith("vllm-models")
    server = dev.one(":Container", "s3-container")
    assert server.plain("image") == "rustfs/rustfs-x86-musl:v2.3.1"
    assert server.plain("env")["RUSTFS_VOLUMES"] == "/data"
    assert server.plain("secret_env") == {"RUSTFS_ACCESS_KEY": "rustfsadmin", "RUSTFS_SECRET_KEY": "rustfsadmin"}
    assert server.is_secret("secret_env") and "RUSTFS_SECRET_KEY" not in server.plain("env")
    assert server.plain("ready_url").endswith(":9000/health/ready")
    assert dev.one("dynamic/rustfs-vllm:Bucket").plain("bucket") == "vllm-models"
    assert dev.one("dynamic/rustfs-vllm:ModelUpload").plain("prefix") == "opt-125m"
    mount_cmd = dev.one(":LocalCommand", "mount")
    assert mount_cmd.plain("create").endswith("scripts/rclone-mount mount")
    smoke = dev.one(":Completion")
    assert smoke.plain("prompt") == "RustFS is" and smoke.plain("max_tokens") == 12


def test_manifest_is_an_input(dev, tmp_path):
    upload = dev.one("dynamic/rustfs-vllm:ModelUpload")
    manifest = upload.plain("manifest")
    assert sorted(manifest) == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    assert manifest["model.safetensors"]["size"] == 4096 and len(manifest["model.safetensors"]["sha256"]) == 64


def test_prod_example_shape(prod):
    assert not [r for r in prod.by_type(":Container") if "s3" in r.name], "external endpoint: no server container"
    vllms = prod.by_type(":Container")
    assert sorted(r.plain("name") for r in vllms) == ["rvllm-prod-vllm-a", "rvllm-prod-vllm-b"]
    assert {r.plain("gpus") for r in vllms} == {"all"}
    b = next(r for r in vllms if r.plain("name").endswith("-b"))
    assert b.plain("env")["VLLM_CPU_KVCACHE_SPACE"] == "2" and "--gpu-memory-utilization" not in b.plain("command")
    assert b.plain("ready_headers") == {"Authorization": f"Bearer {SECRETS[2]}"}
    assert b.plain("secret_env") == {"VLLM_API_KEY": SECRETS[2]} and "VLLM_API_KEY" not in b.plain("env")
    assert prod.one("dynamic/rustfs-vllm:Bucket").plain("endpoint") == "http://rustfs.internal:9000"


def test_credentials_are_secret_everywhere(prod):
    checked = 0
    for r in prod.resources:
        for key, value in r.inputs.items():
            text = json.dumps(unwrap(value), default=str)
            if any(s in text for s in SECRETS):
                assert r.is_secret(key), f"{r.name}.{key} carries a credential but is not secret"
                assert key in r.secret_outputs, f"{r.name}.{key} is not a secret output"
                checked += 1
    assert checked >= 8  # bucket, uploads, mount, containers, smoke tests all carry one


def test_no_credential_in_any_command_or_argv(prod):
    for r in prod.resources:
        for key in ("command", "entrypoint", "create", "delete", "read", "ready_url", "base_url", "triggers"):
            text = json.dumps(unwrap(r.inputs.get(key)), default=str)
            for s in SECRETS:
                assert s not in text, f"{r.name}.{key} contains a credential"


def test_mount_gets_credentials_through_environment_only(prod):
    mount = prod.one(":LocalCommand", "mount")
    env = mount.plain("environment")
    remote = env["RV_REMOTE"]
    assert env[f"RCLONE_CONFIG_{remote}_ACCESS_KEY_ID"] == SECRETS[0]
    assert env[f"RCLONE_CONFIG_{remote}_SECRET_ACCESS_KEY"] == SECRETS[1]
    assert env[f"RCLONE_CONFIG_{remote}_FORCE_PATH_STYLE"] == "true"
    assert env[f"RCLONE_CONFIG_{remote}_PROVIDER"] == "Other"
    assert mount.is_secret("environment")


def test_remount_triggers(dev, tmp_path):
    mount = dev.one(":LocalCommand", "mount")
    triggers = mount.plain("triggers")
    upload = dev.one("dynamic/rustfs-vllm:ModelUpload")
    assert mount.plain("environment")["RV_MOUNT"] in triggers
    assert "http://127.0.0.1:9000" in triggers and "vllm-models" in triggers
    assert len(triggers) == 7  # endpoint, bucket, path, cache dir, flags, rclone, one revision per model
    assert upload.plain("prefix") == "opt-125m"


def test_smoke_test_off(tmp_path):
    cfg = dev_config(tmp_path)
    import dataclasses
    g = build(dataclasses.replace(cfg, smoke_test=False))
    assert not g.by_type(":Completion")
