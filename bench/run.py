"""make bench: upload, preview, model load and `up`, each against a baseline measured in the same
run, on the same S3 server and the same data. Every cold or warm read is measured after
`echo 3 > /proc/sys/vm/drop_caches`.

usage: python -m bench.run [--server rustfs|standin] [--full] [--skip-vllm] [--skip-big] [--big-only] [--load-only]
                           [--stack-only] [--before REF] [--hosts]
vLLM's model load per read path (local disk, our mount cold and warm, the Run:ai Model Streamer from
the bucket): bench.weights, for SmolLM2 and for the 3.4 GB model of bench.big_model.
Every figure: the median of bench.stats.SAMPLES samples taken A/B interleaved, with min, max and spread.
--server rustfs (default): real RustFS 1.0.1, the local build rustfs-vllm/rustfs:1.0.1-local, on
loopback (a container; the stack part runs s3Server: rustfs). --server standin: `rclone serve s3`
on loopback, an S3-compatible stand-in that is NOT RustFS. Results go to bench/results-<server>.json.
--before REF also runs the stack part (up, no-op up, no-op preview) with the program as it was at
git revision REF (a worktree under bench/work), right before the current one in the same run, and
reports current/REF ratios (e.g. REF=c383d2f: the last revision on this project's own container and
command providers, to measure the move to pulumi-docker and pulumi-command).
--hosts: only the time of `up` on one simulated serving host and on two (bench/hosts.py).
Writes bench/results-<server>.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import docker
from boto3.s3.transfer import TransferConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.storage import manifest as manifest_mod  # noqa: E402
from components.config import DEFAULT_MOUNT_FLAGS  # noqa: E402
from components.storage import s3  # noqa: E402
from bench import start, stats, weights  # noqa: E402
from bench.machine import (ACCESS, MIB, ROOT, SECRET, VLLM_IMAGE, WORK, drop_caches, free_port, log,  # noqa: E402
                           mount, read_sequential, unmount)
from tests.s3_under_test import ExternalServer, stack_settings, stored_objects  # noqa: E402
from components.mounting import warm as warm_tool  # noqa: E402
from components.providers.model_upload import DEFAULT_FILE_WORKERS, DEFAULT_PART_WORKERS, sync  # noqa: E402

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
SERVERS = {"rustfs": "RustFS 1.0.1 on loopback (local build from crates.io, rustfs-vllm/rustfs:1.0.1-local)",
           "standin": "rclone serve s3 on loopback (S3 stand-in, not RustFS)"}
DEFAULT_WORKERS = (DEFAULT_FILE_WORKERS, DEFAULT_PART_WORKERS)  # what the program uses
# rclone mount flag sets compared by the load benchmark; "plain" is the guide's mount.
CURRENT_DEFAULT = "mount2:cache-full+bdi-16M"  # what the program mounts with by default (issue 36)
PREFETCH_STREAMS = (4, 16)   # readers of the prefetch variants (--vfs-cache-mode full, then a read)
MOUNT_VARIANTS = {
    "plain": [],
    "chunk-streams-8": ["--vfs-read-chunk-streams", "8", "--vfs-read-chunk-size", "16M"],
    "cache-full": list(DEFAULT_MOUNT_FLAGS),
    "cache-full+streams-8": ["--vfs-cache-mode", "full", "--vfs-cache-max-age", "8760h",
                             "--vfs-read-chunk-streams", "8", "--vfs-read-chunk-size", "16M"],
    # the kernel's read-ahead on the FUSE mount (default 128 KiB): bigger requests to rclone
    "cache-full+readahead-4M": [*DEFAULT_MOUNT_FLAGS, "--max-read-ahead", "4M"],
    # `rclone mount2` (go-fuse): 1 MiB FUSE reads once the kernel's read-ahead allows them, where
    # `rclone mount` always asks 128 KiB (seen with --debug-fuse); the bdi read-ahead is set after mounting
    "mount2:cache-full": [*DEFAULT_MOUNT_FLAGS],
    "mount2:cache-full+bdi-16M": [*DEFAULT_MOUNT_FLAGS],
}
# variants that are not `rclone mount FLAGS`: the subcommand, and the kernel read-ahead (KiB) set after mounting
MOUNT_COMMANDS = {"mount2:cache-full": ("mount2", None), "mount2:cache-full+bdi-16M": ("mount2", 16384)}


def server_name(kind: str) -> str:
    """Which server the figures are from: for RustFS, which build of it (the image's own label)."""
    if kind != "rustfs":
        return SERVERS[kind]
    from components.hosts.docker_facts import image_label
    from components.storage.kinds import SOURCE_LABEL, describe
    from tests.s3_under_test import RUSTFS_IMAGE

    return describe("rustfs", RUSTFS_IMAGE, image_label(RUSTFS_IMAGE, SOURCE_LABEL)) + ", on loopback"


def _commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return out.stdout.strip()


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    began = time.monotonic()
    result = fn(*args, **kwargs)
    return time.monotonic() - began, result


# ------------------------------------------------------------------------------------- fixtures
class Server:
    def __init__(self, root: Path, kind: str) -> None:
        self.root = root
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        self.server = ExternalServer(root, ACCESS, SECRET, kind=kind)
        self.endpoint = self.server.endpoint
        self.client = s3.client(self.endpoint, ACCESS, SECRET, max_pool=64)

    def fresh_bucket(self, name: str) -> str:
        self.client.create_bucket(Bucket=name)
        return name

    def rclone_env(self) -> dict[str, str]:
        return {"PATH": os.environ["PATH"], "HOME": str(self.root.parent),
                "RCLONE_CONFIG_BENCH_TYPE": "s3", "RCLONE_CONFIG_BENCH_PROVIDER": "Other",
                "RCLONE_CONFIG_BENCH_ENDPOINT": self.endpoint, "RCLONE_CONFIG_BENCH_REGION": "us-east-1",
                "RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE": "true", "RCLONE_CONFIG_BENCH_ACCESS_KEY_ID": ACCESS,
                "RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY": SECRET}

    def stop(self) -> None:
        self.server.remove()


def synthetic_set(folder: Path, total: int, files: int) -> Path:
    """A multi-file safetensors-shaped set of random bytes (plus config/tokenizer), cached."""
    marker = folder / f".done-{total}-{files}"
    if marker.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 2048}))
    (folder / "tokenizer.json").write_text("{}")
    per = total // files
    for i in range(files):
        with open(folder / f"model-{i + 1:05d}-of-{files:05d}.safetensors", "wb") as fh:
            left = per
            while left:
                n = min(left, 64 * MIB)
                fh.write(os.urandom(n))
                left -= n
    marker.touch()
    return folder


# --------------------------------------------------------------------------------------- upload
def empty_bucket(server: Server, bucket: str) -> None:
    """Delete a sample's objects (the server's disk holds one copy at a time)."""
    keys = [o["Key"] for page in server.client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])]
    for i in range(0, len(keys), 1000):
        server.client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})


def bench_upload(server: Server, sources: dict[str, Path], results: dict, headline: str | None = "synthetic",
                 rounds: int = stats.SAMPLES) -> None:
    """Ours (the program's sync, its default workers) against the guide's `rclone copy
    --transfers 4` and single-stream boto3, interleaved, SAMPLES rounds, into an emptied bucket."""
    out: dict[str, dict] = {}
    for label, folder in sources.items():
        cache = WORK / "hash-cache" / f"{label}.json"
        drop_caches()
        hash_s, manifest = timed(manifest_mod.build, str(folder), str(cache))
        bucket = server.fresh_bucket(f"up-{label}")
        single = TransferConfig(use_threads=False, multipart_threshold=64 * MIB, multipart_chunksize=64 * MIB)
        props = {"endpoint": server.endpoint, "access_key": ACCESS, "secret_key": SECRET, "bucket": bucket,
                 "prefix": "m", "source": str(folder), "manifest": manifest}
        rclone = [shutil.which("rclone"), "copy", str(folder), f"BENCH:{bucket}/m", "--transfers", "4",
                  "--config", "/dev/null"]

        def sample(fn) -> Callable[[], float]:
            def run() -> float:
                empty_bucket(server, bucket)
                drop_caches()
                return timed(fn)[0]
            return run

        def one_by_one() -> None:
            for rel in sorted(manifest):
                server.client.upload_file(str(folder / rel), bucket, f"m/{rel}", Config=single)

        got = stats.interleaved({
            "ours": sample(lambda: sync(dict(props))),
            "rclone_copy": sample(lambda: subprocess.run(rclone, env=server.rclone_env(), check=True)),
            "boto3_single": sample(one_by_one)}, n=rounds)
        empty_bucket(server, bucket)
        sync(dict(props))      # then a no-op sync: everything there already (an `up` with no change)
        noop_s, noop = timed(sync, dict(props))
        row = {"bytes": sum(e["size"] for e in manifest.values()), "hash_cold_s": round(hash_s, 2),
               "hash_warm_s": round(timed(manifest_mod.build, str(folder), str(cache))[0], 3),
               "noop_sync_s": round(noop_s, 2), "noop_sync_bytes": noop["bytes"], "bucket": bucket,
               **{f"{k}_s": v.summary(2) for k, v in got.items()},
               "ratio_vs_rclone": stats.ratio(got["rclone_copy"], got["ours"]).summary(),
               "ratio_vs_single": stats.ratio(got["boto3_single"], got["ours"]).summary()}
        out[label] = row
        log(f"upload {label}: ours {row['ours_s']['median']} s, rclone copy {row['rclone_copy_s']['median']} s, "
            f"ratio {row['ratio_vs_rclone']['median']} (spread {row['ratio_vs_rclone']['spread']})")
    if headline is None:
        results["upload"] = {"detail": out}
        return
    syn = out[headline]
    results["upload"] = {
        "detail": out, "ours_setting": f"{DEFAULT_WORKERS[0]}x{DEFAULT_WORKERS[1]}",
        "ours_s": syn["ours_s"], "rclone_copy_s": syn["rclone_copy_s"], "boto3_single_s": syn["boto3_single_s"],
        "ratio_vs_rclone": syn["ratio_vs_rclone"], "ratio_vs_single": syn["ratio_vs_single"],
        "real_model_ratio_vs_rclone": out["real-model"]["ratio_vs_rclone"],
        "sync_noop_bytes": syn["noop_sync_bytes"] + out["real-model"]["noop_sync_bytes"]}


# ----------------------------------------------------------------------------------------- load
def read_shuffled_mmap(path: Path, seed: int = 7) -> int:
    """4 MiB pieces in a shuffled order through mmap: the access pattern of safetensors loading."""
    import mmap

    size = path.stat().st_size
    offsets = list(range(0, size, 4 * MIB))
    random.Random(seed).shuffle(offsets)
    total = 0
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        for off in offsets:
            total += len(mm[off:off + 4 * MIB])
    return total


def prefetch(path: Path, streams: int = 8, piece: int = 16 * MIB) -> int:
    """Read ``path`` through the mount with ``streams`` threads, each its own file handle over a
    different range: with --vfs-cache-mode full, rclone downloads those ranges concurrently into
    its cache, so the reader after it (vLLM) reads from local disk."""
    size = path.stat().st_size

    def read(off: int) -> int:
        with open(path, "rb", buffering=0) as fh:
            fh.seek(off)
            return len(fh.read(min(piece, size - off)))

    with ThreadPoolExecutor(max_workers=streams) as pool:
        return sum(pool.map(read, range(0, size, piece)))


def ranged_get(server: Server, bucket: str, key: str, streams: int = 16, piece: int = 8 * MIB) -> int:
    size = server.client.head_object(Bucket=bucket, Key=key)["ContentLength"]

    def get(off: int) -> int:
        end = min(off + piece, size) - 1
        return len(server.client.get_object(Bucket=bucket, Key=key, Range=f"bytes={off}-{end}")["Body"].read())

    with ThreadPoolExecutor(max_workers=streams) as pool:
        return sum(pool.map(get, range(0, size, piece)))


# the variants quick mode reads (the others lost in earlier runs: docs/PERFORMANCE.md section 10)
QUICK_VARIANTS = ("cache-full", "mount2:cache-full", "mount2:cache-full+bdi-16M")


def bench_load(server: Server, synthetic: Path, results: dict, full: bool = True) -> str:
    """One weight file (a quarter of the synthetic set), read cold and warm: 16 concurrent ranged
    GETs and local disk (the baselines) against each mount variant, interleaved, SAMPLES rounds.
    Cold: a fresh mount with an empty VFS cache and the page cache dropped. Warm: the mount's
    cache filled by one read first, then the page cache dropped (what a vLLM restart meets)."""
    bucket = "up-synthetic"
    files = sorted(p.name for p in synthetic.glob("*.safetensors"))
    key, local = f"m/{files[0]}", synthetic / files[0]
    mnt, cache = WORK / "mnt", WORK / "mount-cache"

    def through_mount(flags: list[str], fn, warm: bool, streams: int = 0, name: str = "") -> Callable[[], float]:
        """One sample; with ``streams``, a prefetch by that many readers first, timed with the read."""
        command, read_ahead = MOUNT_COMMANDS.get(name, ("mount", None))

        def run() -> float:
            mount(server, bucket, mnt, flags, cache, command, read_ahead)
            try:
                if warm:
                    fn(mnt / key)
                drop_caches()
                began = time.monotonic()
                if streams:
                    prefetch(mnt / key, streams)
                fn(mnt / key)
                return time.monotonic() - began
            finally:
                unmount(mnt)
        return run

    contenders: dict[str, Callable[[], float]] = {
        "ranged-get-16": timed_after_drop(lambda: ranged_get(server, bucket, key)),
        "local-disk:seq": timed_after_drop(lambda: read_sequential(local)),
        "local-disk:mmap": timed_after_drop(lambda: read_shuffled_mmap(local))}
    for name, flags in MOUNT_VARIANTS.items():
        if not full and name not in QUICK_VARIANTS:
            continue
        contenders[f"{name}:seq_cold"] = through_mount(flags, read_sequential, False, name=name)
        contenders[f"{name}:seq_warm"] = through_mount(flags, read_sequential, True, name=name)
    ours = MOUNT_VARIANTS[CURRENT_DEFAULT]
    for streams in PREFETCH_STREAMS if full else ():   # cold: the prefetch's own time counts
        contenders[f"{CURRENT_DEFAULT}+prefetch-{streams}:seq_cold"] = through_mount(
            ours, read_sequential, False, streams, name=CURRENT_DEFAULT)
    # cold as a start meets it: the warm-up (components/mounting/warm.py) fetching the file into the VFS cache
    contenders[f"{CURRENT_DEFAULT}:warm_up_cold"] = through_mount(
        ours, lambda p: warm_tool.warm_files([(str(p), p.stat().st_size)]), False, name=CURRENT_DEFAULT)
    for pattern in ("mmap_cold", "mmap_warm"):
        contenders[f"{CURRENT_DEFAULT}:{pattern}"] = through_mount(ours, read_shuffled_mmap, pattern.endswith("warm"),
                                                                   name=CURRENT_DEFAULT)
    got = stats.interleaved(contenders)
    results["load"] = {"file_bytes": local.stat().st_size, "samples": got,
                       "detail": {k: v.summary(2) for k, v in got.items()}}
    for k, v in results["load"]["detail"].items():
        log(f"load {k}: median {v['median']} s (min {v['min']}, max {v['max']})")
    set_ours(results, CURRENT_DEFAULT)
    return CURRENT_DEFAULT


def timed_after_drop(fn) -> Callable[[], float]:
    def run() -> float:
        drop_caches()
        return timed(fn)[0]
    return run


def set_ours(results: dict, ours: str) -> None:
    """The headline ratios, as medians of per-round ratios (1.0: as fast as the baseline)."""
    got = results["load"]["samples"]
    variants = {name: {"cold_ratio_vs_ranged_get": stats.ratio(got["ranged-get-16"], got[f"{name}:seq_cold"]).summary(),
                       "warm_ratio_vs_local": stats.ratio(got["local-disk:seq"], got[f"{name}:seq_warm"]).summary()}
                for name in MOUNT_VARIANTS if f"{name}:seq_cold" in got}
    results["load"].update({
        "ours_variant": ours, "ours_flags": MOUNT_VARIANTS[ours], "variants": variants,
        # cold: the warm-up's fetch through the mount (what a cold start does) against 16 ranged GETs
        "cold_ratio_vs_ranged_get": stats.ratio(got["ranged-get-16"], got[f"{ours}:warm_up_cold"]).summary()
        if f"{ours}:warm_up_cold" in got else variants[ours]["cold_ratio_vs_ranged_get"],
        "cold_sequential_read_ratio_vs_ranged_get": variants[ours]["cold_ratio_vs_ranged_get"],
        "warm_ratio_vs_local": variants[ours]["warm_ratio_vs_local"],
        "prefetch_cold_ratio_vs_ranged_get": {
            n: stats.ratio(got["ranged-get-16"], got[f"{ours}+prefetch-{n}:seq_cold"]).summary()
            for n in PREFETCH_STREAMS if f"{ours}+prefetch-{n}:seq_cold" in got},
        "mmap_cold_ratio_vs_ranged_get": stats.ratio(got["ranged-get-16"], got[f"{ours}:mmap_cold"]).summary(),
        "mmap_warm_ratio_vs_local": stats.ratio(got["local-disk:mmap"], got[f"{ours}:mmap_warm"]).summary(),
    })


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


def bench_big_stack(model: Path, fields: dict, kind: str, quick_preview_s: float | None) -> dict:
    """The 3.4 GB model through the program, single samples: `up` from an empty stack (upload, mount,
    cold load, first completion), a no-op preview (against the quick run's, a 1 GiB model), then a
    model change each way: to ``loadFormat: runai_streamer`` (the container replaced, the weights
    streamed from the bucket) and back to the mount (its VFS cache from the first `up` still on disk:
    a warm restart)."""
    from tests.pulumi_cli import Stack

    stack = Stack(ROOT, f"bench-big-{secrets.token_hex(3)}")
    stack.init()
    keys = {"rustfsAccessKey": f"bench-{secrets.token_hex(8)}", "rustfsSecretKey": secrets.token_urlsafe(18)}
    m = {"name": "big", "source": str(model), "prefix": "big", "port": free_port(), "kvCacheSpaceGib": 1, **fields}
    cfg = {"environment": "test", "namePrefix": stack.name, **stack_settings(kind), "rustfsPort": free_port(),
           "bindAddress": "127.0.0.1", "mountPath": f"/mnt/{stack.name}",
           "mountCacheDir": str(WORK / "stack-big-cache"), "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 1500}

    def configure(load_format: str) -> None:
        stack.write_config({**cfg, "models": [{**m, "loadFormat": load_format}]})
        for k, v in keys.items():
            stack.set(k, v, secret=True)
    try:
        configure("mount")
        drop_caches()
        stack.run("up", "--yes", "--skip-preview", label="up")
        stack.run("preview", "--expect-no-changes", label="noop_preview")
        for load_format, label in (("runai_streamer", "to_streamer"), ("mount", "to_mount")):
            configure(load_format)
            drop_caches()
            stack.run("up", "--yes", "--skip-preview", label=label)
        t = stack.timings
        return {"up_s": t["up"], "preview_noop_s": t["noop_preview"],
                "preview_ratio_vs_quick": round(t["noop_preview"] / quick_preview_s, 2) if quick_preview_s else None,
                "change_to_streamer_s": t["to_streamer"], "change_to_mount_warm_s": t["to_mount"],
                "streamer_ratio_vs_mount_warm": round(t["to_streamer"] / t["to_mount"], 2),
                "weights_bytes": sum(p.stat().st_size for p in model.glob("*.safetensors"))}
    finally:
        _drop_stack(stack)
        shutil.rmtree(WORK / "stack-big-cache", ignore_errors=True)


# ------------------------------------------------------------------------------- stack: up, preview
def bench_stack(full: bool, results: dict, program: Path = ROOT, label: str = "stack", kind: str = "rustfs") -> None:
    """up (empty -> first completion), no-op up and no-op preview of a fresh stack of the program
    in the folder ``program`` (this checkout, or a worktree of an earlier revision)."""
    from tests.pulumi_cli import Stack  # the same thin CLI wrapper the tests use

    tmp = WORK / label
    shutil.rmtree(tmp, ignore_errors=True)
    model = tmp / MODEL.name
    shutil.copytree(MODEL, model, ignore=shutil.ignore_patterns(".complete"))
    pad_total = (5 if full else 1) * 2**30
    for i in range(4):  # weights-sized padding vLLM ignores: the model the stack moves is 1 or 5 GB
        with open(model / f"pad-{i}.dat", "wb") as fh:
            left = pad_total // 4
            while left:
                n = min(left, 64 * MIB)
                fh.write(os.urandom(n))
                left -= n
    stack = Stack(program, f"bench-{secrets.token_hex(3)}")
    if program != ROOT:  # that revision's components, not ours
        stack.env = {**stack.env, "PYTHONPATH": str(program)}
    stack.init()
    try:
        name = stack.name
        stack.write_config({
            "environment": "test", "namePrefix": name, **stack_settings(kind), "rustfsPort": free_port(),
            "bindAddress": "127.0.0.1", "mountPath": f"/mnt/{name}", "mountCacheDir": str(tmp / "cache"),
            "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 900,
            "mountFlags": results.get("load", {}).get("ours_flags", []),
            "models": [{"name": "smollm2", "source": str(model), "prefix": MODEL.name, "port": free_port(),
                        "maxModelLen": 512, "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"]}]})
        stack.set("rustfsAccessKey", f"bench-{secrets.token_hex(8)}", secret=True)
        stack.set("rustfsSecretKey", secrets.token_urlsafe(18), secret=True)
        drop_caches()
        breakdown = _breakdown(stack.run("up", "--yes", "--skip-preview", label="up").stdout)
        volume = Path(docker.from_env().volumes.get(f"{name}-data").attrs["Mountpoint"])
        before = stored_objects(volume, kind)       # the objects the server keeps, not its own state
        stack.run("up", "--yes", label="noop_up")
        after = stored_objects(volume, kind)
        rewritten = sum(after[k][0] for k in after if after[k] != before.get(k))
        stack.run("preview", "--expect-no-changes", label="noop_preview")
        t_manifest, _ = timed(manifest_mod.build, str(model),
                              str(program / ".state" / "hash-cache" / _cache_name(model)))
        results["up"] = {"total_s": stack.timings["up"], "noop_s": stack.timings["noop_up"],
                         "by_resource_s": breakdown, "model_bytes": sum(p.stat().st_size for p in model.iterdir())}
        results["preview"] = {"noop_s": stack.timings["noop_preview"], "model_gib": round(pad_total / 2**30 + 0.5, 1)}
        results["upload"]["noop_bytes"] = rewritten
        results["upload"]["noop_s"] = round(t_manifest, 3)
        log(f"{label}: up {results['up']}, preview {results['preview']}")
    finally:
        _drop_stack(stack)


def _drop_stack(stack) -> None:
    """Destroy a bench stack, remove it and its data volume."""
    stack.run("destroy", "--yes", "--skip-preview", check=False)
    stack.remove()
    try:
        docker.from_env().volumes.get(f"{stack.name}-data").remove(force=True)
    except docker.errors.NotFound:
        pass


def bench_before(full: bool, ref: str, results: dict, kind: str) -> None:
    """The stack part with the program at ``ref``: a git worktree of it, same venv, same images."""
    tree = WORK / f"before-{ref}"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
    shutil.rmtree(tree, ignore_errors=True)
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), ref], check=True,
                   capture_output=True)
    try:
        part: dict = {"upload": {}, "load": results.get("load", {})}
        bench_stack(full, part, program=tree, label=f"stack-before-{ref}", kind=kind)
        results["before"] = {"ref": ref, "up": part["up"], "preview": part["preview"]}
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


def _cache_name(model: Path) -> str:
    import hashlib

    return f"hashes-{hashlib.sha256(os.path.realpath(model).encode()).hexdigest()[:16]}.json"


def _breakdown(output: str) -> dict[str, float]:
    """Seconds per resource, from the engine's progress lines ("<type> <name> created (51s)")."""
    spans: dict[str, float] = {}
    for m in re.finditer(r"(?:dynamic/rustfs-vllm:\w+|docker:index(?:/\w+)?:\w+|command:local:Command) (\S+) "
                         r"created \(([0-9.]+)s\)", output):
        spans[m.group(1)] = float(m.group(2))
    return spans


# ----------------------------------------------------------------------------------------- main
def parse_args() -> argparse.Namespace:
    """The command line; which part runs is main's choice, from these flags."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", choices=("rustfs", "standin"), default="rustfs",
                    help="rustfs: real RustFS (local build); standin: rclone serve s3 (not RustFS)")
    ap.add_argument("--full", action="store_true", help="4 GiB synthetic set and a 5 GiB model for preview")
    ap.add_argument("--skip-vllm", action="store_true", help="leave out the vLLM load comparison")
    ap.add_argument("--skip-big", action="store_true", help="leave out the 3.4 GB model (bench.big_model)")
    ap.add_argument("--big-only", action="store_true",
                    help="only the 3.4 GB model's upload and loads, added to results-<server>.json as big")
    ap.add_argument("--load-only", action="store_true",
                    help="only the mount read comparison, into results-<server>-load.json")
    ap.add_argument("--stack-only", action="store_true", help="only the stack part (up, no-op up, no-op preview)")
    ap.add_argument("--skip-stack", action="store_true", help="leave out the stack part")
    ap.add_argument("--starts-only", action="store_true",
                    help="only the vLLM starts per read path (section 14): both models, then the compile restart")
    ap.add_argument("--before", metavar="REF", help="also run the stack part with the program at git revision REF "
                                                    "and report current/REF ratios")
    ap.add_argument("--preview-5g", action="store_true",
                    help="only the stack part with a 5 GiB model, added to the existing results-<server>.json as "
                         "preview.noop_5g_s (does preview time grow with model size?)")
    ap.add_argument("--router", action="store_true",
                    help="only the stack's one endpoint against a model's port, and cache_aware against round_robin "
                         "(bench/router.py: vllm bench serve), written to bench/results-router.json")
    ap.add_argument("--hosts", action="store_true",
                    help="only `up` of one model on one simulated serving host and on two (tests/hosts/sim-hosts), "
                         "added to results-<server>.json as hosts")
    return ap.parse_args()


def results_file(kind: str, suffix: str = "") -> Path:
    """bench/results-<server><suffix>.json: the one place a run's figures go."""
    return ROOT / "bench" / f"results-{kind}{suffix}.json"


@contextmanager
def fresh_server(kind: str) -> Iterator[Server]:
    """A fresh server on WORK/s3data, stopped and its data removed however the part ends."""
    server = Server(WORK / "s3data", kind)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(WORK / "s3data", ignore_errors=True)


def synthetic_bytes(full: bool) -> int:
    """The synthetic set's size: 1 GiB quick, 4 GiB full."""
    return (4 if full else 1) * 2**30


def run_hosts(kind: str) -> None:
    """--hosts: `up` on one simulated serving host and on two, added to results-<server>.json."""
    from bench.hosts import bench_hosts

    out = results_file(kind)
    results = json.loads(out.read_text()) if out.exists() else {}
    bench_hosts(WORK, results, kind)
    out.write_text(json.dumps(results, indent=2))
    log(f"hosts: {results['hosts']}")


def run_preview_5g(kind: str) -> None:
    """--preview-5g: the stack part with a 5 GiB model, set beside an earlier run's quick preview."""
    out = results_file(kind)
    results = json.loads(out.read_text())
    part: dict = {"upload": {}, "load": results.get("load", {})}
    bench_stack(True, part, kind=kind)
    results["preview"]["noop_5g_s"] = part["preview"]["noop_s"]
    results["preview"]["ratio_5g_vs_quick"] = round(part["preview"]["noop_s"] / results["preview"]["noop_s"], 2)
    results["up_5g"] = part["up"]
    out.write_text(json.dumps(results, indent=2))
    log(f"preview: {results['preview']}")


def run_big_only(kind: str, full: bool) -> None:
    """--big-only: the 3.4 GB model's upload and starts, added to results-<server>.json as big."""
    out = results_file(kind)
    results = json.loads(out.read_text()) if out.exists() else {}
    with fresh_server(kind) as server:
        model = big_model_uploaded(server, results, 5 if full else 1)
        start.bench_all(server, results, {"big": (model, "up-big-model", weights.BIG_ARGS)}, True,
                        save=lambda: save(results, kind))   # a run stopped early keeps the starts
    results["start"]["big"]["machine_load"] = stats.LOAD.summary()
    results["noisy"] = noisy(results)
    out.write_text(json.dumps(results, indent=2))
    table(results)


def new_results(args: argparse.Namespace) -> dict:
    """A fresh run's results, headed by what was measured where (mode, time, server, commit)."""
    results: dict = {"mode": "full" if args.full else "quick", "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                     "server": server_name(args.server), "commit": _commit(), "upload": {}}
    return results


def run_load_only(args: argparse.Namespace, results: dict) -> None:
    """--load-only: the mount read comparison alone, into results-<server>-load.json."""
    synthetic = synthetic_set(WORK / "synthetic", synthetic_bytes(args.full), 4)
    with fresh_server(args.server) as server:
        uploaded(server, "up-synthetic", synthetic, "synthetic")
        bench_load(server, synthetic, results)
    results["load"].pop("samples", None)
    results["machine_load"], results["noisy"] = stats.LOAD.summary(), noisy(results)
    out = results_file(args.server, "-load")
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps({k: v for k, v in results["load"].items() if "ratio" in k or k == "variants"}, indent=1))


def run_starts_only(args: argparse.Namespace, results: dict) -> None:
    """--starts-only: the vLLM starts per read path (both models, then the compile restart)."""
    results["mode"] += ", starts only"
    with fresh_server(args.server) as server:
        uploaded(server, "up-real-model", MODEL, "real-model")
        bench_starts(server, results, args.full, big=not args.skip_big, save=lambda: save(results, args.server))


def run_reads(args: argparse.Namespace, results: dict) -> None:
    """Upload, mount reads and (unless --skip-vllm) the vLLM starts, on one server and one data set."""
    synthetic = synthetic_set(WORK / "synthetic", synthetic_bytes(args.full), 4)
    with fresh_server(args.server) as server:
        bench_upload(server, {"synthetic": synthetic, "real-model": MODEL}, results)
        bench_load(server, synthetic, results, full=args.full)
        save(results, args.server)
        if not args.skip_vllm:
            bench_starts(server, results, args.full, big=not args.skip_big,
                         save=lambda: save(results, args.server))


def run_stack_parts(args: argparse.Namespace, results: dict, skip_stack: bool) -> None:
    """The stack part at --before REF, then with this checkout, right after it; then their ratios."""
    if args.before:
        bench_before(args.full, args.before, results, args.server)
    if not skip_stack:
        bench_stack(args.full, results, kind=args.server)
    if args.before and not skip_stack:
        results["vs_before"] = vs_before(results, args.before)


def vs_before(results: dict, ref: str) -> dict:
    """This checkout's stack figures over those at ``ref`` (below 1: faster now)."""
    b = results["before"]
    return {
        "ref": ref,
        "up.total_s": round(results["up"]["total_s"] / b["up"]["total_s"], 2),
        "up.noop_s": round(results["up"]["noop_s"] / b["up"]["noop_s"], 2),
        "preview.noop_s": round(results["preview"]["noop_s"] / b["preview"]["noop_s"], 2)}


def write_results(results: dict, kind: str, t_run: float) -> None:
    """The run's end: raw samples dropped, machine load, noisy figures and run time added; written, tabled."""
    results.get("load", {}).pop("samples", None)
    results["machine_load"] = stats.LOAD.summary()
    results["noisy"] = noisy(results)
    results["run_seconds"] = round(time.monotonic() - t_run)
    out = results_file(kind)
    out.write_text(json.dumps(results, indent=2))
    table(results)
    print(f"\nwritten: {out}")


def run_measured(args: argparse.Namespace) -> None:
    """A run that writes fresh results: --load-only, or the reads (or --starts-only), then the stack part."""
    t_run = time.monotonic()
    results = new_results(args)
    if args.load_only:
        run_load_only(args, results)
        return
    if args.starts_only:
        run_starts_only(args, results)
    elif not args.stack_only:
        run_reads(args, results)
    run_stack_parts(args, results, skip_stack=args.skip_stack or args.starts_only)
    write_results(results, args.server, t_run)


def main() -> None:
    """Run the part the flags name: one that adds to an earlier run's results, or a fresh run."""
    args = parse_args()
    if args.router:
        from bench.router import run as run_router

        print(json.dumps(run_router(), indent=2))
    elif args.hosts:
        run_hosts(args.server)
    elif args.preview_5g:
        run_preview_5g(args.server)
    else:
        WORK.mkdir(parents=True, exist_ok=True)
        if args.big_only:
            run_big_only(args.server, args.full)
        else:
            run_measured(args)


def start_table(st: dict) -> None:
    """start.<model>: the default path's cold and warm ratios, then every path's phases (medians)."""
    for name in ("smollm2", "big"):
        if name not in st:
            continue
        m = st[name]
        print(f"\nstart, {name} (default path {st.get('default_path')}): ratios vs local disk, median (spread)")
        for temp in ("cold", "warm"):
            for k, v in m[temp].items():
                if isinstance(v, dict):
                    print(f"  start.{name}.{temp}.{k:40} {v['median']:>6} ({v['spread']:.2f}){' NOISY' if v['noisy'] else ''}")
        if "warm_first_token_vs_baseline" in m:
            v = m["warm_first_token_vs_baseline"]
            print(f"  start.{name}.warm_first_token_vs_baseline (no --enforce-eager) {v['median']:>6} ({v['spread']:.2f})")
        print(f"  {'path':12} " + " ".join(f"{p:>14}" for p in ("copy", "load_begins", "load", "ready", "first_token")))
        for path, ph in m["detail"]["phases"].items():
            print(f"  {path:12} " + " ".join(f"{ph[p]['median'] if p in ph else '':>14}"
                                           for p in ("copy", "load_begins", "load", "ready", "first_token")))


def uploaded(server: Server, bucket: str, folder: Path, label: str) -> None:
    """``folder`` in a fresh ``bucket`` under prefix m, by the program's own sync (not timed)."""
    server.fresh_bucket(bucket)
    sync({"endpoint": server.endpoint, "access_key": ACCESS, "secret_key": SECRET, "bucket": bucket, "prefix": "m",
          "source": str(folder), "manifest": manifest_mod.build(str(folder), str(WORK / "hash-cache" / f"{label}.json"))})


def save(results: dict, server: str) -> None:
    """results-<server>.json as far as the run got (its ``partial`` flag until the end)."""
    out = ROOT / "bench" / f"results-{server}.json"
    out.write_text(json.dumps({**results, "partial": True, "machine_load": stats.LOAD.summary()}, indent=2,
                              default=lambda o: o.summary(2) if isinstance(o, stats.Samples) else str(o)))


def noisy(results: dict, path: str = "") -> list[str]:
    """Every figure (a summary with samples) whose spread is above stats.SPREAD_FLAG."""
    found = []
    for k, v in results.items():
        if isinstance(v, dict):
            found += [f"{path}{k}"] if "spread" in v and v.get("noisy") else noisy(v, f"{path}{k}.")
    return found


def table(r: dict) -> None:
    if r.get("vs_before"):
        v, b = r["vs_before"], r["before"]
        print(f"\nstack, this checkout vs {v['ref']} (ratio < 1: faster now)")
        for key, before, now in (("up.total_s", b["up"]["total_s"], r["up"]["total_s"]),
                                 ("up.noop_s", b["up"]["noop_s"], r["up"]["noop_s"]),
                                 ("preview.noop_s", b["preview"]["noop_s"], r["preview"]["noop_s"])):
            print(f"{key:20} before {before:>8}  now {now:>8}  ratio {v[key]}")
    if "ours_s" not in r.get("upload", {}):
        start_table(r.get("start", {}))
        return
    up, ld = r["upload"], r["load"]
    rows = [
        ("upload.ours_s", up["ours_s"], f"our upload ({up['ours_setting']} workers)"),
        ("upload.rclone_copy_s", up["rclone_copy_s"], "guide: rclone copy --transfers 4"),
        ("upload.ratio_vs_rclone", up["ratio_vs_rclone"], "target >= 1.3"),
        ("upload.ratio_vs_single", up["ratio_vs_single"], "vs single-stream boto3"),
        ("upload.noop_bytes", up.get("noop_bytes"), "target 0"),
        ("upload.noop_s", up.get("noop_s"), "target <= 2"),
        ("preview.noop_s", r.get("preview", {}).get("noop_s"), f"model {r.get('preview', {}).get('model_gib')} GiB"),
        ("load.cold_ratio_vs_ranged_get", ld["cold_ratio_vs_ranged_get"], f"target >= 0.8 ({ld['ours_variant']})"),
        ("load.warm_ratio_vs_local", ld["warm_ratio_vs_local"], "target >= 0.8"),
        ("up.total_s", r.get("up", {}).get("total_s"), "empty -> first completion"),
        ("up.noop_s", r.get("up", {}).get("noop_s"), "pulumi up with nothing changed"),
    ]
    print(f"\n{'key':36} {'median':>8} {'min':>8} {'max':>8}  note (NOISY: spread > "
          f"{stats.SPREAD_FLAG:.0%})")
    for k, v, note in rows:
        if isinstance(v, dict):
            flag = "NOISY " if v.get("noisy") else ""
            print(f"{k:36} {v['median']:>8} {v['min']:>8} {v['max']:>8}  {flag}{note}")
        else:
            print(f"{k:36} {str(v):>8} {'':>8} {'':>8}  {note}")
    start_table(r.get("start", {}))
    if r.get("big", {}).get("upload"):
        b = r["big"]["upload"]
        print(f"big model upload: ours {b['ours_s']['median']} s, rclone copy {b['rclone_copy_s']['median']} s, "
              f"ratio {b['ratio_vs_rclone']['median']} (spread {b['ratio_vs_rclone']['spread']})")
    for name, v in ld.get("variants", {}).items():
        c, w = v["cold_ratio_vs_ranged_get"], v["warm_ratio_vs_local"]
        print(f"  mount {name:28} cold {c['median']:>5} (spread {c['spread']:.2f})  warm {w['median']:>5} "
              f"(spread {w['spread']:.2f})")
    print(f"machine load (1 min): {r.get('machine_load')}")


if __name__ == "__main__":
    main()
