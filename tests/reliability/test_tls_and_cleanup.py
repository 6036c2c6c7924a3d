"""TLS with a private CA, and failures that clean up after themselves, through the real engine.

One stack, one S3 endpoint on HTTPS on loopback, with a certificate from a CA made by the test
(tests/tls.py), the company-CA case: the server of tests/s3_under_test.py (real RustFS, local
build, serving TLS from RUSTFS_TLS_PATH under `make test-rustfs`; else `rclone serve s3 --cert`,
the S3-compatible stand-in, NOT RustFS).
In order:

  preview without rustfsCaBundle -> preview with another CA -> up with the CA and a bad mount flag
  (the mount fails; no mount, rclone or container left) -> up fixed, serving through the TLS mount
  -> rclone and its supervisor killed (a dead mount) -> destroy (removes the dead mount and says so,
  says where the VFS cache is and how big, keeps every object). (A destroy with purgeOnDestroy removes the
  cache: tests/e2e/test_lifecycle.py's step 9; this stack's up and destroy of it were cut on 2026-12-07.)
"""
from __future__ import annotations

import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import docker
import pytest
from openai import OpenAI

from components.storage import layout
from tests import s3_under_test
from tests.helpers import ROOT, free_port, kill_mount_keeper
from tests.pulumi_cli import Stack
from tests.reliability.conftest import ACCESS, SECRET, leftovers, tear_down
from tests.s3_under_test import ExternalServer
from tests.tls import make_pki

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
PREFIX = "SmolLM2-135M-Instruct"
SERVED = "smollm2"
BUCKET = "tls-models"
RESULTS = ROOT / ".state" / f"reliability-tls-cleanup-{s3_under_test.KIND}.json"
_results: list[dict] = []

pytestmark = pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                                reason="scripts/build-smollm2-model has not run (scripts/test runs it)")


def record(case: str, stage: str, result: str, detail: str) -> None:
    _results.append({"case": case, "stage": stage, "result": result, "detail": detail[:400]})


def line_with(text: str, fragment: str) -> str:
    """The first line with ``fragment``, without the engine's display prefix ("+  type name creating (1s) ")."""
    line = next((ln.strip() for ln in text.splitlines() if fragment in ln), "")
    return re.sub(r"^[-+~ ]*\S+ \S+ (creating|deleting|updating) \([0-9.]+s\) ", "", line)


def rclone_processes(path: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "args", "--width", "100000"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if ((" mount " in ln or " mount2 " in ln) and "rclone" in ln or "mount-supervisor" in ln)
            and path in ln]


class World:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.pki = make_pki(tmp / "pki", "company-ca")
        self.other_ca = make_pki(tmp / "other", "other-ca").ca
        self.server = ExternalServer(tmp, ACCESS, SECRET, tls=self.pki)
        self.endpoint = self.server.endpoint
        self.stack = Stack(ROOT, f"tls-{secrets.token_hex(3)}")
        self.mount = f"/mnt/{self.stack.name}"
        self.cache = tmp / "rclone-cache"
        self.vllm_port = free_port()
        self.model = tmp / PREFIX
        shutil.copytree(MODEL, self.model, ignore=shutil.ignore_patterns(".complete"))

    def config(self, **changes) -> dict:
        cfg = {"environment": "test", "namePrefix": self.stack.name, "s3Server": "external",
               "rustfsEndpoint": self.endpoint, "bucket": BUCKET, "bindAddress": "127.0.0.1",
               "mountPath": self.mount, "mountCacheDir": str(self.cache),
               "vllmImage": "rustfs-vllm/vllm-openai-cpu:0.30.0", "vllmReadyTimeout": 600,
               "models": [{"name": SERVED, "source": str(self.model), "prefix": PREFIX, "port": self.vllm_port,
                           "maxModelLen": 512, "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"],
                           "loadFormat": "mount"}]}   # the mount's TLS and cleanup
        cfg.update(changes)
        return {k: v for k, v in cfg.items() if v is not None}

    def configure(self, **changes) -> None:
        self.stack.write_config(self.config(**changes))
        self.stack.set("rustfsAccessKey", ACCESS, secret=True)
        self.stack.set("rustfsSecretKey", SECRET, secret=True)

    def objects(self) -> list[str]:
        return sorted(self.server.objects(BUCKET))

    def containers(self) -> list:
        return docker.from_env().containers.list(all=True, filters={"label": f"rustfs-vllm.stack={self.stack.name}"})


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("tls"))
    w.stack.init()
    yield w
    tear_down(w.stack, w.server, RESULTS, _results)


def test_preview_without_the_ca_fails_in_one_line_naming_endpoint_problem_and_key(world):
    world.configure()
    proc = world.stack.run("preview", check=False)
    out = proc.stdout + proc.stderr
    line = line_with(out, "rustfs-vllm:rustfsEndpoint = ")
    assert proc.returncode != 0 and world.endpoint in line and "not trusted" in line, out[-3000:]
    assert "set rustfs-vllm:rustfsCaBundle" in line and "certificate" in line
    assert "Traceback" not in out
    assert leftovers(world.stack.name, world.mount, "none") == [] and world.objects() == []
    record("https endpoint, company CA, no rustfsCaBundle", "preview", "rejected", line)


def test_preview_with_another_ca_fails_naming_the_bundle(world):
    world.configure(rustfsCaBundle=str(world.other_ca))
    proc = world.stack.run("preview", check=False)
    out = proc.stdout + proc.stderr
    line = line_with(out, "rustfs-vllm:rustfsCaBundle = ")
    assert proc.returncode != 0 and str(world.other_ca) in line and world.endpoint in line, out[-3000:]
    record("https endpoint, rustfsCaBundle of another CA", "preview", "rejected", line)


def test_a_failed_mount_leaves_no_mount_no_rclone_no_container(world):
    world.configure(rustfsCaBundle=str(world.pki.ca), mountFlags=["--vfs-cache-mode", "bogus"])
    started = time.monotonic()
    proc = world.stack.run("up", "--yes", "--skip-preview", check=False)
    took = time.monotonic() - started
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "rclone exited instead of mounting" in out and "bogus" in out, out[-3000:]
    assert layout.mounted_at(f"{world.mount}/{PREFIX}") is None
    assert rclone_processes(world.mount) == []
    assert world.containers() == []
    assert f"{PREFIX}/config.json" in world.objects()          # the upload went through TLS
    record("mount step fails (bad rclone flag)", "up (mount)", "failed; nothing left",
           f"{line_with(out, 'rclone exited instead of mounting')[:120]}... {line_with(out, 'bogus')[:120]} "
           f"(up failed after {took:.0f} s); no fuse.rclone mount, no rclone or supervisor process, no container")


def test_with_the_ca_it_serves_through_the_tls_mount(world):
    world.configure(rustfsCaBundle=str(world.pki.ca))
    world.stack.run("up", "--yes", "--skip-preview")
    text = OpenAI(base_url=f"http://127.0.0.1:{world.vllm_port}/v1", api_key="EMPTY", timeout=120).completions.create(
        model=SERVED, prompt="RustFS is", max_tokens=12, temperature=0).choices[0].text
    assert text == world.stack.outputs()["smoke_completions"][SERVED]
    [rclone] = [p for p in rclone_processes(world.mount) if "mount-supervisor" not in p and "bash" not in p]
    assert f"--ca-cert {world.pki.ca}" in rclone
    again = world.stack.run("preview", "--expect-no-changes", check=False)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    record("https endpoint with rustfsCaBundle", "up", "serving",
           f"bucket, upload and credential check verified against the CA; rclone mount runs with --ca-cert; "
           f"completion {text!r}; second preview: no changes")


def test_destroy_removes_a_dead_mount_reports_the_cache_and_keeps_objects(world):
    mnt = f"{world.mount}/{PREFIX}"
    kill_mount_keeper(mnt)
    subprocess.run(["pkill", "-9", "-f", f"rclone mount2? [^ ]* {mnt} "], check=False)
    time.sleep(1)
    assert layout.mounted_at(mnt) == "fuse.rclone"             # dead: nobody serves it any more
    objects = world.objects()
    proc = world.stack.run("destroy", "--yes", "--skip-preview")
    out = proc.stdout + proc.stderr
    dead = line_with(out, "removed the dead rclone mount at")
    cache = line_with(out, "kept the rclone VFS cache at")
    assert dead and mnt in dead, out[-3000:]
    assert cache and str(world.cache) in cache and "on disk" in cache, out[-3000:]
    assert leftovers(world.stack.name, world.mount, "none") == [] and rclone_processes(world.mount) == []
    # every object kept but the bucket's own record, which goes with the stack (issue 57)
    assert world.objects() == sorted(s3_under_test.kept_by_destroy(dict.fromkeys(objects))) and world.cache.exists()
    record("destroy after rclone and its keeper were killed", "destroy", "dead mount removed; objects kept",
           f"{dead}; {cache}")
