"""One start of our vLLM image on a read path (local folder, mount, the host's copy, or the Run:ai
Model Streamer from the bucket), timed in phases: bench.start runs the paths against each other.
Every start answers one streamed default (sampled) completion.

The load is timed the same way on every path: from vLLM's "Starting to load model" to the engine's
next line once the model is in memory ("Reducing Torch threads ..."; model init and every weight
read), with the millisecond timestamps of a logging config of ours (``VLLM_LOGGING_CONFIG_PATH``). The default loader's own "Loading weights took" is kept too
(the streamer's loader does not log one).
"""
from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Optional, Sequence

import docker

from bench.machine import ACCESS, SECRET, VLLM_IMAGE, free_port
from components.serving import streamer

SMALL_ARGS = ("--dtype", "float32", "--max-model-len", "512", "--enforce-eager")
# the 3.4 GB model on 2 cores: a short context and batch keep vLLM's profile run to seconds
BIG_FIELDS = {"dtype": "bfloat16", "maxModelLen": 256,     # the same as a stack's model fields
              "extraArgs": ["--max-num-batched-tokens", "256", "--max-num-seqs", "4", "--enforce-eager"]}
BIG_ARGS = ("--dtype", BIG_FIELDS["dtype"], "--max-model-len", str(BIG_FIELDS["maxModelLen"]), *BIG_FIELDS["extraArgs"])
LOGGING = {"version": 1, "disable_existing_loggers": False,
           "formatters": {"t": {"format": "%(levelname)s %(created).3f %(message)s"}},
           "handlers": {"h": {"class": "logging.StreamHandler", "formatter": "t", "stream": "ext://sys.stdout"}},
           "loggers": {"vllm": {"handlers": ["h"], "level": "INFO", "propagate": False}}}
START = r"([0-9]{9,}\.[0-9]{3}) Starting to load model"
# the first line once the model is loaded (the engine sizes its threads and the KV cache next)
END = r"([0-9]{9,}\.[0-9]{3}) (?:Reducing Torch threads|Using \w+ KV cache layout|Explicitly set|Warming up model)"
# after the load, the engine's first forward passes (issue 46: longer after a load through the mount)
INIT_ENGINE = r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) s"


@dataclass
class Start:
    ready_s: float                  # container start -> /v1/models lists the model
    load_s: float                   # "Starting to load model" -> "Warming up model"
    weights_s: Optional[float]      # the default loader's "Loading weights took" (None: the streamer)
    answer: str
    # seconds from the container's start: vLLM begins to read weights, weights loaded, ready (/v1/models),
    # first token of a streamed default (sampled) completion
    phases: dict[str, float] = field(default_factory=dict)
    # with a ``watch``: (seconds from the container's start, what it counted then), e.g. the bytes in
    # the mount's VFS cache, from the start until ready
    watched: list[tuple[float, int]] = field(default_factory=list)
    init_engine_s: Optional[float] = None   # vLLM's "init engine (profile, create kv cache, warmup model) took"

    def watched_at(self, phase: str) -> Optional[int]:
        """What ``watch`` counted when ``phase`` began (the last sample at or before it)."""
        at = self.phases.get(phase)
        before = [n for t, n in self.watched if at is not None and t <= at]
        return before[-1] if before else None


class Watcher(threading.Thread):
    """Samples ``count()`` every 0.25 s from ``t0`` (epoch seconds) until stopped."""

    def __init__(self, count: Callable[[], int], t0: float) -> None:
        super().__init__(daemon=True)
        self.count, self.t0, self.samples, self.stop = count, t0, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((round(time.time() - self.t0, 2), self.count()))
            self.stop.wait(0.25)


def phases(logs: str, t0: float, ready_at: float, first_token_at: float) -> dict[str, float]:
    """The start in phases, in seconds since the container started (``t0``, epoch seconds), from
    vLLM's own log timestamps (the load) and this machine's clock (ready, first token)."""
    start = re.search(START, logs)
    end = re.compile(END).search(logs, start.end()) if start else None
    if not (start and end):
        raise RuntimeError("vLLM's log has no 'Starting to load model' line, or none after it")
    return {"load_begins": round(float(start.group(1)) - t0, 2), "weights_loaded": round(float(end.group(1)) - t0, 2),
            "ready": round(ready_at - t0, 2), "first_token": round(first_token_at - t0, 2)}


def load_seconds(logs: str) -> float:
    start = re.search(START, logs)
    end = re.compile(END).search(logs, start.end()) if start else None
    if not (start and end):
        raise RuntimeError("vLLM's log has no 'Starting to load model' line, or none after it")
    return round(float(end.group(1)) - float(start.group(1)), 3)


def _support(work: Path) -> Path:
    """The logging config and the streamer's credentials file, bound read-only into the containers."""
    folder = work / "vllm-support"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "logging.json").write_text(json.dumps(LOGGING))
    (folder / "aws-credentials").write_text(streamer.credentials(ACCESS, SECRET))
    return folder


def vllm_start(work: Path, model_args: Sequence[str], *, source_dir: Optional[Path] = None, prefix: str = "m",
               s3: Optional[tuple[str, str]] = None, extra_env: Optional[dict[str, str]] = None,
               compile_cache: Optional[str] = None, entrypoint: Optional[list[str]] = None,
               watch: Optional[Callable[[], int]] = None) -> Start:
    """Our vLLM image on ``source_dir/prefix`` (bound at /models), or with ``s3=(endpoint, bucket)`` on
    ``s3://bucket/prefix/`` through the streamer (host network, keys as a file); ready and answering.
    ``compile_cache``: a Docker volume for vLLM's and inductor's caches, as vllmCompileCache mounts it.
    ``entrypoint``: the program's (a mounted model's: the wait and the warm-up, then vllm serve; it reads
    RV_MODEL_DIR, set here); ``watch``: counted every 0.25 s until ready (Start.watched)."""
    from components.serving.vllm import COMPILE_CACHE, COMPILE_CACHE_ENV

    client, port, support = docker.from_env(), free_port(), _support(work)
    volumes = {str(support): {"bind": "/bench", "mode": "ro"}}
    if compile_cache:
        volumes[compile_cache] = {"bind": COMPILE_CACHE, "mode": "rw"}
        extra_env = {**COMPILE_CACHE_ENV, **(extra_env or {})}
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_CONFIG_PATH": "/bench/logging.json", **(extra_env or {})}
    kwargs: dict = {}
    if s3:
        endpoint, bucket = s3
        model = streamer.model_url(bucket, prefix)
        env |= {**streamer.env(endpoint, False), "AWS_SHARED_CREDENTIALS_FILE": "/bench/aws-credentials"}
        extra = streamer.argv("127.0.0.1", port)
        kwargs["network_mode"] = "host"
    else:
        model, extra = f"/models/{prefix}", ()
        volumes[str(source_dir)] = {"bind": "/models", "mode": "ro"}
        kwargs["ports"] = {"8000/tcp": ("127.0.0.1", port)}
    if entrypoint:
        env["RV_MODEL_DIR"] = model
        kwargs["entrypoint"] = entrypoint
    start, t0 = time.monotonic(), time.time()
    c = client.containers.run(VLLM_IMAGE, ["--model", model, "--served-model-name", "m", *model_args, *extra],
                              detach=True, shm_size="2g", environment=env, volumes=volumes, **kwargs)
    t0 = _started(c, t0)
    watcher = Watcher(watch, t0) if watch else None
    if watcher:
        watcher.start()
    try:
        _wait_ready(c, port, start)
        ready, ready_at = time.monotonic() - start, time.time()
        if watcher:
            watcher.stop.set()
        first_at, answer = first_token(port)
        logs = c.logs().decode(errors="replace")
        _keep_log(work, c)
        m = re.search(r"Loading weights took ([0-9.]+) seconds", logs)
        init = re.search(INIT_ENGINE, logs)
        return Start(round(ready, 2), load_seconds(logs), float(m.group(1)) if m else None, answer,
                     phases(logs, t0, ready_at, first_at), list(watcher.samples) if watcher else [],
                     float(init.group(1)) if init else None)
    finally:
        if watcher:
            watcher.stop.set()
        c.remove(force=True)


def _keep_log(work: Path, c) -> None:
    """The container's log with Docker's timestamps, in ``work``/logs/start-<time>.log (where a start's
    boot spends its time, line by line; the folder goes with the bench's work folder)."""
    folder = work / "logs"
    folder.mkdir(exist_ok=True)
    head = f"# {c.attrs.get('Config', {}).get('Cmd')}\n"
    (folder / f"start-{time.strftime('%H%M%S')}-{c.short_id}.log").write_text(
        head + c.logs(timestamps=True).decode(errors="replace"))


def _started(c, fallback: float) -> float:
    """The container's start (Docker's StartedAt, epoch seconds): the zero of every phase."""
    c.reload()
    raw = c.attrs.get("State", {}).get("StartedAt", "")
    try:
        return datetime.fromisoformat(raw[:26].rstrip("Z") + "+00:00").timestamp()
    except ValueError:
        return fallback


def _wait_ready(c, port: int, start: float) -> None:
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                if b'"m"' in r.read():
                    return
        except OSError:
            pass
        c.reload()
        if c.status != "running":
            state = c.attrs.get("State", {})
            raise RuntimeError(f"vLLM's container {c.status} (exit {state.get('ExitCode')}, OOMKilled "
                               f"{state.get('OOMKilled')}, {state.get('Error') or 'no error'}); its log:\n"
                               + c.logs(tail=30).decode(errors="replace"))
        if time.monotonic() - start > 1200:
            raise RuntimeError("vLLM not ready in 1200 s")
        time.sleep(0.5)


def first_token(port: int) -> tuple[float, str]:
    """A streamed completion as the OpenAI client sends it by default (sampled, no temperature): the
    epoch time its first token arrived, and the whole text."""
    body = json.dumps({"model": "m", "prompt": "RustFS is", "max_tokens": 4, "stream": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    first_at, text = 0.0, ""
    with urllib.request.urlopen(req, timeout=300) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            piece = json.loads(line[6:])["choices"][0].get("text", "")
            if not first_at:
                first_at = time.time()
            text += piece
    if not first_at:
        raise RuntimeError("the streamed completion sent no token")
    return first_at, text
