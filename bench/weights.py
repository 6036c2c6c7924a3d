"""vLLM's own model load, per read path, for one model: local disk (the baseline), our mount cold
(fresh mount, empty VFS cache) and warm (a restart: the mount's cache full), and the Run:ai Model
Streamer reading the bucket (``loadFormat: runai_streamer``). Page cache dropped before each sample;
the contenders interleaved, bench.stats.SAMPLES rounds; every start answers one completion.

The load is timed the same way on every path: from vLLM's "Starting to load model" to the engine's
next line once the model is in memory ("Reducing Torch threads ..."; model init and every weight
read), with the millisecond timestamps of a logging config of ours (``VLLM_LOGGING_CONFIG_PATH``). The default loader's own "Loading weights took" is kept too
(the streamer's loader does not log one).
"""
from __future__ import annotations

import json
import re
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import docker

from bench import run as base
from bench import stats
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


@dataclass
class Start:
    ready_s: float                  # container start -> /v1/models lists the model
    load_s: float                   # "Starting to load model" -> "Warming up model"
    weights_s: Optional[float]      # the default loader's "Loading weights took" (None: the streamer)
    answer: str


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
    (folder / "aws-credentials").write_text(streamer.credentials(base.ACCESS, base.SECRET))
    return folder


def vllm_start(work: Path, model_args: Sequence[str], *, source_dir: Optional[Path] = None, prefix: str = "m",
               s3: Optional[tuple[str, str]] = None, extra_env: Optional[dict[str, str]] = None) -> Start:
    """Our vLLM image on ``source_dir/prefix`` (bound at /models), or with ``s3=(endpoint, bucket)`` on
    ``s3://bucket/prefix/`` through the streamer (host network, keys as a file); ready and answering."""
    client, port, support = docker.from_env(), base._free_port(), _support(work)
    volumes = {str(support): {"bind": "/bench", "mode": "ro"}}
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
    start = time.monotonic()
    c = client.containers.run(base.VLLM_IMAGE, ["--model", model, "--served-model-name", "m", *model_args, *extra],
                              detach=True, shm_size="2g", environment=env, volumes=volumes, **kwargs)
    try:
        _wait_ready(c, port, start)
        ready = time.monotonic() - start
        answer = _complete(port)
        logs = c.logs().decode(errors="replace")
        m = re.search(r"Loading weights took ([0-9.]+) seconds", logs)
        return Start(round(ready, 2), load_seconds(logs), float(m.group(1)) if m else None, answer)
    finally:
        c.remove(force=True)


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
            raise RuntimeError(c.logs(tail=30).decode())
        if time.monotonic() - start > 1200:
            raise RuntimeError("vLLM not ready in 1200 s")
        time.sleep(0.5)


def _complete(port: int) -> str:
    """One completion as the OpenAI client sends it by default (sampled, no temperature)."""
    body = json.dumps({"model": "m", "prompt": "RustFS is", "max_tokens": 4}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())["choices"][0]["text"]


# the streamer's own setting worth steering on few cores: how many ranged GETs it keeps in flight
# (vLLM's default is the streamer's, 16); each variant is one more contender
STREAMER_VARIANTS: dict[str, dict[str, str]] = {"streamer": {}}


def bench_paths(server, flags: list[str], model: Path, bucket: str, model_args: Sequence[str],
                n: int = stats.SAMPLES, streamer_variants: Optional[dict[str, dict[str, str]]] = None) -> dict:
    """The read paths for ``model`` (uploaded at ``bucket``/m/), interleaved: their load and ready
    seconds, and the ratios against local disk and the mount."""
    variants = streamer_variants or STREAMER_VARIANTS
    work = base.WORK
    mnt, cache = work / f"mnt-{bucket}", work / f"mount-cache-{bucket}"
    ready: dict[str, list[float]] = {}
    answers: list[str] = []

    def keep(name: str, s: Start) -> float:
        ready.setdefault(name, []).append(s.ready_s)
        answers.append(s.answer)
        return s.load_s

    def local() -> float:
        base.drop_caches()
        return keep("local", vllm_start(work, model_args, source_dir=model.parent, prefix=model.name))

    def mounted(warm: bool) -> Callable[[], float]:
        def run() -> float:
            base.mount(server, bucket, mnt, flags, cache)
            try:
                if warm:                       # fill the mount's cache: every file read once
                    for f in sorted((mnt / "m").iterdir()):
                        base.read_sequential(f)
                base.drop_caches()
                return keep(f"mount:{'warm' if warm else 'cold'}", vllm_start(work, model_args, source_dir=mnt))
            finally:
                base.unmount(mnt)
        return run

    def streamed(name: str, env: dict[str, str]) -> Callable[[], float]:
        def run() -> float:
            base.drop_caches()
            return keep(name, vllm_start(work, model_args, s3=(server.endpoint, bucket), extra_env=env))
        return run

    got = stats.interleaved({"local": local, "mount:cold": mounted(False), "mount:warm": mounted(True),
                             **{name: streamed(name, env) for name, env in variants.items()}}, n=n)
    size = sum(p.stat().st_size for p in model.glob("*.safetensors"))
    return {
        "weights_bytes": size, "samples": n,
        "load_s": {k: v.summary(2) for k, v in got.items()},
        "ready_s": {k: stats.Samples(v).summary(1) for k, v in ready.items()},
        "load_mb_per_s": {k: round(size / v.median / 1e6, 1) for k, v in got.items()},
        "mount_ratio_vs_local": stats.ratio(got["mount:cold"], got["local"]).summary(),
        "mount_warm_ratio_vs_local": stats.ratio(got["mount:warm"], got["local"]).summary(),
        "streamer_ratio_vs_local": stats.ratio(got["streamer"], got["local"]).summary(),
        "streamer_ratio_vs_mount": stats.ratio(got["streamer"], got["mount:cold"]).summary(),
        **{f"{name}_ratio_vs_local": stats.ratio(got[name], got["local"]).summary()
           for name in variants if name != "streamer"},
        "streamer_variants": variants,
        "answered": all(a is not None for a in answers) and len(answers) == (3 + len(variants)) * n,
        "an_answer": answers[0] if answers else None}
