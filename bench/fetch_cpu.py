"""What the mount's fetch costs the serving host's CPU (issue 46, item 2), per setting: the warm-up
(components/mounting/warm.py) of one model from an empty VFS cache, then vLLM's read of it through the
warm mount (every page touched in order through a read-only map, the page cache dropped first), each
with the CPU-seconds per GB of rclone (its process), RustFS (its container's cgroup) and this process
(the warm-up's threads, or the reader).

Settings: rclone's chunk size and parallel chunk streams, the warm-up's threads and its pace, and one
mode where RustFS runs pinned to core 1 and rclone and the warm-up to core 0, as the guide's layout puts
RustFS on another machine. Interleaved rounds, medians (bench.stats).

    python -m bench.fetch_cpu MODEL_DIR [ROUNDS]      (root; writes bench/results-fetch-cpu.json)
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bench import stats
from bench.levers import mmap_touch, weights_of
from bench.machine import WORK, drop_caches, each_thread, log, mount, rclone_pid, unmount
from bench.server import Server, fresh_server, uploaded
from components.config.schema import DEFAULT_MOUNT_COMMAND, DEFAULT_MOUNT_FLAGS, DEFAULT_READ_AHEAD_KB
from components.mounting import warm

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Setting:
    """One way to fetch: rclone's extra flags, the warm-up's threads and pace (bytes/s, 0: unpaced),
    and whether RustFS and the host's side run on cores of their own."""
    flags: tuple[str, ...] = ()
    workers: int = warm.WORKERS
    pace: float = 0.0
    pinned: bool = False


SETTINGS: dict[str, Setting] = {
    "default (chunk 128M, 8 threads, unpaced)": Setting(),
    "paced 200 MB/s (the warm-up's default here)": Setting(pace=2 * warm.RATE_PER_CPU),
    "2 threads": Setting(workers=2),
    "chunk 16M": Setting(flags=("--vfs-read-chunk-size", "16M")),
    "chunk 512M": Setting(flags=("--vfs-read-chunk-size", "512M")),
    "4 chunk streams of 16M": Setting(flags=("--vfs-read-chunk-streams", "4", "--vfs-read-chunk-size", "16M")),
    "RustFS pinned to core 1, the host's side to core 0": Setting(pinned=True),
}


@dataclass
class Cpu:
    """CPU-seconds so far of rclone's process, the S3 server's container and this process."""
    rclone: float
    server: float
    own: float

    def minus(self, earlier: "Cpu") -> dict[str, float]:
        return {"rclone": self.rclone - earlier.rclone, "s3_server": self.server - earlier.server,
                "own": self.own - earlier.own}


@dataclass
class Meter:
    server: Server
    mountpoint: Path
    rclone_pid: int = 0
    samples: dict[str, list[float]] = field(default_factory=dict)

    def now(self) -> Cpu:
        fields = Path(f"/proc/{self.rclone_pid}/stat").read_text().rsplit(")", 1)[1].split()
        own = resource.getrusage(resource.RUSAGE_SELF)
        return Cpu(rclone=(int(fields[11]) + int(fields[12])) / TICK, server=container_cpu(self.server.server.name),
                   own=own.ru_utime + own.ru_stime)

    def add(self, key: str, value: float) -> None:
        self.samples.setdefault(key, []).append(value)


def container_cpu(name: str) -> float:
    """CPU-seconds a container has used (cgroup v1 cpuacct, as this machine's Docker engine has it)."""
    cid = subprocess.run(["docker", "inspect", "-f", "{{.Id}}", name], capture_output=True, text=True,
                         check=True).stdout.strip()
    usage = Path(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage")
    if not usage.exists():
        raise RuntimeError(f"no cgroup v1 CPU accounting for container {name} ({usage})")
    return int(usage.read_text()) / 1e9


def pin(server: Server, pinned: bool) -> None:
    """RustFS on core 1 and this process (the warm-up's threads, the reader) on core 0, or both free."""
    cpus = os.cpu_count() or 1
    subprocess.run(["docker", "update", "--cpuset-cpus", "1" if pinned else f"0-{cpus - 1}", server.server.name],
                   check=True, capture_output=True)
    os.sched_setaffinity(0, {0} if pinned else set(range(cpus)))


def one(meter: Meter, model: Path, name: str, setting: Setting) -> Callable[[], float]:
    size_gb = sum(p.stat().st_size for p in model.iterdir() if p.is_file()) / 1e9
    cache = WORK / "cache-fetch"

    def run() -> float:
        pin(meter.server, setting.pinned)
        mount(meter.server, "fetch", meter.mountpoint, [*DEFAULT_MOUNT_FLAGS, *setting.flags], cache,
              DEFAULT_MOUNT_COMMAND, DEFAULT_READ_AHEAD_KB)
        try:
            meter.rclone_pid = rclone_pid(meter.mountpoint)
            if setting.pinned:
                each_thread(meter.rclone_pid, cpus={0})
            drop_caches()
            before, t = meter.now(), time.monotonic()
            _, fetched, _, problem = warm.warm(str(meter.mountpoint / "m"), workers=setting.workers,
                                                   pace=setting.pace)
            took = time.monotonic() - t
            if problem or fetched < size_gb * 1e9 * 0.99:
                raise RuntimeError(f"{name}: the warm-up fetched {fetched} bytes of {size_gb * 1e9:.0f}: {problem}")
            for who, cpu in meter.now().minus(before).items():
                meter.add(f"{name}|warm_up|{who}_cpu_s_per_gb", cpu / size_gb)
            drop_caches()
            before, t = meter.now(), time.monotonic()
            mmap_touch(weights_of(meter.mountpoint / "m"))
            meter.add(f"{name}|read|seconds", time.monotonic() - t)
            for who, cpu in meter.now().minus(before).items():
                meter.add(f"{name}|read|{who}_cpu_s_per_gb", cpu / size_gb)
            return took
        finally:
            unmount(meter.mountpoint)
            shutil.rmtree(cache, ignore_errors=True)
            pin(meter.server, False)
    return run


def main(model: Path, rounds: int) -> dict:
    size = sum(p.stat().st_size for p in model.iterdir() if p.is_file())
    out: dict = {"model": model.name, "bytes": size, "rounds": rounds, "cores": os.cpu_count(),
                 "settings": {n: {"rclone_flags": [*DEFAULT_MOUNT_FLAGS, *s.flags], "warm_up_threads": s.workers,
                                  "pace_bytes_per_s": s.pace, "pinned": s.pinned} for n, s in SETTINGS.items()}}
    with fresh_server("rustfs") as server:
        uploaded(server, "fetch", model, "fetch")
        meter = Meter(server, WORK / "mnt-fetch")
        try:
            res = stats.interleaved({n: one(meter, model, n, s) for n, s in SETTINGS.items()}, n=rounds)
        finally:
            shutil.rmtree(WORK / "mnt-fetch", ignore_errors=True)
        table: dict[str, dict] = {n: {"warm_up_seconds": res[n].summary(2)["median"]} for n in SETTINGS}
        for key, values in meter.samples.items():
            name, stage, what = key.split("|")
            table[name][f"{stage}_{what}"] = stats.Samples(values).summary(2)["median"]
        for row in table.values():
            for stage in ("warm_up", "read"):
                row[f"{stage}_host_cpu_s_per_gb"] = round(row[f"{stage}_rclone_cpu_s_per_gb"] + row[f"{stage}_own_cpu_s_per_gb"], 2)
        out["table"] = table
    return out


RESULTS = Path(__file__).resolve().parent / "results-fetch-cpu.json"


def run(model: Path, rounds: int) -> dict:
    """main(), written to RESULTS and its table logged."""
    result = main(model, rounds)
    RESULTS.write_text(json.dumps(result, indent=2))
    log(f"fetch CPU: {json.dumps(result['table'], indent=1)}")
    return result


if __name__ == "__main__":
    run(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 3)
