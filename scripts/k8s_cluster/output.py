"""What the script prints: ``==> step`` lines (bold), indented notes, ``k8s-cluster: error: ...`` on stderr,
and the small text helpers the bash did with date, awk, tail and sed."""
from __future__ import annotations

import datetime
import os
import sys
import threading
import time
from typing import NoReturn

_lock = threading.Lock()   # load-image's pulls print from threads


class Die(Exception):
    """die(): the message goes to stderr as ``k8s-cluster: error: MESSAGE`` and the command exits 1."""


def write(text: str, err: bool = False) -> None:
    stream = sys.stderr if err else sys.stdout
    with _lock:
        stream.write(text)
        stream.flush()


def step(msg: str) -> None:
    write(f"\033[1m==> {msg}\033[0m\n")


def note(msg: str) -> None:
    write(f"    {msg}\n")


def die(msg: str) -> NoReturn:
    raise Die(msg)


def now_s() -> int:
    """``date +%s``."""
    return int(time.time())


def iso_now() -> str:
    """``date -Is``: 2026-12-02T10:11:12+00:00."""
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def elapsed(t0: float) -> str:
    """Seconds since ``t0`` (a time.time()), one decimal."""
    return f"{time.time() - t0:.1f}"


def log_start(log: str, what: str) -> None:
    """The ``\\n=== <date -Is> start WHAT`` line every start appends to its log."""
    with open(log, "a") as f:
        f.write(f"\n=== {iso_now()} {what}\n")


def tail(path: str, n: int) -> str:
    """``tail -N FILE``: its last N lines ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            chunk = 8192
            while True:   # read backwards until N+1 line ends are in hand (or the whole file)
                start = max(0, size - chunk)
                f.seek(start)
                data = f.read()
                if start == 0 or data.count(b"\n") > n:
                    break
                chunk *= 4
    except OSError:
        return ""
    lines = data.split(b"\n")
    end = b""
    if lines[-1] == b"":
        lines.pop()
        end = b"\n"
    if not lines:
        return ""
    return (b"\n".join(lines[-n:]) + end).decode("utf-8", "replace")


def tail_err(path: str, n: int = 20) -> None:
    """``tail -N FILE >&2``."""
    write(tail(path, n), err=True)
