"""The offline toolchain: the built CLI, our language host, the dynamic-provider shim and Docker,
driven through up / preview / refresh / destroy by the real engine; checks the machine itself."""
from __future__ import annotations

import io
import json
import secrets
import subprocess
import tarfile
import time

import docker
import pytest

from tests.helpers import ROOT, free_port, pulumi_env
from tests.pulumi_cli import Stack

STACK_DIR = ROOT / "tests" / "toolchain" / "stack"


def test_cli_reports_the_built_version():
    out = subprocess.run(["pulumi", "version"], env=pulumi_env(), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "v3.274.1"


def test_plugin_ls_lists_the_providers_the_sdks_ask_for():
    """docker 5.1.0 and command 1.2.1 are in the project's plugin home (real or stand-in), and
    bootstrap says which."""
    env = pulumi_env()
    out = subprocess.run(["pulumi", "plugin", "ls", "--json"], env=env, capture_output=True, text=True, check=True)
    have = {(p["name"], p["version"]) for p in json.loads(out.stdout) if p["kind"] == "resource"}
    assert {("docker", "5.1.0"), ("command", "1.2.1")} <= have
    said = subprocess.run([str(ROOT / "scripts" / "install-plugins")], env=env, capture_output=True, text=True,
                          check=True).stdout
    for name in ("docker", "command"):
        line = next(line for line in said.splitlines() if line.split()[0] == name)
        assert "OFFLINE STAND-IN" in line or "real plugin" in line.lower(), line


SHARED_PLUGINS = ROOT.parent / "shared" / "plugins"
needs_shared = pytest.mark.skipif(not (SHARED_PLUGINS / "README.md").is_file(),
                                  reason="no ../shared/plugins beside this checkout (an air-gapped user's machine)")


def _sha256(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@needs_shared
def test_bootstrap_takes_the_real_plugins_from_the_shared_folder(tmp_path):
    """With no user cache and no RUSTFS_VLLM_PLUGIN_DIR, install-plugins takes ../shared/plugins/ into an
    empty plugin home, says REAL, and the installed binaries are the ones the README names by sha256."""
    home = tmp_path / "home"
    env = {**pulumi_env(), "PULUMI_HOME": str(home), "RUSTFS_VLLM_USER_PLUGINS": str(tmp_path / "none")}
    env.pop("RUSTFS_VLLM_PLUGIN_DIR", None)
    said = subprocess.run([str(ROOT / "scripts" / "install-plugins")], env=env, capture_output=True, text=True,
                          check=True).stdout
    readme = (SHARED_PLUGINS / "README.md").read_text()
    for name, version in (("docker", "5.1.0"), ("command", "1.2.1")):
        line = next(line for line in said.splitlines() if line.split()[0] == name)
        assert "REAL plugin from the project's shared folder" in line and "STAND-IN" not in line, line
        binary = home / "plugins" / f"resource-{name}-v{version}" / f"pulumi-resource-{name}"
        row = next(r for r in readme.splitlines() if f"| {name} | {version} |" in r)
        assert _sha256(binary) in row, (name, row)
    out = subprocess.run(["pulumi", "plugin", "ls", "--json"], env=env, capture_output=True, text=True, check=True)
    have = {(p["name"], p["version"]) for p in json.loads(out.stdout) if p["kind"] == "resource"}
    assert {("docker", "5.1.0"), ("command", "1.2.1")} <= have


@needs_shared
def test_bootstrap_refuses_a_shared_plugin_whose_sha256_differs(tmp_path):
    """A shared folder whose tarball holds another binary than its README names: install-plugins stops
    in one line naming both sums, and installs nothing (no stand-in either)."""
    import shutil
    import tarfile

    shared = tmp_path / "plugins"
    shared.mkdir()
    shutil.copy(SHARED_PLUGINS / "README.md", shared / "README.md")
    shutil.copy(SHARED_PLUGINS / "pulumi-resource-command-v1.2.1-linux-amd64.tar.gz", shared)
    fake = tmp_path / "pulumi-resource-docker"
    fake.write_text("#!/bin/sh\necho not the docker plugin\n")
    fake.chmod(0o755)
    with tarfile.open(shared / "pulumi-resource-docker-v5.1.0-linux-amd64.tar.gz", "w:gz") as tar:
        tar.add(fake, arcname="pulumi-resource-docker")
    home = tmp_path / "home"
    env = {**pulumi_env(), "PULUMI_HOME": str(home), "RUSTFS_VLLM_USER_PLUGINS": str(tmp_path / "none"),
           "RUSTFS_VLLM_SHARED_PLUGINS": str(shared)}
    env.pop("RUSTFS_VLLM_PLUGIN_DIR", None)
    run = subprocess.run([str(ROOT / "scripts" / "install-plugins")], env=env, capture_output=True, text=True)
    assert run.returncode != 0
    assert _sha256(fake) in run.stderr and "names" in run.stderr, run.stderr
    assert not (home / "plugins" / "resource-docker-v5.1.0").exists()


def test_warm_bootstrap_takes_seconds():
    started = time.monotonic()
    subprocess.run([str(ROOT / "scripts" / "bootstrap")], capture_output=True, check=True)
    assert time.monotonic() - started < 30


@pytest.fixture
def stack(tmp_path):
    s = Stack(STACK_DIR, f"tc-{secrets.token_hex(4)}")
    s.init()
    yield s
    s.run("destroy", "--yes", check=False)
    s.remove()


def test_up_preview_refresh_destroy_against_the_machine(stack, tmp_path):
    image = subprocess.run([str(ROOT / "scripts" / "build-s3-standin-image")], capture_output=True, text=True,
                           check=True).stdout.split()[-1]
    port = free_port()
    stack.set("workdir", str(tmp_path))
    stack.set("port", str(port))
    stack.set("image", image)
    client = docker.from_env()
    name = f"rvllm-toolchain-{stack.name}"

    stack.run("up", "--yes", "--skip-preview")
    assert client.containers.get(name).status == "running"
    assert (tmp_path / "command-made-this").read_text() == f"made by {stack.name}\n"
    assert stack.outputs()["stdout"] == f"made by {stack.name}"
    assert (tmp_path / "dynamic-made-this").read_text() == "hello"

    stack.run("preview", "--expect-no-changes")
    stack.run("refresh", "--yes", "--expect-no-changes")

    # drift: the container disappears behind Pulumi's back; refresh notices, up brings it back
    client.containers.get(name).remove(force=True)
    stack.run("refresh", "--yes", "--skip-preview")
    stack.run("up", "--yes", "--skip-preview")
    assert client.containers.get(name).status == "running"

    stack.run("destroy", "--yes", "--skip-preview")
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(name)
    assert not (tmp_path / "command-made-this").exists()
    assert not (tmp_path / "dynamic-made-this").exists()


def test_remote_image_is_pulled_by_up_from_a_registry(stack, tmp_path):
    """An image that is not on the Docker host: `up` pulls it (docker.RemoteImage) from a real
    registry on loopback, runs the container from it, and destroy keeps it (keep_locally)."""
    from tests.registry import Registry

    base = subprocess.run([str(ROOT / "scripts" / "build-s3-standin-image")], capture_output=True, text=True,
                          check=True).stdout.split()[-1]
    registry = Registry(tmp_path / "registry")
    client = docker.from_env()
    ref = f"{registry.host}/rustfs-vllm-test/pull-me:{stack.name}"
    try:
        ctx = tmp_path / "ctx"
        ctx.mkdir()
        (ctx / "marker").write_text(stack.name)         # a layer of its own: removing the image removes it
        (ctx / "Dockerfile").write_text(f"FROM {base}\nCOPY marker /marker\n")
        client.images.build(path=str(ctx), tag=ref)
        for line in client.images.push(ref, stream=True, decode=True):
            assert "error" not in line, line
        client.images.remove(ref, force=True)
        with pytest.raises(docker.errors.ImageNotFound):
            client.images.get(ref)

        port = free_port()
        stack.set("workdir", str(tmp_path))
        stack.set("port", str(port))
        stack.set("image", ref)
        stack.run("up", "--yes", "--skip-preview")
        pulled = client.images.get(ref)                  # pulled by up
        c = client.containers.get(f"rvllm-toolchain-{stack.name}")
        assert c.status == "running" and c.image.id == pulled.id
        bits, _ = c.get_archive("/marker")               # the file from the container's own layers (an exec's
        with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tar:   # output came back empty once in CI)
            assert tar.extractfile("marker").read().decode() == stack.name
        stack.run("preview", "--expect-no-changes")
        stack.run("destroy", "--yes", "--skip-preview")
        assert client.images.get(ref).id == pulled.id    # keep_locally: destroy leaves the image
    finally:
        try:
            client.images.remove(ref, force=True)
        except docker.errors.ImageNotFound:
            pass
        registry.stop()
