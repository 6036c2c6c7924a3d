"""The program's SIGINT handler (components.config.runtime.stop_quietly_when_interrupted), in a real
Python process sent a real SIGINT while it waits, as the upstream language host's cancel does."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT

CHILD = """
import pathlib, sys, time
from components.config import runtime
{install}
sys.stdout.write("output still in its buffer")
pathlib.Path(sys.argv[1]).touch()
time.sleep(60)
"""


def interrupted(tmp: Path, install: bool, inherited=signal.SIG_DFL) -> subprocess.CompletedProcess:
    """The child starts with SIGINT's disposition ``inherited``: an interactive shell's default, or ignored, as
    a non-interactive shell's background job (scripts/test's lanes) starts it."""
    code = CHILD.format(install="runtime.stop_quietly_when_interrupted()" if install else "")
    ready = tmp / "ready"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}   # the language host does not set it
    proc = subprocess.Popen([sys.executable, "-c", code, str(ready)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, inherited))
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_python_default_prints_a_keyboard_interrupt_traceback(tmp_path):
    done = interrupted(tmp_path, install=False)
    assert "Traceback" in done.stderr and "KeyboardInterrupt" in done.stderr, done.stderr


@pytest.mark.parametrize("inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["default", "ignored"])
def test_with_the_handler_the_program_stops_as_sigint_does_printing_nothing_and_losing_no_output(tmp_path, inherited):
    # ignored too: the language host's cancel is the engine's request, and the Go CLI above it handles SIGINT
    # whatever it inherited (Go's signal.Notify)
    done = interrupted(tmp_path, install=True, inherited=inherited)
    assert done.returncode == -signal.SIGINT, done
    assert done.stderr == "", done.stderr
    assert done.stdout == "output still in its buffer", done.stdout
