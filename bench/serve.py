"""make bench-serve: the served endpoint under load, through our mount against local disk.

Ours: a stack brought up through the real engine (tests/serving/stack.py: the S3 server in the
stack, the rclone mount, our vLLM image reading the weights through the mount). Baseline, in the
same run: the same image with the same arguments and environment serving the same weights from
this machine's disk (a bind of the folder). Both stay up; the runs alternate in ABBA order (ours,
local, local, ours, ...) so both see the same machine and neither always goes first. Every run is bounded (a request count and a time limit)
and sends only to loopback.

For each concurrency (1, 4, 16, 64) and mode (plain, streaming): requests with the OpenAI client's
default sampling and mixed prompt lengths (tests/serving/load.py), ``--runs`` runs (default 3)
each side; the figures are medians over the runs, min and max kept. Ratios: ours/local for
requests/s and output tokens/s (higher is better) and local/ours for p95 latency and TTFT (so 1.0
is parity and above 0.95 meets the target either way).

usage: python -m bench.serve [--server standin|rustfs] [--runs 3] [--levels 1,4,16,64] [--max-tokens 32]
Writes bench/results-serve-<server>.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers import free_port, wait_http  # noqa: E402
from tests.serving.load import run_load  # noqa: E402
from tests.serving.stack import MAX_MODEL_LEN, MODEL, SERVED, VLLM_IMAGE, bring_up, tear_down  # noqa: E402

SERVERS = {"rustfs": "RustFS 1.0.1 (local build from crates.io, rustfs-vllm/rustfs:1.0.1-local)",
           "standin": "rclone serve s3 (S3 stand-in, not RustFS)"}


def start_local(model: Path, api_key: str, tmp: Path) -> tuple[object, str]:
    """The baseline: the same image, argv and environment as the stack's container, weights from
    disk (the built model folder itself: the stack's source is a Hugging Face cache snapshot of it,
    whose links would not resolve inside a container)."""
    client = docker.from_env()
    port = free_port()
    key_file = tmp / "key.yaml"                     # mode 0600, removed with tmp at the end of the run
    key_file.touch(mode=0o600)
    key_file.write_text(f"api-key: {json.dumps(api_key)}\n")
    c = client.containers.run(
        VLLM_IMAGE, ["--model", "/models/m", "--served-model-name", SERVED, "--dtype", "float32", "--max-model-len",
                     str(MAX_MODEL_LEN), "--config", "/run/key.yaml", "--enforce-eager"],
        name=f"rvllm-bench-serve-local-{port}", detach=True, shm_size="2g",
        environment={"VLLM_CPU_KVCACHE_SPACE": "1"}, ports={"8000/tcp": ("127.0.0.1", port)},
        volumes={str(model): {"bind": "/models/m", "mode": "ro"}, str(key_file): {"bind": "/run/key.yaml", "mode": "ro"}})
    base = f"http://127.0.0.1:{port}/v1"
    if not wait_http(f"http://127.0.0.1:{port}/health", 900, any_status=False):
        raise SystemExit(f"local-disk vLLM never got ready:\n{c.logs(tail=30).decode()}")
    return c, base


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4), "max": round(max(values), 4)}


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", choices=sorted(SERVERS), default="standin")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--levels", default="1,4,16,64")
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    print(f"bench-serve: S3 server {SERVERS[args.server]}; up of the stack ...", flush=True)
    ours = bring_up(tmp, kind=args.server, name="bsrv")
    local = None
    results: dict = {"server": SERVERS[args.server], "runs": args.runs, "max_tokens": args.max_tokens,
                     "sampling": "OpenAI client defaults (temperature 1.0)",
                     "prompts": "mixed lengths: 8, 32, 96, 192 words", "levels": {}, "load_before": load_avg()}
    try:
        local, local_url = start_local(MODEL, ours.api_key, tmp)
        targets = {"mount": ours.base_url, "local": local_url}
        for url in targets.values():   # one warm-up request each: first-request costs out of the figures
            run_load(url, SERVED, count=2, concurrency=2, api_key=ours.api_key, max_tokens=4)
        for c in levels:
            count = max(16, 2 * c)
            for stream in (False, True):
                mode = "streaming" if stream else "plain"
                runs: dict[str, list] = {"mount": [], "local": []}
                for r in range(args.runs):
                    # ABBA order (mount, local, local, mount, ...): neither side always goes first
                    for side, url in (list(targets.items())[::1 if r % 2 == 0 else -1]):
                        s = run_load(url, SERVED, count=count, concurrency=c, api_key=ours.api_key,
                                     max_tokens=args.max_tokens, stream=stream, limit_s=600, seed=r)
                        runs[side].append(s)
                        print(f"  c={c:<3} {mode:<9} run {r + 1} {side:<5}: {s.requests_per_s:6.2f} req/s "
                              f"{s.output_tokens_per_s:7.1f} tok/s p95 {s.latency_s['p95']} s "
                              f"failed {s.failed}", flush=True)
                results["levels"][f"c{c}-{mode}"] = row(runs, stream)
    finally:
        if local is not None:
            local.remove(force=True)
        results["load_after"] = load_avg()
        results["seconds"] = round(time.monotonic() - started, 1)
        tear_down(ours, ROOT / ".state" / f"bench-serve-stack-{args.server}.json")
        shutil.rmtree(tmp, ignore_errors=True)      # the model's cache copy and the key file
    out = ROOT / "bench" / f"results-serve-{args.server}.json"
    out.write_text(json.dumps(results, indent=2))
    print_table(results)
    print(f"wrote {out}")


def row(runs: dict[str, list], stream: bool) -> dict:
    def fig(side: str, get) -> dict:
        return spread([get(s) for s in runs[side]])

    out: dict = {}
    for side in runs:
        out[side] = {
            "requests_per_s": fig(side, lambda s: s.requests_per_s),
            "output_tokens_per_s": fig(side, lambda s: s.output_tokens_per_s),
            "latency_p50_s": fig(side, lambda s: s.latency_s["p50"]),
            "latency_p95_s": fig(side, lambda s: s.latency_s["p95"]),
            "latency_p99_s": fig(side, lambda s: s.latency_s["p99"]),
            "failed": sum(s.failed for s in runs[side]), "requests": sum(s.requests for s in runs[side]),
        }
        if stream:
            for q in ("p50", "p95", "p99"):
                out[side][f"ttft_{q}_s"] = fig(side, lambda s, q=q: s.ttft_s[q])
    m, loc = out["mount"], out["local"]
    out["ratio"] = {
        "throughput_mount_vs_local": round(m["output_tokens_per_s"]["median"] / loc["output_tokens_per_s"]["median"], 3),
        "p95_local_vs_mount": round(loc["latency_p95_s"]["median"] / m["latency_p95_s"]["median"], 3),
    }
    if stream:
        out["ratio"]["ttft_p95_local_vs_mount"] = round(loc["ttft_p95_s"]["median"] / m["ttft_p95_s"]["median"], 3)
    return out


def print_table(results: dict) -> None:
    print(f"\nS3 server: {results['server']}; medians of {results['runs']} runs per side; "
          f"load {results['load_before']} -> {results['load_after']}")
    print("| level | mount req/s | local req/s | mount tok/s | local tok/s | mount p95 s | local p95 s "
          "| mount TTFT p95 s | local TTFT p95 s | failed (mount/local) | tput ratio | p95 ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results["levels"].items():
        m, loc = r["mount"], r["local"]
        ttft = (f"{m['ttft_p95_s']['median']} | {loc['ttft_p95_s']['median']}" if "ttft_p95_s" in m else "- | -")
        print(f"| {name} | {m['requests_per_s']['median']} | {loc['requests_per_s']['median']} "
              f"| {m['output_tokens_per_s']['median']} | {loc['output_tokens_per_s']['median']} "
              f"| {m['latency_p95_s']['median']} | {loc['latency_p95_s']['median']} | {ttft} "
              f"| {m['failed']}/{loc['failed']} | {r['ratio']['throughput_mount_vs_local']} "
              f"| {r['ratio']['p95_local_vs_mount']} |")


if __name__ == "__main__":
    main()
