"""Why a cold start through the mount begins to load later than a start from local disk (issue 46,
item 3): vLLM's cold starts of one model, local disk against the mount with the program's entrypoint
(the warm-up while vLLM boots), with one thing about the fetch changed per variant, interleaved.

A variant is a name made of these words, joined by ``+``:

- ``paced``: the warm-up's pace as it is (components/mounting/warm.py: RATE_PER_CPU per core);
  ``unpaced``: no pace (the warm-up fetches as fast as rclone goes);
- the fetch at the program's CPU weight (keeper_tool.FETCH_CPU_SHARES: rclone in a cgroup of that weight, as
  in its keeper container, and RustFS's container at it; bench.machine.mount, bench.server) unless
  ``unweighted``: rclone in the root cgroup at nice 0 and RustFS's container at Docker's default 1024, as
  they were before (vLLM's containers are at 1024 in every variant);
- ``yield``: the fetch at the lowest CPU weight: every thread of rclone at nice 19 and RustFS's container at
  ``--cpu-shares 2`` (with the program's weight, rclone's nice weighs only inside its cgroup);
- ``apart``: RustFS and rclone on the last core, every vLLM container (local disk's too) on the others
  (for the whole run: in every variant or in none);
- ``io-idle``: every thread of rclone and of RustFS in the idle I/O class (``ionice -c 3``; this machine's
  scheduler, mq-deadline, serves the classes in order): the store's reads wait for vLLM's boot's;
- ``store-cached``: RustFS's data read into the page cache before the start (the store's disk is not
  read during it, as where RustFS runs on another machine);
- ``cache-in-memory``: rclone's VFS cache on /dev/shm (the fetch writes nothing to the disk);
- ``prefetch``, ``eager``: vLLM's ``--safetensors-load-strategy`` for the start through the mount (local disk's
  start keeps vLLM's default): ``prefetch`` reads the shards into the page cache in 8 threads beside the
  loader, ``eager`` reads each shard whole before taking its tensors, instead of mapping it;
- ``no-boot-wait``: the warm-up does not wait while vLLM's processes read the disk (warm.py's BOOT_READS 0,
  as before 2026-12-07; the results of 2026-12-07 01:16 name it the other way: ``boot-reads`` where it
  waited); ``wait-short``: the wait for a fetch shorter than warm.py's SHORT_FETCH too (SHORT_FETCH 0, as at
  bc5cb79; the SmolLM2 results of 2026-12-07 02:35 ran before SHORT_FETCH, so their ``paced`` waited);
  ``two-workers``: the warm-up in 2 threads instead of 8 (fewer reads of the store's disk at once);
  ``pace-x2``: the pace doubled (RATE_PER_CPU 200 MB/s per core);
- ``warm``: the VFS cache full before the start (filled unpaced through the mount, as bench.start's warm
  path does: a restart), instead of empty;
- ``cache-hot``: rclone's VFS cache files read into the page cache after the drop, before the start (not
  timed): what a load through the mount costs when rclone's reads of its cache do not wait on the disk;
- ``no-readahead``: without the read-ahead of rclone's cache that every mount start here has, as the
  program's keeper does once it has mounted (``vfs_cache.read_cache_ahead`` in a thread started just before
  the container, beside vLLM's boot: the kernel reads the cache files that rclone holds whole,
  ``POSIX_FADV_WILLNEED`` per MiB, in the warm-up's order, no copy; with an empty cache it reads nothing).
  Results before it (2026-12-06 21:47) name it the other way: ``cache-readahead`` where it was done.

Every start drops the page cache first (then ``store-cached`` reads the store's data back). The free
page reporting of this VM is held back and the machine's free memory written once before the starts
(bench/fresh_memory.prefault: memory the host has not backed yet costs its first touch). Phases from vLLM's
own log lines (bench.weights): ``load_begins`` against local disk's is the delay this probe looks for.

    python -m bench.boot_delay SIZE ROUNDS VARIANT[,VARIANT...]
        (root; SIZE: large, big or smollm2; writes bench/results-boot-delay.json)
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import docker.models.containers

from bench import start, stats, weights
from bench.fresh_memory import page_reporting, prefault
from bench.machine import ROOT, WORK, drop_caches, each_thread, mount, rclone_pid, unmount, unweighted
from bench.models import SIZES, probe_paths
from bench.server import Server, fresh_server
from components.config import DEFAULT_MOUNT_FLAGS
from components.config.schema import DEFAULT_MOUNT_COMMAND, DEFAULT_READ_AHEAD_KB
from components.mounting.keeper_tool import FETCH_CPU_SHARES
from components.mounting import warm as warm_mod
from components.serving import vllm

WORDS = ("paced", "unpaced", "unweighted", "yield", "io-idle", "apart", "store-cached", "cache-in-memory",
         "prefetch", "eager", "warm", "cache-hot", "no-readahead", "no-boot-wait", "wait-short", "two-workers",
         "pace-x2")
OUT = ROOT / "bench" / "results-boot-delay.json"
READAHEAD_S: list[float] = []      # the read-ahead's seconds per start (those that read something)


def parse(variants: str) -> list[str]:
    """``a+b,c`` -> ["a+b", "c"]; an unknown word, or a variant naming neither pace or both, is refused in
    one line."""
    out = [v for v in variants.split(",") if v]
    for v in out:
        words = v.split("+")
        unknown = [w for w in words if w not in WORDS]
        if unknown:
            raise SystemExit(f"bench.boot_delay: variant {v!r}: {', '.join(unknown)} unknown; use {', '.join(WORDS)}")
        if ("paced" in words) == ("unpaced" in words):
            raise SystemExit(f"bench.boot_delay: variant {v!r} names neither 'paced' nor 'unpaced', or both")
        if {"prefetch", "eager"} <= set(words):
            raise SystemExit(f"bench.boot_delay: variant {v!r} names two load strategies")
    if not out:
        raise SystemExit("bench.boot_delay: no variant given")
    apart = {"apart" in v.split("+") for v in out}
    if len(apart) > 1:      # it pins local disk's vLLM and RustFS for the whole run: every variant alike
        raise SystemExit("bench.boot_delay: 'apart' pins every start of the run; name it in every variant or in none")
    return out


def warm_code(words: list[str]) -> str:
    """The entrypoint's warm-up as the program ships it, with its pace off (``unpaced``: RATE_PER_CPU 0),
    not waiting while the boot reads the disk (``no-boot-wait``: BOOT_READS 0), waiting for a short fetch
    too (``wait-short``: SHORT_FETCH 0), in two threads (``two-workers``: WORKERS 2), or at twice the pace
    (``pace-x2``: RATE_PER_CPU 200e6)."""
    code = vllm.WARM_CODE
    for word, name, value in (("unpaced", "RATE_PER_CPU", "0"), ("no-boot-wait", "BOOT_READS", "0"),
                              ("wait-short", "SHORT_FETCH", "0"), ("two-workers", "WORKERS", "2"),
                              ("pace-x2", "RATE_PER_CPU", "200e6")):
        if word in words:
            line = next(x for x in code.splitlines() if x.startswith(f"{name} = "))
            code = code.replace(line, f"{name} = {value}")
    return code


def last_core() -> str:
    return str(max(os.sched_getaffinity(0)))


@contextlib.contextmanager
def vllm_cpus(cpus: str) -> Iterator[None]:
    """Every vLLM container this process starts (local disk's too) pinned to ``cpus``."""
    collection = docker.models.containers.ContainerCollection
    run = collection.run

    def pinned(self, image, *args, **kwargs):
        if image == weights.VLLM_IMAGE:
            kwargs["cpuset_cpus"] = cpus
        return run(self, image, *args, **kwargs)

    collection.run = pinned
    try:
        yield
    finally:
        collection.run = run


def docker_update(container: str, *flags: str) -> None:
    subprocess.run(["docker", "update", *flags, container], check=True, stdout=subprocess.DEVNULL)


def server_pids(server: Server) -> list[int]:
    """The host pids of the processes in RustFS's container."""
    out = subprocess.run(["docker", "top", server.server.name, "-o", "pid"], capture_output=True, text=True,
                         check=True).stdout.split()
    return [int(x) for x in out[1:]]


def store_data(server: Server) -> str:
    return subprocess.run(["docker", "volume", "inspect", "-f", "{{.Mountpoint}}", f"{server.server.name}-data"],
                          capture_output=True, text=True, check=True).stdout.strip()


def read_all(folder: str) -> None:
    """Every file under ``folder`` read once (into the page cache), not timed."""
    subprocess.run(f"find {folder} -type f -print0 | xargs -0 cat > /dev/null", shell=True, check=True)


def mounted(p: start.Paths, server: Server, variant: str) -> Callable[[], float]:
    """One cold start through the mount, the fetch changed as ``variant`` says."""
    words = variant.split("+")
    vfs = Path("/dev/shm/rustfs-vllm-bench-vfs") if "cache-in-memory" in words else p.vfs

    def run() -> float:
        mount(server, p.bucket, p.mnt, list(DEFAULT_MOUNT_FLAGS), vfs, DEFAULT_MOUNT_COMMAND, DEFAULT_READ_AHEAD_KB)
        try:
            rclone = rclone_pid(p.mnt)
            each_thread(rclone, cpus={int(last_core())} if "apart" in words else None,
                        nice=19 if "yield" in words else None, io_class=3 if "io-idle" in words else None)
            if "io-idle" in words:
                for pid in server_pids(server):
                    each_thread(pid, io_class=3)
            if "unweighted" in words:
                unweighted(rclone)
            if "warm" in words:     # a restart: the VFS cache full (filled unpaced, not timed)
                warm_mod.warm(str(p.mnt / "m"), pace=0)
            if {"yield", "unweighted"} & set(words):
                docker_update(server.server.name, "--cpu-shares", "2" if "yield" in words else "1024")
            drop_caches()
            if "store-cached" in words:
                read_all(store_data(server))
            if "cache-hot" in words:
                read_all(f"{vfs}/vfs")
            entrypoint = ["/bin/sh", "-c", vllm.MOUNT_WAIT, "rustfs-vllm-wait-mount", warm_code(words),
                          *vllm.VLLM_ENTRYPOINT]
            strategy = [f"--safetensors-load-strategy={w}" for w in words if w in ("prefetch", "eager")]
            if "no-readahead" not in words:
                start.read_ahead_beside(vfs, READAHEAD_S)
            return p._keep(variant, weights.vllm_start(WORK, [*p.args, *strategy], source_dir=p.mnt, entrypoint=entrypoint,
                                                       watch=lambda: start.cached_bytes(vfs)))
        finally:
            unmount(p.mnt)
            if "io-idle" in words:      # RustFS back in the default class for the next start
                for pid in server_pids(server):
                    each_thread(pid, io_class=0)
            if {"yield", "unweighted"} & set(words):
                docker_update(server.server.name, "--cpu-shares", str(FETCH_CPU_SHARES))
            shutil.rmtree(vfs, ignore_errors=True)
    return run


def probe(size: str, rounds: int, variants: list[str]) -> dict:
    with page_reporting(True) as state, fresh_server("rustfs") as server:
        t = time.monotonic()
        written = prefault()
        p = probe_paths(server, size)
        apart = any("apart" in v.split("+") for v in variants)
        if apart:       # every path alike: the vLLM containers on the other cores, RustFS on the last
            docker_update(server.server.name, "--cpuset-cpus", last_core())
        others = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)) if str(c) != last_core())
        with vllm_cpus(others) if apart else contextlib.nullcontext():
            got = stats.interleaved({"local": p.local, **{v: mounted(p, server, v) for v in variants}}, n=rounds)
        out = start.summary(p, got)
        local = p.starts["local"]
        for name, starts in p.starts.items():        # per round, against local disk's start of that round
            out["phases"][name]["load_begins_vs_local_s"] = stats.Samples(
                [s.phases["load_begins"] - b.phases["load_begins"] for s, b in zip(starts, local)]).summary(2)
    return {"size": size, "model": p.model.name, "rounds": rounds, "variants": variants, "page_reporting": state,
            "prefault": written, "fetch_cpu_shares": FETCH_CPU_SHARES,
            **({"cache_readahead_s": READAHEAD_S} if READAHEAD_S else {}),
            "apart": f"vLLM on cores {others}, RustFS and rclone on core {last_core()}" if apart else None,
            "seconds": round(time.monotonic() - t), **out}


def main(argv: list[str]) -> None:
    if len(argv) != 3 or argv[0] not in SIZES or not argv[1].isdigit():
        raise SystemExit("usage: python -m bench.boot_delay large|big|smollm2 ROUNDS VARIANT[,VARIANT...]")
    variants = parse(argv[2])
    WORK.mkdir(parents=True, exist_ok=True)
    result = probe(argv[0], int(argv[1]), variants)
    results = json.loads(OUT.read_text()) if OUT.exists() else {}
    results[f"{argv[0]}: {argv[2]}"] = result
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    start.log_medians(result)


if __name__ == "__main__":
    main(sys.argv[1:])
