"""A server out of space during an upload says so (issue 29): the S3 server's data on a Docker
volume smaller than the model (a tmpfs volume of 48 MiB), a real upload of 96 MiB through the
upload provider's own code. The error names the likely cause, the volume's free space (read from
this machine's Docker engine) and what the upload still needed; the next upload on a bigger volume
converges. The server is the rclone serve s3 stand-in image (NOT RustFS); tests/s3_under_test.py's
RUSTFS_VLLM_TEST_S3=rustfs runs the same test on real RustFS."""
from __future__ import annotations

import os
import secrets
import subprocess
import time

import docker
import pytest

from components.errors import ProviderError
from components.providers import model_upload
from components.storage import manifest, s3
from tests import s3_under_test
from tests.helpers import ROOT, free_port, wait_http

ACCESS, SECRET = "fulldisk-access-0001", "fulldisk-secret-00001"
RESULT = ROOT / ".state" / f"full-disk-{s3_under_test.KIND}.txt"      # the message, for the docs


def run_server(client, volume: str, port: int):
    if s3_under_test.KIND == "rustfs":
        env = {"RUSTFS_VOLUMES": "/data", "RUSTFS_ADDRESS": ":9000", "RUSTFS_ACCESS_KEY": ACCESS,
               "RUSTFS_SECRET_KEY": SECRET}
        return client.containers.run(s3_under_test.RUSTFS_IMAGE, detach=True, environment=env,
                                     ports={"9000/tcp": ("127.0.0.1", port)}, volumes={volume: {"bind": "/data"}})
    return client.containers.run(s3_under_test.STANDIN_IMAGE, ["serve", "s3", "/data", "--addr", ":9000"],
                                 detach=True, environment={"RCLONE_AUTH_KEY": f'"{ACCESS},{SECRET}"'},
                                 ports={"9000/tcp": ("127.0.0.1", port)}, volumes={volume: {"bind": "/data"}})


def small_volume(client, name: str, size_mib: int, tmp_path):
    """A Docker volume of ``size_mib``: tmpfs for the stand-in; for RustFS, which writes with O_DIRECT
    (tmpfs refuses it), a folder on a loop-mounted ext4 image bound as the volume."""
    if s3_under_test.KIND != "rustfs":
        return client.volumes.create(name, driver_opts={"type": "tmpfs", "device": "tmpfs",
                                                        "o": f"size={size_mib}m,uid=10001,gid=10001"})
    image, point = tmp_path / "small.img", tmp_path / "small"
    subprocess.run(["truncate", "-s", f"{size_mib}M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    point.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(point)], check=True)
    (point / "data").mkdir()
    os.chmod(point / "data", 0o777)
    return client.volumes.create(name, driver_opts={"type": "none", "o": "bind", "device": str(point / "data")})


@pytest.mark.parametrize("size_mib", [48])
def test_an_upload_to_a_full_server_names_the_space(tmp_path, size_mib):
    client = docker.from_env()
    tag = secrets.token_hex(3)
    small = small_volume(client, f"rv-full-{tag}", size_mib, tmp_path)
    big = client.volumes.create(f"rv-roomy-{tag}")
    model = tmp_path / "model"
    model.mkdir()
    for i in range(3):
        (model / f"part-{i}.bin").write_bytes(os.urandom(32 * 2**20))
    (model / "config.json").write_text("{}")
    man = manifest.build(str(model), str(tmp_path / "hash-cache"))
    port = free_port()
    containers = []
    try:
        for volume in (small, big):
            containers.append(run_server(client, volume.name, port))
            assert wait_http(f"http://127.0.0.1:{port}/", 60)
            time.sleep(1)
            c = s3.client(f"http://127.0.0.1:{port}", ACCESS, SECRET)
            try:
                c.create_bucket(Bucket="full")
            except Exception:   # noqa: BLE001 - already there (the same data on the second server: no)
                pass
            props = {"endpoint": f"http://127.0.0.1:{port}", "access_key": ACCESS, "secret_key": SECRET,
                     "bucket": "full", "prefix": "m", "source": str(model), "manifest": man,
                     "store": f"{s3_under_test.KIND} volume {volume.name}"}
            if volume is small:
                with pytest.raises(ProviderError) as exc:
                    model_upload.sync(props)
                text = str(exc.value)
                assert "out of space" in text and f"volume {small.name}" in text, text
                assert "free of" in text and "still needed" in text and "pulumi up" in text, text
                assert "Traceback" not in text
                RESULT.parent.mkdir(exist_ok=True)
                RESULT.write_text(text + "\n")
                containers.pop().remove(force=True)
            else:
                stats = model_upload.sync(props)     # a bigger volume converges
                assert stats["files"] == 4
    finally:
        for c in containers:
            c.remove(force=True)
        for v in (small, big):
            v.remove(force=True)
        if (tmp_path / "small").exists():
            subprocess.run(["umount", "-l", str(tmp_path / "small")], check=False)
