"""loadFormat: runai_streamer through the real engine: vLLM streams SmolLM2's weights straight from the
bucket of the S3 server under test (real RustFS under `make test-rustfs`, else the rclone serve s3
stand-in, NOT RustFS) with the Run:ai Model Streamer 0.17.1 in our vLLM image, and serves.

1. `up` serves: no mount for the model, the container given ``s3://<bucket>/<prefix>/``; the OpenAI
   client's own defaults (sampled, no temperature), plain and streamed, 8 at once, all answered.
2. No key anywhere but the secret file: not in the container's inspect data (argv, env, labels), not
   on any process's command line, not in the state file in plain text.
3. A no-op preview changes nothing; switching the model to ``loadFormat: mount`` replaces only its
   container (and what follows it) and adds its mount, and it serves again through the mount.
4. destroy keeps the bucket's objects.
"""
from __future__ import annotations

import json
import secrets
from pathlib import Path

import docker
import pytest

from tests import s3_under_test
from tests.helpers import ROOT, free_port, process_command_lines
from tests.pulumi_cli import Stack
from tests.serving.load import run_load

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
PREFIX, SERVED, BUCKET = "smollm2", "smollm2", "stream-models"


def served_ok(port: int, count: int = 8) -> None:
    """``count`` requests as the OpenAI client sends them by default, half of them streamed, 4 at once."""
    for stream in (False, True):
        s = run_load(f"http://127.0.0.1:{port}/v1", SERVED, count // 2, 4, max_tokens=12, stream=stream)
        assert s.failed == 0 and s.requests == count // 2, s.as_dict()


def test_streamed_from_the_bucket(tmp_path: Path):
    if not MODEL.joinpath("model.safetensors").exists():
        pytest.skip("scripts/build-smollm2-model has not run (scripts/test runs it)")
    stack = Stack(ROOT, f"str-{secrets.token_hex(3)}")
    stack.init()
    prefix, port = f"rvllm-{stack.name}", free_port()
    access, secret = f"str-access-{secrets.token_hex(6)}", secrets.token_urlsafe(18)
    model = {"name": SERVED, "source": str(MODEL), "prefix": PREFIX, "port": port, "maxModelLen": 512,
             "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"], "loadFormat": "runai_streamer"}
    cfg = {"environment": "test", "namePrefix": prefix, **s3_under_test.stack_settings(),
           "rustfsPort": str(free_port()), "bindAddress": "127.0.0.1", "bucket": BUCKET,
           "mountPath": f"/mnt/{prefix}", "mountCacheDir": str(tmp_path / "rclone-cache"),
           "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 600, "models": [model]}
    stack.write_config(cfg)
    stack.set("rustfsAccessKey", access, secret=True)
    stack.set("rustfsSecretKey", secret, secret=True)
    client = docker.from_env()
    try:
        preview = stack.run("preview", label="preview_create").stdout
        assert f"weights streamed from s3://{BUCKET}/{PREFIX}/ by the Run:ai Model Streamer" in preview
        stack.run("up", "--yes", "--skip-preview", label="up_streamed")
        out = stack.outputs()
        assert out["models"][SERVED]["load_format"] == "runai_streamer"
        assert out["smoke_completions"][SERVED].strip()
        # 1. no mount; vLLM was given the bucket's prefix and loaded through the streamer
        assert not any(f"/mnt/{prefix}/{PREFIX}" in line for line in Path("/proc/mounts").read_text().splitlines())
        [vllm] = client.containers.list(filters={"label": [f"rustfs-vllm.stack={stack.name}", "rustfs-vllm.role=vllm"]})
        cmd = vllm.attrs["Config"]["Cmd"]
        assert cmd[:2] == ["--model", f"s3://{BUCKET}/{PREFIX}/"] and "runai_streamer" in cmd
        assert "Loading safetensors using Runai Model Streamer: 100%" in vllm.logs().decode(errors="replace")
        served_ok(port)
        # 2. the keys only in the secret file
        inspect = json.dumps(client.api.inspect_container(vllm.id))
        assert access not in inspect and secret not in inspect
        assert access not in process_command_lines() and secret not in process_command_lines()
        state = json.dumps(stack.state())
        assert access not in state and secret not in state
        # 3. a no-op preview; then the model moves to the mount: only its own chain changes
        stack.run("preview", "--expect-no-changes", label="preview_noop")
        stack.write_config({**cfg, "models": [{**model, "loadFormat": "mount"}]})
        stack.set("rustfsAccessKey", access, secret=True)      # the file was written anew: the same keys
        stack.set("rustfsSecretKey", secret, secret=True)
        steps = json.loads(stack.run("preview", "--json", label="preview_to_mount").stdout)["steps"]
        changed = {s["urn"].split("::")[-1]: s["op"] for s in steps if s["op"] not in ("same", "read")}
        assert changed.pop(f"mount-{PREFIX}-command") == "create"
        assert set(changed) <= {f"vllm-{PREFIX}-container", f"vllm-{PREFIX}-ready-wait", f"smoke-{PREFIX}-completion",
                                f"mount-{PREFIX}", f"vllm-{PREFIX}", f"smoke-{PREFIX}",
                                "rclone-image"}, changed   # the mount's keeper image (issue 37), pulled once
        assert changed[f"vllm-{PREFIX}-container"] in ("replace", "create-replacement"), changed
        stack.run("up", "--yes", "--skip-preview", label="up_to_mount")
        assert stack.outputs()["models"][SERVED]["load_format"] == "mount"
        assert any(f"/mnt/{prefix}/{PREFIX} " in line for line in Path("/proc/mounts").read_text().splitlines())
        served_ok(port, count=4)
        # 4. destroy keeps the objects
        before = s3_under_test.volume_objects(f"{prefix}-data")
        assert f"{BUCKET}/{PREFIX}/model.safetensors" in before, sorted(before)
        stack.run("destroy", "--yes", "--skip-preview", label="destroy")
        assert client.containers.list(all=True, filters={"label": f"rustfs-vllm.stack={stack.name}"}) == []
        assert s3_under_test.volume_objects(f"{prefix}-data") == s3_under_test.kept_by_destroy(before)
        assert f"{BUCKET}/{s3_under_test.BUCKET_RECORD}" in before, sorted(before)   # the stack's own record went
    finally:
        stack.teardown(f"{prefix}-data")
