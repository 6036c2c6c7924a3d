"""Each privilege a mount keeper keeps, dropped one at a time (issue 45), on the real Docker engine with real
rclone over real FUSE and an S3 server: the keeper with all of them mounts; without any one of them it
does not, and what breaks is recorded (.state/keeper-privileges.json; docs/RELIABILITY.md's table). A
privilege whose loss breaks nothing fails its case: it is then not needed and must go.

AppArmor: ``apparmor=unconfined`` can only be tried on a host whose Docker engine confines containers with
AppArmor (``docker info``'s SecurityOptions name it); elsewhere its case is skipped, saying so."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import docker
import pytest

from components.mounting import keeper_tool, mount_tool
from tests.integration.mounting import WEIGHTS, mount_env, put_model
from tests.integration.test_keeper import RCLONE_IMAGE, needs_image

RESULTS = Path(__file__).parents[2] / ".state" / "keeper-privileges.json"
_found: dict[str, str] = {}


def _without_cap(cap: str) -> Callable[[dict], None]:
    def drop(body: dict) -> None:
        body["HostConfig"]["CapAdd"] = [c for c in body["HostConfig"]["CapAdd"] if c != cap]
    return drop


def _without_pid_host(body: dict) -> None:
    body["HostConfig"]["PidMode"] = ""


def _confined(body: dict) -> None:
    body["HostConfig"]["SecurityOpt"] = [o for o in body["HostConfig"]["SecurityOpt"] if not o.startswith("apparmor=")]


DROPS: dict[str, Callable[[dict], None]] = {
    "all kept (control)": lambda body: None,
    "--pid host": _without_pid_host,
    "SYS_ADMIN": _without_cap("SYS_ADMIN"),
    "SYS_PTRACE": _without_cap("SYS_PTRACE"),
    "SYS_CHROOT": _without_cap("SYS_CHROOT"),
    "apparmor=unconfined": _confined,
}


def _apparmor() -> bool:
    return any("apparmor" in o for o in docker.APIClient().info().get("SecurityOptions") or [])


@pytest.fixture
def spec_of(s3_server, tmp_path):
    """A model on the S3 server and a keeper's spec for it (as the mount action writes it)."""
    put_model(s3_server)
    made: list[tuple[str, str, str]] = []

    def make(name: str) -> tuple[str, list[str]]:
        root = f"/mnt/{name}"
        env = mount_env(s3_server, Path(root), tmp_path)
        point = f"{root}/m1"
        log = f"{keeper_tool.LOGS_HOME}/{name}/rclone.log"
        home, rclone = keeper_tool.install(os.path.dirname(keeper_tool.__file__), shutil.which("rclone") or "rclone")
        spec = f"/var/lib/rustfs-vllm/itest-priv/{name}.keeper.json"
        os.close(keeper_tool.root_folder(os.path.dirname(log)))
        keeper_tool.write_spec(spec, {
            "mount": point, "root": root, "log": log, "stack": name, "env": {k: v for k, v in env.items()
                                                                             if k.startswith("RCLONE_CONFIG_")},
            "cmd": [rclone, "mount", f"{env['RV_REMOTE']}:models/m1", point, "--read-only", "--config", "/dev/null",
                    "--cache-dir", env["RV_CACHE_DIR"], *keeper_tool.log_flags(log)]})
        made.append((name, root, spec))
        argv = [keeper_tool.host_python(), "-I", "-B", os.path.join(home, "mount_tool.py"),
                "rustfs-vllm-mount-supervisor", point, "--keep", spec]
        return point, argv

    yield make
    for name, root, spec in made:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        subprocess.run(["fusermount3", "-uz", f"{root}/m1"], capture_output=True, check=False)
        subprocess.run(["umount", "-l", root], capture_output=True, check=False)
        keeper_tool.remove_spec(spec)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(f"{keeper_tool.LOGS_HOME}/{name}", ignore_errors=True)


@needs_image
@pytest.mark.parametrize("drop", list(DROPS))
def test_each_privilege_a_keeper_keeps_is_needed(spec_of, drop):
    if drop == "apparmor=unconfined" and not _apparmor():
        _found[drop] = "not tried: this Docker engine confines no container with AppArmor (docker info)"
        pytest.skip(_found[drop])
    name = f"rv-itest-priv-{secrets.token_hex(3)}"
    point, argv = spec_of(name)
    body: dict[str, Any] = keeper_tool.keeper_body(RCLONE_IMAGE, point, name, argv)
    DROPS[drop](body)
    keeper_tool.start_keeper(name, RCLONE_IMAGE, point, name, argv, body=body)
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline and mount_tool.mount_state(point) != "live" and \
            docker.APIClient().inspect_container(name)["State"]["Status"] != "exited":
        time.sleep(0.5)
    mounted = mount_tool.mount_state(point) == "live"
    logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True)
    words = [ln.strip() for ln in (logs.stdout + logs.stderr).splitlines() if ln.strip()]
    state = docker.APIClient().inspect_container(name)
    why = [w for w in words if w.startswith("nsenter:")] or words or ["nothing printed"]
    _found[drop] = "mounts" if mounted else f"no mount: {why[-1][:300]} (restarts: {state['RestartCount']})"
    if drop.startswith("all kept"):
        assert mounted, words[-5:]
        assert (Path(point) / "model.safetensors").read_bytes() == WEIGHTS
    else:
        assert not mounted, f"the keeper mounts without {drop}: it is not needed (drop it from keeper_body)"
        # it says why in one line and stays down (not restarted by Docker)
        assert any("refused to start: cannot enter the host's mount namespace" in w for w in words), words
        assert state["State"]["Status"] == "exited" and state["RestartCount"] == 0, state["State"]


def teardown_module() -> None:
    if _found:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(_found, indent=1))
