"""This machine as every bench part uses it: where the bench works, the S3 keys and the vLLM image
it runs with, and the steps each measurement takes on the host (a timestamped log line, a dropped
page cache, a free loopback port, an rclone mount of a bucket, a sequential read through it).

Its rclone runs on the host, not in a keeper container as the program's does; so that it weighs on the CPU
as the program's does, ``mount`` moves it into a CPU cgroup of its own beside Docker's containers with the
keeper's weight (components.mounting.keeper_tool.FETCH_CPU_SHARES), ``unweighted`` back to the root's.

Its own module so that bench.run (the entry point) imports bench.start and bench.weights, and
they import this, never bench.run back."""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Protocol

from components.mounting.keeper_tool import FETCH_CPU_SHARES

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / "work"
ACCESS, SECRET = "bench-access-000001", "bench-secret-000001"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
MIB = 2**20
# cgroup v1 (these machines: Docker's cgroupfs driver) and v2: where Docker puts its containers' cgroups
DOCKER_CGROUPS = (Path("/sys/fs/cgroup/cpu/docker"), Path("/sys/fs/cgroup/docker"))


def fetch_cgroup(path: Path) -> str:
    """The name of the CPU cgroup of the rclone that serves ``path`` (one per mount, as keepers are)."""
    return "rustfs-vllm-bench-fetch-" + hashlib.sha256(str(path).encode()).hexdigest()[:12]


class RcloneRemote(Protocol):
    """An S3 server rclone reaches as the remote ``BENCH:`` through environment variables only."""

    def rclone_env(self) -> dict[str, str]: ...


def log(msg: str) -> None:
    """A timestamped progress line, flushed: a bench run takes hours and is watched live."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def drop_caches() -> None:
    """Empty the page cache, so that the next read is cold (needs root)."""
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def free_port() -> int:
    """A loopback port nothing listens on now (for a container or a stack under test)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mount(server: RcloneRemote, bucket: str, path: Path, flags: list[str], cache_dir: Path, command: str = "mount",
          read_ahead_kb: int | None = None) -> None:
    """``bucket`` read-only at ``path`` by ``rclone <command>`` with ``flags`` and an emptied VFS cache, rclone at
    the keeper's CPU weight (weigh_fetch); ``read_ahead_kb``: the kernel's read-ahead of the FUSE mount, set after mounting."""
    path.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(cache_dir, ignore_errors=True)
    subprocess.run(["setsid", shutil.which("rclone"), command, f"BENCH:{bucket}", str(path), "--read-only",
                    "--allow-other", "--daemon", "--config", "/dev/null", "--cache-dir", str(cache_dir), *flags],
                   env=server.rclone_env(), check=True, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    weigh_fetch(rclone_pid(path), fetch_cgroup(path))
    if read_ahead_kb:
        bdi = subprocess.run(["mountpoint", "-d", str(path)], capture_output=True, text=True, check=True).stdout.strip()
        Path(f"/sys/class/bdi/{bdi}/read_ahead_kb").write_text(f"{read_ahead_kb}\n")


def rclone_pid(path: Path) -> int:
    """The rclone process ``mount`` left serving ``path`` (exactly one)."""
    found = subprocess.run(["pgrep", "-f", f"rclone [^ ]+ BENCH:[^ ]+ {path}( |$)"],
                           capture_output=True, text=True).stdout.split()
    if len(found) != 1:
        raise RuntimeError(f"expected one rclone process for {path}, found {found}")
    return int(found[0])


def docker_cgroup() -> Path | None:
    """The CPU cgroup Docker puts its containers in (DOCKER_CGROUPS), or None."""
    return next((d for d in DOCKER_CGROUPS if d.is_dir()), None)


def weigh_fetch(pid: int, name: str, shares: int = FETCH_CPU_SHARES) -> Path:
    """rclone (``pid``, every thread) in a CPU cgroup beside Docker's containers weighing ``shares``, as the
    program's keeper container weighs (it runs rclone in its own cgroup ``name``); the cgroup."""
    parent = docker_cgroup()
    if parent is None:
        raise RuntimeError(f"no Docker cgroup at {' or '.join(map(str, DOCKER_CGROUPS))}: the bench cannot give "
                           "rclone the keeper's CPU weight (is dockerd running with the cgroupfs driver?)")
    group = parent / name
    group.mkdir(exist_ok=True)
    if (group / "cpu.shares").exists():
        (group / "cpu.shares").write_text(f"{shares}\n")
    else:        # v2: Docker's own conversion of --cpu-shares to cpu.weight
        (group / "cpu.weight").write_text(f"{1 + (shares - 2) * 9999 // 262142}\n")
    (group / "cgroup.procs").write_text(f"{pid}\n")
    return group


def unweighted(pid: int) -> None:
    """rclone (``pid``) back in the root CPU cgroup, where a process competes at its nice's weight."""
    parent = docker_cgroup()
    if parent is not None:
        (parent.parent / "cgroup.procs").write_text(f"{pid}\n")


def each_thread(pid: int, *, cpus: set[int] | None = None, nice: int | None = None,
                io_class: int | None = None) -> None:
    """Every thread of ``pid`` pinned to ``cpus``, set to ``nice`` and/or to ``io_class`` (``ionice -c``: 3 idle,
    whose reads mq-deadline dispatches only while no other class waits; 0 none, the default); on Linux all
    three are per thread (new threads inherit their creator's), and rclone does its work on threads other
    than its first."""
    for task in os.listdir(f"/proc/{pid}/task"):
        if cpus is not None:
            os.sched_setaffinity(int(task), cpus)
        if nice is not None:
            os.setpriority(os.PRIO_PROCESS, int(task), nice)
        if io_class is not None:
            subprocess.run(["ionice", "-c", str(io_class), "-p", task], check=False, stderr=subprocess.DEVNULL)


def unmount(path: Path) -> None:
    """Unmount ``path`` and wait until it is gone from /proc/mounts (lazily, if it stays busy); weigh_fetch's
    cgroup removed once its rclone has exited."""
    subprocess.run(["fusermount3", "-u", str(path)], check=False)
    for _ in range(50):
        with open("/proc/mounts") as fh:
            if not any(line.split()[1] == str(path) for line in fh):
                break
        time.sleep(0.1)
    else:
        subprocess.run(["fusermount3", "-uz", str(path)], check=False)
    remove_fetch_cgroup(fetch_cgroup(path))


def remove_fetch_cgroup(name: str, wait: float = 5.0) -> None:
    """weigh_fetch's cgroup ``name``, once no rclone is left in it (waiting up to ``wait`` s for one that is exiting;
    a cgroup with a process in it stays)."""
    for parent in DOCKER_CGROUPS:
        group = parent / name
        deadline = time.monotonic() + wait
        while group.is_dir():
            try:
                group.rmdir()
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)


def read_sequential(path: Path) -> int:
    """Read ``path`` front to back in 8 MiB pieces, unbuffered; the bytes read."""
    n = 0
    with open(path, "rb", buffering=0) as fh:
        while chunk := fh.read(8 * MIB):
            n += len(chunk)
    return n


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    began = time.monotonic()
    result = fn(*args, **kwargs)
    return time.monotonic() - began, result
