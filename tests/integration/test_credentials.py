"""The credential check against real S3 servers (`rclone serve s3`, the S3-compatible stand-in,
NOT RustFS): one that takes the configured keys, one that runs on RustFS's default keys (what a
RustFS that never received its keys does), one that takes both, and wrong keys."""
from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from components.providers.credentials import check, check_until
from components.errors import ProviderError
from tests.helpers import free_port, start_rclone_s3
from tests.integration.conftest import ACCESS, SECRET


def serve(root: Path, auth_keys: str) -> tuple[subprocess.Popen, str]:
    """rclone serve s3 with RCLONE_AUTH_KEY = ``auth_keys`` (CSV of quoted "ak,sk" pairs)."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    return start_rclone_s3(root, port, auth_keys=auth_keys), f"http://127.0.0.1:{port}"


@pytest.fixture
def server(tmp_path):
    procs = []

    def start(auth_keys: str) -> str:
        proc, endpoint = serve(tmp_path / f"s{len(procs)}", auth_keys)
        procs.append(proc)
        return endpoint

    yield start
    for p in procs:
        p.kill()
        p.wait()


def props(endpoint: str, **extra) -> dict:
    return {"endpoint": endpoint, "access_key": ACCESS, "secret_key": SECRET, "kind": "rustfs",
            "defaults_allowed": False, "server": "c1", **extra}


def test_configured_keys_work_and_defaults_are_refused(server):
    check(props(server(f'"{ACCESS},{SECRET}"')))


def test_a_server_on_rustfs_default_keys_is_named_as_the_cause(server):
    endpoint = server('"rustfsadmin,rustfsadmin"')
    with pytest.raises(ProviderError) as err:
        check(props(endpoint))
    msg = str(err.value)
    assert "accepts RustFS's default credentials 'rustfsadmin'" in msg and "never received the configured" in msg
    assert "RUSTFS_ACCESS_KEY_FILE" in msg and SECRET not in msg
    check(props(endpoint, access_key="rustfsadmin", secret_key="rustfsadmin", defaults_allowed=True))  # dev


def test_a_server_that_also_takes_the_defaults_is_refused(server):
    endpoint = server(f'"{ACCESS},{SECRET}","rustfsadmin,rustfsadmin"')
    with pytest.raises(ProviderError) as err:
        check(props(endpoint, kind="external"))
    assert "also RustFS's default credentials" in str(err.value)


def test_wrong_keys_are_reported_as_wrong_keys(server):
    endpoint = server('"someone-else-key-0001,someone-else-secret-1"')
    with pytest.raises(ProviderError) as err:
        check(props(endpoint))
    assert "rejected the credentials" in str(err.value) and "rustfsAccessKey" in str(err.value)
    assert "default" not in str(err.value)


def test_an_unreachable_endpoint_is_reported_as_such():
    with pytest.raises(ProviderError) as err:
        check(props(f"http://127.0.0.1:{free_port()}"))
    assert "is unreachable" in str(err.value)


def test_with_wait_seconds_a_server_restarting_with_new_keys_passes(server, tmp_path):
    """The Kubernetes target's case: new keys applied, the check starts while the old server still
    answers with the old keys, and the new one comes up a few seconds later."""
    old = serve(tmp_path / "old", '"old-access-key-0001,old-secret-key-0001"')
    endpoint = old[1]
    port = int(endpoint.rsplit(":", 1)[1])
    restarted: list[subprocess.Popen] = []

    def restart() -> None:
        time.sleep(3)
        old[0].kill()
        old[0].wait()
        restarted.append(start_rclone_s3(tmp_path / "new", port, auth_keys=f'"{ACCESS},{SECRET}"'))

    (tmp_path / "new").mkdir()
    t = threading.Thread(target=restart)
    t.start()
    started = time.monotonic()
    try:
        check_until(props(endpoint, wait_seconds=60))
        assert time.monotonic() - started >= 3      # it did wait for the new server
    finally:
        t.join()
        for p in restarted:
            p.kill()
            p.wait()


def test_with_wait_seconds_wrong_keys_still_fail_with_their_cause(server):
    endpoint = server('"other-access-key-01,other-secret-key-01"')
    started = time.monotonic()
    with pytest.raises(ProviderError) as err:
        check_until(props(endpoint, wait_seconds=4))
    assert time.monotonic() - started >= 4
    assert "rejected the credentials" in str(err.value) and SECRET not in str(err.value)
