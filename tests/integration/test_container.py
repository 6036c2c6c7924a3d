"""Container provider against the real Docker engine, with the locally built S3 stand-in image."""
from __future__ import annotations

import subprocess

import docker
import pytest

from components.providers.container import ContainerProvider
from tests.helpers import ROOT, free_port

@pytest.fixture(scope="module")
def image():
    out = subprocess.run([str(ROOT / "scripts" / "build-s3-standin-image")], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture
def client():
    return docker.from_env()


def props(image, name, port, **extra):
    return {"name": name, "image": image, "command": ["serve", "s3", "/data", "--addr", ":9000", "--config", "/dev/null"],
            "env": {}, "secret_env": {"RCLONE_AUTH_KEY": '"container-access-01,container-secret-01"'},
            "secrets": ["container-access-01", "container-secret-01"],
            "labels": {"rustfs-vllm.stack": "itest"}, "ports": [{"internal": 9000, "external": port, "ip": "127.0.0.1"}],
            "mounts": [], "restart": "no", "ready_url": f"http://127.0.0.1:{port}/", "ready_any_status": True,
            "ready_timeout": 30, **extra}


def test_create_waits_for_ready_then_delete_is_idempotent(image, client):
    port = free_port()
    p = ContainerProvider()
    res = p.create(props(image, "rvllm-itest-c1", port))
    try:
        c = client.containers.get(res.id)
        assert c.status == "running" and c.name == "rvllm-itest-c1"
        assert c.attrs["HostConfig"]["PortBindings"]["9000/tcp"][0]["HostPort"] == str(port)
        assert p.read(res.id, res.outs).id == res.id
    finally:
        p.delete(res.id, res.outs)
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(res.id)
    p.delete(res.id, res.outs)                      # already gone
    assert p.read(res.id, res.outs).id is None      # refresh sees it gone


def test_secrets_reach_the_server_but_not_docker_inspect(image, client):
    import json
    import os

    from components.providers import s3

    port = free_port()
    p = ContainerProvider()
    res = p.create(props(image, "rvllm-itest-c7", port))
    try:
        inspect = json.dumps(client.api.inspect_container(res.id))
        assert "container-secret-01" not in inspect and "container-access-01" not in inspect
        c = s3.client(f"http://127.0.0.1:{port}", "container-access-01", "container-secret-01")
        c.create_bucket(Bucket="works")                      # the server got the credentials
        folder = "/run/rustfs-vllm/secrets/rvllm-itest-c7"
        st = os.stat(f"{folder}/RCLONE_AUTH_KEY")
        assert oct(st.st_mode & 0o777) == "0o400" and st.st_uid == 10001
    finally:
        p.delete(res.id, res.outs)
    assert not os.path.exists("/run/rustfs-vllm/secrets/rvllm-itest-c7")


def test_exiting_container_fails_with_its_logs_and_is_removed(image, client):
    p = ContainerProvider()
    bad = props(image, "rvllm-itest-c2", free_port(), command=["serve", "s3", "/data", "--no-such-flag"])
    with pytest.raises(RuntimeError) as info:
        p.create(bad)
    assert "exited" in str(info.value) and "no-such-flag" in str(info.value)
    with pytest.raises(docker.errors.NotFound):
        client.containers.get("rvllm-itest-c2")


def test_missing_image_is_explained():
    with pytest.raises(RuntimeError) as info:
        ContainerProvider().create(props("rustfs-vllm/does-not-exist:1", "rvllm-itest-c3", free_port()))
    assert "is not on this Docker host" in str(info.value)


def test_port_in_use_is_explained(image):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(RuntimeError) as info:
            ContainerProvider().create(props(image, "rvllm-itest-c4", port))
    assert "Docker refused to start it" in str(info.value) and "address already in use" in str(info.value)
    with pytest.raises(docker.errors.NotFound):
        docker.from_env().containers.get("rvllm-itest-c4")


def test_foreign_container_with_same_name_is_not_touched(image, client):
    foreign = client.containers.create(image, ["version"], name="rvllm-itest-c5")
    try:
        with pytest.raises(RuntimeError) as info:
            ContainerProvider().create(props(image, "rvllm-itest-c5", free_port()))
        assert "not managed by this stack" in str(info.value)
        assert client.containers.get("rvllm-itest-c5").id == foreign.id
    finally:
        foreign.remove(force=True)


def test_leftover_of_our_stack_is_replaced(image, client):
    port = free_port()
    leftover = client.containers.create(image, ["version"], name="rvllm-itest-c6", labels={"rustfs-vllm.stack": "itest"})
    p = ContainerProvider()
    res = p.create(props(image, "rvllm-itest-c6", port))
    try:
        assert res.id != leftover.id
    finally:
        p.delete(res.id, res.outs)


def test_any_input_change_replaces_deleting_first():
    p = ContainerProvider()
    olds = {"name": "n", "image": "i", "command": ["a"], "container_id": "x"}
    assert p.diff("x", olds, {"name": "n", "image": "i", "command": ["a"]}).changes is False
    d = p.diff("x", olds, {"name": "n", "image": "i", "command": ["b"]})
    assert d.changes and d.replaces == ["command"] and d.delete_before_replace
