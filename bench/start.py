"""A vLLM server's start in phases, per read path, for one model (issues 28 and 36): what `up`, a model
change, a rotation, a crash restart or a rolling step costs before the first token.

Paths (each a fresh container of our vLLM image, the page cache dropped before it starts):
- ``local``: the model on local disk (the baseline);
- ``mount:cold`` / ``mount:warm`` (the default read path): through our rclone mount (the program's
  default flags) and the program's entrypoint for a mounted model (the warm-up of components/mounting/
  warm.py started with the container, then vllm serve), with an empty VFS cache / with the cache full
  (a restart), and the keeper's read-ahead of that cache beside the boot (vfs_cache.read_cache_ahead).
  The VFS cache's bytes are watched: ``warmed_fraction_at_load_begin`` is the share of the model in it
  when vLLM began to read;
- full mode: ``mount:cold:no-warm-up`` (the same entrypoint without the warm-up), ``copy:cold`` /
  ``copy:warm`` (``loadFormat: local_copy``: the host's copy made by the program's own tool, then vLLM
  reading it; the copy's time is its own phase, ``bucket_to_first_token`` adds it) and ``streamer``
  (the Run:ai Model Streamer from the bucket).

Phases, seconds from the container's start: ``load_begins`` (vLLM's "Starting to load model"),
``weights_loaded``, ``ready`` (``/v1/models`` lists the model), ``first_token`` (of a streamed
default-sampled completion); plus ``load`` (weights_loaded - load_begins, vLLM's own timestamps).
Ratios against local disk are medians of per-round ratios (bench.stats).

``compile_restart``: the restart of a server WITHOUT ``--enforce-eager`` (torch.compile runs, as with
the guide's own arguments): a new container of a model whose weights are warm, today's main (mount
warm, no compile cache) against the new defaults (copy warm, vllmCompileCache volume filled by one
earlier start), interleaved, ``COMPILE_ROUNDS`` rounds.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import docker

from bench import stats, weights
from bench.machine import ROOT, WORK, drop_caches, log, mount, unmount
from components.config import DEFAULT_MOUNT_FLAGS
from components.config.schema import DEFAULT_MOUNT_COMMAND, DEFAULT_READ_AHEAD_KB
from components.docker import copies
from components.mounting import vfs_cache, warm as warm_mod
from components.serving.vllm import mount_wait_entrypoint
from components.storage import manifest as manifest_mod

SCRIPT = str(ROOT / "scripts" / "rclone-mount")
COMPILE_ROUNDS = 3
# what a restart costs on today's main (before issue 28), emulated here with main's own read path
BASELINE = ("main fd9419c: loadFormat mount with its default flags, the VFS cache warm, no compile cache "
            "(vllmCompileCache did not exist): a new container compiles again")
PHASES = ("load_begins", "weights_loaded", "ready", "first_token")


def copy_up(server, bucket: str, root: Path, model: Path, log: Path) -> float:
    """The program's copy of ``bucket``/m into ``root``, as ModelCopy runs it; seconds."""
    manifest = manifest_mod.build(str(model), str(WORK / "hash-cache" / f"{model.name}.json"))
    revision = hashlib.sha256("".join(f"{k}:{v['sha256']}\n" for k, v in sorted(manifest.items())).encode()).hexdigest()[:16]
    env = {**server.rclone_env(), "RV_RCLONE": shutil.which("rclone") or "rclone", "RV_REMOTE": "BENCH",
           "RV_SOURCE": f"{bucket}/m", "RV_ROOT": str(root), "RV_COPY_ROOT": str(root), "RV_REVISION": revision,
           "RV_EXPECT": json.dumps(copies.expectations(manifest)), "RV_LOG": str(log), "RV_PURGE": "0"}
    start = time.monotonic()
    subprocess.run([SCRIPT, "copy-up"], env=env, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


class Paths:
    """The contenders for one model; each returns container start -> first token (seconds) and keeps
    its phases in ``starts``."""

    def __init__(self, server, model: Path, bucket: str, model_args: Sequence[str]) -> None:
        self.server, self.model, self.bucket, self.args = server, model, bucket, list(model_args)
        w = WORK
        self.mnt, self.vfs = w / f"mnt-{bucket}", w / f"mount-cache-{bucket}"
        self.copy_root = w / f"copy-{bucket}"
        self.starts: dict[str, list[weights.Start]] = {}
        self.copy_s: dict[str, list[float]] = {}

    def _keep(self, name: str, s: weights.Start, copy_s: Optional[float] = None) -> float:
        self.starts.setdefault(name, []).append(s)
        if copy_s is not None:
            self.copy_s.setdefault(name, []).append(copy_s)
        return s.phases["first_token"]

    def local(self) -> float:
        drop_caches()
        return self._keep("local", weights.vllm_start(WORK, self.args, source_dir=self.model.parent,
                                                      prefix=self.model.name))

    def mounted(self, warm: bool, warm_up: bool = True) -> Callable[[], float]:
        """Our mount with the program's defaults, an empty VFS cache (cold) or a full one (warm: a
        restart), and the program's entrypoint for a mounted model (the warm-up, then vllm serve;
        ``warm_up=False``: the entrypoint without it). The VFS cache's bytes are watched meanwhile."""
        def run() -> float:
            mount(self.server, self.bucket, self.mnt, list(DEFAULT_MOUNT_FLAGS), self.vfs, DEFAULT_MOUNT_COMMAND,
                  DEFAULT_READ_AHEAD_KB)
            try:
                if warm:    # the VFS cache filled before the start, unpaced (not timed)
                    warm_mod.warm(str(self.mnt / "m"), pace=0)
                drop_caches()
                read_ahead_beside(self.vfs)          # as the keeper does once it has mounted
                name = f"mount:{'warm' if warm else 'cold'}{'' if warm_up else ':no-warm-up'}"
                return self._keep(name, weights.vllm_start(
                    WORK, self.args, source_dir=self.mnt, entrypoint=mount_wait_entrypoint(warm_up),
                    watch=lambda: cached_bytes(self.vfs)))
            finally:
                unmount(self.mnt)
        return run

    def copied(self, warm: bool) -> Callable[[], float]:
        def run() -> float:
            if not warm:
                shutil.rmtree(self.copy_root, ignore_errors=True)
            drop_caches()
            took = copy_up(self.server, self.bucket, self.copy_root, self.model, WORK / f"copy-{self.bucket}.log")
            drop_caches()          # vLLM reads the copy from disk, as it reads the local baseline
            folder = next(p for p in self.copy_root.iterdir() if p.is_dir())   # <root>/<revision>
            start = weights.vllm_start(WORK, self.args, source_dir=folder.parent, prefix=folder.name)
            return self._keep(f"copy:{'warm' if warm else 'cold'}", start, took)
        return run

    def streamed(self) -> float:
        drop_caches()
        return self._keep("streamer", weights.vllm_start(WORK, self.args, s3=(self.server.endpoint, self.bucket)))


def read_ahead_beside(vfs: Path, took: Optional[list[float]] = None) -> threading.Thread:
    """The program's read-ahead of a mount's cache (vfs_cache.read_cache_ahead: the keeper's, once it has
    mounted) started in a thread beside the vLLM start that follows; its seconds go to ``took`` when it
    read something."""
    def run() -> None:
        n, _done, seconds, _why = vfs_cache.read_cache_ahead(str(vfs))
        if n and took is not None:
            took.append(round(seconds, 2))
    reader = threading.Thread(target=run, daemon=True)
    reader.start()
    return reader


def cached_bytes(cache_dir: Path) -> int:
    """The bytes rclone's VFS cache holds on disk (its data files are sparse: blocks allocated)."""
    n = 0
    for here, _dirs, names in os.walk(cache_dir / "vfs"):
        for name in names:
            try:
                n += os.stat(os.path.join(here, name)).st_blocks * 512
            except OSError:
                pass
    return n


def log_medians(out: dict) -> None:
    """One line per path of a summary's phases: each phase's median (the probes' last words)."""
    for name, ph in out["phases"].items():
        log(f"{name}: " + ", ".join(f"{k} {v['median']}" for k, v in ph.items() if isinstance(v, dict) and "median" in v))


def summary(paths: Paths, got: dict[str, stats.Samples]) -> dict:
    """Phases, copy times and the ratios the issue names, for one model."""
    out: dict = {"samples": len(got["local"].values), "phases": {}, "ratios": {}}
    for name, starts in paths.starts.items():
        ph = {p: stats.Samples([s.phases[p] for s in starts]).summary(2) for p in PHASES}
        ph["load"] = stats.Samples([s.load_s for s in starts]).summary(2)
        if all(s.init_engine_s is not None for s in starts):
            ph["init_engine"] = stats.Samples([s.init_engine_s for s in starts]).summary(2)
        if starts and starts[0].watched:   # the share of the model in the VFS cache when vLLM began to read
            size = sum(f.stat().st_size for f in paths.model.rglob("*") if f.is_file())
            ph["warmed_fraction_at_load_begin"] = stats.Samples(
                [min(1.0, (s.watched_at("load_begins") or 0) / size) for s in starts]).summary(3)
        if name in paths.copy_s:
            ph["copy"] = stats.Samples(paths.copy_s[name]).summary(2)
            ph["bucket_to_first_token"] = stats.Samples(
                [c + s.phases["first_token"] for c, s in zip(paths.copy_s[name], starts)]).summary(2)
        out["phases"][name] = ph
    local = paths.starts["local"]

    def ratio(name: str, value: Callable[[weights.Start], float], extra: Sequence[float] = ()) -> dict:
        mine = [value(s) + (extra[i] if extra else 0) for i, s in enumerate(paths.starts[name])]
        return stats.ratio(stats.Samples(mine), stats.Samples([value(s) for s in local])).summary()

    for name in paths.starts:
        if name == "local":
            continue
        out["ratios"][name] = {"load_ratio_vs_local": ratio(name, lambda s: s.load_s),
                               "first_token_ratio_vs_local": ratio(name, lambda s: s.phases["first_token"])}
        if name in paths.copy_s:
            out["ratios"][name]["bucket_to_first_token_ratio_vs_local"] = ratio(
                name, lambda s: s.phases["first_token"], paths.copy_s[name])
    out["answered"] = all(s.answer is not None for ss in paths.starts.values() for s in ss)
    return out


def bench_start(server, model: Path, bucket: str, model_args: Sequence[str], full: bool = False,
                n: int = stats.SAMPLES) -> dict:
    """Every read path of ``model`` (uploaded at ``bucket``/m/), interleaved, ``n`` rounds."""
    p = Paths(server, model, bucket, model_args)
    n = int(os.environ.get("RUSTFS_VLLM_BENCH_ROUNDS") or n)     # fewer rounds for a short look (below 5: say so)
    contenders: dict[str, Callable[[], float]] = {"local": p.local, "mount:cold": p.mounted(False),
                                                  "mount:warm": p.mounted(True)}
    if full:
        contenders |= {"mount:cold:no-warm-up": p.mounted(False, warm_up=False), "copy:cold": p.copied(False),
                       "copy:warm": p.copied(True), "streamer": p.streamed}
    only = [x for x in os.environ.get("RUSTFS_VLLM_BENCH_PATHS", "").split(",") if x]   # e.g. local,copy:cold,copy:warm
    if only:
        contenders = {k: v for k, v in contenders.items() if k in only or k == "local"}
    try:
        got = stats.interleaved(contenders, n=n)
    finally:
        shutil.rmtree(p.copy_root, ignore_errors=True)
        shutil.rmtree(p.vfs, ignore_errors=True)
    return summary(p, got)


def compile_restart(server, model: Path, bucket: str, model_args: Sequence[str], n: int = COMPILE_ROUNDS) -> dict:
    """A warm restart without --enforce-eager: today's main (mount warm, no compile cache) against the
    new defaults (copy warm, a compile-cache volume filled by one earlier start), first token."""
    args = [a for a in model_args if a != "--enforce-eager"]
    p = Paths(server, model, bucket, args)
    client = docker.from_env()
    volume = f"bench-compile-{bucket}"
    try:
        client.volumes.get(volume).remove(force=True)
    except docker.errors.NotFound:
        pass
    client.volumes.create(volume)
    copy_up(server, bucket, p.copy_root, model, WORK / f"copy-{bucket}.log")
    folder = next(x for x in p.copy_root.iterdir() if x.is_dir())
    fill = weights.vllm_start(WORK, args, source_dir=folder.parent, prefix=folder.name, compile_cache=volume)

    def ours() -> float:
        drop_caches()
        s = weights.vllm_start(WORK, args, source_dir=folder.parent, prefix=folder.name, compile_cache=volume)
        return p._keep("ours", s)

    try:
        got = stats.interleaved({"main": p.mounted(True), "ours": ours}, n=n)
    finally:
        client.volumes.get(volume).remove(force=True)
        shutil.rmtree(p.copy_root, ignore_errors=True)
        shutil.rmtree(p.vfs, ignore_errors=True)
    main_starts = p.starts["mount:warm"]
    return {"rounds": n, "args": args, "baseline": BASELINE, "filling_start_first_token_s": fill.phases["first_token"],
            "main_first_token_s": got["main"].summary(1), "ours_first_token_s": got["ours"].summary(1),
            "main_phases": {ph: stats.Samples([s.phases[ph] for s in main_starts]).summary(1) for ph in PHASES},
            "ours_phases": {ph: stats.Samples([s.phases[ph] for s in p.starts["ours"]]).summary(1) for ph in PHASES},
            "warm_first_token_vs_baseline": stats.ratio(got["ours"], got["main"]).summary()}


def headline(got: dict, default: str = "mount") -> dict:  # noqa: C901
    """The figures issue 36 names for one model, from the default read path (``mount``: loadFormat
    mount, warmed while vLLM boots): cold and warm load and first-token ratios against local disk, and
    the share of the model the warm-up had fetched when vLLM began to read (cold)."""
    r, ph = got["ratios"], got["phases"]
    out = {temp: {"load_ratio_vs_local": r[f"{default}:{temp}"]["load_ratio_vs_local"],
                  "first_token_ratio_vs_local": r[f"{default}:{temp}"]["first_token_ratio_vs_local"]}
           for temp in ("cold", "warm") if f"{default}:{temp}" in r}    # RUSTFS_VLLM_BENCH_PATHS may leave one out
    fraction = ph.get(f"{default}:cold", {}).get("warmed_fraction_at_load_begin")
    if fraction:
        out["cold"]["warmed_fraction_at_load_begin"] = fraction
    return {**out, **({"copy_cold": r["copy:cold"]} if "copy:cold" in r else {})}


def bench_all(server, results: dict, models: dict[str, tuple[Path, str, Sequence[str]]], full: bool,
              save: Callable[[], None] = lambda: None) -> None:
    """results["start"][name]: every path of each model (name -> (folder, bucket, vLLM args)), then the
    compile-cache restart of each; the headline figures beside the detail; ``save`` after each part
    (a long run stopped half-way keeps what it measured)."""
    out = results.setdefault("start", {"default_path": "mount (loadFormat mount, warmed while vLLM boots)"})
    for name, (model, bucket, args) in models.items():
        t = time.monotonic()
        got = bench_start(server, model, bucket, args, full=full)
        out[name] = {**headline(got), "weights_bytes": sum(f.stat().st_size for f in model.glob("*.safetensors")),
                     "detail": got, "seconds": round(time.monotonic() - t)}
        log(f"start {name}: cold {out[name].get('cold')}, warm {out[name].get('warm')}")
        save()
    for name, (model, bucket, args) in models.items():
        if not full:
            break                       # quick mode: no compile restart (about 4 min a start)
        t = time.monotonic()
        cr = compile_restart(server, model, bucket, args)
        out[name]["compile_restart"] = {**cr, "seconds": round(time.monotonic() - t)}
        out[name]["warm_first_token_vs_baseline"] = cr["warm_first_token_vs_baseline"]
        log(f"compile restart {name}: ours/main {cr['warm_first_token_vs_baseline']}")
        save()
