"""A vLLM server's start in phases, per read path, for one model (issue 28): what `up`, a model change,
a rotation, a crash restart or a rolling step costs before the first token.

Paths (each a fresh container of our vLLM image, the page cache dropped before it starts):
- ``local``: the model on local disk (the baseline);
- ``mount:cold`` / ``mount:warm``: through our rclone mount (the program's default flags), with an
  empty VFS cache / with the cache full (a restart);
- ``copy:cold`` / ``copy:warm``: ``loadFormat: local_copy``: the host's copy made by the program's own
  tool (``scripts/rclone-mount copy-up``, rclone copy from the bucket, every file's sha256 checked)
  into an empty folder / found complete (a restart: only the check that it is complete), then
  vLLM reading it. The copy's time is its own phase; ``bucket_to_first_token`` adds it.
- ``streamer`` (full mode): the Run:ai Model Streamer from the bucket.

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
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import docker

from bench import stats, weights
from bench.machine import ROOT, WORK, drop_caches, log, mount, read_sequential, unmount
from components.config import DEFAULT_MOUNT_FLAGS
from components.docker import copies
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

    def mounted(self, warm: bool) -> Callable[[], float]:
        def run() -> float:
            mount(self.server, self.bucket, self.mnt, list(DEFAULT_MOUNT_FLAGS), self.vfs)
            try:
                if warm:
                    for f in sorted((self.mnt / "m").iterdir()):
                        read_sequential(f)
                drop_caches()
                return self._keep(f"mount:{'warm' if warm else 'cold'}",
                                  weights.vllm_start(WORK, self.args, source_dir=self.mnt))
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


def summary(paths: Paths, got: dict[str, stats.Samples]) -> dict:
    """Phases, copy times and the ratios the issue names, for one model."""
    out: dict = {"samples": len(got["local"].values), "phases": {}, "ratios": {}}
    for name, starts in paths.starts.items():
        ph = {p: stats.Samples([s.phases[p] for s in starts]).summary(2) for p in PHASES}
        ph["load"] = stats.Samples([s.load_s for s in starts]).summary(2)
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
    contenders: dict[str, Callable[[], float]] = {
        "local": p.local, "mount:cold": p.mounted(False), "copy:cold": p.copied(False), "copy:warm": p.copied(True)}
    if full:
        contenders |= {"mount:warm": p.mounted(True), "streamer": p.streamed}
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


def headline(got: dict, default: str = "copy") -> dict:  # noqa: C901
    """The figures issue 28 names for one model, from the default read path (``copy``: loadFormat
    local_copy): cold and warm load and first-token ratios against local disk."""
    r = got["ratios"]
    return {"cold": {"load_ratio_vs_local": r[f"{default}:cold"]["load_ratio_vs_local"],
                     "first_token_ratio_vs_local": r[f"{default}:cold"]["first_token_ratio_vs_local"],
                     "bucket_to_first_token_ratio_vs_local": r[f"{default}:cold"].get("bucket_to_first_token_ratio_vs_local")},
            "warm": {"load_ratio_vs_local": r[f"{default}:warm"]["load_ratio_vs_local"],
                     "first_token_ratio_vs_local": r[f"{default}:warm"]["first_token_ratio_vs_local"]},
            **({"mount_cold": r["mount:cold"]} if "mount:cold" in r else {})}


def bench_all(server, results: dict, models: dict[str, tuple[Path, str, Sequence[str]]], full: bool,
              save: Callable[[], None] = lambda: None) -> None:
    """results["start"][name]: every path of each model (name -> (folder, bucket, vLLM args)), then the
    compile-cache restart of each; the headline figures beside the detail; ``save`` after each part
    (a long run stopped half-way keeps what it measured)."""
    out = results.setdefault("start", {"default_path": "copy (loadFormat local_copy)"})
    for name, (model, bucket, args) in models.items():
        t = time.monotonic()
        got = bench_start(server, model, bucket, args, full=full)
        out[name] = {**headline(got), "detail": got, "seconds": round(time.monotonic() - t)}
        log(f"start {name}: cold {out[name]['cold']}, warm {out[name]['warm']}")
        save()
    for name, (model, bucket, args) in models.items():
        if name != "smollm2" and not full:
            continue                    # quick mode: the compile restart of SmolLM2 only (about 4 min a start)
        t = time.monotonic()
        cr = compile_restart(server, model, bucket, args)
        out[name]["compile_restart"] = {**cr, "seconds": round(time.monotonic() - t)}
        out[name]["warm_first_token_vs_baseline"] = cr["warm_first_token_vs_baseline"]
        log(f"compile restart {name}: ours/main {cr['warm_first_token_vs_baseline']}")
        save()
