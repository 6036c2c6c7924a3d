"""The vLLM starts: the models vLLM starts with, SmolLM2 (MODEL, bench.server) and the 3.4 GB model
of bench.big_model (built, then uploaded with our upload against rclone copy); their starts per
read path (bench.start) and, in full mode, the big model's stack (bench.stack)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from bench import start, weights
from bench.machine import log
from bench.server import MODEL, Server
from bench.stack import bench_big_stack
from bench.upload import bench_upload


def big_model_uploaded(server: Server, results: dict, rounds: int) -> Path:
    """The 3.4 GB model (bench.big_model), built once, uploaded to bucket up-big-model (prefix m) with
    our upload against rclone copy (``rounds`` samples); results["big"]["upload"]."""
    from bench import big_model

    model = big_model.build(big_model.cache_dir() / big_model.NAME, big_model.cache_dir() / big_model.SMOLLM2)
    part: dict = {}
    bench_upload(server, {"big-model": model}, part, headline=None, rounds=rounds)
    results.setdefault("big", {}).update(model=model.name, upload=part["upload"]["detail"]["big-model"])
    log(f"big model: upload ratio {part['upload']['detail']['big-model']['ratio_vs_rclone']}")
    return model


def bench_starts(server: Server, results: dict, full: bool, big: bool, save: Callable[[], None] = lambda: None) -> None:
    """A vLLM server's start in phases per read path, SmolLM2 and the 3.4 GB model (bench.start); in
    full mode also the old per-path load comparison with the streamer variants and the big stack."""
    # the 3.36 GB model first: where the read path costs most (a run stopped early keeps its figures)
    models = {"big": (big_model_uploaded(server, results, 5 if full else 1), "up-big-model", weights.BIG_ARGS)} \
        if big else {}
    models["smollm2"] = (MODEL, "up-real-model", weights.SMALL_ARGS)
    start.bench_all(server, results, models, full, save)
    if big and full:
        results["big"]["stack"] = bench_big_stack(models["big"][0], weights.BIG_FIELDS, server.server.kind,
                                                  results.get("preview", {}).get("noop_s"))
