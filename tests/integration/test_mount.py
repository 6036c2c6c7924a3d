"""scripts/rclone-mount against real rclone over real FUSE and a real S3 server process."""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import grpc
import pytest

from components import layout
from components import machine
from components.mount import generation
from tests.helpers import ROOT
from tests.integration.conftest import ACCESS, SECRET
from tests.plugin_client import PluginClient

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse on this host")
SCRIPT = str(ROOT / "scripts" / "rclone-mount")


def mount_env(s3_server, mnt, tmp_path, **extra):
    r = "ITEST"
    return {"RV_RCLONE": shutil.which("rclone"), "RV_REMOTE": r, "RV_BUCKET": "models", "RV_MOUNT": str(mnt),
            "RV_CACHE_DIR": str(tmp_path / "cache"), "RV_LOG": str(tmp_path / "rclone.log"),
            "RV_WAIT_FILES": "m1/config.json", "RV_WAIT_SECONDS": "20",
            f"RCLONE_CONFIG_{r}_TYPE": "s3", f"RCLONE_CONFIG_{r}_PROVIDER": "Other",
            f"RCLONE_CONFIG_{r}_ENDPOINT": s3_server.endpoint, f"RCLONE_CONFIG_{r}_REGION": "us-east-1",
            f"RCLONE_CONFIG_{r}_FORCE_PATH_STYLE": "true", f"RCLONE_CONFIG_{r}_ACCESS_KEY_ID": ACCESS,
            f"RCLONE_CONFIG_{r}_SECRET_ACCESS_KEY": SECRET, **extra}


TOKEN = "command:local:Command"


def props(env):
    """The inputs components/mount.py gives its local.Command."""
    return {"create": f"{SCRIPT} mount", "delete": f"{SCRIPT} unmount", "environment": env, "triggers": []}


class MountCommand:
    """scripts/rclone-mount run by the pulumi-command plugin this machine has (the offline stand-in
    under tests; the same calls the engine makes)."""

    def __init__(self) -> None:
        self.plugin = PluginClient("standins.command_provider")

    def create(self, inputs):
        from standins.plugin import decode

        id_, state = self.plugin.create(TOKEN, inputs, secrets={"environment"})
        return id_, decode(state)[0]

    def delete(self, id_, state):
        self.plugin.delete(TOKEN, id_, state)


def mount_options(path) -> list[str]:
    with open("/proc/mounts") as fh:
        for line in fh:
            p = line.split()
            if p[1] == str(path):
                return p[3].split(",")
    return []


@pytest.fixture
def bucket(s3_server):
    c = s3_server.client()
    c.create_bucket(Bucket="models")
    c.put_object(Bucket="models", Key="m1/config.json", Body=b'{"a": 1}')
    c.put_object(Bucket="models", Key="m1/model.safetensors", Body=b"w" * 100_000)
    return c


@pytest.fixture(scope="module")
def mounter():
    m = MountCommand()
    yield m
    m.plugin.close()


@pytest.fixture
def mounted(mounter, s3_server, bucket, tmp_path):
    mnt = tmp_path / "mnt"
    p = mounter
    env = mount_env(s3_server, mnt, tmp_path, RV_MARKER=str(tmp_path / "marker.json"), RV_GENERATION="5")
    id_, outs = p.create(props(env))
    yield mnt, outs, p, id_
    p.delete(id_, outs)


def test_mount_is_read_only_fuse_and_serves_the_bucket(mounted):
    mnt, outs, _, _ = mounted
    assert layout.mounted_at(str(mnt)) == "fuse.rclone"
    opts = mount_options(mnt)
    assert "ro" in opts and "allow_other" in opts
    assert (mnt / "m1" / "model.safetensors").read_bytes() == b"w" * 100_000
    with pytest.raises(OSError):
        (mnt / "m1" / "new-file").write_text("no")
    assert "mounted models read-only" in outs["stdout"]


def test_no_credential_in_rclone_argv(mounted):
    mnt, _, _, _ = mounted
    out = subprocess.run(["ps", "-eo", "args", "--width", "100000"], capture_output=True, text=True).stdout
    rclone_lines = [line for line in out.splitlines() if "rclone mount" in line and str(mnt) in line]
    assert rclone_lines, out
    for line in rclone_lines:
        assert ACCESS not in line and SECRET not in line


def test_program_notices_a_dead_rclone_and_unmount_still_succeeds(mounted, tmp_path):
    mnt, outs, p, id_ = mounted
    marker = str(tmp_path / "marker.json")
    assert machine.mount_alive(str(mnt))
    assert generation(marker, str(mnt), machine.mount_alive) == 5      # alive: the plan stays empty
    subprocess.run(["pkill", "-9", "-f", f"rclone mount ITEST:models {mnt}"], check=False)
    time.sleep(0.5)
    assert not machine.mount_alive(str(mnt))
    assert generation(marker, str(mnt), machine.mount_alive) == 6      # dead: preview/up remount
    p.delete(id_, outs)                            # unmounts the dead mount
    assert layout.mounted_at(str(mnt)) is None
    assert not os.path.exists(marker)              # unmounted: nothing left to notice
    p.delete(id_, outs)                            # already unmounted: fine
    p.create(props({**outs["environment"], "RV_GENERATION": "6"}))     # and `up` mounts again
    assert (mnt / "m1" / "config.json").read_bytes() == b'{"a": 1}'
    assert generation(marker, str(mnt), machine.mount_alive) == 6


def test_missing_model_files_fail_the_mount_clearly(mounter, s3_server, bucket, tmp_path):
    env = mount_env(s3_server, tmp_path / "mnt2", tmp_path, RV_WAIT_FILES="absent/config.json", RV_WAIT_SECONDS="2")
    with pytest.raises(grpc.RpcError) as info:
        mounter.create(props(env))
    assert "absent/config.json is not visible through the mount" in info.value.details()
    mounter.delete("id", props(env))
    assert layout.mounted_at(str(tmp_path / "mnt2")) is None


def test_non_empty_mount_point_is_refused(mounter, s3_server, bucket, tmp_path):
    mnt = tmp_path / "full"
    mnt.mkdir()
    (mnt / "precious.txt").write_text("keep")
    with pytest.raises(grpc.RpcError) as info:
        mounter.create(props(mount_env(s3_server, mnt, tmp_path)))
    assert "is not empty" in info.value.details()
    assert (mnt / "precious.txt").read_text() == "keep"


def test_wrong_credentials_fail_the_mount(mounter, s3_server, bucket, tmp_path):
    env = mount_env(s3_server, tmp_path / "mnt3", tmp_path, RV_WAIT_SECONDS="3")
    env["RCLONE_CONFIG_ITEST_SECRET_ACCESS_KEY"] = "wrong-secret-000001"
    with pytest.raises(grpc.RpcError) as info:
        mounter.create(props(env))
    assert "wrong-secret" not in info.value.details()
    mounter.delete("id", props(env))
