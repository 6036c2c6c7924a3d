"""Every test runs with the environment of scripts/env.sh (PATH with .venv and .tools, offline
Pulumi settings), however pytest was started."""
from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers import ROOT, pulumi_env

os.environ.update(pulumi_env())


@pytest.fixture(scope="session")
def image() -> str:
    """The locally built S3 stand-in image (rclone serve s3, not RustFS): small, has /bin/sh."""
    out = subprocess.run([str(ROOT / "scripts" / "build-s3-standin-image")], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture
def client():
    import docker

    return docker.from_env()
