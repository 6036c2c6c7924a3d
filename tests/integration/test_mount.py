"""scripts/rclone-mount against real rclone over real FUSE, a real S3 server process and the real
Docker engine: the shared mount root, one mount per model under it, the supervisor that mounts
again when rclone dies, and a container that keeps reading through re-made mounts."""
from __future__ import annotations

import os
import subprocess
import time

import grpc
import pytest

from components.storage import layout
from components.hosts import machine
from components.docker.mounts import generation
from tests.integration.conftest import ACCESS, SECRET
from tests.integration.mounting import (CONFIG, SCRIPT, WEIGHTS, mount_env, mount_options, pids, props,
                                        root_props, wait_for)

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse on this host")


@pytest.fixture
def bucket(s3_server):
    c = s3_server.client()
    c.create_bucket(Bucket="models")
    for prefix in ("m1", "m2"):
        c.put_object(Bucket="models", Key=f"{prefix}/config.json", Body=CONFIG)
        c.put_object(Bucket="models", Key=f"{prefix}/model.safetensors", Body=WEIGHTS)
    return c



@pytest.fixture
def mounted(commands, s3_server, bucket, root, tmp_path):
    env = mount_env(s3_server, root, tmp_path)
    id_, outs = commands.create(props(env))
    yield root / "m1", outs, id_
    commands.delete(id_, outs)


def test_root_is_a_shared_self_bind_and_goes_away(commands, tmp_path):
    path = tmp_path / "r"
    id_, state = commands.create(root_props(path))
    assert layout.is_self_bind(str(path))
    info = [ln for ln in open("/proc/self/mountinfo") if ln.split()[4] == str(path)]
    assert info and "shared:" in info[-1]
    commands.create(root_props(path))                    # again: idempotent, still one bind
    assert len([ln for ln in open("/proc/self/mountinfo") if ln.split()[4] == str(path)]) == 1
    assert layout.mount_point_problem(str(path)) is None  # ours: preview accepts it
    commands.delete(id_, state)
    assert layout.mounted_at(str(path)) is None and not path.exists()


def test_model_mount_is_read_only_fuse_and_serves_its_prefix(mounted):
    mnt, outs, _ = mounted
    assert layout.mounted_at(str(mnt)) == "fuse.rclone"
    assert "ro" in mount_options(mnt)
    assert (mnt / "config.json").read_bytes() == CONFIG
    with pytest.raises(OSError):
        (mnt / "new.txt").write_text("x")
    assert "mounted models/m1 read-only" in outs["stdout"]
    assert layout.mount_point_problem(str(mnt.parent)) is None   # the root with our mount in it


def test_no_credential_in_rclone_argv(mounted):
    mnt, _, _ = mounted
    out = subprocess.run(["ps", "-eo", "args", "--width", "100000"], capture_output=True, text=True).stdout
    lines = [line for line in out.splitlines() if "rclone mount" in line and str(mnt) in line]
    assert lines, out
    for line in lines:
        assert ACCESS not in line and SECRET not in line


def test_the_supervisor_mounts_again_when_rclone_dies(mounted):
    mnt, _, _ = mounted
    [old] = pids(f"^[^ ]*rclone mount ITEST:models/m1 {mnt} ")
    subprocess.run(["kill", "-9", old], check=True)
    assert wait_for(lambda: pids(f"^[^ ]*rclone mount ITEST:models/m1 {mnt} ") not in ([], [old])
                    and machine.mount_alive(str(mnt)), timeout=20)
    assert (mnt / "config.json").read_bytes() == CONFIG


def test_program_notices_a_mount_whose_supervisor_died_too(commands, mounted, tmp_path):
    mnt, outs, id_ = mounted
    marker = str(tmp_path / "marker-m1.json")
    assert machine.mount_alive(str(mnt))
    assert generation(marker, str(mnt), machine.mount_alive) == 5      # alive: the plan stays empty
    subprocess.run(["pkill", "-9", "-f", f"rustfs-vllm-mount-supervisor {mnt} "], check=False)
    subprocess.run(["pkill", "-9", "-f", f"rclone mount ITEST:models/m1 {mnt} "], check=False)
    time.sleep(0.5)
    assert not machine.mount_alive(str(mnt))
    assert generation(marker, str(mnt), machine.mount_alive) == 6      # dead: preview/up mount again
    commands.delete(id_, outs)                     # unmounts the dead mount
    assert layout.mounted_at(str(mnt)) is None
    assert not os.path.exists(marker)              # unmounted: nothing left to notice
    commands.delete(id_, outs)                     # already unmounted: fine
    commands.create(props({**outs["environment"], "RV_GENERATION": "6"}))     # and `up` mounts again
    assert (mnt / "config.json").read_bytes() == CONFIG
    assert generation(marker, str(mnt), machine.mount_alive) == 6


def test_a_container_keeps_reading_through_remade_mounts(commands, s3_server, bucket, root, tmp_path, image, client):
    """The container binds the root (rslave) before any model is mounted; a model mounted later,
    a model whose rclone is killed and mounted again, and a re-mount with new content all reach it."""
    from docker.types import Mount

    c = client.containers.run(image, ["serve", "http", "/tmp", "--addr", ":8080", "--config", "/dev/null"],
                              detach=True, name=f"rvllm-itest-rslave-{tmp_path.name[-6:]}",
                              mounts=[Mount("/models", str(root), type="bind", read_only=True,
                                            propagation="rslave")])
    try:
        id1, outs1 = commands.create(props(mount_env(s3_server, root, tmp_path)))
        id2, outs2 = commands.create(props(mount_env(s3_server, root, tmp_path, prefix="m2")))

        def cat(path: str) -> bytes:
            return c.exec_run(["cat", path]).output

        assert cat("/models/m1/config.json") == CONFIG and cat("/models/m2/config.json") == CONFIG
        # rclone killed: the supervisor mounts again and the same container reads through it
        subprocess.run(["pkill", "-9", "-f", f"^[^ ]*rclone mount ITEST:models/m1 {root / 'm1'} "], check=False)
        assert wait_for(lambda: cat("/models/m1/config.json") == CONFIG, timeout=20)
        # new content, re-mounted (what a model update does): the container sees the new bytes
        new = b'{"a": 2, "changed": true}'
        bucket.put_object(Bucket="models", Key="m1/config.json", Body=new)
        env = mount_env(s3_server, root, tmp_path, files={"config.json": new, "model.safetensors": WEIGHTS})
        outs1 = commands.update(id1, outs1, props(env))
        assert cat("/models/m1/config.json") == new and (root / "m1" / "config.json").read_bytes() == new
        # removing m2 leaves m1 alone
        commands.delete(id2, outs2)
        assert cat("/models/m1/config.json") == new and layout.mounted_at(str(root / "m2")) is None
        commands.delete(id1, outs1)
    finally:
        c.remove(force=True)


def test_missing_model_files_fail_the_mount_and_leave_nothing(commands, s3_server, bucket, root, tmp_path):
    env = mount_env(s3_server, root, tmp_path, prefix="absent", RV_WAIT_SECONDS="3")
    with pytest.raises(grpc.RpcError) as info:
        commands.create(props(env))
    assert "not visible through the mount" in info.value.details()
    assert "config.json" in info.value.details()
    assert "last lines of rclone's log" in info.value.details()   # rclone's own words, e.g. a TLS error
    assert layout.mounted_at(str(root / "absent")) is None
    assert not pids(f"rclone mount ITEST:models/absent {root / 'absent'} ")
    assert not pids(f"rustfs-vllm-mount-supervisor {root / 'absent'} ") and not (root / "absent").exists()


def test_stale_content_is_not_accepted(commands, s3_server, bucket, root, tmp_path):
    """The mount returns only when the files match the manifest: a wrong expectation (what a
    stale cache would look like) fails instead of serving old bytes."""
    env = mount_env(s3_server, root, tmp_path, RV_WAIT_SECONDS="3",
                    files={"config.json": b'{"a": 9}', "model.safetensors": WEIGHTS})
    with pytest.raises(grpc.RpcError) as info:
        commands.create(props(env))
    assert "config.json: sha256" in info.value.details() and "stale" in info.value.details()


def test_non_empty_mount_point_is_refused(commands, s3_server, bucket, root, tmp_path):
    (root / "m1").mkdir()
    (root / "m1" / "precious.txt").write_text("keep")
    with pytest.raises(grpc.RpcError) as info:
        commands.create(props(mount_env(s3_server, root, tmp_path)))
    assert "is not empty" in info.value.details()
    assert (root / "m1" / "precious.txt").read_text() == "keep"
    (root / "m1" / "precious.txt").unlink()


def test_wrong_credentials_fail_the_mount(commands, s3_server, bucket, root, tmp_path):
    env = mount_env(s3_server, root, tmp_path, RV_WAIT_SECONDS="3")
    env["RCLONE_CONFIG_ITEST_SECRET_ACCESS_KEY"] = "wrong-secret-000001"
    with pytest.raises(grpc.RpcError) as info:
        commands.create(props(env))
    assert "wrong-secret" not in info.value.details()
    assert "SignatureDoesNotMatch" in info.value.details() and "rustfsSecretKey" in info.value.details()
    assert layout.mounted_at(str(root / "m1")) is None
    assert not pids(f"rclone mount ITEST:models/m1 {root / 'm1'} ") and not (root / "m1").exists()



def kill_mount_processes(mnt) -> None:
    subprocess.run(["pkill", "-9", "-f", f"rustfs-vllm-mount-supervisor {mnt} "], check=False)
    subprocess.run(["pkill", "-9", "-f", f"rclone mount ITEST:models/[^ ]* {mnt} "], check=False)
    assert wait_for(lambda: not pids(f"rclone mount ITEST:models/[^ ]* {mnt} "), timeout=10)


def run_script(action: str, env: dict) -> str:
    return subprocess.run([SCRIPT, action], env={**os.environ, **env}, capture_output=True, text=True,
                          check=True).stdout


def test_destroy_removes_mounts_left_outside_the_state_dead_or_live_and_says_so(commands, s3_server, bucket,
                                                                                 tmp_path):
    """A mount whose `up` was killed is in no state: the root's delete (the last step of destroy)
    finds it under the root, stops its processes, unmounts it and says so."""
    path = tmp_path / "r2"
    commands.create(root_props(path))
    for prefix in ("m1", "m2"):
        commands.create(props(mount_env(s3_server, path, tmp_path, prefix=prefix)))   # states never recorded
    kill_mount_processes(path / "m1")                                                 # m1 dead, m2 live
    assert layout.mounted_at(str(path / "m1")) == "fuse.rclone" and not machine.mount_alive(str(path / "m1"))
    out = run_script("root-down", {"RV_ROOT": str(path)})
    assert f"removed a leftover dead rclone mount at {path / 'm1'}" in out, out
    assert f"removed a leftover live rclone mount at {path / 'm2'}" in out, out
    assert str(path) not in open("/proc/mounts").read()
    assert not pids(f"rclone mount ITEST:models/[^ ]* {path}/") and not pids(f"rustfs-vllm-mount-supervisor {path}/")
    assert not path.exists()


def test_unmount_of_a_dead_mount_says_so(commands, s3_server, bucket, root, tmp_path):
    env = mount_env(s3_server, root, tmp_path)
    commands.create(props(env))
    kill_mount_processes(root / "m1")
    assert "removed the dead rclone mount at" in run_script("unmount", env)
    assert layout.mounted_at(str(root / "m1")) is None
    assert "nothing was mounted at" in run_script("unmount", env)


def test_cache_down_reports_or_purges_only_what_rclone_made(tmp_path):
    cache = tmp_path / "cache"
    (cache / "m1" / "vfs" / "ITEST").mkdir(parents=True)
    (cache / "m1" / "vfs" / "ITEST" / "weights").write_bytes(b"w" * 300_000)
    (cache / "m1" / "vfsMeta").mkdir()
    (cache / "mine").mkdir()
    (cache / "mine" / "notes.txt").write_text("not rclone's")
    env = {"RV_CACHE_ROOT": str(cache)}
    kept = run_script("cache-down", {**env, "RV_PURGE": "0"})
    assert f"kept the rclone VFS cache at {cache} (" in kept and "purgeOnDestroy" in kept, kept
    assert (cache / "m1" / "vfs" / "ITEST" / "weights").exists()
    purged = run_script("cache-down", {**env, "RV_PURGE": "1"})
    assert f"removed the rclone VFS cache at {cache}" in purged and f"left {cache}/mine/ alone" in purged, purged
    assert not (cache / "m1").exists() and (cache / "mine" / "notes.txt").read_text() == "not rclone's"
    (cache / "mine" / "notes.txt").unlink()
    (cache / "mine").rmdir()
    assert "removed" in run_script("cache-down", {**env, "RV_PURGE": "1"}) and not cache.exists()
    assert f"no rclone VFS cache at {cache}" in run_script("cache-down", {**env, "RV_PURGE": "1"})


def test_rclone_that_exits_fails_the_mount_at_once_in_its_own_words(commands, s3_server, bucket, root, tmp_path):
    env = mount_env(s3_server, root, tmp_path, RV_FLAGS="--vfs-cache-mode\nbogus", RV_WAIT_SECONDS="60")
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as info:
        commands.create(props(env))
    assert time.monotonic() - started < 20, "waited for the deadline instead of noticing rclone exit"
    assert "rclone exited instead of mounting" in info.value.details() and "bogus" in info.value.details()
    assert layout.mounted_at(str(root / "m1")) is None and not (root / "m1").exists()
    assert not pids(f"rclone mount ITEST:models/m1 {root / 'm1'} ") and not pids(f"rustfs-vllm-mount-supervisor {root / 'm1'} ")
