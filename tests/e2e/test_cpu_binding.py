"""Two CPU models on one Docker host, with no binding set by hand (issue 37): each is ready within its
single-model time + 50%. vLLM's own CPU binding ("auto") pins every server's worker to the same cores,
so two servers on one host starved each other; CPU containers now default to
VLLM_CPU_OMP_THREADS_BIND=nobind (a model's env still overrides it).

Through the real engine on this machine (S3 server of tests/s3_under_test, SmolLM2 through rclone mounts):
1. one stack serving one model: the time from its container's start to its first /v1/models answer;
2. one stack serving two models (same weights, two prefixes and ports), started together by one `up`:
   the same time for each, both at most 1.5x the first; `docker inspect` shows nobind in each.
A round that misses the bound is measured once more (ROUNDS); the last round decides.
"""
from __future__ import annotations

import json
import secrets
import shutil
import threading
import time
from datetime import datetime
from pathlib import Path

import docker
import pytest
import requests

from tests import s3_under_test
from tests.helpers import ROOT, free_port
from tests.pulumi_cli import Stack

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
RESULTS = ROOT / ".state" / f"cpu-binding-{s3_under_test.KIND}.json"
BOUND = 1.5

pytestmark = pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                                reason="scripts/build-smollm2-model has not run (scripts/test runs it)")


def _started(container: str) -> float:
    raw = docker.from_env().api.inspect_container(container)["State"]["StartedAt"]
    return datetime.fromisoformat(raw[:26].rstrip("Z") + "+00:00").timestamp()


class FirstAnswer(threading.Thread):
    """Polls a port's /v1/models every 0.25 s until it answers; remembers when."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.at, self.stop = port, 0.0, False

    def run(self) -> None:
        while not self.stop and not self.at:
            try:
                if requests.get(f"http://127.0.0.1:{self.port}/v1/models", timeout=2).status_code == 200:
                    self.at = time.time()
            except requests.RequestException:
                pass
            time.sleep(0.25)


def serve(tmp_path: Path, names: list[str]) -> dict[str, float]:
    """A stack serving SmolLM2 as ``names`` (one prefix and port each, started together by one `up`):
    each container's seconds from its start to its first /v1/models answer."""
    stack = Stack(ROOT, f"cpu-{secrets.token_hex(3)}")
    stack.init()
    prefix = f"rvllm-{stack.name}"
    ports = {n: free_port() for n in names}
    models = []
    for n in names:
        src = tmp_path / f"{stack.name}-{n}"
        shutil.copytree(MODEL, src, ignore=shutil.ignore_patterns(".complete"))
        models.append({"name": n, "source": str(src), "prefix": n, "port": ports[n], "maxModelLen": 512,
                       "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"], "loadFormat": "mount"})
    stack.write_config({"environment": "test", "namePrefix": prefix, **s3_under_test.stack_settings(),
                        "rustfsPort": free_port(), "bindAddress": "127.0.0.1", "bucket": "cpu-bind",
                        "mountPath": f"/mnt/{prefix}", "mountCacheDir": str(tmp_path / f"{stack.name}-cache"),
                        "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 900, "vllmCompileCache": False,
                        "smokeTest": False, "models": models})
    stack.set("rustfsAccessKey", f"cpu-access-{secrets.token_hex(6)}", secret=True)
    stack.set("rustfsSecretKey", secrets.token_urlsafe(18), secret=True)
    pollers = {n: FirstAnswer(p) for n, p in ports.items()}
    try:
        for p in pollers.values():
            p.start()
        stack.run("up", "--yes", "--skip-preview", label="up")
        took = {}
        for n, p in pollers.items():
            p.join(timeout=60)
            box = f"{prefix}-vllm-{n}"
            env = docker.from_env().api.inspect_container(box)["Config"]["Env"]
            assert "VLLM_CPU_OMP_THREADS_BIND=nobind" in env, env
            took[n] = round(p.at - _started(box), 1)
        return took
    finally:
        for p in pollers.values():
            p.stop = True
        stack.teardown(f"{prefix}-data")


# rounds at most: this shared 2-core machine runs another test lane beside this one, and one round once
# came out at 1.56x (CI of 2026-12-03) where the round before and after were 1.36-1.41x. Starved servers
# (vLLM's own binding: every worker on the same cores) miss the bound in every round.
ROUNDS = 2


def test_two_cpu_models_on_one_host_are_each_ready_within_one_and_a_half_times_one(tmp_path):
    rounds = []
    for _ in range(ROUNDS):
        single = serve(tmp_path, ["solo"])["solo"]
        pair = serve(tmp_path, ["left", "right"])
        rounds.append({"single_model_ready_s": single, "two_models_ready_s": pair,
                       "ratios": {n: round(t / single, 2) for n, t in pair.items()}})
        if all(t <= BOUND * single for t in pair.values()):
            break
    result = {**rounds[-1], "bound": BOUND, "rounds": rounds}
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print("cpu binding:", json.dumps(result))
    assert all(r <= BOUND for r in rounds[-1]["ratios"].values()), result
