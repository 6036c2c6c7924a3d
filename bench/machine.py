"""This machine as every bench part uses it: where the bench works, the S3 keys and the vLLM image
it runs with, and the steps each measurement takes on the host (a timestamped log line, a dropped
page cache, a free loopback port, an rclone mount of a bucket, a sequential read through it).

Its own module so that bench.run (the entry point) imports bench.start and bench.weights, and
they import this, never bench.run back."""
from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Protocol

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / "work"
ACCESS, SECRET = "bench-access-000001", "bench-secret-000001"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
MIB = 2**20


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
    """``bucket`` read-only at ``path`` by ``rclone <command>`` with ``flags`` and an emptied VFS cache;
    ``read_ahead_kb``: the kernel's read-ahead of the FUSE mount, set after mounting."""
    path.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(cache_dir, ignore_errors=True)
    subprocess.run(["setsid", shutil.which("rclone"), command, f"BENCH:{bucket}", str(path), "--read-only",
                    "--allow-other", "--daemon", "--config", "/dev/null", "--cache-dir", str(cache_dir), *flags],
                   env=server.rclone_env(), check=True, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if read_ahead_kb:
        bdi = subprocess.run(["mountpoint", "-d", str(path)], capture_output=True, text=True, check=True).stdout.strip()
        Path(f"/sys/class/bdi/{bdi}/read_ahead_kb").write_text(f"{read_ahead_kb}\n")


def unmount(path: Path) -> None:
    """Unmount ``path`` and wait until it is gone from /proc/mounts (lazily, if it stays busy)."""
    subprocess.run(["fusermount3", "-u", str(path)], check=False)
    for _ in range(50):
        with open("/proc/mounts") as fh:
            if not any(line.split()[1] == str(path) for line in fh):
                return
        time.sleep(0.1)
    subprocess.run(["fusermount3", "-uz", str(path)], check=False)


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
