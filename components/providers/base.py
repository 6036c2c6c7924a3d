"""What every dynamic provider of the program does in the process the engine runs it in.

The engine starts the SDK's provider server (``python -m pulumi.dynamic``, through the upstream
``pulumi-resource-pulumi-python`` shim) and calls ``configure`` once per provider before anything
else. There each provider (a subclass of ``Provider``) adopts the process, once:

- **Errors read as one line.** The SDK's server answers any exception with its full Python
  traceback (``traceback.format_exc()``), which the engine shows the user. A ``ProviderError``
  (components/errors.py) already names the resource, the cause and the fix: the engine gets that
  message alone; any other exception its class and message and where the traceback is. The
  traceback always goes to ``.state/logs/providers.log`` under the project folder (the process's
  working folder), and to the engine as well with ``RUSTFS_VLLM_DEBUG=1``.
- **It exits with the engine.** After a ``kill -9`` of ``pulumi`` nothing ends the provider
  server (it serves until killed): an upload in flight would go on writing while the user runs the
  recovery steps. A thread watches the engine's process and exits this one within half a second of
  the engine's end.
- **The configuration the engine hands over.** ``configure`` gets the stack's configuration as the
  engine has it for this run: the last ``up``'s for a plain ``pulumi destroy``, the configuration
  from every source (the stack file, ``--config-file``, ``-c``, an ESC environment) when the
  program ran (``pulumi destroy --run-program``). ``engine_config`` returns what was handed over.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import Any, Callable, Optional

from pulumi.dynamic import ConfigureRequest, ResourceProvider

WATCH_INTERVAL_S = 0.5
SHIM = "pulumi-resource-pulumi-python"   # the upstream launcher: a shell script that runs python (no exec)
_adopted = False
_config: dict[str, Any] = {}
_format_exc: Callable[..., str] = traceback.format_exc


def log_path() -> str:
    return os.path.join(os.getcwd(), ".state", "logs", "providers.log")


LOG_MAX_BYTES = 4 * 2**20      # the providers' log is kept to this size (and one older file beside it)


def write_log(log: str, text: str) -> None:
    """``text`` appended to the log: created 0600 (a traceback may name paths and values), never through a link
    (O_NOFOLLOW), moved to ``<log>.1`` once it passes LOG_MAX_BYTES (issue 57). Best effort: a log that
    cannot be written never hides the error it was for."""
    try:
        os.makedirs(os.path.dirname(log), exist_ok=True)
        st = os.lstat(log) if os.path.lexists(log) else None
        if st is not None and st.st_size > LOG_MAX_BYTES:
            os.replace(log, f"{log}.1")
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, text.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError:
        pass


def message_for_engine(*args: Any, **kwargs: Any) -> str:
    """Stands in for ``traceback.format_exc`` in the provider process, where the SDK's server calls it to
    build the error it sends the engine: the traceback to the log, the engine one line."""
    full = _format_exc(*args, **kwargs)
    exc = sys.exc_info()[1]
    log = log_path()
    write_log(log, f"--- {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} pid {os.getpid()}\n{full}\n")
    if os.environ.get("RUSTFS_VLLM_DEBUG") == "1" or exc is None:
        return full
    if any(cls.__name__ == "ProviderError" for cls in type(exc).__mro__):
        return str(exc)
    return f"{type(exc).__name__}: {exc} (an unexpected error; the traceback is in {log})"


def _stat(pid: int) -> Optional[list[str]]:
    """The fields of /proc/<pid>/stat after the command name, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def engine_process(pid: Optional[int] = None) -> Optional[tuple[int, str]]:
    """(pid, start time) of the engine that started process ``pid`` (default: this one): its parent, or its
    grandparent when the parent is the upstream shim, which runs python as a child. None when the parent
    is already init (nothing to watch)."""
    parent = os.getppid() if pid is None else int((_stat(pid) or ["", "0"])[1])
    if parent > 1 and SHIM in _cmdline(parent):
        parent = int((_stat(parent) or ["", "0"])[1])
    fields = _stat(parent) if parent > 1 else None
    return (parent, fields[19]) if fields else None


def watch_engine(on_gone: Callable[[], None], interval: float = WATCH_INTERVAL_S) -> Optional[threading.Thread]:
    """A daemon thread that calls ``on_gone`` once the engine's process has ended (or was replaced)."""
    engine = engine_process()
    if engine is None:
        return None
    pid, started = engine

    def loop() -> None:
        while True:
            fields = _stat(pid)
            if fields is None or fields[19] != started or fields[0] == "Z":
                on_gone()
                return
            time.sleep(interval)

    thread = threading.Thread(target=loop, name="engine-watch", daemon=True)
    thread.start()
    return thread


def _engine_gone() -> None:
    os._exit(70)   # EX_SOFTWARE; nobody reads it: the engine is gone


def adopt(config: Any) -> None:
    """Once per process: the error lines, the engine watch; every time: the configuration handed over."""
    global _adopted, _config
    _config = dict(getattr(config, "_props", None) or {})
    if _adopted:
        return
    _adopted = True
    traceback.format_exc = message_for_engine
    watch_engine(_engine_gone)


def engine_config(key: str) -> Any:
    """A configuration value (``namespace:key``) as the engine handed it to this provider process; None when
    it handed none (a process that was not configured, e.g. a test calling a provider directly)."""
    return _config.get(key)


class Provider(ResourceProvider):
    """The base of the program's dynamic providers (see the module's docstring).

    ``REPLACE_ON``: the inputs whose change makes the engine replace the resource (its ``diff`` says so);
    tests/e2e/test_replacements.py changes each of them through the engine (issue 57)."""

    REPLACE_ON: tuple[str, ...] = ()

    def configure(self, req: ConfigureRequest) -> None:
        adopt(req.config)
