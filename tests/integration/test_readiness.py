"""scripts/wait-ready (the readiness command of every server container) against real containers
on the real Docker engine, with the locally built S3 stand-in image (rclone serve s3, not RustFS)."""
from __future__ import annotations

import json
import os
import subprocess
import time

from tests.helpers import ROOT, free_port

SCRIPT = str(ROOT / "scripts" / "wait-ready")


def wait(name: str, url: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([SCRIPT], env={"PATH": os.environ["PATH"], "RV_URL": url, "RV_CONTAINER": name, **env},
                          capture_output=True, text=True, timeout=120)


SERVE = ["serve", "s3", "/data", "--addr", ":9000", "--config", "/dev/null"]   # the stand-in, answering


def run(client, image, name, port, command):
    return client.containers.run(image, command, name=name, detach=True,
                                 ports={"9000/tcp": ("127.0.0.1", port)}, labels={"rustfs-vllm.stack": "itest"})


def test_ready_when_the_server_answers(image, client):
    port = free_port()
    c = run(client, image, "rvllm-itest-ready1", port, SERVE)
    try:
        proc = wait(c.name, f"http://127.0.0.1:{port}/", RV_ANY_STATUS="1", RV_TIMEOUT="30")
        assert proc.returncode == 0, proc.stderr
        assert f"http://127.0.0.1:{port}/" in proc.stdout and " after " in proc.stdout
    finally:
        c.remove(force=True)


def test_an_exiting_container_fails_in_one_line_with_the_cause_from_its_log(image, client):
    port = free_port()
    c = run(client, image, "rvllm-itest-ready2", port, ["serve", "s3", "/data", "--no-such-flag"])
    try:
        started = time.monotonic()
        proc = wait(c.name, f"http://127.0.0.1:{port}/", RV_TIMEOUT="60")
        assert proc.returncode == 1 and time.monotonic() - started < 30
        [line] = proc.stderr.strip().splitlines()
        assert line.startswith(f"wait-ready: container {c.name} ") and "exited" in line and "no-such-flag" in line, line
        assert f"(its log: docker logs {c.name})" in line
    finally:
        c.remove(force=True)


def test_timeout_names_the_container_the_url_and_the_setting_in_one_line(image, client):
    port = free_port()
    c = run(client, image, "rvllm-itest-ready3", port, SERVE)
    try:
        proc = wait(c.name, f"http://127.0.0.1:{port}/never", RV_CONTAINS='"never"', RV_TIMEOUT="3")
        assert proc.returncode == 1
        [line] = proc.stderr.strip().splitlines()
        assert f"container {c.name} not ready at http://127.0.0.1:{port}/never after 3 s (HTTP 404)" in line, line
        assert "vllmReadyTimeout" in line
    finally:
        c.remove(force=True)


def test_the_auth_header_is_sent_and_never_printed(image, client, tmp_path):
    """A server that needs the key answers only with it; the key is not in the output."""
    import http.server
    import threading

    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append(self.headers.get("Authorization", ""))
            ok = self.headers.get("Authorization") == "Bearer key-0001-secret"
            self.send_response(200 if ok else 401)
            self.end_headers()
            self.wfile.write(json.dumps({"data": [{"id": "m"}]}).encode())

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proc = wait("", f"http://127.0.0.1:{server.server_port}/v1/models", RV_CONTAINS='"m"',
                    RV_AUTH="Bearer key-0001-secret", RV_TIMEOUT="10")
        assert proc.returncode == 0 and seen[-1] == "Bearer key-0001-secret"
        assert "key-0001-secret" not in proc.stdout + proc.stderr
    finally:
        server.shutdown()
