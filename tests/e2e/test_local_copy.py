"""loadFormat: local_copy through the real engine: the serving host copies SmolLM2's upload revision from
the bucket of the S3 server under test (real RustFS under `make test-rustfs` or when a RustFS binary is
at hand, else the rclone serve s3 stand-in, NOT RustFS) to its own disk, checks it against the
manifest, and vLLM serves from that copy; the vLLM compile cache is a volume of its own.

1. preview names the copy; `up` serves: no mount for the model, the container binds the revision's
   folder read-only at /models/<prefix>; the folder holds exactly the uploaded bytes; the OpenAI
   client's defaults (sampled), plain and streamed, all answered.
2. A no-op preview and a no-op `up` copy nothing (the copy's files are not rewritten).
3. A host-level loss: the copy removed from the disk; `up --refresh` copies it again, the container
   is replaced, serving again.
4. A new revision (one file changed): preview replaces the copy and the container; after `up` the
   old revision's folder is gone and the new one serves.
5. destroy keeps the bucket's objects and the copy (and says so); the compile-cache volume goes with
   the stack. (With purgeOnDestroy the copy goes too: tests/e2e/test_purge_config.py.)
"""
from __future__ import annotations

import hashlib
import json
import secrets
import shutil
from pathlib import Path

import docker
import pytest

from components.mounting import copy_tool
from tests import s3_under_test
from tests.helpers import ROOT, free_port, process_command_lines
from tests.pulumi_cli import Stack
from tests.serving.load import run_load

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
PREFIX, SERVED, BUCKET = "smollm2", "smollm2", "copy-models"


def served_ok(stack: Stack, count: int = 4) -> None:
    """The model answers at its server's URL (the stack's output: a change of its copy goes side by side, issue 58,
    and its server alternates between its port and changePort)."""
    base = stack.outputs()["models"][SERVED]["base_url"]
    for stream in (False, True):
        s = run_load(base, SERVED, count // 2, 2, max_tokens=8, stream=stream)
        assert s.failed == 0 and s.requests == count // 2, s.as_dict()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def vllm_container(client, stack: Stack):
    [c] = client.containers.list(filters={"label": [f"rustfs-vllm.stack={stack.name}", "rustfs-vllm.role=vllm"]})
    return c


def test_served_from_a_local_copy(tmp_path: Path):
    if not MODEL.joinpath("model.safetensors").exists():
        pytest.skip("scripts/build-smollm2-model has not run (scripts/test runs it)")
    source = tmp_path / "model"
    shutil.copytree(MODEL, source, ignore=shutil.ignore_patterns(".complete"))
    stack = Stack(ROOT, f"cpy-{secrets.token_hex(3)}")
    stack.init()
    prefix, port, cache = f"rvllm-{stack.name}", free_port(), tmp_path / "cache"
    access, secret = f"cpy-access-{secrets.token_hex(6)}", secrets.token_urlsafe(18)
    model = {"name": SERVED, "source": str(source), "prefix": PREFIX, "port": port, "maxModelLen": 512,
             "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"], "loadFormat": "local_copy"}
    cfg = {"environment": "test", "namePrefix": prefix, **s3_under_test.stack_settings(),
           "rustfsPort": str(free_port()), "bindAddress": "127.0.0.1", "bucket": BUCKET,
           "mountPath": f"/mnt/{prefix}", "mountCacheDir": str(cache),
           "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 600, "models": [model]}

    def configure(**over) -> None:
        stack.write_config({**cfg, **over})
        stack.set("rustfsAccessKey", access, secret=True)
        stack.set("rustfsSecretKey", secret, secret=True)

    configure()
    client = docker.from_env()
    root = cache / PREFIX / "copy"
    try:
        preview = stack.run("preview", label="preview_create").stdout
        assert "weights read from the host's copy of revision" in preview and str(root) in preview
        stack.run("up", "--yes", "--skip-preview", label="up")
        out = stack.outputs()
        assert out["models"][SERVED]["load_format"] == "local_copy" and out["smoke_completions"][SERVED].strip()
        # 1. no mount; the container binds the revision's folder, which holds the uploaded bytes
        assert not any(f"/mnt/{prefix}/{PREFIX}" in ln for ln in Path("/proc/mounts").read_text().splitlines())
        [folder] = [p for p in root.iterdir() if p.is_dir()]
        assert out["models"][SERVED]["weights_dir"] == str(folder)
        assert json.loads((folder / copy_tool.MARKER).read_text())["source"] == f"{BUCKET}/{PREFIX}"
        for f in source.iterdir():
            if f.is_file() and not f.name.startswith("."):
                assert sha(folder / f.name) == sha(f), f.name
        vllm = vllm_container(client, stack)
        binds = {m["Destination"]: m for m in vllm.attrs["Mounts"]}
        assert binds[f"/models/{PREFIX}"]["Source"] == str(folder) and binds[f"/models/{PREFIX}"]["RW"] is False
        assert binds["/vllm-cache"]["Type"] == "volume"
        assert vllm.attrs["Config"]["Cmd"][:2] == ["--model", f"/models/{PREFIX}"]
        served_ok(stack)
        inspect = json.dumps(client.api.inspect_container(vllm.id))
        assert access not in inspect and secret not in inspect and access not in process_command_lines()
        state = json.dumps(stack.state())
        assert access not in state and secret not in state
        # the compile cache was used: inductor wrote the sampler's kernel there
        volume = binds["/vllm-cache"]["Name"]
        listing = client.containers.run("rustfs-vllm/rclone-s3-standin:1.75.2", ["-c", "ls -R /c | head -50"],
                                        entrypoint="sh", remove=True,
                                        volumes={volume: {"bind": "/c", "mode": "ro"}}).decode()
        assert "inductor" in listing, listing
        # 2. nothing is copied again
        mtimes = {p: p.stat().st_mtime_ns for p in folder.iterdir()}
        stack.run("preview", "--expect-no-changes", label="preview_noop")
        stack.run("up", "--yes", label="up_noop")
        assert {p: p.stat().st_mtime_ns for p in folder.iterdir()} == mtimes
        # 3. the copy lost on the host: up --refresh copies it again and the container follows
        shutil.rmtree(folder)
        stack.run("up", "--yes", "--refresh", label="up_after_loss")
        assert (folder / copy_tool.MARKER).exists() and vllm_container(client, stack).id != vllm.id
        served_ok(stack)
        stack.run("preview", "--expect-no-changes", label="preview_after_loss")
        # 4. a new revision: the copy and the container are replaced, the old folder removed
        cfg_file = source / "generation_config.json"
        cfg_file.write_text(cfg_file.read_text().replace("{", '{"rustfs_vllm_test": 1, ', 1))
        configure()
        steps = json.loads(stack.run("preview", "--json", label="preview_revision").stdout)["steps"]
        changed = {s["urn"].split("::")[-1]: s["op"] for s in steps if s["op"] not in ("same", "read")}
        assert changed.get(f"copy-{PREFIX}-command") in ("replace", "create-replacement"), changed
        assert changed.get(f"vllm-{PREFIX}-container") in ("replace", "create-replacement"), changed
        stack.run("up", "--yes", "--skip-preview", label="up_revision")
        [new_folder] = [p for p in root.iterdir() if p.is_dir()]
        assert new_folder != folder and sha(new_folder / "generation_config.json") == sha(cfg_file)
        served_ok(stack)
        # 5. destroy keeps the objects and the copy (and says where); purge removes it
        before = s3_under_test.volume_objects(f"{prefix}-data")
        out = stack.run("destroy", "--yes", "--skip-preview", label="destroy").stdout
        assert f"kept the local copy at {root}" in out
        after = s3_under_test.volume_objects(f"{prefix}-data")
        assert new_folder.exists() and after == s3_under_test.kept_by_destroy(before)
        assert f"{BUCKET}/{s3_under_test.BUCKET_RECORD}" in before, sorted(before)   # the stack's own record went
        assert not [v for v in client.volumes.list() if v.name.startswith(f"{prefix}-vllm-{PREFIX}-compile-")]
        # (a destroy with purgeOnDestroy removes the copy: tests/e2e/test_purge_config.py, whose stack reads
        # local_copy too; this stack's up and destroy of it were cut on 2026-12-07 for CI's 90 minutes)
    finally:
        stack.teardown(f"{prefix}-data")
