"""Our language host and dynamic-provider host, as processes: they exit when the engine that
started them dies, and the provider host sends the engine one message instead of a traceback."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.helpers import ROOT, alive_of, descendants, free_port

WATCHDOG_CHILD = textwrap.dedent(f"""
    import sys, time
    sys.path.insert(0, {str(ROOT / "scripts")!r})
    from plugin_watchdog import watch_parent
    watch_parent(on_lost=lambda: open(sys.argv[1], "w").write("lost"), engine_address=sys.argv[2])
    print("watching", flush=True)
    time.sleep(60)
""")
# another plugin of the same run that never looks at its engine (as the real Go plugins, which
# check only every 5 minutes): it carries the engine's address as its first argument
DEAF_PLUGIN = "import time; time.sleep(60)"


def test_watchdog_exits_within_a_second_of_its_parent_dying_and_ends_the_runs_other_plugins(tmp_path):
    """A stand-in engine (a shell) starts two plugins, each in its own process group as the engine
    does, and is killed with SIGKILL, as `kill -9 pulumi`."""
    flag = tmp_path / "lost"
    address = f"127.0.0.1:{free_port()}"
    script = (f'setsid "{sys.executable}" -c "$1" "{address}" & '
              f'"{sys.executable}" -c "$0" "{flag}" "{address}" & wait')
    engine = subprocess.Popen(["bash", "-c", script, WATCHDOG_CHILD, DEAF_PLUGIN],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert engine.stdout.readline().strip() == "watching"
    plugins = descendants(engine.pid)
    assert len(plugins) == 2 and sum(address in cmd for cmd in plugins.values()) == 2, plugins
    os.kill(engine.pid, signal.SIGKILL)
    engine.wait()
    killed = time.monotonic()
    while alive_of(plugins) and time.monotonic() - killed < 5:
        time.sleep(0.05)
    assert not alive_of(plugins), f"outlived their engine: {alive_of(plugins)}"
    assert time.monotonic() - killed < 3
    assert flag.read_text() == "lost"          # on_lost ran first (the language host stops its program)


@pytest.fixture
def host():
    loader = importlib.machinery.SourceFileLoader("provider_host", str(ROOT / "scripts" / "pulumi-resource-pulumi-python"))
    spec = importlib.util.spec_from_loader("provider_host", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _message(host, exc: BaseException) -> str:
    try:
        raise exc
    except BaseException:  # noqa: BLE001
        return host._message_for_engine()


def test_provider_errors_reach_the_engine_without_a_traceback(host, monkeypatch):
    from components.errors import ProviderError

    monkeypatch.delenv("RUSTFS_VLLM_DEBUG", raising=False)
    size = os.path.getsize(host.LOG) if os.path.exists(host.LOG) else 0
    msg = _message(host, ProviderError("bucket models: the S3 endpoint is unreachable; check rustfsEndpoint"))
    assert msg == "bucket models: the S3 endpoint is unreachable; check rustfsEndpoint"
    with open(host.LOG, encoding="utf-8") as fh:
        fh.seek(size)
        logged = fh.read()
    assert "Traceback (most recent call last)" in logged and "ProviderError" in logged
    other = _message(host, KeyError("manifest"))
    assert other.startswith("KeyError: 'manifest' (an unexpected error; the traceback is in ")
    assert "Traceback" not in other
    monkeypatch.setenv("RUSTFS_VLLM_DEBUG", "1")
    assert "Traceback (most recent call last)" in _message(host, ProviderError("x"))
