"""``scripts/rclone-mount copy-up|copy-down`` (loadFormat local_copy) as the engine runs it, against
real rclone and a real S3 server process (``rclone serve s3``, NOT RustFS): the copy of a revision,
checked against the manifest; nothing copied the second time; a resumed copy; bytes that differ
from the upload refused and removed; a new revision replacing the old; keys that do not work named
in one line; destroy keeping or purging; and a real container reading the copy."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

import grpc
import pytest

from components.docker import copies
from components.mounting import copy_tool
from components.docker.mounts import remote_env
from tests.integration.conftest import ACCESS, SECRET
from tests.integration.mounting import CONFIG, SCRIPT, WEIGHTS

BIG = os.urandom(3 * 2**20 + 17)                # above rclone's multi-thread cutoff once lowered below
FILES = {"config.json": CONFIG, "model.safetensors": WEIGHTS, "shard/model-00002.safetensors": BIG}


def manifest(files: dict[str, bytes]) -> dict:
    return {rel: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for rel, b in files.items()}


@pytest.fixture
def bucket(s3_server):
    c = s3_server.client()
    c.create_bucket(Bucket="models")
    for rel, body in FILES.items():
        c.put_object(Bucket="models", Key=f"m1/{rel}", Body=body)
    return c


def copy_env(s3_server, tmp_path, revision="rev1", files=None, secret=SECRET, **extra):
    r = "ITEST"
    root = tmp_path / "cache" / "m1" / "copy"
    return {"RV_RCLONE": shutil.which("rclone"), "RV_REMOTE": r, "RV_SOURCE": "models/m1", "RV_ROOT": str(root),
            "RV_COPY_ROOT": str(root), "RV_REVISION": revision,
            "RV_EXPECT": json.dumps(copies.expectations(manifest(files or FILES))),
            "RV_COPY_FLAGS": "--transfers\n2\n--multi-thread-streams\n4\n--multi-thread-cutoff\n1M",
            "RV_LOG": str(tmp_path / "copy.log"), "RV_MARKER": str(tmp_path / "copy-marker.json"),
            "RV_GENERATION": "0", "RV_PURGE": "0", **remote_env(r, s3_server.endpoint, ACCESS, secret), **extra}


def props(env):
    """The inputs components/docker/copies.py gives a model's local.Command."""
    return {"create": f"{SCRIPT} copy-up", "delete": f"{SCRIPT} copy-down", "environment": env, "triggers": []}


def read_all(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != copy_tool.MARKER}


def test_copy_up_copies_the_revision_verified_then_nothing(commands, s3_server, bucket, tmp_path):
    env = copy_env(s3_server, tmp_path)
    id_, outs = commands.create(props(env))
    folder = tmp_path / "cache" / "m1" / "copy" / "rev1"
    assert read_all(folder) == FILES
    assert "copied 3 files" in outs["stdout"] and "sha256 verified" in outs["stdout"]
    assert json.loads((folder / copy_tool.MARKER).read_text())["revision"] == "rev1"
    assert json.loads((tmp_path / "copy-marker.json").read_text())["copy"] == str(folder)
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    _, again = commands.create(props(env))
    assert "nothing copied" in again["stdout"]
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before
    commands.delete(id_, outs)
    assert folder.exists() and not (tmp_path / "copy-marker.json").exists()   # destroy keeps the copy


def test_an_interrupted_copy_resumes(commands, s3_server, bucket, tmp_path):
    partial = tmp_path / "cache" / "m1" / "copy" / "rev1.partial"
    partial.mkdir(parents=True)
    (partial / "config.json").write_bytes(CONFIG)                  # what an interrupted run left
    (partial / "model.safetensors").write_bytes(WEIGHTS[:1000])    # half a file
    _, outs = commands.create(props(copy_env(s3_server, tmp_path)))
    assert read_all(tmp_path / "cache" / "m1" / "copy" / "rev1") == FILES and not partial.exists()


def test_bytes_that_differ_from_the_upload_are_refused_and_removed(commands, s3_server, bucket, tmp_path):
    bucket.put_object(Bucket="models", Key="m1/config.json", Body=b'{"a": 2}')    # changed behind our back
    with pytest.raises(grpc.RpcError) as info:
        commands.create(props(copy_env(s3_server, tmp_path)))
    msg = info.value.details()
    assert "differs from the upload" in msg and "config.json: sha256" in msg and "Traceback" not in msg
    root = tmp_path / "cache" / "m1" / "copy"
    assert not (root / "rev1").exists() and not (root / "rev1.partial").exists()


def test_a_new_revision_replaces_the_old_one(commands, s3_server, bucket, tmp_path):
    commands.create(props(copy_env(s3_server, tmp_path)))
    new_files = {**FILES, "config.json": b'{"a": 3}'}
    bucket.put_object(Bucket="models", Key="m1/config.json", Body=new_files["config.json"])
    _, outs = commands.create(props(copy_env(s3_server, tmp_path, revision="rev2", files=new_files)))
    root = tmp_path / "cache" / "m1" / "copy"
    assert read_all(root / "rev2") == new_files and not (root / "rev1").exists()
    assert "removed older revisions rev1" in outs["stdout"]


def test_keys_that_do_not_work_are_named_in_one_line(commands, s3_server, bucket, tmp_path):
    with pytest.raises(grpc.RpcError) as info:
        commands.create(props(copy_env(s3_server, tmp_path, secret="wrong-secret-000000001")))
    msg = info.value.details()
    assert "rclone could not copy models/m1" in msg and "rustfsSecretKey" in msg
    assert "wrong-secret" not in msg and "Traceback" not in msg


def test_purge_on_destroy_removes_the_copy(commands, s3_server, bucket, tmp_path):
    env = copy_env(s3_server, tmp_path, RV_PURGE="1")
    id_, outs = commands.create(props(env))
    commands.delete(id_, outs)
    assert not (tmp_path / "cache" / "m1" / "copy").exists()
    commands.delete(id_, outs)                                  # already gone: still succeeds


def test_no_room_fails_before_copying(tmp_path):
    root = tmp_path / "copy"
    root.mkdir()
    with pytest.raises(copy_tool.CopyError) as info:
        copy_tool._room(str(root), str(root / "r.partial"), copy_tool._free_bytes(str(root)) + 10**12)
    assert "not enough disk for the local copy" in str(info.value) and "mountCacheDir" in str(info.value)


def test_a_container_reads_the_copy(commands, s3_server, bucket, tmp_path, image):
    """The bind the vLLM container gets (components.serving.vllm._mounts): the revision's folder at
    /models/<prefix>, read-only, read by a real container on the real Docker engine."""
    commands.create(props(copy_env(s3_server, tmp_path)))
    folder = tmp_path / "cache" / "m1" / "copy" / "rev1"
    out = subprocess.run(["docker", "run", "--rm", "--mount", f"type=bind,source={folder},target=/models/m1,readonly",
                          "--entrypoint", "sh", image, "-c", "sha256sum /models/m1/shard/model-00002.safetensors; "
                          "touch /models/m1/x 2>/dev/null && echo writable || echo read-only"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert hashlib.sha256(BIG).hexdigest() in out and "read-only" in out


def test_a_replaced_copy_leaves_the_folder_to_its_replacement(commands, s3_server, bucket, tmp_path):
    """Pulumi makes the new copy first (the old container still serves), then deletes the old one: that
    delete, even with purgeOnDestroy, leaves the folder to the newer copy."""
    old_id, old = commands.create(props(copy_env(s3_server, tmp_path, RV_PURGE="1", RV_TOKEN="old-token")))
    new_id, new = commands.create(props(copy_env(s3_server, tmp_path, RV_PURGE="1", RV_TOKEN="new-token",
                                                 RV_GENERATION="1")))
    assert "nothing copied" in new["stdout"]
    commands.delete(old_id, old)
    root = tmp_path / "cache" / "m1" / "copy"
    assert read_all(root / "rev1") == FILES and (tmp_path / "copy-marker.json").exists()
    commands.delete(new_id, new)                      # the destroy: the owner purges
    assert not root.exists() and not (tmp_path / "copy-marker.json").exists()
