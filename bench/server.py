"""The S3 server every bench part measures against, and the data it is given: a fresh server on
loopback (RustFS, or the rclone stand-in; at the CPU weight the program gives its store:
keeper_tool.FETCH_CPU_SHARES) with its bucket helpers and the rclone remote that reaches it, the synthetic safetensors-shaped set, SmolLM2 (MODEL), and a folder uploaded by the program's
own sync, untimed."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from bench.machine import ACCESS, MIB, ROOT, SECRET, WORK
from components.mounting.keeper_tool import FETCH_CPU_SHARES
from components.providers.model_upload import sync
from components.storage import manifest as manifest_mod
from components.storage import s3
from tests.s3_under_test import ExternalServer

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
SERVERS = {"rustfs": "RustFS 1.0.1 on loopback (local build from crates.io, rustfs-vllm/rustfs:1.0.1-local)",
           "standin": "rclone serve s3 on loopback (S3 stand-in, not RustFS)"}


def server_name(kind: str) -> str:
    """Which server the figures are from: for RustFS, which build of it (the image's own label)."""
    if kind != "rustfs":
        return SERVERS[kind]
    from components.hosts.docker_facts import image_label
    from components.storage.kinds import SOURCE_LABEL, describe
    from tests.s3_under_test import RUSTFS_IMAGE

    return describe("rustfs", RUSTFS_IMAGE, image_label(RUSTFS_IMAGE, SOURCE_LABEL)) + ", on loopback"


# ------------------------------------------------------------------------------------- fixtures
class Server:
    def __init__(self, root: Path, kind: str) -> None:
        self.root = root
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        self.server = ExternalServer(root, ACCESS, SECRET, kind=kind)
        if kind == "rustfs":      # the program's weight for a RustFS beside vLLM (components.docker.s3_server)
            subprocess.run(["docker", "update", "--cpu-shares", str(FETCH_CPU_SHARES), self.server.name],
                           check=True, stdout=subprocess.DEVNULL)
        self.endpoint = self.server.endpoint
        self.client = s3.client(self.endpoint, ACCESS, SECRET, max_pool=64)

    def fresh_bucket(self, name: str) -> str:
        self.client.create_bucket(Bucket=name)
        return name

    def rclone_env(self) -> dict[str, str]:
        return {"PATH": os.environ["PATH"], "HOME": str(self.root.parent),
                "RCLONE_CONFIG_BENCH_TYPE": "s3", "RCLONE_CONFIG_BENCH_PROVIDER": "Other",
                "RCLONE_CONFIG_BENCH_ENDPOINT": self.endpoint, "RCLONE_CONFIG_BENCH_REGION": "us-east-1",
                "RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE": "true", "RCLONE_CONFIG_BENCH_ACCESS_KEY_ID": ACCESS,
                "RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY": SECRET}

    def stop(self) -> None:
        self.server.remove()


@contextmanager
def fresh_server(kind: str) -> Iterator[Server]:
    """A fresh server on WORK/s3data, stopped and its data removed however the part ends."""
    server = Server(WORK / "s3data", kind)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(WORK / "s3data", ignore_errors=True)


def synthetic_set(folder: Path, total: int, files: int) -> Path:
    """A multi-file safetensors-shaped set of random bytes (plus config/tokenizer), cached."""
    marker = folder / f".done-{total}-{files}"
    if marker.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 2048}))
    (folder / "tokenizer.json").write_text("{}")
    per = total // files
    for i in range(files):
        with open(folder / f"model-{i + 1:05d}-of-{files:05d}.safetensors", "wb") as fh:
            left = per
            while left:
                n = min(left, 64 * MIB)
                fh.write(os.urandom(n))
                left -= n
    marker.touch()
    return folder


def synthetic_bytes(full: bool) -> int:
    """The synthetic set's size: 1 GiB quick, 4 GiB full."""
    return (4 if full else 1) * 2**30


def empty_bucket(server: Server, bucket: str) -> None:
    """Delete a sample's objects (the server's disk holds one copy at a time)."""
    keys = [o["Key"] for page in server.client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])]
    for i in range(0, len(keys), 1000):
        server.client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})


def uploaded(server: Server, bucket: str, folder: Path, label: str) -> None:
    """``folder`` in a fresh ``bucket`` under prefix m, by the program's own sync (not timed)."""
    server.fresh_bucket(bucket)
    sync({"endpoint": server.endpoint, "access_key": ACCESS, "secret_key": SECRET, "bucket": bucket, "prefix": "m",
          "source": str(folder), "manifest": manifest_mod.build(str(folder), str(WORK / "hash-cache" / f"{label}.json"))})
