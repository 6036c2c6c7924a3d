"""The endpoint's errors say what happened (issue 57), through the real nginx of the router image
(rustfs-vllm/vllm-router:0.1.17, Debian's nginx-light) running the nginx.conf the program makes
(components/serving/router_conf.py), in front of an upstream of this test's own on the router's port: an HTTP
server that answers what a vLLM server or the router answers in the case under test (a 500 of its own in
OpenAI's shape, an answer slower than the read timeout). The OpenAI client (its defaults: 2 retries) and raw
requests ask it.

- a server's own 500 (OpenAI's JSON) stays a 500 saying the server failed the request (not an outage); the
  router's own 500 (plain text: a server gone since its last health check) is the 503 of no healthy server;
- a request that outlives the read timeout is a 504 that says so, and the OpenAI client does not send it again
  (``x-should-retry: false``): the upstream saw it once;
- a body above the limit is a 413 in OpenAI's shape naming the limit, not nginx's HTML page;
- a model of the stack whose servers the router has not registered (the router just restarted: another model's
  vLLM answers the request with its 404) is a 503 with Retry-After, never a 404 (issue 58); an unknown model
  stays the 404 that names the models there are; the router's own 503 carries Retry-After too;
- the API key compares exactly: the same key in another case is refused; with a key, only /health answers
  without it (/metrics, /v1/models, any other path: 401).
"""
from __future__ import annotations

import http.server
import json
import secrets
import threading
import time
import urllib.error
import urllib.request

import docker
import openai
import pytest

from components.serving import router_conf
from tests.helpers import free_ports, wait_http

IMAGE = "rustfs-vllm/vllm-router:0.1.17"
KEY = "Key-With.Case$And+Symbols" + secrets.token_hex(4)
MODEL = "m1"


class Upstream(http.server.BaseHTTPRequestHandler):
    """What the router answers for each model of this test: ``boom`` a server's own 500 (JSON), ``gone`` the
    router's own 500 (plain text, as vllm-router 0.1.17 answers for a server gone since its last health check),
    ``slow`` an answer after 4 s, anything else a completion."""
    seen: list[str] = []

    def log_message(self, *args) -> None:  # noqa: D401 - quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _plain(self, code: int, data: bytes) -> None:
        """An answer of the router's own: plain text."""
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self._send(200, {"status": "ok"})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        model = body.get("model", "")
        Upstream.seen.append(model)
        if model == "gone":      # the router's own 500 for a server gone since its last health check
            return self._plain(500, b"Request failed: error sending request for url (http://127.0.0.1:1/v1/completions)")
        if model in ("late", "nosuch"):     # another model's vLLM, asked for a model it does not serve
            return self._send(404, {"error": {"message": f"The model `{model}` does not exist.", "type": "NotFoundError",
                                              "param": "model", "code": 404}})
        if model == "busy":      # the router's own 503: no healthy worker of the model
            return self._plain(503, b"No available workers (all circuits open or unhealthy)")
        if model == "boom":
            return self._send(500, {"error": {"message": "EngineCore encountered an issue (the server's own words)",
                                              "type": "InternalServerError", "param": None, "code": 500}})
        if model == "slow":
            time.sleep(4)
        self._send(200, {"id": "x", "object": "text_completion", "created": 0, "model": model,
                         "choices": [{"index": 0, "text": " fine", "finish_reason": "length", "logprobs": None}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


@pytest.fixture(scope="module")
def endpoint():
    client = docker.from_env()
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"needs {IMAGE} (scripts/build-images)")
    base = free_ports(3)
    ports = router_conf.Ports("127.0.0.1", base, base + 1, base + 2)
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", p), Upstream) for p in (ports.router, ports.metrics)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    conf = router_conf.nginx_conf({m: ["http://127.0.0.1:1"] for m in (MODEL, "boom", "slow", "gone", "late", "busy")}, ports, KEY,
                                  read_timeout=2)
    box = client.containers.run(IMAGE, ["sh", "-c", f"cat > /tmp/nginx.conf <<'EOF'\n{conf}\nEOF\n"
                                        "exec nginx -c /tmp/nginx.conf -g 'daemon off;'"],
                                detach=True, network_mode="host", name=f"rv-endpoint-errors-{secrets.token_hex(3)}")
    try:
        assert wait_http(f"http://127.0.0.1:{ports.port}/health", 30), box.logs()[-2000:]
        yield f"http://127.0.0.1:{ports.port}"
    finally:
        box.remove(force=True)
        for s in servers:
            s.shutdown()


def ask(url: str, path: str, body: bytes | None = None, key: str | None = KEY) -> tuple[int, dict, str]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(url + path, data=body, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def test_a_servers_own_500_stays_a_500_and_the_routers_is_no_healthy_server(endpoint):
    client = openai.OpenAI(base_url=f"{endpoint}/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.InternalServerError) as err:
        client.completions.create(model="boom", prompt="x", max_tokens=1)
    assert err.value.status_code == 500 and "`boom`'s server failed this request" in str(err.value), err.value
    assert "healthy server" not in str(err.value)
    with pytest.raises(openai.APIStatusError) as gone:
        client.completions.create(model="gone", prompt="x", max_tokens=1)
    assert gone.value.status_code == 503 and "The model `gone` has no healthy server" in str(gone.value), gone.value


def test_a_request_past_the_read_timeout_is_a_504_that_the_client_does_not_send_again(endpoint):
    Upstream.seen.clear()
    client = openai.OpenAI(base_url=f"{endpoint}/v1", api_key=KEY)          # the client's defaults: 2 retries
    with pytest.raises(openai.APIStatusError) as err:
        client.completions.create(model="slow", prompt="x", max_tokens=1)
    assert err.value.status_code == 504 and "took longer than" in str(err.value), err.value
    assert Upstream.seen.count("slow") == 1, Upstream.seen                   # generated once, not three times


def test_a_body_above_the_limit_is_a_413_naming_it(endpoint):
    big = json.dumps({"model": MODEL, "prompt": "x" * (router_conf.MAX_BODY_MIB * 2**20 + 10)}).encode()
    status, headers, text = ask(endpoint, "/v1/completions", big)
    assert status == 413, (status, text[:300])
    assert json.loads(text)["error"]["message"].endswith(f"({router_conf.MAX_BODY_MIB} MiB)."), text


def test_the_key_compares_exactly_and_only_health_answers_without_it(endpoint):
    body = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 1}).encode()
    assert ask(endpoint, "/v1/completions", body)[0] == 200
    for wrong in (KEY.upper(), KEY.lower(), KEY + "x", KEY[:-1], None):
        assert ask(endpoint, "/v1/completions", body, key=wrong)[0] == 401, wrong
    for path in ("/metrics", "/v1/models", "/", "/anything"):
        status, _, text = ask(endpoint, path, key=None)
        assert status == 401 and json.loads(text)["error"]["type"] == "AuthenticationError", (path, status, text)
    assert ask(endpoint, "/metrics")[0] == 200
    assert ask(endpoint, "/health", key=None)[0] == 200


def test_a_model_of_the_stack_not_yet_registered_is_a_503_to_retry_never_a_404(endpoint):
    for model in ("late", "busy"):
        body = json.dumps({"model": model, "prompt": "x", "max_tokens": 1}).encode()
        for path in ("/v1/completions", "/v1/chat/completions"):
            status, headers, text = ask(endpoint, path, body)
            assert status == 503, (model, path, status, text)
            assert headers.get("Retry-After") == str(router_conf.RETRY_AFTER_S), (model, path, headers)
            assert f"The model `{model}` has no healthy server" in json.loads(text)["error"]["message"], text
    # the OpenAI client (its defaults) waits and asks again, as Retry-After says: three times in all
    Upstream.seen.clear()
    client = openai.OpenAI(base_url=f"{endpoint}/v1", api_key=KEY)
    with pytest.raises(openai.APIStatusError) as err:
        client.completions.create(model="late", prompt="x", max_tokens=1)
    assert err.value.status_code == 503 and Upstream.seen.count("late") == 3, (err.value, Upstream.seen)
    # a model the stack does not serve stays the 404 naming those it does; so does a route vLLM has not
    status, _, text = ask(endpoint, "/v1/completions", json.dumps({"model": "nosuch", "prompt": "x"}).encode())
    assert status == 404 and "does not exist here" in text and MODEL in text, (status, text)
    status, _, text = ask(endpoint, "/v1/no-such-route", json.dumps({"model": "late", "prompt": "x"}).encode())
    assert status == 404, (status, text)
