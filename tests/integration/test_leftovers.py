"""A killed test run's stack is removed by the next run (tests/leftovers.py, scripts/test's first step): its
containers (which the Docker engine would start again), its data volume, its mounts and the host processes
serving them, and root's folders for it; a stack whose test still runs, and a stack in no ledger (a user's),
are left alone. Real Docker engine, real mounts, real processes."""
from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from tests import leftovers

IMAGE = "rustfs-vllm/debian-bookworm:minbase"


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def client():
    try:
        client = docker.from_env()
        client.images.get(IMAGE)
    except docker.errors.DockerException as exc:
        pytest.skip(f"needs the Docker engine and {IMAGE} (scripts/build-images): {exc}")
    return client


def _stack(client, name: str) -> tuple[str, object, object]:
    """A stack's leftovers as a killed test leaves them: a container that restarts with the engine, its data
    volume, a mount under /mnt/<prefix> and a process serving it."""
    prefix = f"rvllm-{name}"
    container = client.containers.run(IMAGE, ["sleep", "600"], name=f"{prefix}-vllm-m", detach=True,
                                      labels={"rustfs-vllm.stack": name}, restart_policy={"Name": "unless-stopped"})
    volume = client.volumes.create(f"{prefix}-data")
    point = Path("/mnt") / prefix / "m"
    point.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(point)], check=True)
    return prefix, container, volume


def _mounted(point: str) -> bool:
    return any(line.split()[1] == point for line in Path("/proc/mounts").read_text().splitlines())


def test_a_killed_runs_stack_goes_and_a_running_or_users_stack_stays(client, tmp_path, monkeypatch):
    monkeypatch.setattr(leftovers, "LEDGER", tmp_path / "ledger")
    tag = secrets.token_hex(3)
    killed, running, users = f"lft-{tag}-k", f"lft-{tag}-r", f"lft-{tag}-u"
    made = {name: _stack(client, name) for name in (killed, running, users)}
    serving = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", f"/mnt/rvllm-{killed}/m"])
    try:
        leftovers.record(running, f"rvllm-{running}")          # this pytest process: still running
        entry = leftovers.LEDGER / killed                      # a test process that is gone
        entry.write_text(json.dumps({"stack": killed, "prefix": f"rvllm-{killed}", "pid": _dead_pid()}))
        # users: in no ledger

        removed = leftovers.sweep()

        assert list(removed) == [killed], removed
        said = removed[killed]
        assert f"container rvllm-{killed}-vllm-m" in said and f"volume rvllm-{killed}-data" in said, said
        assert f"mount /mnt/rvllm-{killed}/m" in said and f"process {serving.pid}" in said, said
        assert serving.wait(timeout=10) == -9
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(made[killed][1].id)
        with pytest.raises(docker.errors.NotFound):
            client.volumes.get(f"rvllm-{killed}-data")
        assert not _mounted(f"/mnt/rvllm-{killed}/m") and not Path(f"/mnt/rvllm-{killed}").exists()
        assert not entry.exists()
        for name in (running, users):
            assert client.containers.get(made[name][1].id).status == "running"
            assert client.volumes.get(f"rvllm-{name}-data")
            assert _mounted(f"/mnt/rvllm-{name}/m")
        assert (leftovers.LEDGER / running).exists()
        leftovers.forget(running)
        assert not (leftovers.LEDGER / running).exists()
    finally:
        serving.kill()
        for name, (prefix, container, volume) in made.items():
            subprocess.run(["umount", "-l", f"/mnt/{prefix}/m"], capture_output=True, check=False)
            subprocess.run(["rm", "-rf", "--one-file-system", f"/mnt/{prefix}"], check=False)
            subprocess.run(["docker", "rm", "-f", container.name], capture_output=True, check=False)
            subprocess.run(["docker", "volume", "rm", "-f", f"{prefix}-data"], capture_output=True, check=False)
