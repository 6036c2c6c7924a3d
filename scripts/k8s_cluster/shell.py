"""Running the external commands (argument lists, no shell), with the bash's ``set -euo pipefail`` made
explicit: ``run(check=True)`` raises Failed(rc) where the bash would have stopped with that command's status,
``check=False`` is a command the bash ran under ``||``, ``if`` or ``$(...)``. Every other module calls these
through this module (``sh.run``), so tests can put a fake in their place."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from typing import Mapping, Optional, Sequence

from .output import write

DEVNULL = subprocess.DEVNULL
PIPE = subprocess.PIPE
STDOUT = subprocess.STDOUT


class Failed(Exception):
    """A command failed where ``set -e`` stopped the bash script: the command exits with its status."""

    def __init__(self, cmd: Sequence[str], rc: int):
        super().__init__(f"{' '.join(cmd)}: exit {rc}")
        self.cmd, self.rc = list(cmd), rc


def _rc(returncode: int) -> int:
    """A signal's death as bash reports it (128 + the signal)."""
    return 128 - returncode if returncode < 0 else returncode


def _not_found(cmd: Sequence[str], e: OSError, stderr) -> subprocess.CompletedProcess:
    """What bash does for a command it cannot run: a line on stderr, status 127 (126 when not executable)."""
    rc = 127 if isinstance(e, FileNotFoundError) else 126
    if stderr is not DEVNULL:
        why = "command not found" if rc == 127 else e.strerror
        write(f"k8s-cluster: {cmd[0]}: {why}\n", err=True)
    return subprocess.CompletedProcess(list(cmd), rc, "", "")


def _interrupted(p: subprocess.Popen) -> None:
    """Ctrl-C while CMD runs: it had the SIGINT too; as bash, wait for it to end (not killed here)."""
    for f in (p.stdout, p.stderr):
        if f is not None:
            f.close()
    p.wait()


def run(cmd: Sequence[str], *, check: bool = True, input: Optional[str] = None, stdout=None, stderr=None,
        env: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
    """Run CMD in the foreground. stdout/stderr: None (this script's), DEVNULL, PIPE (captured, text), an open
    file, or STDOUT (stderr only: ``2>&1``). Raises Failed when ``check`` and it fails."""
    cmd = [str(a) for a in cmd]
    sys.stdout.flush()
    try:
        p = subprocess.Popen(cmd, stdin=PIPE if input is not None else None, stdout=stdout, stderr=stderr,
                             env=None if env is None else dict(env), encoding="utf-8", errors="replace")
    except (FileNotFoundError, PermissionError) as e:
        done = _not_found(cmd, e, stderr)
    else:
        try:
            out, err = p.communicate(input)
        except KeyboardInterrupt:
            _interrupted(p)
            raise
        done = subprocess.CompletedProcess(cmd, _rc(p.returncode), out, err)
    if check and done.returncode != 0:
        raise Failed(cmd, done.returncode)
    return done


def ok(cmd: Sequence[str], *, stdout=DEVNULL, stderr=DEVNULL) -> bool:
    """``CMD >/dev/null 2>&1`` as a condition."""
    return run(cmd, check=False, stdout=stdout, stderr=stderr).returncode == 0


def capture(cmd: Sequence[str], *, check: bool = False, stderr=None, input: Optional[str] = None) -> tuple[int, str]:
    """``$(CMD)``: its status and its stdout without the trailing newlines."""
    p = run(cmd, check=check, stdout=PIPE, stderr=stderr, input=input)
    return p.returncode, (p.stdout or "").rstrip("\n")


def out(cmd: Sequence[str], **kw) -> str:
    """``$(CMD)``, its status ignored (as in a note's text)."""
    return capture(cmd, **kw)[1]


def stream(cmd: Sequence[str], prefix: str, *, stderr=None) -> int:
    """``CMD | sed 's/^/PREFIX/'`` as the lines come; returns CMD's status (pipefail: sed does not fail)."""
    cmd = [str(a) for a in cmd]
    sys.stdout.flush()
    try:
        p = subprocess.Popen(cmd, stdout=PIPE, stderr=stderr, encoding="utf-8", errors="replace")
    except (FileNotFoundError, PermissionError) as e:
        return _not_found(cmd, e, stderr).returncode
    assert p.stdout is not None
    try:
        for line in p.stdout:
            write(prefix + line)
    except KeyboardInterrupt:
        _interrupted(p)
        raise
    p.stdout.close()
    return _rc(p.wait())


def which(name: str) -> str:
    """``command -v NAME``: the path found in $PATH, "" when there is none."""
    return shutil.which(name) or ""


def _background_signals() -> None:
    # bash starts a non-interactive script's `CMD &` with SIGINT and SIGQUIT ignored: so do we
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


_spawned: list[subprocess.Popen] = []


def spawn(cmd: Sequence[str], log: str) -> int:
    """``CMD >> LOG 2>&1 < /dev/null &``: started in the background and left running; returns ``$!``."""
    cmd = [str(a) for a in cmd]
    sys.stdout.flush()
    with open(log, "a") as f:
        p = subprocess.Popen(cmd, stdin=DEVNULL, stdout=f, stderr=STDOUT, preexec_fn=_background_signals)
    _spawned.append(p)
    return p.pid


def reap() -> None:
    """Collect the background commands of this run that ended (bash does it as they end): a dead one then
    has no /proc/PID left, as procs.pid_of and procs.stop expect."""
    for p in list(_spawned):
        if p.poll() is not None:
            _spawned.remove(p)


def kill(pid, sig: int) -> None:
    """``kill -SIG PID 2>/dev/null || true``."""
    try:
        os.kill(int(pid), sig)
    except (OSError, ValueError):
        pass
