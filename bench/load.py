"""The mount read comparison: one weight file read cold and warm through each rclone mount variant,
against 16 concurrent ranged GETs and local disk, interleaved; the headline ratios are those of
CURRENT_DEFAULT, the program's own mount."""
from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from bench import stats
from bench.machine import MIB, WORK, drop_caches, log, mount, read_sequential, timed, unmount
from bench.server import Server
from components.config import DEFAULT_MOUNT_FLAGS
from components.mounting import warm as warm_tool

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
