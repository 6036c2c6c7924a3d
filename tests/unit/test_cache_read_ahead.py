"""The keeper's read-ahead of a mount's rclone cache (issue 46, vfs_cache.read_cache_ahead) on real files
and the real page cache: every file rclone holds whole is read in (fincore says so), in the order vLLM
opens them; a file only partly cached (sparse) is left alone; it stops at its memory budget and says so;
an empty cache reads nothing and says nothing."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from components.mounting import vfs_cache

pytestmark = pytest.mark.skipif(not shutil.which("fincore"), reason="no fincore (util-linux) here")
# above the disk's read-ahead size (one WILLNEED reads no more than that) and not a whole MiB
FILES = {"config.json": 300, "model-00001-of-00002.safetensors": 70 << 20,
         "model-00002-of-00002.safetensors": (20 << 20) + 5}


def write_out(path: Path, size: int) -> None:
    """``size`` bytes at ``path``, on the disk and out of the page cache (this file's pages only)."""
    path.write_bytes(os.urandom(size))
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def resident(*paths: Path) -> int:
    out = subprocess.run(["fincore", "--bytes", "--raw", "--noheadings", "-o", "RES", *map(str, paths)],
                         capture_output=True, text=True, check=True).stdout.split()
    return sum(int(x) for x in out)


@pytest.fixture
def cache(tmp_path):
    """A mount's --cache-dir as rclone lays it out: vfs/<remote>/<bucket>/<prefix>/<files>."""
    folder = tmp_path / "vfs" / "RUSTFS" / "models" / "m"
    folder.mkdir(parents=True)
    for name, size in FILES.items():
        write_out(folder / name, size)
    return tmp_path, folder


def test_every_file_rclone_holds_whole_is_read_into_the_page_cache(cache):
    root, folder = cache
    paths = [folder / n for n in FILES]
    assert resident(*paths) < sum(FILES.values()) // 2
    n, done, took, why = vfs_cache.read_cache_ahead(str(root), budget=1 << 30)
    assert (n, done, why) == (3, sum(FILES.values()), "") and took >= 0
    # WILLNEED is a hint: the kernel's read-ahead gives a page up when memory is short (under the whole
    # suite 94 % came in once); read per 64 MiB as one call it brought 8 MiB of each, the disk's read-ahead
    assert resident(*paths) >= 0.9 * sum(FILES.values())


def test_a_file_only_partly_cached_is_left_to_the_warm_up(cache):
    root, folder = cache
    partial = folder / "model-00003-of-00003.safetensors"
    with open(partial, "wb") as f:            # rclone's sparse file: 1 MiB of 64 MiB downloaded
        f.write(os.urandom(1 << 20))
        f.truncate(64 << 20)
    n, done, _took, why = vfs_cache.read_cache_ahead(str(root), budget=1 << 30)
    assert (n, done, why) == (3, sum(FILES.values()), "")
    assert resident(partial) <= 1 << 20


def test_it_stops_at_its_budget_in_the_order_vllm_opens_the_files(cache):
    root, folder = cache
    n, done, _took, why = vfs_cache.read_cache_ahead(str(root), budget=80 << 20)
    # config.json first (small files first), then the shards by name: the first fits, the second does not
    assert (n, done) == (2, 300 + (70 << 20)) and why == "stopped at 0.1 GB, half the memory available"
    assert resident(folder / "model-00002-of-00002.safetensors") < 4 << 20


def test_an_empty_cache_reads_nothing_and_says_nothing(tmp_path):
    assert vfs_cache.read_cache_ahead(str(tmp_path))[:2] == (0, 0)
    assert vfs_cache.read_cache_ahead(str(tmp_path))[3] == ""


def test_the_default_budget_is_half_the_memory_available():
    with open("/proc/meminfo", encoding="ascii") as fh:
        available = next(int(ln.split()[1]) for ln in fh if ln.startswith("MemAvailable:")) * 1024
    assert abs(vfs_cache.memory_budget() - available // 2) < available // 20
