"""One store, many stacks (issue 38) through the real engine, on the S3 server of tests/s3_under_test.py
(real RustFS under scripts/test; the scoped read keys need its admin API):

1. A platform stack (role: store) runs RustFS and makes the bucket; it exports the endpoint, the bucket,
   the CA and the admin key (a secret), and serves nothing.
2. Two serving stacks (two environments: test and production) name it in `store`: each uploads its
   model under its own prefix (an owner record each), registers on the store, makes its own scoped
   read key, and serves through the mount; the platform's root keys reach no serving host.
3. A third stack claiming the first one's prefix is refused at preview, naming the owner.
4. The platform's destroy is refused while serving stacks are registered, naming them; RustFS keeps
   serving them.
5. The second serving stack is destroyed with purgeOnDestroy while the OpenAI client polls the first:
   0 failed requests; its prefix and owner record are gone, the first one's objects untouched.
6. The first is destroyed without purge (its objects and owner record stay); the platform's destroy
   then succeeds, and the volume keeps the bucket's data.
"""
from __future__ import annotations

import secrets
import shutil
import time
from pathlib import Path

import pytest

from components.storage import owners, s3
from tests import s3_under_test
from tests.helpers import ROOT, free_port, process_command_lines
from tests.k8s.poller import Poller
from tests.pulumi_cli import Stack

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
BUCKET = "shared-models"

pytestmark = [
    pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                       reason="scripts/build-smollm2-model makes the model"),
    pytest.mark.skipif(s3_under_test.KIND != "rustfs", reason="serving stacks on a store read with scoped keys: "
                                                              "RustFS's admin API (the stand-in has no users)"),
]


def serving_config(name: str, store: str, prefix: str, environment: str, tmp_path: Path) -> dict:
    source = tmp_path / f"model-{prefix}"
    if not source.exists():
        shutil.copytree(MODEL, source, ignore=shutil.ignore_patterns(".complete"))
    return {"environment": environment, "store": store, "namePrefix": f"rvllm-{name}", "bindAddress": "127.0.0.1",
            "mountPath": f"/mnt/rvllm-{name}", "mountCacheDir": str(tmp_path / f"cache-{prefix}"),
            "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 600, "vllmCompileCache": False,
            "models": [{"name": "smollm2", "source": str(source), "prefix": prefix, "port": free_port(),
                        "maxModelLen": 512, "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"]}]}


def serving_stack(name: str, cfg: dict, api_key: str = "") -> Stack:
    stack = Stack(ROOT, name)
    stack.init()
    stack.write_config(cfg)
    if api_key:
        stack.set("vllmApiKey", api_key, secret=True)
    return stack


def test_a_platform_stack_and_two_serving_stacks_share_one_store(tmp_path: Path):
    tag = secrets.token_hex(3)
    platform = Stack(ROOT, f"plat-{tag}")
    platform.init()
    volume = f"rvllm-plat-{tag}-data"
    access, secret_key = f"plat-access-{secrets.token_hex(6)}", secrets.token_urlsafe(18)
    platform.write_config({"role": "store", "environment": "test", **s3_under_test.stack_settings(),
                           "rustfsPort": str(free_port()), "bindAddress": "127.0.0.1", "bucket": BUCKET,
                           "mountPath": f"/mnt/rvllm-plat-{tag}"})
    platform.set("rustfsAccessKey", access, secret=True)
    platform.set("rustfsSecretKey", secret_key, secret=True)
    ref = f"organization/rustfs-vllm/{platform.name}"
    stacks: list[Stack] = []
    try:
        # 1. the platform: RustFS and the bucket, its store exported (the admin key a secret)
        platform.run("up", "--yes", "--skip-preview", label="platform_up")
        out = platform.outputs()
        assert out["role"] == "store" and out["store_bucket"] == BUCKET and "models" not in out
        shown = platform.run("stack", "output", "--json").stdout
        assert secret_key not in shown and "[secret]" in shown
        c = s3.client(out["store_endpoint"], access, secret_key)

        # 2. two serving stacks, two environments, each with its prefix, key and registration
        a = serving_stack(f"tenant-a-{tag}", serving_config(f"tenant-a-{tag}", ref, "team-a", "test", tmp_path))
        stacks.append(a)
        b = serving_stack(f"tenant-b-{tag}", serving_config(f"tenant-b-{tag}", ref, "team-b", "production", tmp_path),
                          api_key=f"api-{secrets.token_urlsafe(12)}")
        stacks.append(b)
        for s in (a, b):
            s.run("up", "--yes", "--skip-preview", label="serving_up", timeout=1800)
            o = s.outputs()
            assert o["read_keys"].startswith("scoped:") and o["bucket"] == BUCKET, o
            assert o["smoke_completions"]["smollm2"].strip()
        assert owners.registered(c, BUCKET) == sorted(f"organization/rustfs-vllm/{s.name}" for s in (a, b))
        assert owners.owner(c, BUCKET, "team-a") == f"organization/rustfs-vllm/{a.name}"
        assert owners.owner(c, BUCKET, "team-b") == f"organization/rustfs-vllm/{b.name}"
        assert secret_key not in process_command_lines()          # the platform's key on no command line
        for s in (a, b):                                          # and in no serving stack's state in plain text
            assert secret_key not in s.run("stack", "export").stdout

        # 3. a third stack claiming team-a is refused at preview, naming the owner
        clash = serving_stack(f"tenant-c-{tag}", serving_config(f"tenant-c-{tag}", ref, "team-a", "test", tmp_path))
        stacks.append(clash)
        refused = clash.run("preview", check=False)
        said = refused.stdout + refused.stderr
        assert refused.returncode != 0 and "rustfs-vllm:models[smollm2].prefix = 'team-a' is invalid: owned by " \
            f"stack organization/rustfs-vllm/{a.name}" in said, said[-3000:]
        assert "Traceback" not in said

        # 4. the platform will not go while they are on it
        blocked = platform.run("destroy", "--yes", "--skip-preview", check=False)
        said = blocked.stdout + blocked.stderr
        assert blocked.returncode != 0 and f"still serves 2 stack(s): organization/rustfs-vllm/{a.name}, " \
            f"organization/rustfs-vllm/{b.name}" in said, said[-3000:]

        # 5. b goes with its data while a client polls a: a never fails
        poll = Poller(a.outputs()["models"]["smollm2"]["base_url"], "smollm2").start()
        b.set("purgeOnDestroy", "true")
        b.run("destroy", "--yes", "--skip-preview", label="serving_destroy_purge", timeout=900)
        time.sleep(3)
        polled = poll.stop().summary()
        assert polled["failed"] == 0 and polled["requests"] > 3, polled
        keys = [o["Key"] for o in c.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
        assert not [k for k in keys if k.startswith("team-b/")] and owners.owner(c, BUCKET, "team-b") is None, keys
        assert any(k == "team-a/model.safetensors" for k in keys), keys
        assert owners.registered(c, BUCKET) == [f"organization/rustfs-vllm/{a.name}"]

        # 6. a goes without purge (its objects and owner stay); then the platform goes, its volume kept
        a.run("destroy", "--yes", "--skip-preview", label="serving_destroy", timeout=900)
        assert owners.owner(c, BUCKET, "team-a") == f"organization/rustfs-vllm/{a.name}"
        platform.run("destroy", "--yes", "--skip-preview", label="platform_destroy")
        left = s3_under_test.volume_objects(volume)
        assert f"{BUCKET}/team-a/model.safetensors" in left, sorted(left)[:10]
    finally:
        for s in stacks:
            s.teardown(f"rvllm-{s.name}-data")
        platform.teardown(volume)
