"""``scripts/router-routes``: make the running endpoint serve the stack's routes, with no restart.

Run by the stack's ``router-routes`` command (pulumi-command, on this machine) at create and whenever the
routes change. Its environment: RV_ROUTES (``{model: [server URL, ...]}``, router_conf.routes_json),
RV_ROUTER and RV_FRONT (the two containers), RV_BIND, RV_PORT, RV_ROUTER_PORT, RV_METRICS_PORT; the API
key (``vllmApiKey``, maybe empty) comes on stdin, never in argv or the environment.

In order, so that no request in flight is dropped:
1. the router's workers file (``workers.json``, replayed by the image's wrapper after a restart) is
   written into the router container;
   (the router's API is asked inside its container, ``docker exec``: its port is guarded on the host so that no
   unprivileged process reaches it, RouterApi below)
2. the router's workers are changed through its worker API: every new (model, server) added first, a
   server whose model changed (a rename) re-added under its new name, and only then the ones no route
   names removed (a removal finishes the requests already sent to it: the router drains nothing itself,
   but vLLM keeps serving what it accepted until its container goes, after this command);
3. the endpoint's nginx.conf is written into the front container, checked with ``nginx -t`` and loaded
   with ``nginx -s reload`` (graceful: old workers finish their requests);
4. it waits until the endpoint lists exactly the stack's models.
Every change is one line on stdout; a failure is one line on stderr naming what failed and what to do.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from components.serving import router_conf


class Fail(Exception):
    """One line: what failed, why, what to do."""


def http(method: str, url: str, body: object = None, headers: dict[str, str] | None = None,
         timeout: float = 10) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        return 0, str(e)


def write_into(container: str, path: str, text: str, check: str = "", then: str = "") -> None:
    """``text`` into ``path`` in the container (0600, replaced whole), through stdin of ``docker exec``;
    ``check`` runs on the new file (``path``.new) first, ``then`` after it took its place."""
    script = f"umask 077 && cat > {path}.new && {check + ' && ' if check else ''}mv -f {path}.new {path}" \
             f"{' && ' + then if then else ''}"
    run = subprocess.run(["docker", "exec", "-i", container, "sh", "-c", script], input=text.encode(),
                         capture_output=True)
    if run.returncode != 0:
        cause = (run.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise Fail(f"could not write {path} in container {container}: {cause} (is it running? docker ps -a "
                   f"--filter name={container}; `pulumi up --refresh` makes it again)")


class RouterApi:
    """The router's API, asked inside its container (``docker exec`` of the image's python3): on the host its port
    answers only root's processes (the router guard, issue 57), and this way a stack step needs no more."""

    SCRIPT = ("import json,sys,urllib.request,urllib.error\n"
              "m,u=sys.argv[1],sys.argv[2]; d=sys.stdin.buffer.read() or None\n"
              "r=urllib.request.Request(u,data=d,method=m,headers={'Content-Type':'application/json'})\n"
              "try:\n    x=urllib.request.urlopen(r,timeout=float(sys.argv[3])); c,b=x.status,x.read()\n"
              "except urllib.error.HTTPError as e:\n    c,b=e.code,e.read()\n"
              "except OSError as e:\n    c,b=0,str(e).encode()\n"
              "sys.stdout.write(str(c)+'\\n'); sys.stdout.flush(); sys.stdout.buffer.write(b)\n")

    def __init__(self, container: str, port: int, timeout: float = 10) -> None:
        self.container, self.base, self.timeout = container, f"http://127.0.0.1:{port}", timeout

    def call(self, method: str, path: str, body: object = None) -> tuple[int, str]:
        data = json.dumps(body).encode() if body is not None else b""
        try:
            run = subprocess.run(["docker", "exec", "-i", self.container, "python3", "-c", self.SCRIPT, method,
                                  f"{self.base}{path}", str(self.timeout)],
                                 input=data, capture_output=True, timeout=self.timeout + 20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 0, str(exc)
        if run.returncode != 0:
            return 0, (run.stderr.decode(errors="replace").strip().splitlines() or [f"exit {run.returncode}"])[-1]
        code, _, text = run.stdout.decode(errors="replace").partition("\n")
        return (int(code) if code.isdigit() else 0), text


def wait_router(api: RouterApi, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while True:
        code, text = api.call("GET", "/health")
        if code == 200:
            return
        if time.monotonic() > end:
            raise Fail(f"the router in container {api.container} did not answer {api.base}/health within {timeout:.0f} s "
                       f"({text[:200] or code}); see docker logs {api.container}")
        time.sleep(0.5)


def registered(api: RouterApi) -> list[dict]:
    code, text = api.call("GET", "/workers")
    if code != 200:
        raise Fail(f"the router's GET {api.base}/workers answered {code}: {text[:200]}")
    try:
        return json.loads(text).get("workers", [])
    except (ValueError, AttributeError):
        raise Fail(f"the router's GET {api.base}/workers answered what is not its worker list: {text[:200]}") from None


def sync_workers(api: RouterApi, wanted: list[dict]) -> list[str]:
    """The router's workers made ``wanted``: adds (and renames) first, removals last. Returns the lines said."""
    said = []
    have = {w["url"]: w.get("model_id", "") for w in registered(api)}
    want = {w["url"]: w for w in wanted}
    for url, w in want.items():
        if have.get(url) == w["model_id"]:
            continue
        if url in have:      # the server now serves another name: its old entry goes first
            remove(api, url)
            said.append(f"router: server {url} now serves {w['model_id']} (was {have[url]})")
        else:
            said.append(f"router: route {w['model_id']} -> {url} added")
        code, text = api.call("POST", "/workers", w)
        if code not in (200, 201, 202):
            raise Fail(f"the router refused worker {url} ({w['model_id']}): HTTP {code} {text[:200]}")
    for url, model in have.items():
        if url not in want:
            remove(api, url)
            said.append(f"router: route {model} -> {url} removed")
    return said


def remove(api: RouterApi, url: str) -> None:
    code, text = api.call("DELETE", f"/workers/{urllib.parse.quote(url, safe='')}")
    if code not in (200, 202, 204, 404):
        raise Fail(f"the router did not remove worker {url}: HTTP {code} {text[:200]}")


def unguarded(port: int) -> bool:
    """Whether a process of an unprivileged user on this machine reaches the router's port (the guard missing:
    a router image from before issue 57, or a router container made by an earlier version of the program).
    Tried for real: ``bash``'s /dev/tcp as user nobody (setpriv, when this runs as root)."""
    argv = ["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}"]
    if os.geteuid() == 0:
        argv = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", *argv]
    try:
        return subprocess.run(argv, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def wait_listing(endpoint: str, names: list[str], api_key: str, timeout: float = 30) -> None:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    end, got = time.monotonic() + timeout, ""
    while time.monotonic() < end:
        code, text = http("GET", f"{endpoint}/v1/models", headers=headers)
        if code == 200:
            got = text
            try:
                if sorted(m["id"] for m in json.loads(text).get("data", [])) == names:
                    return
            except (ValueError, AttributeError, KeyError, TypeError):
                pass                 # not a model list (yet): asked again, said below if it stays so
        time.sleep(0.3)
    raise Fail(f"the endpoint {endpoint}/v1/models did not list {', '.join(names)} within {timeout:.0f} s after "
               f"nginx's reload (it answered {got[:200]!r}); see docker logs of the endpoint's container")


def entries(routes: dict[str, list[str]], api_key: str) -> dict[str, dict]:
    """Each model's /v1/models entry as one of its servers gives it (its max_model_len, root, created), so
    the endpoint lists what a server lists; a model none of whose servers answers gets the plain entry."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    out: dict[str, dict] = {}
    for model, urls in routes.items():
        for url in urls:
            code, text = http("GET", f"{url}/v1/models", headers=headers)
            try:
                found = [m for m in json.loads(text).get("data", []) if m.get("id") == model] if code == 200 else []
            except (ValueError, AttributeError):
                found = []
            if found:
                out[model] = {k: v for k, v in found[0].items() if k != "permission"}
                break
    return out


def main() -> int:
    env = os.environ
    try:
        routes = json.loads(env["RV_ROUTES"])
        router, front = env["RV_ROUTER"], env["RV_FRONT"]
        ports = router_conf.Ports(env["RV_BIND"], int(env["RV_PORT"]), int(env["RV_ROUTER_PORT"]),
                                  int(env["RV_METRICS_PORT"]))
    except (KeyError, ValueError) as exc:
        print(f"router-routes: missing or bad variable: {exc} (run by the stack's router-routes command)",
              file=sys.stderr)
        return 2
    api_key = sys.stdin.read().strip() if not sys.stdin.isatty() else ""
    api = RouterApi(router, ports.router)
    host = router_conf.reach(ports.bind)
    try:
        wanted = router_conf.workers(routes, api_key)
        write_into(router, router_conf.WORKERS_PATH, json.dumps(wanted))
        wait_router(api)
        if unguarded(ports.router):
            raise Fail(f"the router's port 127.0.0.1:{ports.router} answers any process on this machine (its worker API "
                       f"would take routes from anyone): container {router} runs without the router guard; run "
                       "scripts/build-images, then `pulumi up --refresh` (the router is made again from the new image)")
        for line in sync_workers(api, wanted):
            print(line, flush=True)
        conf = router_conf.nginx_conf(routes, ports, api_key, created=int(time.time()),
                                      entries=entries(routes, api_key), workers_root=True)
        write_into(front, router_conf.CONF_PATH, conf,
                   check=f"nginx -q -t -c {router_conf.CONF_PATH}.new", then=f"nginx -c {router_conf.CONF_PATH} -s reload")
        wait_listing(f"http://{host}:{ports.port}", sorted(routes), api_key)
    except Fail as exc:
        print(f"router-routes: {exc}", file=sys.stderr)
        return 1
    print(f"router: http://{host}:{ports.port}/v1 serves {', '.join(sorted(routes)) or 'no model'} "
          f"({sum(len(v) for v in routes.values())} servers)", flush=True)
    return 0
