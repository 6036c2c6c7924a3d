"""readKeys scoped (issue 31) through the real engine, on real RustFS 1.0.1 (the local image; `make test-rustfs`,
or `scripts/test` when a RustFS binary is at hand). The stand-in (rclone serve s3, NOT RustFS) has no users,
so on it this test is skipped: its refusal of readKeys scoped is tested in tests/unit/test_read_keys.py
and tests/integration/test_read_key.py.

1. `up` of a Docker stack on this machine, SmolLM2 through the rclone mount (readKeys not set: the default
   with s3Server rustfs is scoped): it serves (the OpenAI client's defaults, plain and streamed); the
   outputs say scoped.
2. The mount's rclone, found on this host, holds the stack's read key, not the root keys; from this host,
   with that key, RustFS refuses a PUT, a DELETE, a read of another prefix and a listing of the bucket
   root, and serves the model's own objects.
3. The root keys are in no container's `docker inspect` but the S3 server's, on no command line, in no
   process environment on this host, in none of the mount's files (its keeper spec), and in the state
   only encrypted; the read key's secret too.
4. Another model added to the config: preview updates the read key's grant in place and touches nothing
   of the first model.
5. A new read key (`pulumi up --replace` of it) while the OpenAI client polls: 0 failed requests, the vLLM
   container stays, the mount holds the new key, RustFS refuses the old one; the next `up` changes nothing.
6. destroy keeps the bucket's objects and removes the read key: RustFS started again on the kept volume
   refuses it.
"""
from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

import docker
import pytest

from components.storage import read_policy, s3
from tests import s3_under_test
from tests.helpers import ROOT, free_port, process_command_lines, s3_answer, wait_http
from tests.k8s.poller import Poller
from tests.pulumi_cli import Stack
from tests.serving.load import run_load

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
PREFIX, SERVED, BUCKET = "smollm2", "smollm2", "scoped-models"

pytestmark = pytest.mark.skipif(s3_under_test.KIND != "rustfs", reason="readKeys scoped needs real RustFS's IAM "
                                "(`make test-rustfs`); the stand-in's refusal is a unit and integration test")


def rclone_environments(remote: str) -> list[dict[str, str]]:
    """The environment of every rclone process on this host whose remote is ``remote``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if not argv[0].endswith(b"rclone") or not any(a.startswith(f"{remote}:".encode()) for a in argv):
                continue
            raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        found.append(dict(e.decode().split("=", 1) for e in raw if b"=" in e))
    return found


def all_environments() -> str:
    texts = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            texts.append(Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace"))
        except OSError:
            continue
    return "\n".join(texts)


def test_serving_hosts_read_with_a_scoped_key(tmp_path: Path):
    if not MODEL.joinpath("model.safetensors").exists():
        pytest.skip("scripts/build-smollm2-model has not run (scripts/test runs it)")
    stack = Stack(ROOT, f"rk-{secrets.token_hex(3)}")
    stack.init()
    prefix, port, s3_port = f"rvllm-{stack.name}", free_port(), free_port()
    endpoint = f"http://127.0.0.1:{s3_port}"
    access, secret = f"rk-access-{secrets.token_hex(6)}", secrets.token_urlsafe(18)
    model = {"name": SERVED, "source": str(MODEL), "prefix": PREFIX, "port": port, "maxModelLen": 512,
             "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"], "loadFormat": "mount"}
    cfg = {"environment": "test", "namePrefix": prefix, **s3_under_test.stack_settings(), "rustfsPort": str(s3_port),
           "bindAddress": "127.0.0.1", "bucket": BUCKET, "mountPath": f"/mnt/{prefix}",
           "mountCacheDir": str(tmp_path / "rclone-cache"), "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 600,
           "models": [model]}
    stack.write_config(cfg)
    stack.set("rustfsAccessKey", access, secret=True)
    stack.set("rustfsSecretKey", secret, secret=True)
    client = docker.from_env()
    base = read_policy.user_base(stack.name, BUCKET)
    try:
        preview = stack.run("preview", label="preview_create").stdout
        assert "with a read-only key (readKeys scoped)" in preview, preview[-3000:]
        stack.run("up", "--yes", "--skip-preview", label="up_scoped")
        out = stack.outputs()
        assert out["read_keys"].startswith("scoped:") and out["smoke_completions"][SERVED].strip()
        for stream in (False, True):
            s = run_load(f"http://127.0.0.1:{port}/v1", SERVED, 2, 2, max_tokens=8, stream=stream)
            assert s.failed == 0 and s.requests == 2, s.as_dict()

        # 2. the mount's rclone holds the read key; RustFS refuses it anything but reading the model
        remote = prefix.upper().replace("-", "_")
        envs = rclone_environments(remote)
        assert envs, f"no rclone process of remote {remote} on this host"
        key = (envs[0][f"RCLONE_CONFIG_{remote}_ACCESS_KEY_ID"], envs[0][f"RCLONE_CONFIG_{remote}_SECRET_ACCESS_KEY"])
        assert key[0].startswith(base) and access not in key and secret not in key
        root = s3.client(endpoint, access, secret)
        root.put_object(Bucket=BUCKET, Key="another-stack/model/config.json", Body=b"{}")
        reader = s3.client(endpoint, *key)
        assert s3_answer(lambda: reader.get_object(Bucket=BUCKET, Key=f"{PREFIX}/config.json")) == "OK"
        refused = {
            "put": s3_answer(lambda: reader.put_object(Bucket=BUCKET, Key=f"{PREFIX}/evil.json", Body=b"x")),
            "delete": s3_answer(lambda: reader.delete_object(Bucket=BUCKET, Key=f"{PREFIX}/config.json")),
            "another prefix": s3_answer(lambda: reader.get_object(Bucket=BUCKET, Key="another-stack/model/config.json")),
            "bucket root": s3_answer(lambda: reader.list_objects_v2(Bucket=BUCKET)),
        }
        assert refused == dict.fromkeys(refused, "AccessDenied"), refused

        # 3. the root keys: only the S3 server's container holds them on this host
        for c in client.containers.list(filters={"label": f"rustfs-vllm.stack={stack.name}"}):
            inspect = json.dumps(client.api.inspect_container(c.id))
            assert key[1] not in inspect, c.name
            if c.labels.get("rustfs-vllm.role") != "s3-server":
                assert access not in inspect and secret not in inspect, c.name
        assert not any(k in process_command_lines() for k in (access, secret, key[1]))
        assert secret not in all_environments(), "a process on this host holds the root secret"
        spec_files = [p for d in (ROOT / ".state" / "mounts", Path("/var/lib/rustfs-vllm") / prefix)
                      for p in d.rglob("*") if p.is_file() and stack.name in str(p)]
        assert any(p.name.endswith(".keeper.json") for p in spec_files), spec_files
        assert spec_files and not any(secret in p.read_text(errors="replace") for p in spec_files)
        state = json.dumps(stack.state())
        assert access not in state and secret not in state and key[1] not in state

        # 4. another model in the config: the read key's policy changes in place, the first model is untouched
        second = {**model, "name": "second", "prefix": "second", "port": free_port()}
        stack.write_config({**cfg, "models": [model, second]})
        stack.set("rustfsAccessKey", access, secret=True)
        stack.set("rustfsSecretKey", secret, secret=True)
        steps = json.loads(stack.run("preview", "--json", label="preview_add_model").stdout)["steps"]
        changed = {s["urn"].split("::")[-1]: s["op"] for s in steps if s["op"] not in ("same", "read")}
        assert changed.pop("read-grant") == "update", changed       # the policy, in place; the key itself stays
        assert changed.pop("router-routes") == "update", changed    # the one endpoint takes the new model
        assert not [n for n in changed if PREFIX in n or SERVED in n], changed
        assert set(changed.values()) == {"create"}, changed
        stack.write_config(cfg)
        stack.set("rustfsAccessKey", access, secret=True)
        stack.set("rustfsSecretKey", secret, secret=True)

        # 5. a new read key (`pulumi up --replace` of the read key) while the OpenAI client polls the model:
        #    0 failed, the container stays, the mount holds the new key, RustFS refuses the old one after
        urn = next(r["urn"] for r in stack.state()["deployment"]["resources"] if r["urn"].endswith("::read-key"))
        container = next(c.id for c in client.containers.list(filters={"label": [
            f"rustfs-vllm.stack={stack.name}", "rustfs-vllm.role=vllm"]}))
        poll = Poller(f"http://127.0.0.1:{port}/v1", SERVED).start()
        stack.run("up", "--yes", "--skip-preview", "--replace", urn, label="up_new_read_key")
        time.sleep(3)
        rotation = poll.stop().summary()
        print("read-key rotation under a polling client:", json.dumps(rotation))
        assert rotation["failed"] == 0 and rotation["requests"] >= 3, rotation
        assert container in [c.id for c in client.containers.list(filters={"label": f"rustfs-vllm.stack={stack.name}"})]
        envs = rclone_environments(remote)
        new = (envs[0][f"RCLONE_CONFIG_{remote}_ACCESS_KEY_ID"], envs[0][f"RCLONE_CONFIG_{remote}_SECRET_ACCESS_KEY"])
        assert new[0] != key[0] and new[0].startswith(base), (new[0], key[0])
        assert s3_answer(lambda: reader.get_object(Bucket=BUCKET, Key=f"{PREFIX}/config.json")) == "InvalidAccessKeyId"
        reader = s3.client(endpoint, *new)
        assert s3_answer(lambda: reader.get_object(Bucket=BUCKET, Key=f"{PREFIX}/config.json")) == "OK"
        assert s3_answer(lambda: reader.put_object(Bucket=BUCKET, Key=f"{PREFIX}/x", Body=b"")) == "AccessDenied"
        out = stack.run("up", "--yes", "--skip-preview", label="up_after_new_read_key").stdout
        assert "+ " not in out and "~ " not in out and "- " not in out, out[-2000:]

        # 6. destroy: the objects are kept, and RustFS started again on the kept volume refuses the read key
        stack.run("destroy", "--yes", "--skip-preview", label="destroy")
        assert f"{BUCKET}/{PREFIX}/model.safetensors" in s3_under_test.volume_objects(f"{prefix}-data")
        again = client.containers.run(s3_under_test.RUSTFS_IMAGE, detach=True, volumes={f"{prefix}-data": {"bind": "/data"}},
                                      environment={"RUSTFS_VOLUMES": "/data", "RUSTFS_ADDRESS": ":9000",
                                                   "RUSTFS_ACCESS_KEY": access, "RUSTFS_SECRET_KEY": secret},
                                      ports={"9000/tcp": ("127.0.0.1", s3_port)})
        try:
            assert wait_http(f"{endpoint}/health/ready", 90, any_status=False), again.logs()[-2000:]   # not just up
            assert s3_answer(lambda: root.head_object(Bucket=BUCKET, Key=f"{PREFIX}/config.json")) == "OK"
            assert s3_answer(lambda: reader.get_object(Bucket=BUCKET, Key=f"{PREFIX}/config.json")) == "InvalidAccessKeyId"
        finally:
            again.remove(force=True)
    finally:
        stack.teardown(f"{prefix}-data")
