"""The mount's levers for the warm-up and the warm read (issue 36), on one model: per variant of the
mount (`rclone mount` / `mount2`, flags, the bdi read-ahead), cold: the warm-up (warm.py) from an
empty VFS cache, timed; then warm: the model's files read as vLLM's default loader does (mmap, the
pages touched in order) and with read(), the page cache dropped before each; local disk the same.
Interleaved rounds, medians (bench.stats). ``python -m bench.levers MODEL_DIR [ROUNDS]`` (root)."""
from __future__ import annotations

import json
import mmap
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

from bench import stats
from bench.load import ranged_get
from bench.machine import WORK, drop_caches, log, mount, unmount
from bench.server import fresh_server, uploaded
from components.config import DEFAULT_MOUNT_FLAGS
from components.mounting import warm

STREAMS = ["--vfs-read-chunk-streams", "8", "--vfs-read-chunk-size", "16M"]
VARIANTS: dict[str, tuple[str, list[str], int | None]] = {
    "mount": ("mount", list(DEFAULT_MOUNT_FLAGS), None),
    "mount+streams-8": ("mount", [*DEFAULT_MOUNT_FLAGS, *STREAMS], None),
    "mount2+bdi-16M": ("mount2", list(DEFAULT_MOUNT_FLAGS), 16384),
    "mount2+bdi-16M+streams-8": ("mount2", [*DEFAULT_MOUNT_FLAGS, *STREAMS], 16384),
}


def weights_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix == ".safetensors")


def mmap_touch(files: list[Path]) -> int:
    """Every page of every file touched in order through a private read-only map (vLLM's lazy load)."""
    n = 0
    for f in files:
        with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as m:
            for off in range(0, len(m), 4096):
                n += m[off]
    return n


def read_all(files: list[Path]) -> int:
    n = 0
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while chunk := fh.read(16 << 20):
                n += len(chunk)
    return n


def timed(fn: Callable[[], object]) -> float:
    drop_caches()
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def main(model: Path, rounds: int) -> dict:
    size = sum(p.stat().st_size for p in model.iterdir() if p.is_file())
    out: dict = {"model": model.name, "bytes": size, "rounds": rounds, "variants": {n: v[:1] + (v[1], v[2]) for n, v in VARIANTS.items()}}
    with fresh_server("rustfs") as server:
        uploaded(server, "levers", model, "levers")
        mnt, cache = WORK / "mnt-levers", WORK / "cache-levers"
        key = f"m/{weights_of(model)[0].name}"

        def variant(name: str) -> Callable[[], float]:
            command, flags, ra = VARIANTS[name]

            def run() -> float:
                mount(server, "levers", mnt, flags, cache, command, ra)
                try:
                    cold = timed(lambda: warm.warm(str(mnt / "m"), pace=0))   # the fetch itself, unpaced
                    got.setdefault(f"{name}:mmap_warm", []).append(timed(lambda: mmap_touch(weights_of(mnt / "m"))))
                    got.setdefault(f"{name}:read_warm", []).append(timed(lambda: read_all(weights_of(mnt / "m"))))
                    return cold
                finally:
                    unmount(mnt)
            return run

        got: dict[str, list[float]] = {}

        def local() -> float:
            got.setdefault("local:read", []).append(timed(lambda: read_all(weights_of(model))))
            return timed(lambda: mmap_touch(weights_of(model)))

        contenders = {"local:mmap": local, "ranged-get-16:first-shard": lambda: timed(lambda: ranged_get(server, "levers", key)),
                      **{f"{n}:warm_up_cold": variant(n) for n in VARIANTS}}
        try:
            res = stats.interleaved(contenders, n=rounds)
        finally:
            shutil.rmtree(cache, ignore_errors=True)       # a copy of the model: not left on the disk
        figures = {k: v.summary(2) for k, v in res.items()}
        figures |= {k: stats.Samples(v).summary(2) for k, v in got.items()}
        out["seconds"] = figures
        out["mb_per_s"] = {k: round(size / 1e6 / v["median"]) for k, v in figures.items() if not k.startswith("ranged")}
        out["vs_local_mmap"] = {k: round(v["median"] / figures["local:mmap"]["median"], 2) for k, v in figures.items()
                                if k.endswith(("mmap_warm", "read_warm"))}
    return out


if __name__ == "__main__":
    result = main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 3)
    path = Path(__file__).resolve().parent / "results-levers.json"
    path.write_text(json.dumps(result, indent=2))
    log(json.dumps({k: result[k] for k in ("mb_per_s", "vs_local_mmap")}, indent=1))
