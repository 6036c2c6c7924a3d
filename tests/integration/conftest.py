"""A real S3 server process for the integration tests: `rclone serve s3` (the S3-compatible server
from rclone, NOT RustFS) on a loopback port, storing objects in a temporary folder."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.storage import s3
from tests.helpers import free_port, start_rclone_s3

ACCESS = "integration-access-0001"
SECRET = "integration-secret-0001"


@dataclass
class S3Server:
    endpoint: str
    root: Path               # backing folder: <root>/<bucket>/<key>
    proc: subprocess.Popen
    port: int

    def props(self, **extra):
        return {"endpoint": self.endpoint, "access_key": ACCESS, "secret_key": SECRET, **extra}

    def client(self):
        return s3.client(self.endpoint, ACCESS, SECRET)


def start_server(root: Path, port: int) -> subprocess.Popen:
    return start_rclone_s3(root, port, ACCESS, SECRET)


@pytest.fixture
def s3_server(tmp_path):
    root = tmp_path / "s3data"
    root.mkdir()
    port = free_port()
    proc = start_server(root, port)
    server = S3Server(f"http://127.0.0.1:{port}", root, proc, port)
    yield server
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def commands():
    """The command plugin, for tests that run scripts/rclone-mount as the engine does."""
    from tests.integration.mounting import Commands

    m = Commands()
    yield m
    m.plugin.close()


@pytest.fixture
def root(commands, tmp_path):
    """A mount root made (and removed after the test) by the plugin."""
    from components.storage import layout
    from tests.integration.mounting import root_props

    path = tmp_path / "root"
    id_, state = commands.create(root_props(path))
    yield path
    commands.delete(id_, state)
    assert not path.exists() or not layout.is_self_bind(str(path))
