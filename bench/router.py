"""make bench BENCH_ARGS=--router: the stack's one endpoint (vllm-router with nginx in front) against a model's
own port, and the router's cache_aware policy against round_robin over two replicas of one model.

1. Through the router or direct: one stack of ours brought up through the real engine (tests/serving/stack.py:
   RustFS in the stack, the mount, our vLLM image, an API key), and vLLM's own client, ``vllm bench serve``
   (in our vLLM image, host network, loopback only), against ``<endpoint>`` and against the model's port, in
   one run, interleaved (router, direct, direct, router, ...), ``--rounds`` rounds each (default 5). Each
   round: ``--prompts`` random prompts (input 64, output 32 tokens, ignore_eos), at most 4 in flight.
   Figures per round: output tokens/s, TTFT p50 and p99; the ratios router/direct are medians over the rounds.
2. cache_aware against round_robin: two vLLM containers of our image serving the same name on this machine
   (a stack cannot put one model twice on one host, so the bench starts them itself, the stack's argv) and
   the router's containers as the stack runs them (components/docker/router.py's argv, our image, the nginx
   conf of components/serving/router_conf.py), one router per policy; a shared-prefix workload
   (``--dataset-name prefix_repetition``: 4 prefixes of 256 tokens, 32-token suffixes, 16 output tokens),
   interleaved, the same rounds. vLLM's prefix cache is on by default: the policy that keeps a prefix on the
   replica that holds it gives the lower TTFT.
The API key reaches the client as OPENAI_API_KEY from the environment (never on a command line).
Writes bench/results-router.json.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import docker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from components.serving import router_conf  # noqa: E402
from components.serving.router_conf import HEALTH_INTERVAL_S  # noqa: E402
from tests.helpers import free_ports, wait_http  # noqa: E402
from tests.serving.stack import MAX_MODEL_LEN, MODEL, SERVED, VLLM_IMAGE, bring_up, tear_down  # noqa: E402

ROUTER_IMAGE = "rustfs-vllm/vllm-router:0.1.17"
RESULTS = ROOT / "bench" / "results-router.json"


def bench_serve(base: str, model: str, out: Path, label: str, workload: list[str], seed: int,
                key: str = "") -> dict:
    """One ``vllm bench serve`` run against ``base`` (no /v1): its saved result."""
    name = f"{label}-{seed}.json"
    env = {"OPENAI_API_KEY": key} if key else {}
    cmd = ["docker", "run", "--rm", "--network", "host", "--entrypoint", "vllm", "-e", "HF_HUB_OFFLINE=1",
           *(["-e", "OPENAI_API_KEY"] if key else []),
           "-v", f"{MODEL}:/tokenizer:ro", "-v", f"{out}:/out", VLLM_IMAGE, "bench", "serve", "--backend", "openai",
           "--base-url", base, "--model", model, "--tokenizer", "/tokenizer",
           "--max-concurrency", "4", "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99",
           "--seed", str(seed), "--save-result", "--result-dir", "/out", "--result-filename", name,
           "--disable-tqdm", "--ready-check-timeout-sec", "0", *workload]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env={**os.environ, **env})
    if run.returncode != 0:
        raise RuntimeError(f"vllm bench serve against {base} failed: {run.stdout[-1500:]}{run.stderr[-1500:]}")
    r = json.loads((out / name).read_text())
    return {"output_tokens_per_s": round(r["output_throughput"], 2), "ttft_p50_ms": round(r["p50_ttft_ms"], 1),
            "ttft_p99_ms": round(r["p99_ttft_ms"], 1), "completed": r["completed"], "failed": r.get("failed", 0)}


def random_workload(prompts: int) -> list[str]:
    return ["--dataset-name", "random", "--random-input-len", "64", "--random-output-len", "32", "--ignore-eos",
            "--num-prompts", str(prompts)]


def interleave(sides: dict[str, Callable[[int], dict]], rounds: int) -> dict[str, list[dict]]:
    """ABBA: each round runs both sides, the first side alternating."""
    names, out = list(sides), {n: [] for n in sides}
    for i in range(rounds):
        for n in (names if i % 2 == 0 else names[::-1]):
            out[n].append(sides[n](i))
    return out


def medians(samples: list[dict]) -> dict:
    return {k: round(statistics.median(s[k] for s in samples), 2)
            for k in ("output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms")}


def through_the_router(rounds: int, prompts: int, work: Path) -> dict:
    served = bring_up(work / "stack", name="bench-router")
    out = work / "out"
    out.mkdir()
    wl = random_workload(prompts)
    try:
        # warm: the sampler's kernels compiled, the endpoint's keepalive open
        for base in (served.base_url, served.endpoint):
            bench_serve(base.removesuffix("/v1"), SERVED, out, "warm", random_workload(8), 0, served.api_key)
        samples = interleave({
            "router": lambda i: bench_serve(served.endpoint.removesuffix("/v1"), SERVED, out, "router", wl, i + 1,
                                            served.api_key),
            "direct": lambda i: bench_serve(served.base_url.removesuffix("/v1"), SERVED, out, "direct", wl, i + 1,
                                            served.api_key)}, rounds)
    finally:
        tear_down(served, work / "stack-results.json")
    ratio = [r["output_tokens_per_s"] / d["output_tokens_per_s"] for r, d in zip(samples["router"], samples["direct"])]
    ttft = [r["ttft_p50_ms"] / d["ttft_p50_ms"] for r, d in zip(samples["router"], samples["direct"])]
    return {"samples": samples, "router": medians(samples["router"]), "direct": medians(samples["direct"]),
            "output_tokens_per_s_ratio_vs_direct": round(statistics.median(ratio), 3),
            "ttft_p50_ratio_vs_direct": round(statistics.median(ttft), 3),
            "ratios_per_round": {"output_tokens_per_s": [round(x, 3) for x in ratio],
                                 "ttft_p50": [round(x, 3) for x in ttft]}}


def replicas(client: docker.DockerClient, ports: list[int]) -> list:
    """Two vLLM containers of our image serving SmolLM2 under one name (the stack's argv, local disk)."""
    out = []
    for port in ports:
        out.append(client.containers.run(
            VLLM_IMAGE, ["--model", "/models/m", "--served-model-name", SERVED, "--dtype", "float32",
                         "--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager"],
            name=f"rvllm-bench-replica-{port}", detach=True, shm_size="2g",
            environment={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"},
            ports={"8000/tcp": ("127.0.0.1", port)}, volumes={str(MODEL): {"bind": "/models/m", "mode": "ro"}}))
    for port in ports:
        if not wait_http(f"http://127.0.0.1:{port}/health", 900, any_status=False):
            raise RuntimeError(f"replica on port {port} did not start")
    return out


def router_for(client: docker.DockerClient, policy: str, routes: dict, work: Path) -> tuple[list, str]:
    """The stack's two router containers (its argv, its nginx conf), the routes written as router-routes does."""
    first = free_ports(3)
    ports = router_conf.Ports("127.0.0.1", first, first + 1, first + 2)
    conf = work / f"nginx-{policy}.conf"
    conf.write_text(router_conf.nginx_conf(routes, ports, created=int(time.time())))
    workers = work / f"workers-{policy}.json"
    workers.write_text(json.dumps(router_conf.workers(routes)))
    made = [client.containers.run(ROUTER_IMAGE, router_conf.router_argv(policy, ports),
                                  name=f"rvllm-bench-router-{policy}", detach=True, network_mode="host",
                                  volumes={str(workers): {"bind": router_conf.WORKERS_PATH, "mode": "ro"}}),
            client.containers.run(ROUTER_IMAGE, ["nginx", "-c", router_conf.CONF_PATH, "-g", "daemon off;"],
                                  name=f"rvllm-bench-endpoint-{policy}", detach=True, network_mode="host",
                                  volumes={str(conf): {"bind": router_conf.CONF_PATH, "mode": "ro"}})]
    base = f"http://127.0.0.1:{first}"
    if not wait_http(f"{base}/v1/models", 60, any_status=False):
        raise RuntimeError(f"the {policy} router did not answer")
    time.sleep(2 * HEALTH_INTERVAL_S)          # both workers checked healthy
    return made, base


def policies(rounds: int, prompts: int, work: Path) -> dict:
    client = docker.from_env()
    ports = [free_ports(1), free_ports(1)]
    made = replicas(client, ports)
    routes = {SERVED: [f"http://127.0.0.1:{p}" for p in ports]}
    out = work / "out-policies"
    out.mkdir()
    wl = ["--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "256",
          "--prefix-repetition-suffix-len", "32", "--prefix-repetition-num-prefixes", "4",
          "--prefix-repetition-output-len", "16", "--num-prompts", str(prompts)]
    bases: dict[str, str] = {}
    try:
        for policy in ("cache_aware", "round_robin"):
            containers, bases[policy] = router_for(client, policy, routes, work)
            made += containers
        # each round a new seed: new prefixes, so no policy starts from the other's cached prefixes
        samples = interleave({p: (lambda i, p=p: bench_serve(bases[p], SERVED, out, p, wl, 100 + i))
                              for p in bases}, rounds)
    finally:
        for c in made:
            c.remove(force=True)
    return {"samples": samples, "cache_aware": medians(samples["cache_aware"]),
            "round_robin": medians(samples["round_robin"]),
            "ttft_p50_ratio_cache_aware_vs_round_robin": round(
                statistics.median(c["ttft_p50_ms"] / r["ttft_p50_ms"]
                                  for c, r in zip(samples["cache_aware"], samples["round_robin"])), 3),
            "note": "two replicas of SmolLM2-135M (CPU) on this machine's 2 cores, our vLLM image from local disk; "
                    "the router's containers as the stack runs them; prefix_repetition: 4 prefixes of 256 tokens"}


def run(rounds: int = 5, prompts: int = 32) -> dict:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-router-") as tmp:
        work = Path(tmp)
        results = {"tool": "vllm bench serve (vLLM 0.30.0, our image)", "rounds": rounds, "prompts": prompts,
                   "through_the_router": through_the_router(rounds, prompts, work),
                   "policies_on_two_replicas": policies(rounds, prompts, work)}
    results["run_seconds"] = round(time.monotonic() - started)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=32)
    a = ap.parse_args()
    print(json.dumps(run(a.rounds, a.prompts), indent=2))
