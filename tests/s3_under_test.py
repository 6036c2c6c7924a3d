"""The S3 server the e2e and reliability layers run on, chosen by ``RUSTFS_VLLM_TEST_S3``:

- ``rustfs``: real RustFS 1.0.1, the local build that scripts/build-rustfs-image packs as
  ``rustfs-vllm/rustfs:1.0.1-local`` from the crates.io crate (``make test-rustfs`` runs this);
- ``standin`` (the default): ``rclone serve s3``, an S3-compatible server that is NOT RustFS,
  in the locally built image ``rustfs-vllm/rclone-s3-standin:1.75.2`` (stacks) or as a process
  (the reliability suite's external server).

Where a test checks the machine rather than the S3 API, it reads what the server keeps in its own
storage: the stand-in keeps one file per object (``<bucket>/<key>``); RustFS keeps one folder per
object (``<bucket>/<key>/xl.meta``, plus ``<data-dir>/part.N`` for objects it does not inline) and
its own system folder ``.rustfs.sys``.
"""
from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from tests.helpers import free_port, start_rclone_s3, wait_http

if TYPE_CHECKING:
    from tests.tls import Pki

KIND = os.environ.get("RUSTFS_VLLM_TEST_S3", "standin")
if KIND not in ("rustfs", "standin"):
    raise RuntimeError(f"RUSTFS_VLLM_TEST_S3={KIND!r}: use rustfs (real RustFS, local build) or standin")
RUSTFS_IMAGE = "rustfs-vllm/rustfs:1.0.1-local"
STANDIN_IMAGE = "rustfs-vllm/rclone-s3-standin:1.75.2"


def stack_settings(kind: str = KIND) -> dict[str, str]:
    """The stack config keys that put the chosen server in a stack (``s3Server``, ``rustfsImage``)."""
    if kind == "rustfs":
        return {"s3Server": "rustfs", "rustfsImage": RUSTFS_IMAGE}
    return {"s3Server": "rclone-serve-s3", "rustfsImage": STANDIN_IMAGE}


def expected_s3_server_output() -> str:
    """What a stack's ``s3_server`` output says: for the local RustFS image, where its binary came from
    (its SOURCE_LABEL: compiled here, or a prebuilt binary such as ../shared/rustfs/ and its sha256)."""
    from components.hosts.docker_facts import image_label
    from components.storage.kinds import SOURCE_LABEL, describe

    s = stack_settings()
    return describe(s["s3Server"], s["rustfsImage"], image_label(s["rustfsImage"], SOURCE_LABEL))


def stored_objects(base: Path, kind: str = KIND) -> dict[str, tuple[int, int]]:
    """{``bucket/key``: (bytes the server keeps for it, mtime_ns of its newest write)} read from
    the server's storage folder ``base``, not through S3."""
    found: dict[str, tuple[int, int]] = {}
    if kind == "rustfs":
        for meta in base.rglob("xl.meta"):
            key = meta.parent.relative_to(base)
            if key.parts[0].startswith("."):
                continue                                 # .rustfs.sys: the server's own state
            size = sum(p.stat().st_size for p in meta.parent.rglob("*") if p.is_file())
            found[str(key)] = (size, meta.stat().st_mtime_ns)
        return found
    for p in base.rglob("*"):
        if p.is_file() and not p.name.startswith("."):  # .rclone_temp_*: unfinished uploads
            found[str(p.relative_to(base))] = (p.stat().st_size, p.stat().st_mtime_ns)
    return found


BUCKET_RECORD = ".rustfs-vllm/bucket.json"    # the stack's record in a bucket it made: a destroy removes it (issue 57)


def kept_by_destroy(objects: dict) -> dict:
    """``objects`` (keys with or without their bucket) less the bucket's own record, which names the stack
    that made the bucket and goes with the stack when a destroy keeps the bucket: what a destroy keeps."""
    return {k: v for k, v in objects.items() if k != BUCKET_RECORD and not k.endswith("/" + BUCKET_RECORD)}


def volume_objects(volume: str, kind: str = KIND) -> dict[str, tuple[int, int]]:
    """``stored_objects`` of a Docker volume mounted at the server's ``/data``."""
    import docker

    return stored_objects(Path(docker.from_env().volumes.get(volume).attrs["Mountpoint"]), kind)


def _wait_ready(endpoint: str, ca: str = "") -> None:
    if not wait_http(f"{endpoint}/health/ready", 60, any_status=False, ca=ca):
        raise RuntimeError(f"RustFS at {endpoint} was not ready within 60 s")


class ExternalServer:
    """A server outside any stack (``s3Server: external``) that a test can kill and start again;
    the chosen kind, on a loopback port, with the given credentials. ``keys=False`` starts it the
    way a server that never received its keys runs: on RustFS's default ``rustfsadmin`` pair (RustFS:
    no key given at all; the stand-in: given only that pair)."""

    def __init__(self, tmp: Path, access: str, secret: str, keys: bool = True, kind: str = KIND,
                 tls: "Pki | None" = None) -> None:
        self.kind = kind
        if not keys:
            access = secret = "rustfsadmin"
        self.access, self.secret = access, secret
        self.port = free_port()
        self.tls = tls                                   # serve HTTPS with this certificate (tests/tls.py)
        self.ca = str(tls.ca) if tls else ""
        self.endpoint = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.tmp = tmp
        self.proc: subprocess.Popen | None = None
        self.name = f"rvllm-test-rustfs-{secrets.token_hex(3)}"
        if self.kind == "rustfs":
            folder = tmp / f"{self.name}-keys"        # bind-mounted read-only; readable by uid 10001
            folder.mkdir(mode=0o755)
            for name, value in (("access", access), ("secret", secret)):
                (folder / name).write_text(value)
                (folder / name).chmod(0o444)
            folder.chmod(0o755)
            given = ["-v", f"{folder}:/run/keys:ro", "-e", "RUSTFS_ACCESS_KEY_FILE=/run/keys/access",
                     "-e", "RUSTFS_SECRET_KEY_FILE=/run/keys/secret"] if keys else []
            if tls:   # RustFS serves HTTPS when RUSTFS_TLS_PATH holds rustfs_cert.pem and rustfs_key.pem
                tls_dir = tmp / f"{self.name}-tls"
                tls_dir.mkdir(mode=0o755)
                for src, name in ((tls.cert, "rustfs_cert.pem"), (tls.key, "rustfs_key.pem")):
                    (tls_dir / name).write_bytes(src.read_bytes())
                    (tls_dir / name).chmod(0o444)          # a test key, readable by the image's uid 10001
                given += ["-v", f"{tls_dir}:/tls:ro", "-e", "RUSTFS_TLS_PATH=/tls"]
            subprocess.run(["docker", "run", "-d", "--name", self.name, "-p", f"127.0.0.1:{self.port}:9000",
                            "-v", f"{self.name}-data:/data", *given, RUSTFS_IMAGE],
                           check=True, capture_output=True)
            _wait_ready(self.endpoint, self.ca)
        else:
            self.root = tmp / "s3data"
            self.root.mkdir()
            self.proc = start_rclone_s3(self.root, self.port, access, secret, tls=self._tls_pair())

    def alive(self) -> bool:
        if self.kind == "rustfs":
            out = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", self.name],
                                 capture_output=True, text=True)
            return out.stdout.strip() == "true"
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.kind == "rustfs":
            subprocess.run(["docker", "kill", self.name], check=True, capture_output=True)
        elif self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> None:
        if self.kind == "rustfs":
            subprocess.run(["docker", "start", self.name], check=True, capture_output=True)
            _wait_ready(self.endpoint, self.ca)
        else:
            self.proc = start_rclone_s3(self.root, self.port, self.access, self.secret, tls=self._tls_pair())

    def _tls_pair(self) -> "tuple[Path, Path] | None":
        return (self.tls.cert, self.tls.key) if self.tls else None

    def remove(self) -> None:
        if self.kind == "rustfs":
            subprocess.run(["docker", "rm", "-f", "-v", self.name], capture_output=True)
            subprocess.run(["docker", "volume", "rm", "-f", f"{self.name}-data"], capture_output=True)
        elif self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def client(self):
        from components.storage import s3

        return s3.client(self.endpoint, self.access, self.secret, ca_bundle=self.ca)

    def objects(self, bucket: str) -> dict[str, tuple[int, str]]:
        """{key: (size, ETag)} as the server lists them (finished uploads only)."""
        c, out, token = self.client(), {}, None
        if not self.bucket_exists(bucket):
            return {}
        while True:
            page = c.list_objects_v2(Bucket=bucket, **({"ContinuationToken": token} if token else {}))
            out.update({o["Key"]: (o["Size"], o["ETag"]) for o in page.get("Contents", [])})
            if not page.get("IsTruncated"):
                return out
            token = page["NextContinuationToken"]

    def bucket_exists(self, bucket: str) -> bool:
        return any(b["Name"] == bucket for b in self.client().list_buckets().get("Buckets", []))

    def read(self, bucket: str, key: str) -> bytes:
        return self.client().get_object(Bucket=bucket, Key=key)["Body"].read()
