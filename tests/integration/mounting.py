"""The mount script driven as the engine drives it: its inputs, the real pulumi-command plugin, and
small looks at the machine. Shared by the mount and
TLS integration tests; their fixtures (``commands``, ``root``) are in conftest.py."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time

from components.docker.mounts import expectations
from tests.helpers import ROOT
from tests.integration.conftest import ACCESS, SECRET
from tests.plugin_client import PluginClient, decode

SCRIPT = str(ROOT / "scripts" / "rclone-mount")
TOKEN = "command:local:Command"
CONFIG = b'{"a": 1}'
WEIGHTS = b"w" * 100_000


def expect(files: dict[str, bytes]) -> str:
    return json.dumps(expectations({rel: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()}
                                    for rel, b in files.items()}))


def put_model(s3_server, prefix: str = "m1") -> None:
    """A small model (config.json and its weights) under ``models/<prefix>`` on the S3 server."""
    folder = s3_server.root / "models" / prefix
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes(CONFIG)
    (folder / "model.safetensors").write_bytes(WEIGHTS)


def mount_env(s3_server, root, tmp_path, prefix="m1", files=None, **extra):
    r = "ITEST"
    files = files or {"config.json": CONFIG, "model.safetensors": WEIGHTS}
    return {"RV_RCLONE": shutil.which("rclone"), "RV_REMOTE": r, "RV_SOURCE": f"models/{prefix}",
            "RV_ROOT": str(root), "RV_MOUNT": str(root / prefix), "RV_CACHE_DIR": str(tmp_path / "cache" / prefix),
            "RV_LOG": str(tmp_path / f"rclone-{prefix}.log"), "RV_EXPECT": expect(files), "RV_WAIT_SECONDS": "20",
            "RV_MARKER": str(tmp_path / f"marker-{prefix}.json"), "RV_GENERATION": "5",
            f"RCLONE_CONFIG_{r}_TYPE": "s3", f"RCLONE_CONFIG_{r}_PROVIDER": "Other",
            f"RCLONE_CONFIG_{r}_ENDPOINT": s3_server.endpoint, f"RCLONE_CONFIG_{r}_REGION": "us-east-1",
            f"RCLONE_CONFIG_{r}_FORCE_PATH_STYLE": "true", f"RCLONE_CONFIG_{r}_ACCESS_KEY_ID": ACCESS,
            f"RCLONE_CONFIG_{r}_SECRET_ACCESS_KEY": SECRET, **extra}


def props(env):
    """The inputs components/docker/mounts.py gives a model's local.Command."""
    return {"create": f"{SCRIPT} mount", "delete": f"{SCRIPT} unmount", "environment": env, "triggers": []}


def root_props(root):
    return {"create": f"{SCRIPT} root-up", "delete": f"{SCRIPT} root-down", "environment": {"RV_ROOT": str(root)}}


class Commands:
    """scripts/rclone-mount run by the real pulumi-command plugin 1.2.1 (the calls the engine makes)."""

    def __init__(self) -> None:
        self.plugin = PluginClient("command", "1.2.1")

    def create(self, inputs):
        id_, state = self.plugin.create(TOKEN, inputs, secrets={"environment"})
        return id_, decode(state)[0]

    def update(self, id_, olds, news):
        return decode(self.plugin.update(TOKEN, id_, olds, news, secrets={"environment"}))[0]

    def delete(self, id_, state):
        self.plugin.delete(TOKEN, id_, state)


def mount_options(path) -> list[str]:
    with open("/proc/mounts") as fh:
        for line in fh:
            p = line.split()
            if p[1] == str(path):
                return p[3].split(",")
    return []


def pids(pattern: str) -> list[str]:
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()


def wait_for(check, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False
