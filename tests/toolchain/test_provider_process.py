"""What our dynamic providers do in the provider process the engine starts (components/providers/base.py):
an error reaches the engine as one line (the traceback goes to the providers' log), and the process exits
when the engine is gone. Through the real engine these are the reliability suite's (the S3 server killed
mid-upload, `kill -9` of `pulumi` mid-upload); here each one on its own, with processes laid out as the
engine lays them out (the engine, the upstream launcher, the SDK's server)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from components.providers import base
from tests.helpers import ROOT, alive_of, descendants


def _message(exc: BaseException) -> str:
    try:
        raise exc
    except BaseException:  # noqa: BLE001
        return base.message_for_engine()


def test_provider_errors_reach_the_engine_without_a_traceback(tmp_path, monkeypatch):
    from components.errors import ProviderError

    monkeypatch.chdir(tmp_path)            # the provider process runs in the project folder
    monkeypatch.delenv("RUSTFS_VLLM_DEBUG", raising=False)
    msg = _message(ProviderError("bucket models: the S3 endpoint is unreachable; check rustfsEndpoint"))
    assert msg == "bucket models: the S3 endpoint is unreachable; check rustfsEndpoint"
    logged = (tmp_path / ".state" / "logs" / "providers.log").read_text()
    assert "Traceback (most recent call last)" in logged and "ProviderError" in logged
    other = _message(KeyError("manifest"))
    assert other.startswith("KeyError: 'manifest' (an unexpected error; the traceback is in ")
    assert str(tmp_path / ".state" / "logs" / "providers.log") in other and "Traceback" not in other
    monkeypatch.setenv("RUSTFS_VLLM_DEBUG", "1")
    assert "Traceback (most recent call last)" in _message(ProviderError("x"))


def test_adopting_a_process_routes_the_sdks_error_path_and_keeps_the_handed_over_config(monkeypatch):
    """The SDK's server builds its error with traceback.format_exc(): after adopt() that is ours."""
    import traceback

    from pulumi.dynamic import Config

    monkeypatch.setattr(base, "_adopted", False)
    monkeypatch.setattr(base, "watch_engine", lambda on_gone: None)
    monkeypatch.setattr(traceback, "format_exc", traceback.format_exc)
    base.adopt(Config({"rustfs-vllm:purgeOnDestroy": "true"}, "rustfs-vllm"))
    assert traceback.format_exc is base.message_for_engine
    assert base.engine_config("rustfs-vllm:purgeOnDestroy") == "true"
    base.adopt(Config({}, "rustfs-vllm"))                   # configured again: the newer configuration counts
    assert base.engine_config("rustfs-vllm:purgeOnDestroy") is None


PROVIDER = textwrap.dedent(f"""
    import sys, time
    sys.path.insert(0, {str(ROOT)!r})
    from components.providers import base
    def gone():
        with open(sys.argv[1], "w") as fh:
            fh.write("gone")
        base._engine_gone()
    base.watch_engine(gone)
    print("watching", flush=True)
    time.sleep(60)
""")


def test_the_provider_process_exits_within_a_second_of_the_engine_being_killed(tmp_path):
    """engine (bash, its own process group, as `pulumi`) -> the launcher (a shell script named as upstream's,
    which runs python as its child, not exec) -> python watching: `kill -9` of the engine ends python within a
    second, and the launcher with it."""
    flag = tmp_path / "gone"
    launcher = tmp_path / "pulumi-resource-pulumi-python"
    launcher.write_text(f'#!/bin/sh\n"{sys.executable}" -u -c "$PROVIDER" "$@"\n')
    launcher.chmod(0o755)
    engine = subprocess.Popen(["bash", "-c", f'"{launcher}" "{flag}"; sleep 60'], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PROVIDER": PROVIDER}, start_new_session=True)
    assert engine.stdout.readline().strip() == "watching"
    plugins = descendants(engine.pid)
    assert len(plugins) == 2, plugins                    # the launcher and python
    os.kill(engine.pid, signal.SIGKILL)
    engine.wait()
    killed = time.monotonic()
    while alive_of(plugins) and time.monotonic() - killed < 5:
        time.sleep(0.05)
    assert not alive_of(plugins), f"outlived their engine: {alive_of(plugins)}"
    assert time.monotonic() - killed < 2
    assert flag.read_text() == "gone"
