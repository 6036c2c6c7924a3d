"""The mount keepers (issue 37), on the real Docker engine, real rclone over real FUSE and an S3 server
(`rclone serve s3`): a keeper runs from rcloneImage with the least it needs and runs what the mount
action installed root-owned outside the checkout; a failed mount leaves no spec (it holds the keys);
a keeper whose rclone cannot mount backs off, exits so that Docker's restart policy shows it, and
keeps its log bounded. The spec and the log's small parts are checked without Docker."""
from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import time
from pathlib import Path

import docker
import pytest

from components.mounting import keeper_tool, mount_tool
from tests.helpers import keeper_privileges
from tests.integration.mounting import SCRIPT, WEIGHTS, mount_env

RCLONE_IMAGE = "rustfs-vllm/rclone-mount:1.75.2"
RESULTS = Path(__file__).parents[2] / ".state" / "keeper-backoff.json"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"


def _image_here() -> bool:
    try:
        docker.from_env().images.get(RCLONE_IMAGE)
        return True
    except Exception:  # noqa: BLE001 - no engine or no image: the Docker cases cannot run
        return False


needs_image = pytest.mark.skipif(not _image_here(), reason=f"{RCLONE_IMAGE} is not built (scripts/build-images)")


def action(name: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([SCRIPT, name], env={"PATH": os.environ["PATH"], **env}, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def keeper_env(s3_server, tmp_path):
    """A model uploaded to the S3 server and a mount of it asked for with a keeper (as the program asks)."""
    bucket = s3_server.root / "models" / "m1"
    bucket.mkdir(parents=True)
    (bucket / "config.json").write_bytes(b'{"a": 1}')
    (bucket / "model.safetensors").write_bytes(WEIGHTS)
    root = Path(f"/mnt/rv-itest-keeper-{secrets.token_hex(3)}")
    name = f"rv-itest-keeper-{secrets.token_hex(3)}"
    env = mount_env(s3_server, root, tmp_path, RV_KEEPER_IMAGE=RCLONE_IMAGE, RV_KEEPER_NAME=name,
                    RV_SPEC=f"/var/lib/rustfs-vllm/itest/mounts/{name}.keeper.json", RV_STACK=name,
                    RV_SPEC_BEFORE=str(tmp_path / "old.keeper.json"))
    yield env
    action("unmount", env)
    action("root-down", {"RV_ROOT": str(root)})
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


@needs_image
def test_a_keeper_runs_from_its_own_image_with_the_least_it_needs(keeper_env, tmp_path):
    env = keeper_env
    Path(env["RV_SPEC_BEFORE"]).write_text("{}")            # where an older version kept the spec
    done = action("mount", env)
    assert done.returncode == 0, done.stderr
    assert (Path(env["RV_MOUNT"]) / "model.safetensors").read_bytes() == WEIGHTS
    attrs = docker.APIClient().inspect_container(env["RV_KEEPER_NAME"])
    facts = keeper_privileges(attrs, VLLM_IMAGE, RCLONE_IMAGE)
    # what root runs is root's, outside the checkout; the spec is root's, mode 0600; the old one is gone
    tool_dir = Path(facts["cmd"][3]).parent
    spec = json.loads(Path(env["RV_SPEC"]).read_text())
    for path in (tool_dir, tool_dir / "mount_tool.py", tool_dir / "keeper_tool.py", Path(spec["cmd"][0])):
        st = path.stat()
        assert st.st_uid == 0 and not st.st_mode & 0o022, path
    assert Path(spec["cmd"][0]).parent.name.startswith("rclone-") and str(tool_dir).startswith(keeper_tool.TOOLS_HOME)
    assert not str(tool_dir).startswith(str(Path(__file__).parents[2]))
    assert stat.S_IMODE(Path(env["RV_SPEC"]).stat().st_mode) == 0o600
    assert not Path(env["RV_SPEC_BEFORE"]).exists()
    # its rclone runs with the spec's credentials in its environment only, never on a command line
    ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
    assert env[f"RCLONE_CONFIG_{env['RV_REMOTE']}_SECRET_ACCESS_KEY"] not in ps
    assert f"{spec['cmd'][0]} mount ITEST:models/m1 {env['RV_MOUNT']}" in ps
    # unmount removes the keeper and the spec
    assert action("unmount", env).returncode == 0
    assert not Path(env["RV_SPEC"]).exists()
    with pytest.raises(docker.errors.NotFound):
        docker.APIClient().inspect_container(env["RV_KEEPER_NAME"])


@needs_image
def test_mount2_with_its_read_ahead_is_kept_across_an_rclone_kill(keeper_env):
    """The program's defaults (issue 36): `rclone mount2`, the mount's bdi read-ahead raised to 16 MiB
    by the mount action, and again by the keeper when it mounts after rclone was killed (a new FUSE
    connection is a new bdi, at the kernel's 128 KiB)."""
    env = {**keeper_env, "RV_MOUNT_COMMAND": "mount2", "RV_READ_AHEAD_KB": "16384"}
    done = action("mount", env)
    assert done.returncode == 0, done.stderr
    point = env["RV_MOUNT"]
    assert mount_tool.read_ahead(point) == 16384 and mount_tool.mounted_at(point) == mount_tool.FUSE

    def rclones() -> list[str]:
        ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
        return [ln.split()[0] for ln in ps.splitlines() if f" mount2 ITEST:models/m1 {point} " in ln]

    [pid] = rclones()
    subprocess.run(["kill", "-9", pid], check=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (rclones() not in ([], [pid]) and mount_tool.mount_state(point) == "live"):
        time.sleep(0.5)
    assert rclones() not in ([], [pid]) and mount_tool.mount_state(point) == "live", "the keeper did not mount again"
    time.sleep(2)                                        # the keeper sets it once it sees the mount
    assert mount_tool.read_ahead(point) == 16384, "the new mount kept the kernel's read-ahead"
    assert (Path(point) / "model.safetensors").read_bytes() == WEIGHTS


@needs_image
def test_a_failed_mount_leaves_no_spec_and_no_keeper(keeper_env):
    env = {**keeper_env, "RV_FLAGS": "--no-such-rclone-flag", "RV_WAIT_SECONDS": "30"}
    done = action("mount", env)
    assert done.returncode != 0 and "rclone" in done.stderr, done.stderr
    assert not Path(env["RV_SPEC"]).exists(), "the spec (it holds the keys) was left behind"
    assert not docker.from_env().containers.list(all=True, filters={"name": env["RV_KEEPER_NAME"]})


@needs_image
def test_a_keeper_that_cannot_mount_backs_off_exits_and_keeps_its_log_small(tmp_path):
    """rclone fails at once every time (its remote has no configuration): the keeper waits 2, 4, 8, 16
    and 32 s between attempts, exits with status 1 after the sixth, and Docker's restart policy starts
    it again (RestartCount); its log stays small."""
    name = f"rv-itest-keeper-{secrets.token_hex(3)}"
    point = f"/mnt/{name}/m"
    log = tmp_path / "rclone.log"
    spec = f"/var/lib/rustfs-vllm/itest/mounts/{name}.keeper.json"
    tool_dir = os.path.dirname(keeper_tool.__file__)
    home, rclone = keeper_tool.install(tool_dir, subprocess.run(["which", "rclone"], capture_output=True,
                                                                text=True).stdout.strip())
    keeper_tool.write_spec(spec, {"mount": point, "root": f"/mnt/{name}", "log": str(log), "stack": name,
                                  "cmd": [rclone, "mount", "NOSUCHREMOTE:models/m", point, "--config", "/dev/null"],
                                  "env": {}})
    argv = [keeper_tool.host_python(), "-I", "-B", os.path.join(home, "mount_tool.py"),
            "rustfs-vllm-mount-supervisor", point, "--keep", spec]
    started = time.monotonic()
    try:
        keeper_tool.start_keeper(name, RCLONE_IMAGE, point, name, argv)
        api = docker.APIClient()
        while time.monotonic() - started < 150:
            state = api.inspect_container(name)
            if state["RestartCount"] >= 1:
                break
            time.sleep(1)
        took = time.monotonic() - started
        text = log.read_text()
        assert state["RestartCount"] >= 1, text
        waits = [int(w) for w in __import__("re").findall(r"mounting again in (\d+) s", text)]
        assert waits[:5] == [2, 4, 8, 16, 32], waits
        assert "6 failures in a row: the keeper exits" in text, text[-2000:]
        assert 60 <= took <= 150, took
        assert log.stat().st_size < 64 * 1024, log.stat().st_size
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps({"waits": waits[:5], "attempts": 6, "took_s": round(took, 1),
                                       "log_bytes": log.stat().st_size}))
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        keeper_tool.remove_spec(spec)
        subprocess.run(["rm", "-rf", f"/mnt/{name}"], check=False)


# --------------------------------------------------------------------------- without Docker
def test_the_spec_never_follows_a_link_planted_where_it_goes(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    spec = tmp_path / "mounts" / "x.keeper.json"
    spec.parent.mkdir()
    spec.symlink_to(victim)
    keeper_tool.write_spec(str(spec), {"env": {"K": "secret"}})
    assert victim.read_text() == "keep me"
    assert not spec.is_symlink() and stat.S_IMODE(spec.stat().st_mode) == 0o600
    assert json.loads(spec.read_text()) == {"env": {"K": "secret"}}
    assert [p.name for p in spec.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_the_log_is_rotated_above_its_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(keeper_tool, "LOG_MAX_BYTES", 1000)
    log = tmp_path / "rclone.log"
    log.write_bytes(b"x" * 999)
    keeper_tool.rotate_log(str(log))
    assert log.stat().st_size == 999
    log.write_bytes(b"y" * 1001)
    keeper_tool.rotate_log(str(log))
    assert not log.exists() and (tmp_path / "rclone.log.1").read_bytes() == b"y" * 1001


def test_tools_are_not_installed_where_others_can_write(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir(mode=0o777)
    os.chmod(home, 0o777)
    monkeypatch.setattr(keeper_tool, "TOOLS_HOME", str(home))
    rclone = tmp_path / "rclone"
    rclone.write_bytes(b"#!/bin/sh\n")
    with pytest.raises(OSError, match="not root's alone"):
        keeper_tool.install(os.path.dirname(keeper_tool.__file__), str(rclone))
    os.chmod(home, 0o755)
    tools, binary = keeper_tool.install(os.path.dirname(keeper_tool.__file__), str(rclone))
    again = keeper_tool.install(os.path.dirname(keeper_tool.__file__), str(rclone))
    assert again == (tools, binary) and Path(binary).read_bytes() == b"#!/bin/sh\n"
    # a tampered copy is replaced, not used
    Path(tools, "mount_tool.py").write_text("import os; os.system('id')\n")
    assert keeper_tool.install(os.path.dirname(keeper_tool.__file__), str(rclone))[0] == tools
    assert "os.system" not in Path(tools, "mount_tool.py").read_text()
