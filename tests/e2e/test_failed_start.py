"""A vLLM container that cannot start, under the real docker provider (issue 43): what the user reads, and
that the next `up` converges once the cause is gone. Real engine, upstream language host, real plugins,
the S3 server of tests/s3_under_test.py, our vLLM image serving SmolLM2.

1. The model's port is taken after preview, while `up` runs (between the program's port check and the
   container's start): `up` fails, naming the container and the port's cause in its one error line. The
   real docker provider keeps the container it made and could not start, and a plain `up` does not start
   it (its update changes nothing): the next preview and `up` say so in one line, naming `pulumi up
   --refresh`; that converges (the refresh finds the container stopped and it is made again) to a served
   completion and a preview with no changes.
2. An image whose server exits at once: `up` fails well before vllmReadyTimeout, in one line naming the
   container, its exit code and the cause from its log; the image set back, the next `up` converges.
"""
from __future__ import annotations

import re
import socket
import subprocess
import time

import docker
import pytest

from tests.helpers import ROOT
from tests.e2e.one_model import MODEL, one_model_stack
from tests.pulumi_cli import TRANSCRIPT, Stack

BASE_IMAGE = "rustfs-vllm/debian-bookworm:minbase"

pytestmark = pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                                reason="scripts/build-smollm2-model makes the model")


def errors(text: str) -> list[str]:
    """The lines the engine printed as errors."""
    return [line.strip() for line in text.splitlines() if line.strip().startswith("error:")]


@pytest.fixture
def stack(tmp_path):
    s = one_model_stack(tmp_path, "fst")
    yield s
    s.teardown(s.volume)


def served(stack: Stack) -> str:
    from openai import OpenAI

    client = OpenAI(base_url=f"http://127.0.0.1:{stack.port}/v1", api_key="EMPTY", timeout=120)
    return client.completions.create(model="smollm2", prompt="RustFS is", max_tokens=8).choices[0].text


def test_a_port_taken_after_preview_fails_in_one_line_and_the_next_up_converges(stack):
    stack.run("preview")
    up = subprocess.Popen(["pulumi", "up", "--yes", "--skip-preview", "--non-interactive", "--stack", stack.name],
                          cwd=ROOT, env=stack.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    client = docker.from_env()
    holder = None
    deadline = time.monotonic() + 300
    try:
        # the program has checked the port once the S3 server's container exists: take it then
        while time.monotonic() < deadline:
            if client.containers.list(filters={"name": f"{stack.config['namePrefix']}-s3"}):
                break
            time.sleep(0.2)
        holder = socket.socket()
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", stack.port))
        holder.listen(1)
        out, _ = up.communicate(timeout=1500)
    finally:
        if up.poll() is None:
            up.kill()
        if holder:
            holder.close()
    TRANSCRIPT.append(("pulumi up (port taken)", out))
    assert up.returncode != 0, out[-3000:]
    assert "Traceback" not in out
    said = [line for line in errors(out) if stack.container in line]
    assert said, out[-4000:]
    assert re.search(r"address already in use|port is already allocated", said[0]), said
    assert str(stack.port) in said[0], said
    print(f"the failed up said: {said[0]}")
    assert client.containers.get(stack.container).status == "created"        # kept by the provider, never started
    preview = stack.run("preview").stdout
    hint = f"container {stack.container} was made but never started"
    assert hint in preview and "pulumi up --refresh" in preview, preview[-3000:]
    plain = stack.run("up", "--yes", "--skip-preview", check=False, label="up_plain_after_port_freed")
    said = plain.stdout + plain.stderr
    assert plain.returncode != 0 and "Traceback" not in said
    assert f"wait-ready: {hint}" in said and "pulumi up --refresh" in said, said[-3000:]
    started = time.monotonic()
    stack.run("up", "--refresh", "--yes", "--skip-preview", label="up_refresh_after_port_freed")
    took = time.monotonic() - started
    assert served(stack).strip()
    stack.run("preview", "--expect-no-changes")
    c = client.containers.get(stack.container)
    assert c.status == "running" and c.attrs["RestartCount"] == 0
    print(f"`pulumi up --refresh` converged in {took:.0f} s after the port was freed")


def test_an_image_that_exits_at_once_fails_in_one_line_and_the_next_up_converges(stack, tmp_path):
    client = docker.from_env()
    broken = f"rustfs-vllm/broken-vllm:{stack.name}"
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    # the entrypoint the program gives a mounted model runs `vllm serve`: this image has no vllm
    (ctx / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\n")
    client.images.build(path=str(ctx), tag=broken)
    try:
        stack.run("up", "--yes", "--skip-preview", label="up_good")
        stack.write_config({**stack.config, "vllmImage": broken}, keep_secrets=True)
        started = time.monotonic()
        proc = stack.run("up", "--yes", "--skip-preview", check=False, label="up_broken")
        took = time.monotonic() - started
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-3000:]
        assert "Traceback" not in out
        assert took < 300, f"a server that exits at once took {took:.0f} s to fail"
        [line] = [line for line in out.splitlines() if line.strip().startswith(f"wait-ready: container {stack.container}")]
        assert re.search(r"(restarting|exited) \(exit code \d+, restarted \d+ times\)|exited and was restarted \d+ times",
                         line), line
        assert "vllm" in line and "not found" in line and f"docker logs {stack.container}" in line, line
        stack.write_config(stack.config, keep_secrets=True)
        stack.run("up", "--yes", "--skip-preview", label="up_fixed")
        assert served(stack).strip()
        stack.run("preview", "--expect-no-changes")
    finally:
        try:
            client.images.remove(broken, force=True)
        except docker.errors.ImageNotFound:
            pass
