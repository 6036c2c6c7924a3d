"""The OFFLINE STAND-IN for pulumi-docker 5.1.0 (standins/docker_provider.py), over its gRPC
service and against the real Docker engine: the real provider's replace/update split, delete-first
replacement, uploads, refresh of what is gone or stopped, delete of what is already gone."""
from __future__ import annotations

import io
import json
import secrets
import subprocess
import tarfile
import time
import urllib.request

import docker
import grpc
import pytest
from pulumi.runtime.proto import provider_pb2

from standins.plugin import decode
from tests.helpers import free_port
from tests.registry import Registry

CONTAINER = "docker:index/container:Container"
IMAGE = "docker:index/remoteImage:RemoteImage"
VOLUME = "docker:index/volume:Volume"


def serve_http(image: str, name: str, port: int, **extra) -> dict:
    return {"name": name, "image": image, "entrypoints": ["/usr/local/bin/rclone"],
            "command": ["serve", "http", "/tmp", "--addr", ":8080", "--config", "/dev/null"],
            "labels": [{"label": "rustfs-vllm.stack", "value": "standin-test"}],
            "ports": [{"internal": 8080, "external": port, "ip": "127.0.0.1"}], **extra}


def answers(port: int, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
            return True
        except OSError:
            time.sleep(0.2)
    return False


def test_diff_matches_the_real_providers_force_new_split(docker_plugin):
    old = {"name": "c", "image": "i", "restart": "no", "envs": ["A=1", "B=2"], "mustRun": True}
    assert docker_plugin.diff(CONTAINER, old, dict(old)).changes == provider_pb2.DiffResponse.DIFF_NONE
    # a set: order does not matter
    assert docker_plugin.diff(CONTAINER, old, {**old, "envs": ["B=2", "A=1"]}).changes == \
        provider_pb2.DiffResponse.DIFF_NONE
    upd = docker_plugin.diff(CONTAINER, old, {**old, "restart": "always"})
    assert list(upd.diffs) == ["restart"] and not upd.replaces
    rep = docker_plugin.diff(CONTAINER, old, {**old, "envs": ["A=1"], "image": "j"})
    assert sorted(rep.replaces) == ["envs", "image"] and rep.deleteBeforeReplace
    assert docker_plugin.diff(IMAGE, {"name": "a:1", "keepLocally": True}, {"name": "a:2", "keepLocally": True}).replaces
    assert not docker_plugin.diff(IMAGE, {"name": "a:1"}, {"name": "a:1", "keepLocally": True}).replaces
    assert list(docker_plugin.diff(VOLUME, {"name": "v"}, {"name": "w"}).replaces) == ["name"]


def test_check_fills_defaults_and_rejects_what_it_does_not_implement(docker_plugin):
    inputs, failures = docker_plugin.check(CONTAINER, {"name": "c", "image": "i", "ports": [{"internal": 80}]})
    assert not failures
    assert inputs["restart"] == "no" and inputs["mustRun"] is True and inputs["waitTimeout"] == 60
    assert inputs["ports"] == [{"internal": 80, "ip": "0.0.0.0", "protocol": "tcp"}]
    _, failures = docker_plugin.check(CONTAINER, {"name": "c", "image": "i", "networksAdvanced": [],
                                                  "restart": "sometimes"})
    assert {p for p, _ in failures} == {"networksAdvanced", "restart"}
    assert any("stand-in" in r for _, r in failures)
    _, failures = docker_plugin.check(CONTAINER, {"image": "i", "uploads": [{"file": "/x"}]})
    assert {p for p, _ in failures} == {"name", "uploads[0]"}


def test_container_lifecycle_on_the_real_engine(docker_plugin, client, image):
    name, port = f"rvllm-standin-{secrets.token_hex(3)}", free_port()
    inputs, _ = docker_plugin.check(CONTAINER, serve_http(image, name, port, restart="unless-stopped"))
    id_, props = docker_plugin.create(CONTAINER, inputs)
    state = decode(props)[0]
    try:
        c = client.containers.get(id_)
        assert c.name == name and c.status == "running" and answers(port)
        assert c.attrs["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
        assert c.labels["rustfs-vllm.stack"] == "standin-test"
        assert docker_plugin.read(CONTAINER, id_, state)[0] == id_
        # restart updates in place (same container)
        state = decode(docker_plugin.update(CONTAINER, id_, state, {**inputs, "restart": "always"}))[0]
        assert client.containers.get(id_).attrs["HostConfig"]["RestartPolicy"]["Name"] == "always"
        # a stopped container reads as mustRun=false; the update that follows starts it again
        client.containers.get(id_).stop(timeout=0)
        _, read_state, read_inputs = docker_plugin.read(CONTAINER, id_, state)
        assert read_state["mustRun"] is False and read_inputs["mustRun"] is False
        assert list(docker_plugin.diff(CONTAINER, read_inputs, {**inputs, "restart": "always"}).diffs) == ["mustRun"]
        docker_plugin.update(CONTAINER, id_, read_state, {**inputs, "restart": "always"})
        assert client.containers.get(id_).status == "running"
    finally:
        docker_plugin.delete(CONTAINER, id_, state)
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(id_)
    docker_plugin.delete(CONTAINER, id_, state)                 # already gone: success
    assert docker_plugin.read(CONTAINER, id_, state)[0] == ""   # refresh: gone


def test_uploads_reach_the_container_but_not_docker_inspect(docker_plugin, client, image):
    name, port = f"rvllm-standin-{secrets.token_hex(3)}", free_port()
    secret = "upload-secret-value-0001"
    inputs, _ = docker_plugin.check(CONTAINER, serve_http(image, name, port, uploads=[
        {"file": "/run/rustfs-vllm/secrets/TOKEN", "content": secret, "permissions": "0444"}],
        user="10001:10001"))
    id_, props = docker_plugin.create(CONTAINER, inputs, secrets={"uploads"})
    try:
        assert props.fields["uploads"].struct_value.fields["4dabf18193072939515e22adb298388d"].string_value
        c = client.containers.get(id_)
        assert secret not in json.dumps(client.api.inspect_container(id_))
        # the image's user (not root) can read it
        assert c.exec_run(["cat", "/run/rustfs-vllm/secrets/TOKEN"], user="10001").output.decode() == secret
    finally:
        docker_plugin.delete(CONTAINER, id_, decode(props)[0])


def test_create_failure_leaves_no_container(docker_plugin, client, image):
    port = free_port()
    holder = subprocess.Popen(["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    name = f"rvllm-standin-{secrets.token_hex(3)}"
    try:
        inputs, _ = docker_plugin.check(CONTAINER, serve_http(image, name, port))
        with pytest.raises(grpc.RpcError) as err:
            docker_plugin.create(CONTAINER, inputs)
        assert "Unable to start container" in err.value.details()
        assert not client.containers.list(all=True, filters={"name": f"^{name}$"})
    finally:
        holder.kill()


def test_remote_image_uses_a_local_image_and_keeps_it(docker_plugin, client, image):
    id_, props = docker_plugin.create(IMAGE, {"name": image, "keepLocally": True})
    state = decode(props)[0]
    assert state["imageId"] == client.images.get(image).id and id_ == state["imageId"] + image
    docker_plugin.delete(IMAGE, id_, state)
    client.images.get(image)                                     # keepLocally: still there
    with pytest.raises(grpc.RpcError) as err:
        docker_plugin.create(IMAGE, {"name": "127.0.0.1:1/nothing/here:1"})
    assert "unable to pull image 127.0.0.1:1/nothing/here:1" in err.value.details()


def test_a_pull_that_fails_midway_names_the_daemons_error(docker_plugin, client, tmp_path):
    """A pull whose layer the registry has lost (as with a full disk on the host, the daemon only
    says so inside its progress stream): the error names the daemon's own words, not just "no such
    image" (the CI run that filled its disk said only that)."""
    registry = Registry(tmp_path / "registry")
    name = f"{registry.host}/rvllm-standin/lost-layer:{secrets.token_hex(3)}"
    try:
        layer = io.BytesIO()
        with tarfile.open(fileobj=layer, mode="w") as tar:      # a layer of its own: not shared locally
            data = secrets.token_bytes(1 << 20)
            info = tarfile.TarInfo("payload")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        repo, tag = name.rsplit(":", 1)
        client.api.import_image_from_data(layer.getvalue(), repository=repo, tag=tag)
        client.images.push(repo, tag=tag)
        client.images.remove(name)
        blobs = [p for p in (tmp_path / "registry" / "blobs").rglob("data") if p.stat().st_size >= 1 << 20]
        assert len(blobs) == 1, blobs
        blobs[0].unlink()
        with pytest.raises(grpc.RpcError) as err:
            docker_plugin.create(IMAGE, {"name": name})
        assert f"unable to pull image {name}: unknown blob" in err.value.details()
    finally:
        registry.stop()


def test_volume_adopts_an_existing_one_and_delete_of_gone_succeeds(docker_plugin, client):
    name = f"rvllm-standin-{secrets.token_hex(3)}"
    client.volumes.create(name)
    id_, props = docker_plugin.create(VOLUME, {"name": name})
    assert id_ == name and decode(props)[0]["mountpoint"]
    docker_plugin.delete(VOLUME, id_, decode(props)[0])
    with pytest.raises(docker.errors.NotFound):
        client.volumes.get(name)
    docker_plugin.delete(VOLUME, id_, decode(props)[0])
    assert docker_plugin.read(VOLUME, id_, {"name": name})[0] == ""


def test_an_ssh_host_that_is_down_fails_at_once_with_ssh_s_words():
    """An ssh:// provider whose host refuses connections: every call fails within seconds, naming
    the host and ssh's own error (the real hosts are exercised by tests/hosts); it once hung."""
    import json
    import time

    from pulumi.runtime.proto import provider_pb2

    from standins.plugin import encode
    from tests.plugin_client import PluginClient

    c = PluginClient("standins.docker_provider")
    try:
        c.stub.Configure(provider_pb2.ConfigureRequest(args=encode({
            "host": "ssh://root@127.0.0.9:1", "sshOpts": json.dumps(["-o", "BatchMode=yes", "-o", "ConnectTimeout=5"])}),
            acceptSecrets=True))
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            c.delete("docker:index/container:Container", "gone", {"name": "gone"})
        assert time.monotonic() - started < 20
        assert "cannot reach the Docker daemon at ssh://root@127.0.0.9:1" in err.value.details()
        assert "Connection refused" in err.value.details()
    finally:
        c.close()
