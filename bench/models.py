"""The vLLM starts: the models vLLM starts with, by size (SIZES: SmolLM2, MODEL of bench.server, and the
synthetic Llama models of bench.big_model, built once and uploaded), their starts per read path
(bench.start) and, in full mode, the 3.4 GB model's stack (bench.stack)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

from bench import big_model, start, weights
from bench.machine import log
from bench.server import MODEL, Server, uploaded
from bench.stack import bench_big_stack
from bench.upload import bench_upload

# the sizes of the curve, the biggest first (where the read path costs most: a run stopped early keeps it)
SIZES = ("large", "big", "smollm2")


def probe_paths(server: Server, size: str) -> start.Paths:
    """The starts of one size's model for a probe (bench.boot_delay, bench.cache_direct): SmolLM2 or the
    synthetic model of ``size``, uploaded once (bucket up-real-model or up-<size>-model, prefix m)."""
    if size == "smollm2":
        uploaded(server, "up-real-model", MODEL, "real-model")
        return start.Paths(server, MODEL, "up-real-model", weights.SMALL_ARGS)
    return start.Paths(server, model_uploaded(server, {}, size, 1), f"up-{size}-model", weights.BIG_ARGS)


def model_uploaded(server: Server, results: dict, size: str, rounds: int) -> Path:
    """The model of ``size`` (bench.big_model), built once, in bucket up-<size>-model (prefix m):
    with ``rounds`` above 1 our upload against rclone copy (results[size]["upload"]), else one
    upload by the program's own sync, timed (results[size]["upload_s"])."""
    model = big_model.built(size)
    entry = results.setdefault(size, {})
    entry.update(model=model.name, weights_bytes=sum(p.stat().st_size for p in model.glob("*.safetensors")))
    if rounds > 1:
        part: dict = {}
        bench_upload(server, {f"{size}-model": model}, part, headline=None, rounds=rounds)
        entry["upload"] = part["upload"]["detail"][f"{size}-model"]
        log(f"{size} model: upload ratio {entry['upload']['ratio_vs_rclone']}")
    else:
        began = time.monotonic()
        uploaded(server, f"up-{size}-model", model, f"{size}-model")
        entry["upload_s"] = round(time.monotonic() - began, 1)
        log(f"{size} model: {entry['weights_bytes'] / 1e9:.2f} GB uploaded in {entry['upload_s']} s")
    return model


def bench_starts(server: Server, results: dict, full: bool, sizes: Sequence[str] = SIZES,
                 save: Callable[[], None] = lambda: None) -> None:
    """A vLLM server's start in phases per read path, for each of ``sizes`` (bench.start); in full
    mode also the old per-path load comparison with the streamer variants and the big stack."""
    models: dict[str, tuple[Path, str, Sequence[str]]] = {}
    for size in sizes:
        if size == "smollm2":
            if not server.server.bucket_exists("up-real-model"):
                uploaded(server, "up-real-model", MODEL, "real-model")   # --reads uploaded it already
            models[size] = (MODEL, "up-real-model", weights.SMALL_ARGS)
        else:
            models[size] = (model_uploaded(server, results, size, 5 if full else 1), f"up-{size}-model",
                            weights.BIG_ARGS)
    start.bench_all(server, results, models, full, save)
    if "big" in models and full:
        results["big"]["stack"] = bench_big_stack(models["big"][0], weights.BIG_FIELDS, server.server.kind,
                                                  results.get("preview", {}).get("noop_s"))
