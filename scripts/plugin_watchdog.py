"""Exit when the Pulumi engine that started this plugin is gone.

Used by this project's language host and dynamic-provider host (scripts/pulumi-language-python,
scripts/pulumi-resource-pulumi-python). The engine starts its plugins in their own process group,
so a `kill -9` of `pulumi` leaves them running, re-parented to PID 1 (or a subreaper): a provider
cut off mid-upload would go on sending while the user's recovery runs. The Go plugins watch the
engine the same way (they health-check its address); here the parent is watched: when it
changes, the engine is dead.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable, Optional

INTERVAL_S = 0.5


def watch_parent(on_lost: Optional[Callable[[], None]] = None, interval: float = INTERVAL_S) -> threading.Thread:
    """Start a daemon thread that calls ``on_lost`` (if given) and exits the process when the parent dies."""
    parent = os.getppid()

    def loop() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        try:
            if on_lost is not None:
                on_lost()
        finally:
            os._exit(70)  # EX_SOFTWARE; nobody reads it: the engine is gone

    thread = threading.Thread(target=loop, name="engine-watchdog", daemon=True)
    thread.start()
    return thread
