"""The admin client against a real HTTP server that answers as a starting RustFS does: 503 "server context
is not ready" for a while, then the answer (components.storage.admin_api.admin_for's retries)."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from components.storage import admin_api

NOT_READY = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code>'
             b'<Message>server context is not ready</Message></Error>')


def serve(not_ready_for: int):
    """A server whose first ``not_ready_for`` requests get the 503; then user-info answers."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):    # noqa: N802 - http.server's name
            seen.append(self.path)
            if len(seen) <= not_ready_for:
                self.send_response(503)
                body = NOT_READY
            else:
                self.send_response(200)
                body = b'{"status":"enabled","policyName":""}'
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def props(port: int) -> dict:
    return {"endpoint": f"http://127.0.0.1:{port}", "access_key": "root", "secret_key": "root-secret-1234"}


def test_a_starting_servers_503_is_waited_out():
    server, seen = serve(not_ready_for=3)
    try:
        admin_api.admin_for(props(server.server_port)).user_info("rvreadx")
    finally:
        server.shutdown()
    assert len(seen) == 4, seen


def test_a_server_that_stays_not_ready_fails_in_one_line_with_its_answer(monkeypatch):
    monkeypatch.setattr(admin_api, "NOT_READY_BACKOFF_MAX", 0.05)
    server, seen = serve(not_ready_for=1000)
    p = props(server.server_port)
    try:
        with pytest.raises(Exception) as got:
            admin_api.admin_for(p).user_info("rvreadx")
    finally:
        server.shutdown()
    assert len(seen) == 1 + admin_api.NOT_READY_RETRIES, len(seen)
    line = admin_api.explain(got.value, p, "look up user rvreadx")
    assert "503 ServiceUnavailable: server context is not ready" in line and "\n" not in line, line
