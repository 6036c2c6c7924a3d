"""An upgrade as users make it: a stack deployed with the previous main (UPGRADE_FROM), then the
current code in the same folder. The new code must preview it with no changes (the reshaped
config, preflight, hosts and mount leave every resource's inputs as they were), `up` must do
nothing, and destroy with the new code must tear it down. Real engine, real containers, real
rclone mount, our vLLM image serving SmolLM2 through it."""
from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import urllib.request
from pathlib import Path

import docker
import pytest

from tests import s3_under_test
from tests.helpers import ROOT, free_port
from tests.pulumi_cli import Stack

# main before issue 19's reshaping (config schema, preflight, hosts as a type, the mount in Python)
UPGRADE_FROM = "66278a1"
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"

pytestmark = pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                                reason="scripts/build-smollm2-model makes the model")


def checkout(rev: str | None, into: Path) -> None:
    """The project's files at ``rev`` (None: this checkout's, uncommitted changes too) into ``into``,
    replacing the tracked files there; ignored files (.state, the stack's config) stay."""
    if rev is None:
        names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                               capture_output=True).stdout.decode().split("\0")
        for old in subprocess.run(["git", "ls-files", "-z"], cwd=into, capture_output=True).stdout.decode().split("\0"):
            if old and (into / old).is_file():
                (into / old).unlink()
        for name in filter(None, names):
            if (ROOT / name).is_file():
                (into / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, into / name)
        return
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=into, check=True)
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x"], cwd=into, input=archive, check=True)
    subprocess.run(["git", "add", "-A"], cwd=into, check=True)   # so `checkout(None)` knows the old files
    (into / ".venv").symlink_to(ROOT / ".venv")


def changes(stack: Stack) -> list[tuple[str, str]]:
    steps = json.loads(stack.run("preview", "--json").stdout).get("steps", [])
    return [(s["op"], s["urn"].split("::")[-1]) for s in steps if s["op"] != "same"]


def test_a_stack_made_by_the_previous_main_previews_and_ups_with_no_changes(tmp_path):
    try:
        subprocess.run(["git", "cat-file", "-e", f"{UPGRADE_FROM}^{{commit}}"], cwd=ROOT, check=True)
    except subprocess.CalledProcessError:
        pytest.skip(f"this checkout's history lacks {UPGRADE_FROM}")
    app = tmp_path / "app"
    checkout(UPGRADE_FROM, app)
    model = tmp_path / "model"
    shutil.copytree(MODEL, model, ignore=shutil.ignore_patterns(".complete"))
    stack = Stack(app, f"upg-{secrets.token_hex(3)}")
    stack.env.update(PYTHONPATH=str(app), RUSTFS_VLLM_ROOT=str(app))   # the program in app/, not this checkout
    stack.init()
    prefix, port = f"rvllm-{stack.name}", free_port()
    stack.write_config({
        "environment": "test", "namePrefix": prefix, **s3_under_test.stack_settings(),
        "rustfsPort": str(free_port()), "bindAddress": "127.0.0.1", "bucket": "upg-models",
        "mountPath": f"/mnt/{prefix}", "mountCacheDir": str(tmp_path / "rclone-cache"), "vllmImage": VLLM_IMAGE,
        "vllmReadyTimeout": 600,
        "models": [{"name": "smollm2", "source": str(model), "prefix": "smollm2", "port": port,
                    "maxModelLen": 512, "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"]}]})
    stack.set("rustfsAccessKey", f"upg-access-{secrets.token_hex(6)}", secret=True)
    stack.set("rustfsSecretKey", secrets.token_urlsafe(18), secret=True)
    try:
        stack.run("up", "--yes", "--skip-preview", label="up_old")
        before = stack.outputs()
        checkout(None, app)
        assert not (app / "components" / "settings.py").exists(), "the new code is in place"
        assert changes(stack) == []
        up = stack.run("up", "--yes", "--skip-preview", label="up_new").stdout
        summary = up[up.rindex("Resources:"):]
        assert "unchanged" in summary and not re.search(r"\b(created|updated|deleted|replaced)\b", summary), summary
        after = stack.outputs()
        # the one output the new code adds: how each model reads its weights (the old ones all mount)
        assert {n: m.pop("load_format") for n, m in after["models"].items()} == {"smollm2": "mount"}
        assert after == before
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
            assert "smollm2" in r.read().decode()
        # the new code tears down what the old one made: containers, mounts, the mount root
        stack.run("destroy", "--yes", "--skip-preview", label="destroy_new")
        assert docker.from_env().containers.list(all=True, filters={"label": f"rustfs-vllm.stack={stack.name}"}) == []
        assert f" /mnt/{prefix}" not in Path("/proc/mounts").read_text()
        assert not Path(f"/mnt/{prefix}").exists()
    finally:
        stack.teardown(f"{prefix}-data")
