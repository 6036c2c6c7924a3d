"""What the stack's one endpoint is made of, as data: the routes (each served model and the vLLM servers
that serve it), the router's workers, and the nginx.conf of the endpoint in front of the router.

vLLM's router (vllm-router, ``--enable-igw``) routes a request to the workers of the ``model`` it names,
balances them by its policy, health-checks them, retries and opens circuits. nginx (the same image, a
second container or a second container of the pod) is what clients reach; it adds what the router does not
give in OpenAI's shape, tried by hand with vllm-router 0.1.17 (2026-12-04/05):

- ``GET /v1/models``: the router answers ``{"models": [...]}``, which the OpenAI client reads as an empty
  list; nginx answers OpenAI's list of the stack's served names;
- an unknown model: the router passes the request to some worker, whose vLLM answers 404 without the
  models there are; nginx answers 404 in OpenAI's error shape naming them;
- a model with no healthy server: the router answers a plain-text 503 (or 502); nginx answers 503 in
  OpenAI's error shape naming the model (read from the request body, which nginx holds in memory);
- errors say what happened (issue 57): a request that outlives ``proxy_read_timeout`` is a 504 that says
  so, with ``x-should-retry: false`` (the OpenAI clients would otherwise send it twice more and have it
  generated three times); a server's own 500 (OpenAI's JSON) stays a 500 that says the server failed the
  request (not an outage), while the router's own 500 (plain text: a server gone since its last health
  check) is the 503 above (nginx cannot pass an intercepted body on, so the server's message is in its
  log); a body above ``client_max_body_size`` is a 413 naming the limit;
- the API key (``vllmApiKey``): nginx refuses a request without it (401, OpenAI's shape), comparing it
  exactly (a case-sensitive regular expression of the whole header: a ``map`` of plain strings ignores
  case), and the router passes the client's ``Authorization`` on to the servers, which check it again.
  With a key, only ``/health`` answers without it (``/metrics`` and every other path need it);
- only ``/v1/...``, ``/health`` and ``/metrics`` (the router's Prometheus metrics) pass: the router's
  worker API stays on loopback.

This module is pure (no Pulumi, no I/O): the program puts the routes in a command's environment (what
preview shows changing) and ``components/serving/router_sync.py`` renders them on the host.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, Sequence

CONF_PATH = "/etc/rustfs-vllm/nginx.conf"
WORKERS_PATH = "/etc/rustfs-vllm/workers.json"
# a served model name as nginx reads it from a JSON body (the names the config allows, SERVED_NAME_RE)
MODEL_IN_BODY = r'"model"\s*:\s*"(?<rv_m>[A-Za-z0-9][A-Za-z0-9._:/-]{0,127})"'


HEALTH_INTERVAL_S = 2      # a server that stops answering /health leaves the rotation within ~2 intervals
READ_TIMEOUT_S = 600       # a request (streamed: between two chunks) that waits longer for the router gets a 504
MAX_BODY_MIB = 16          # the largest request body (a long prompt is far below: 128k tokens is ~1 MiB)
RETRY_AFTER_S = HEALTH_INTERVAL_S    # a 503's Retry-After: a server back is taken into the rotation within it
# the requests vLLM answers for a named model (a 404 of one of them for a model of the stack is the router's
# having no server of it registered, not a missing model)
MODEL_ROUTES = r"^/v1/(completions|chat/completions|responses(/.*)?|embeddings|score|rerank|pooling|classify|messages|audio/(transcriptions|translations))$"


@dataclass(frozen=True)
class Ports:
    """Where the endpoint listens, and the router's own loopback ports (router and Prometheus)."""
    bind: str
    port: int
    router: int
    metrics: int


def reach(bind: str) -> str:
    """Where this machine reaches a port listening on ``bind``."""
    return "127.0.0.1" if bind in ("0.0.0.0", "127.0.0.1") else bind


def router_argv(policy: str, ports: "Ports") -> list[str]:
    """The router container's command: vllm-router in Inference-Gateway mode (routes by ``model``) on loopback,
    its Prometheus metrics beside it, every server's /health checked every HEALTH_INTERVAL_S."""
    return ["rustfs-vllm-router", "--enable-igw", "--host", "127.0.0.1", "--port", str(ports.router),
            "--policy", policy, "--prometheus-host", "127.0.0.1", "--prometheus-port", str(ports.metrics),
            "--health-check-interval-secs", str(HEALTH_INTERVAL_S), "--health-check-endpoint", "/health",
            "--log-level", "warning"]


def routes_json(routes: Mapping[str, Sequence[str]]) -> str:
    """The routes as the command's environment holds them: {model: [worker URL, ...]}, sorted (one diff per
    change: preview shows which model gains or loses which server)."""
    return json.dumps({m: sorted(set(urls)) for m, urls in sorted(routes.items())}, sort_keys=True)


def workers(routes: Mapping[str, Sequence[str]], api_key: str = "") -> list[dict[str, str]]:
    """The router's workers: one per (model, server URL), the model named (the router does not ask the
    server, so a server still booting is registered and health-checked until it answers)."""
    out = []
    for model, urls in sorted(routes.items()):
        for url in sorted(set(urls)):
            w = {"url": url, "model_id": model, "runtime": "vllm"}
            if api_key:
                w["api_key"] = api_key
            out.append(w)
    return out


def _q(text: str) -> str:
    """A double-quoted nginx string holding ``text`` literally (a map's source value: no variables)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _json_body(obj: object) -> str:
    """A JSON body in an nginx ``return``: single-quoted, with $rv_model the only variable."""
    text = json.dumps(obj, separators=(",", ":")).replace("\\", "\\\\").replace("'", "\\'")
    return "'" + text.replace("$", "${rv_dollar}").replace("${rv_dollar}rv_model", "$rv_model") + "'"


def models_list(names: Sequence[str], created: int) -> dict:
    return {"object": "list", "data": [{"id": n, "object": "model", "created": created, "owned_by": "rustfs-vllm",
                                         "root": n, "parent": None} for n in sorted(names)]}


def error(message: str, kind: str, code: int, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def bodies(names: Sequence[str], created: int, entries: Mapping[str, dict] | None = None) -> dict[str, str]:
    """The answers nginx gives itself, as ``return`` arguments: the model list (each model's entry as one of
    its servers gave it, when ``entries`` has it: max_model_len, created) and the errors."""
    listing = ", ".join(names) if names else "(none yet)"
    models = models_list(names, created)
    models["data"] = [{**m, **(entries or {}).get(m["id"], {})} for m in models["data"]]
    return {k: _json_body(v) for k, v in {
        "models": models,
        "unknown": error(f"The model `$rv_model` does not exist here. The models this endpoint serves: {listing}.",
                         "NotFoundError", 404, "model"),
        "no_route": error("Not found. This endpoint serves POST /v1/completions, /v1/chat/completions and the other "
                          f"OpenAI routes of vLLM, GET /v1/models, /health and /metrics; models: {listing}.",
                          "NotFoundError", 404),
        "no_server": error("The model `$rv_model` has no healthy server right now (each of its servers is down, "
                           "restarting or failing its health check); retry in a few seconds.",
                           "ServiceUnavailableError", 503),
        "denied": error("Incorrect API key provided: send Authorization: Bearer <the stack's vllmApiKey>.",
                        "AuthenticationError", 401),
        "server_error": error("The model `$rv_model`'s server failed this request (its own HTTP 500, not an outage: "
                              "it serves other requests); its log says why.", "InternalServerError", 500),
        "timeout": error(f"The request took longer than {READ_TIMEOUT_S} s without an answer from `$rv_model`'s server "
                         "and was given up; it is not retried: send it again with a lower max_tokens, or stream it.",
                         "TimeoutError", 504),
        "too_large": error(f"The request body is larger than this endpoint takes ({MAX_BODY_MIB} MiB).",
                           "RequestTooLargeError", 413)}.items()}


def _server(ports: Ports, b: dict[str, str], check: str, read_timeout: int) -> str:
    return f"""    server {{
        listen {ports.bind}:{ports.port} reuseport;
        error_page 413 = @too_large;
        location = /v1/models {{
{check}            return 200 {b["models"]};
        }}
        location /v1/ {{
{check}            proxy_pass http://rv_router;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout {read_timeout}s;
            proxy_send_timeout {read_timeout}s;
            proxy_intercept_errors on;
            error_page 404 = @unknown_model;
            # the router's own failures: plain-text 503 "No available workers", 502, and its 500 "Request failed"
            # for a server gone since its last health check (plain text); a server's own 500 (JSON) stays a 500
            error_page 502 503 = @no_server;
            error_page 500 = @failed;
            error_page 504 = @timeout;
            error_page 413 = @too_large;     # a location's error_page replaces the server's: said again here
        }}
        location = /health {{
            proxy_pass http://rv_router/health;
        }}
        location = /metrics {{
{check}            proxy_pass http://127.0.0.1:{ports.metrics}/metrics;
        }}
        location / {{
{check}            return 404 {b["no_route"]};
        }}
        location @unknown_model {{
            if ($rv_model = "") {{ return 404 {b["no_route"]}; }}
            # a model of the stack whose servers the router has not (yet) registered: another model's vLLM
            # answered the 404 (the router, restarted, registers its workers again): a 503 to retry, never a 404
            if ($rv_wait) {{
                add_header Retry-After {RETRY_AFTER_S} always;
                return 503 {b["no_server"]};
            }}
            return 404 {b["unknown"]};
        }}
        location @no_server {{
            add_header Retry-After {RETRY_AFTER_S} always;
            return 503 {b["no_server"]};
        }}
        location @failed {{
            if ($upstream_http_content_type ~* "json") {{ return 500 {b["server_error"]}; }}
            add_header Retry-After {RETRY_AFTER_S} always;
            return 503 {b["no_server"]};
        }}
        location @timeout {{
            add_header x-should-retry false always;
            return 504 {b["timeout"]};
        }}
        location @too_large {{
            return 413 {b["too_large"]};
        }}
    }}
"""


def _regex(text: str) -> str:
    """``text`` as a PCRE that matches it literally."""
    return "".join(c if c.isalnum() or c in "_-" else "\\" + c for c in text)


def nginx_conf(routes: Mapping[str, Sequence[str]], ports: Ports, api_key: str = "", created: int = 0,
               entries: Mapping[str, dict] | None = None, read_timeout: int = READ_TIMEOUT_S,
               workers_root: bool = False) -> str:
    """The endpoint's whole nginx.conf. ``workers_root`` (a Docker host): nginx's workers stay root, the one user
    the router guard lets reach the router's port (components/docker/router.py)."""
    b = bodies(sorted(routes), created, entries)
    check = ("            if ($rv_denied) { return 401 " + b["denied"] + "; }\n") if api_key else ""
    # the whole header, case and all: a map's plain strings compare ignoring case, a "~" regex does not
    key_map = ("    map $http_authorization $rv_denied {\n        default 1;\n        "
               + _q("~^Bearer " + _regex(api_key) + "$") + " 0;\n    }\n") if api_key else ""
    user = "user root root;\n" if workers_root else ""
    known = "".join(f"        {_q(name)} 1;\n" for name in sorted(routes))
    return f"""# made by rustfs-vllm (components/serving/router_conf.py): the stack's one OpenAI endpoint
{user}worker_processes 1;
pid /tmp/nginx.pid;
error_log stderr warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path /tmp/client_body;
    proxy_temp_path /tmp/proxy;
    # request bodies in memory: the error pages read the model from them
    client_body_buffer_size 1m;
    client_max_body_size {MAX_BODY_MIB}m;
    default_type application/json;
    geo $rv_dollar {{ default "$"; }}
    map $request_body $rv_model {{
        default "";
        {_q("~" + MODEL_IN_BODY)} $rv_m;
    }}
    # a model of the stack named on one of vLLM's model routes (the 404 of a server not registered is a 503)
    map $rv_model $rv_known {{
        default 0;
{known}    }}
    map $uri $rv_api {{
        default 0;
        {_q("~" + MODEL_ROUTES)} 1;
    }}
    map "$rv_known$rv_api" $rv_wait {{
        default 0;
        11 1;
    }}
{key_map}    upstream rv_router {{
        server 127.0.0.1:{ports.router};
        keepalive 64;
    }}
{_server(ports, b, check, read_timeout)}}}
"""
