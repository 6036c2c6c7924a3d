"""The processes of this host, read from /proc (no ps, no psutil)."""
from __future__ import annotations

import os
from typing import Iterator


def argvs() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, argv) of every process whose command line can be read now (kernel threads have none)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0]:
            yield int(entry), argv
