"""A served stack for the serving tests and `make bench-serve`, through the real engine: the S3
server of tests/s3_under_test.py in the stack (real RustFS, local build, under `make test-rustfs`;
else the rclone serve s3 stand-in, NOT RustFS), rclone over FUSE, and our vLLM image serving
SmolLM2-135M-Instruct through the mount, with an API key (``vllmApiKey``) so the 401 cases are real.
"""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import docker

from tests import s3_under_test
from tests.helpers import ROOT, free_port, make_hf_cache
from tests.pulumi_cli import Stack

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
PREFIX = "SmolLM2-135M-Instruct"
SERVED = "smollm2"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
MAX_MODEL_LEN = 512
RESULTS = ROOT / ".state" / f"serving-{s3_under_test.KIND}.json"


@dataclass
class Served:
    stack: Stack
    base_url: str
    api_key: str
    prefix: str
    mount: str
    bucket: str
    model: Path
    tmp: Path
    results: dict = field(default_factory=dict)
    endpoint: str = ""          # the stack's one endpoint (router), its base URL

    @property
    def root_url(self) -> str:
        return self.base_url.removesuffix("/v1")

    def container(self, role: str = "vllm"):
        [c] = docker.from_env().containers.list(
            filters={"label": [f"rustfs-vllm.stack={self.stack.name}", f"rustfs-vllm.role={role}"]})
        return c


def bring_up(tmp: Path, kind: str = s3_under_test.KIND, name: str = "srv") -> Served:
    """`pulumi up` of a stack serving SmolLM2 through the mount, on the S3 server ``kind``, with an
    API key; returns once it serves (the smoke completions passed). The model's source is where
    most users' models live: a Hugging Face cache snapshot (``.../snapshots/<rev>/``, each file a
    symlink into ``../../blobs/``)."""
    model = make_hf_cache(MODEL, tmp / "hub")
    stack = Stack(ROOT, f"{name}-{secrets.token_hex(3)}")
    stack.init()
    port = free_port()
    prefix = f"rvllm-{stack.name}"
    api_key = f"srv-key-{secrets.token_urlsafe(12)}"
    cfg = {
        "environment": "test", "namePrefix": prefix, **s3_under_test.stack_settings(kind),
        "rustfsPort": str(free_port()), "bindAddress": "127.0.0.1", "bucket": "srv-models",
        "mountPath": f"/mnt/{prefix}", "mountCacheDir": str(tmp / "rclone-cache"),
        "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 600,
        "models": [{"name": SERVED, "source": str(model), "prefix": PREFIX, "port": port, "dtype": "float32",
                    "maxModelLen": MAX_MODEL_LEN, "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"],
                    "loadFormat": "mount"}],   # served through the mount (the conformance checks its files)
    }
    stack.write_config(cfg)
    stack.set("rustfsAccessKey", f"srv-access-{secrets.token_hex(6)}", secret=True)
    stack.set("rustfsSecretKey", secrets.token_urlsafe(18), secret=True)
    stack.set("vllmApiKey", api_key, secret=True)
    ctx = Served(stack, f"http://127.0.0.1:{port}/v1", api_key, prefix, f"/mnt/{prefix}", "srv-models", model, tmp)
    try:
        stack.run("up", "--yes", "--skip-preview", label="up")
        ctx.endpoint = stack.outputs()["endpoint"]
    except BaseException:
        stack.teardown(f"{prefix}-data")
        raise
    return ctx


def tear_down(ctx: Served, results: Path) -> None:
    """Destroy and remove the stack and what a failed test left of it; write its results."""
    ctx.stack.teardown(f"{ctx.prefix}-data")
    results.parent.mkdir(exist_ok=True)
    results.write_text(json.dumps({"timings": ctx.stack.timings, **ctx.results}, indent=2))
