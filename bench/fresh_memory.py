"""What memory costs to touch on this VM (issue 46, item 1): N GiB written by one process right after the
same amount was freed (recycled) and after the freed memory sat idle, with the guest's page reporting as
the machine has it and with it held back. The guest kernel's page_reporting module hands free memory
back to the host (its `reported_kib` counts it); a page the host took back faults in again when it is
touched, so the first touch of idle free memory is slower than the touch of memory freed just before.
vLLM's `init engine` step touches gigabytes of fresh memory (the KV cache, the profile run), and which
memory it gets follows what the load left free.

    python -m bench.fresh_memory [GIB] [IDLE_S] [ROUNDS]   (root; writes bench/results-fresh-memory.json)

The module's parameters are set back as they were however the run ends.
"""
from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from bench import stats
from bench.machine import drop_caches, log

PARAMS = Path("/sys/module/page_reporting/parameters")
# the settings: the machine's own, and page reporting held back two ways (its free-page bitmap off; the
# smallest order it reports raised past the largest order the buddy allocator has, so nothing qualifies)
SETTINGS: dict[str, dict[str, str]] = {
    "as the machine has it": {},
    "free_bitmap_enable=N": {"free_bitmap_enable": "N"},
    "page_reporting_order=11": {"page_reporting_order": "11"},
}


def reported_mib() -> int:
    return int((PARAMS / "reported_kib").read_text()) // 1024


@contextmanager
def params(changes: dict[str, str]) -> Iterator[None]:
    """The module's parameters set to ``changes``, and back as they were afterwards."""
    before = {k: (PARAMS / k).read_text().strip() for k in changes}
    try:
        for k, v in changes.items():
            (PARAMS / k).write_text(f"{v}\n")
        yield
    finally:
        for k, v in before.items():
            (PARAMS / k).write_text(f"{v}\n")


@contextmanager
def page_reporting(hold: bool) -> Iterator[str]:
    """The guest's free page reporting for the run, held back when ``hold``, and in words for the results."""
    if not PARAMS.is_dir():
        yield "no page_reporting module on this kernel"
        return
    order = (PARAMS / "page_reporting_order").read_text().strip()
    if not hold:
        yield f"as the machine has it (page_reporting_order {order})"
        return
    with params({"page_reporting_order": "11"}):
        log(f"page reporting held back for the run (page_reporting_order 11; set back to {order} after)")
        yield f"held back by --hold-page-reporting (page_reporting_order 11; the machine has {order})"


def available_gib() -> int:
    """MemAvailable of /proc/meminfo, in whole GiB."""
    with open("/proc/meminfo") as fh:
        kib = next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable:"))
    return kib >> 20


def prefault(keep_gib: int = 3) -> str:
    """The machine's free memory written once and freed (all but ``keep_gib`` GiB, the page cache dropped
    first), in words. With page reporting held back the host keeps it backed from then on, as a bare-metal
    host's memory is: no start then pays for the first touch of memory the host never backed (on a fresh
    VM, 20 GiB took 26-34 s to write once, against 0.48 s for 3 GiB recycled)."""
    drop_caches()
    gib = max(0, available_gib() - keep_gib)
    if not gib:
        return "free memory not written first (less than the room kept)"
    return f"{gib} GiB of free memory written once before the starts, in {fill(gib):.1f} s"


def fill(gib: int) -> float:
    """Seconds to write ``gib`` GiB of fresh anonymous memory (every page), which is then freed."""
    t = time.monotonic()
    block = np.ones(gib << 30, dtype=np.uint8)
    took = time.monotonic() - t
    del block
    return took


def main(gib: int, idle_s: float, rounds: int) -> dict:
    out: dict = {"gib": gib, "idle_s": idle_s, "rounds": rounds, "settings": {}}
    if not PARAMS.is_dir():
        out["skipped"] = "no page_reporting module on this kernel"
        return out
    for name, changes in SETTINGS.items():
        try:
            with params(changes):
                got: dict[str, list[float]] = {"recycled": [], "after_idle": []}
                reported = reported_mib()
                for _ in range(rounds):
                    fill(gib)                                  # so that the next fill reuses freed memory
                    got["recycled"].append(fill(gib))
                    time.sleep(idle_s)
                    got["after_idle"].append(fill(gib))
                row = {k: stats.Samples(v).summary(2) for k, v in got.items()}
                row["reported_mib_during"] = reported_mib() - reported
                row["idle_vs_recycled"] = round(row["after_idle"]["median"] / row["recycled"]["median"], 2)
        except OSError as exc:
            row = {"refused": f"{exc.strerror}"}
        out["settings"][name] = row
        log(f"{name}: {row}")
    return out


if __name__ == "__main__":
    argv = sys.argv[1:]
    result = main(int(argv[0]) if argv else 3, float(argv[1]) if len(argv) > 1 else 15, int(argv[2]) if len(argv) > 2 else 3)
    (Path(__file__).resolve().parent / "results-fresh-memory.json").write_text(json.dumps(result, indent=2))
