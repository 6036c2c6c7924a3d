"""Exit when the Pulumi engine that started this plugin is gone, and take its other plugins along.

Used by this project's language host and dynamic-provider host (scripts/pulumi-language-python,
scripts/pulumi-resource-pulumi-python). The engine starts its plugins in their own process groups,
so a `kill -9` of `pulumi` leaves them running, re-parented to PID 1 (or a subreaper): a provider
cut off mid-upload would go on sending while the user's recovery runs. The parent is watched: when
it changes, the engine is dead.

The real Go plugins (pulumi-docker, pulumi-command) check the engine only every 5 minutes, and
were seen alive more than 30 minutes after a `kill -9` of the engine. So the watchdog also ends
every process that carries the dead engine's address among its arguments (each plugin gets it as
its first argument, the program as ``--engine``): SIGTERM to its process group, SIGKILL after a
second for what is left.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Callable, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the project
from components.hosts.procs import argvs  # noqa: E402

INTERVAL_S = 0.5


def _carrying(address: str) -> list[int]:
    """Processes other than this one with ``address`` as one of their arguments."""
    return [pid for pid, argv in argvs() if pid != os.getpid() and address.encode() in argv[1:]]


def end_run(address: str, grace: float = 1.0) -> list[int]:
    """End the other processes of the run whose engine listened on ``address``; returns their pids."""
    pids = _carrying(address)
    for pid in pids:
        try:
            target = os.getpgid(pid)
            os.killpg(target, signal.SIGTERM) if target == pid else os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return pids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def watch_parent(on_lost: Optional[Callable[[], None]] = None, engine_address: str = "",
                 interval: float = INTERVAL_S) -> threading.Thread:
    """Start a daemon thread that, when the parent (the engine) dies, calls ``on_lost`` (if given),
    ends the run's other processes (those carrying ``engine_address``), and exits this process."""
    parent = os.getppid()

    def loop() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        try:
            if on_lost is not None:
                on_lost()
            if engine_address:
                end_run(engine_address)
        finally:
            os._exit(70)  # EX_SOFTWARE; nobody reads it: the engine is gone

    thread = threading.Thread(target=loop, name="engine-watchdog", daemon=True)
    thread.start()
    return thread
