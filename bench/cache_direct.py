"""What the warm mount's load costs over rclone's own files (issue 46, the warm path's limit): vLLM's
warm starts of one model through the mount (the program's read path, its VFS cache full: a restart)
against vLLM reading the files of that full VFS cache directly, rclone out of the way, and local disk;
interleaved rounds.

The direct path is not a read path the program has: it says what a start would cost if the bytes that
rclone already holds on the serving host's disk did not cross FUSE (rclone copies every byte twice).
Its cache is filled the way the warm path's is (the warm-up, unpaced, through a fresh mount), so its
files have the same layout on disk; the mount is gone before vLLM starts. The page cache is dropped
before every start.

    python -m bench.cache_direct SIZE ROUNDS    (root; SIZE: large, big or smollm2;
                                                 writes bench/results-cache-direct.json)
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from bench import start, stats, weights
from bench.fresh_memory import page_reporting, prefault
from bench.machine import ROOT, WORK, drop_caches, mount, unmount
from bench.models import SIZES, probe_paths
from bench.server import fresh_server
from components.config import DEFAULT_MOUNT_FLAGS
from components.config.schema import DEFAULT_MOUNT_COMMAND, DEFAULT_READ_AHEAD_KB
from components.mounting import warm

OUT = ROOT / "bench" / "results-cache-direct.json"


def cache_folder(vfs: Path) -> Path:
    """The model's folder in rclone's VFS cache (``vfs``/vfs/<remote>/<bucket>/m): the one holding config.json."""
    found = [d for d in (vfs / "vfs").rglob("m") if d.is_dir() and (d / "config.json").is_file()]
    if len(found) != 1:
        raise RuntimeError(f"expected one model folder in {vfs}/vfs, found {found}")
    return found[0]


def direct(p: start.Paths):
    """One start of vLLM on the files of a full VFS cache, the mount gone."""
    def run() -> float:
        mount(p.server, p.bucket, p.mnt, list(DEFAULT_MOUNT_FLAGS), p.vfs, DEFAULT_MOUNT_COMMAND, DEFAULT_READ_AHEAD_KB)
        try:
            warm.warm(str(p.mnt / "m"), pace=0)         # as the warm path fills it (not timed)
        finally:
            unmount(p.mnt)
        folder = cache_folder(p.vfs)
        drop_caches()
        return p._keep("cache-direct", weights.vllm_start(WORK, p.args, source_dir=folder.parent, prefix=folder.name))
    return run


def probe(size: str, rounds: int) -> dict:
    with page_reporting(True) as state, fresh_server("rustfs") as server:
        t = time.monotonic()
        written = prefault()
        p = probe_paths(server, size)
        got = stats.interleaved({"local": p.local, "mount:warm": p.mounted(True), "cache-direct": direct(p)}, n=rounds)
        out = start.summary(p, got)
    return {"size": size, "model": p.model.name, "rounds": rounds, "page_reporting": state, "prefault": written,
            "seconds": round(time.monotonic() - t), **out}


def main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[0] not in SIZES or not argv[1].isdigit() or int(argv[1]) < 1:
        raise SystemExit("usage: python -m bench.cache_direct large|big|smollm2 ROUNDS")
    WORK.mkdir(parents=True, exist_ok=True)
    result = probe(argv[0], int(argv[1]))
    results = json.loads(OUT.read_text()) if OUT.exists() else {}
    results[argv[0]] = result
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    start.log_medians(result)


if __name__ == "__main__":
    main(sys.argv[1:])
