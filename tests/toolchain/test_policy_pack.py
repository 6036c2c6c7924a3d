"""The policy pack (policy/) through the real engine: `pulumi preview --policy-pack policy` of this
project's program, the pack run by our language host's RunPlugin in its own virtualenv (policy/venv).

1. A stack named as production (prod-...) that breaks every rule: environment dev, RustFS's default
   credentials, readKeys shared, vLLM published on 0.0.0.0 with no API key, an image tagged latest.
   The preview fails, each rule refusing in one line that names the key and the fix; nothing is made.
2. The repository's own production stack, Pulumi.prod-example.yaml, with only what this machine lacks
   replaced (its GPU image and GPUs, its model folders, its mount path): the preview passes the pack.
"""
from __future__ import annotations

import secrets
from pathlib import Path

import docker
import pytest
import yaml

from tests.helpers import ROOT, free_port
from tests.pulumi_cli import Stack

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
UNPINNED = "rustfs-vllm/vllm-openai-cpu:latest"
RULES = {"no-default-credentials": "rustfsAccessKey/rustfsSecretKey: production stack",
         "scoped-read-keys": "readKeys: 'shared' on production stack",
         "api-key-when-exposed": "bindAddress: '0.0.0.0' on production stack",
         "no-dev-environment": "environment: 'dev' on production stack",
         "pinned-images": f"vllmImage: '{UNPINNED}' on production stack",
         # issue 45: the keepers' image (rcloneImage's default, a local build named by tag) is not pinned by digest
         "mount-image-by-digest": "rcloneImage: 'rustfs-vllm/rclone-mount:1.75.2' on production stack"}


@pytest.fixture
def model():
    if not MODEL.joinpath("model.safetensors").exists():
        pytest.skip("scripts/build-smollm2-model has not run (scripts/test runs it)")
    if not (ROOT / "policy" / "venv" / "bin" / "python").exists():
        pytest.skip("no policy/venv: scripts/bootstrap makes it")
    return MODEL


def preview(stack: Stack) -> tuple[int, str]:
    proc = stack.run("preview", "--policy-pack", str(ROOT / "policy"), check=False, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def test_a_production_stack_breaking_every_rule_is_refused_one_line_each(model, tmp_path: Path):
    client = docker.from_env()
    client.images.get(VLLM_IMAGE).tag(UNPINNED)              # the same image, under a tag that moves
    stack = Stack(ROOT, f"prod-pol-{secrets.token_hex(3)}")
    stack.init()
    try:
        stack.write_config({"environment": "dev", "s3Server": "rustfs", "readKeys": "shared",
                            "rustfsImage": "rustfs-vllm/rustfs:1.0.1-local", "bindAddress": "0.0.0.0",
                            "mountPath": f"/mnt/rvllm-{stack.name}", "mountCacheDir": str(tmp_path / "cache"),
                            "vllmImage": UNPINNED, "rustfsPort": str(free_port()),
                            "models": [{"name": "smollm2", "source": str(model), "port": free_port(), "maxModelLen": 512,
                                        "kvCacheSpaceGib": 1}]})
        rc, out = preview(stack)
        assert rc != 0, out[-3000:]
        for rule, start in RULES.items():
            assert f"[mandatory]  {rule}" in out, (rule, out[-4000:])
            [line] = [ln.strip() for ln in out.splitlines() if ln.strip().startswith(start)]
            assert f"'{stack.name}'" in line and ("set " in line or "pin " in line), line
        # the stack's one endpoint is exposed on the same address, and said so with its own key
        assert any(ln.strip().startswith("routerPort: the stack's one endpoint listens on '0.0.0.0'")
                   for ln in out.splitlines()), out[-4000:]
        assert "Traceback" not in out and "[advisory]" not in out     # the pack reads only the root's facts
        assert stack.state()["deployment"].get("resources") in (None, []), "a refused preview made something"
    finally:
        stack.remove()
        client.images.remove(UNPINNED)


def test_the_repositorys_production_stack_passes(model, tmp_path: Path):
    example = yaml.safe_load((ROOT / "Pulumi.prod-example.yaml").read_text())["config"]
    cfg = {k.split(":", 1)[1]: v for k, v in example.items()}
    assert cfg["environment"] == "production"
    # what this machine lacks, and only that: a GPU image and GPUs, the model folders, the mount path, free ports
    cfg.update(vllmImage=VLLM_IMAGE, mountPath=f"/mnt/rvllm-pol-{secrets.token_hex(3)}",
               mountCacheDir=str(tmp_path / "cache"))
    cfg.pop("vllmGpus")
    for m in cfg["models"]:
        m.update(source=str(model), dtype="float32", maxModelLen=512, kvCacheSpaceGib=1, port=free_port())
        m.pop("gpuMemoryUtilization", None)
    stack = Stack(ROOT, f"pol-{secrets.token_hex(3)}")
    stack.init()
    try:
        stack.write_config(cfg)
        for key in ("rustfsAccessKey", "rustfsSecretKey", "vllmApiKey"):
            stack.set(key, f"{key}-{secrets.token_hex(8)}", secret=True)
        rc, out = preview(stack)
        assert rc == 0 and "rustfs-vllm@v" in out and "[mandatory]" not in out and "[advisory]" not in out, out[-4000:]
    finally:
        stack.remove()
