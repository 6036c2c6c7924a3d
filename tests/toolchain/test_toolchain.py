"""The toolchain: the Pulumi CLI, the upstream Python language host with its shims, the real plugins and
Docker, driven through up / preview / refresh / destroy by the real engine; checks the machine itself.
And bootstrap's refusals: a plugin or a host whose sha256 differs, no real plugin anywhere."""
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
    """docker 5.1.0 and command 1.2.1 are in the project's plugin home, real, and bootstrap says from where."""
    env = pulumi_env()
    out = subprocess.run(["pulumi", "plugin", "ls", "--json"], env=env, capture_output=True, text=True, check=True)
    have = {(p["name"], p["version"]) for p in json.loads(out.stdout) if p["kind"] == "resource"}
    assert {("docker", "5.1.0"), ("command", "1.2.1")} <= have
    said = subprocess.run([str(ROOT / "scripts" / "install-plugins")], env=env, capture_output=True, text=True,
                          check=True).stdout
    for name in ("docker", "command"):
        line = next(line for line in said.splitlines() if line.split()[0] == name)
        assert line.split()[2] == "REAL", line


SHARED_PLUGINS = ROOT.parent / "shared" / "plugins"
needs_shared = pytest.mark.skipif(not (SHARED_PLUGINS / "README.md").is_file(),
                                  reason="no ../shared/plugins beside this checkout (an air-gapped user's machine)")


def _sha256(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@needs_shared
def test_bootstrap_takes_the_real_plugins_from_the_shared_folder(tmp_path):
    """With no user cache and no RUSTFS_VLLM_PLUGIN_DIR, install-plugins takes ../shared/plugins/ into an
    empty plugin home, says so, and the installed binaries are the ones the README names by sha256."""
    home = tmp_path / "home"
    env = {**pulumi_env(), "PULUMI_HOME": str(home), "RUSTFS_VLLM_USER_PLUGINS": str(tmp_path / "none")}
    env.pop("RUSTFS_VLLM_PLUGIN_DIR", None)
    said = subprocess.run([str(ROOT / "scripts" / "install-plugins")], env=env, capture_output=True, text=True,
                          check=True).stdout
    readme = (SHARED_PLUGINS / "README.md").read_text()
    for name, version in (("docker", "5.1.0"), ("command", "1.2.1")):
        line = next(line for line in said.splitlines() if line.split()[0] == name)
        assert "REAL plugin from the project's shared folder" in line, line
        binary = home / "plugins" / f"resource-{name}-v{version}" / f"pulumi-resource-{name}"
        row = next(r for r in readme.splitlines() if f"| {name} | {version} |" in r)
        assert _sha256(binary) in row, (name, row)
    out = subprocess.run(["pulumi", "plugin", "ls", "--json"], env=env, capture_output=True, text=True, check=True)
    have = {(p["name"], p["version"]) for p in json.loads(out.stdout) if p["kind"] == "resource"}
    assert {("docker", "5.1.0"), ("command", "1.2.1")} <= have


@needs_shared
def test_bootstrap_refuses_a_shared_plugin_whose_sha256_differs(tmp_path):
    """A shared folder whose tarball holds another binary than its README names: install-plugins stops
    in one line naming both sums, and installs nothing."""
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


def test_bootstrap_stops_in_one_line_when_no_real_plugin_is_anywhere(tmp_path):
    """No plugin in the plugin home, the user's cache, RUSTFS_VLLM_PLUGIN_DIR or the shared folder, and the
    engine's download fails (a proxy that refuses, as a machine without internet): bootstrap stops, and
    what it says on stderr is one line naming the plugin and the ways to give it one. Nothing is made up."""
    home = tmp_path / "home"
    env = {**pulumi_env(), "PULUMI_HOME": str(home), "RUSTFS_VLLM_USER_PLUGINS": str(tmp_path / "none"),
           "RUSTFS_VLLM_SHARED_PLUGINS": str(tmp_path / "nothing"),
           "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    env.pop("RUSTFS_VLLM_PLUGIN_DIR", None)
    run = subprocess.run([str(ROOT / "scripts" / "bootstrap")], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0, run.stdout[-2000:]
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("install-plugins: no real pulumi-docker 5.1.0 plugin found: "), lines
    for way in ("~/.pulumi/plugins", "RUSTFS_VLLM_PLUGIN_DIR", "../shared/plugins",
                "pulumi plugin install resource docker 5.1.0"):
        assert way in lines[0], (way, lines[0])
    assert not list(home.glob("plugins/resource-docker-*/pulumi-resource-docker"))


SHARED_TOOLCHAIN = ROOT.parent / "shared" / "toolchain"


def _toolchain_shas() -> dict[str, str]:
    import re

    rows = (SHARED_TOOLCHAIN / "README.md").read_text().splitlines()
    return {m.group(1): m.group(2) for m in (re.match(r"\| `([\w-]+)` .*\b([0-9a-f]{64})\b", r) for r in rows) if m}


@pytest.mark.skipif(not (SHARED_TOOLCHAIN / "README.md").is_file(), reason="no ../shared/toolchain beside this checkout")
def test_the_language_host_beside_the_cli_is_the_upstream_one():
    """The CLI bootstrap built runs with the upstream host and shims, byte for byte the files the toolchain's
    README names; none of the three is a script of ours. `pulumi about` names the host's version."""
    env = pulumi_env()
    cli = subprocess.run(["bash", "-c", "command -v pulumi"], env=env, capture_output=True, text=True).stdout.strip()
    folder = ROOT / ".tools" / "bin"
    if cli != str(folder / "pulumi"):
        pytest.skip(f"a Pulumi installation of the user's own is in use ({cli}), with its own host")
    shas = _toolchain_shas()
    for name in ("pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-pulumi-python"):
        assert _sha256(folder / name) == shas[name], name
    assert (folder / "pulumi-language-python").read_bytes()[:4] == b"\x7fELF"
    version = subprocess.run([str(folder / "pulumi-language-python"), "-version"], capture_output=True,
                             text=True).stdout.strip()
    tarball = next(SHARED_TOOLCHAIN.glob("pulumi-language-python-v*-linux-amd64.tar.gz")).name
    assert tarball == f"pulumi-language-python-{version}-linux-amd64.tar.gz"
    said = (ROOT / ".state" / "language-host.txt").read_text()
    assert said.startswith(f"upstream pulumi-language-python {version} from ") and "sha256 checked" in said


@pytest.mark.skipif(not (SHARED_TOOLCHAIN / "README.md").is_file(), reason="no ../shared/toolchain beside this checkout")
def test_install_language_host_refuses_a_host_whose_sha256_differs(tmp_path):
    """A toolchain folder whose tarball holds another host than its README names: one line naming both sums;
    nothing installed beside the CLI."""
    import shutil

    folder = tmp_path / "toolchain"
    folder.mkdir()
    shutil.copy(SHARED_TOOLCHAIN / "README.md", folder / "README.md")
    tarball = next(SHARED_TOOLCHAIN.glob("pulumi-language-python-v*-linux-amd64.tar.gz"))
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    with tarfile.open(tarball) as tar:
        tar.extractall(unpacked)
    (unpacked / "pulumi-language-python").write_text("#!/bin/sh\necho not the host\n")
    with tarfile.open(folder / tarball.name, "w:gz") as tar:
        for f in unpacked.iterdir():
            tar.add(f, arcname=f.name)
    cache = tmp_path / "cache"
    cli = cache / "toolchain" / "pulumi-v0" / "bin" / "pulumi"
    cli.parent.mkdir(parents=True)
    cli.write_text("#!/bin/sh\n")
    run = subprocess.run([str(ROOT / "scripts" / "install-language-host"), str(cli)], capture_output=True, text=True,
                         env={**pulumi_env(), "RUSTFS_VLLM_CACHE": str(cache), "RUSTFS_VLLM_TOOLCHAIN_DIR": str(folder)})
    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and _sha256(unpacked / "pulumi-language-python") in lines[0], run.stderr
    assert not (cli.parent / "pulumi-language-python").exists()


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
