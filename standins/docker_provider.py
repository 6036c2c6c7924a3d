"""OFFLINE STAND-IN for the pulumi-docker 5.1.0 provider plugin: Container, RemoteImage, Volume.

Not the real plugin (that one is Go: pulumi-docker bridging kreuzwerker/terraform-provider-docker
v4.5.0, and cannot be downloaded on machines without GitHub). It implements, on the Docker Engine
API, the three resources and the properties this program uses, with the real provider's tokens,
property names, defaults and replace-on-change behaviour as read from its v5.1.0 source:

- `docker:index/container:Container`: every property below replaces the container when it
  changes except `restart`, `maxRetryCount`, `mustRun`, `start`, `wait`, `waitTimeout`, `rm`,
  `destroyGraceSeconds`, `removeVolumes`, `healthcheck`, which update in place; replacement deletes
  first (pulumi-docker 5 sets deleteBeforeReplace for containers). `uploads` are copied into the
  created container before it starts (tar entries owned by root, mode `permissions` or 0644/0744).
  Create uses a local image or pulls it; `wait` waits for the healthcheck. Refresh drops a container
  that is gone and reports `mustRun: false` for one that stopped, so the next `up` starts it again.
  Delete stops (grace `destroyGraceSeconds`), removes, and succeeds when it is already gone.
- `docker:index/remoteImage:RemoteImage`: `name` (replaces), `keepLocally`, `forceRemove`,
  `pullTriggers`/`triggers` (replace). Uses the local image when present, otherwise pulls it;
  outputs `imageId`, `repoDigest`; the id is `<image id><name>`. Delete removes the image unless
  `keepLocally`. Refresh drops it when it is no longer on the host.
- `docker:index/volume:Volume`: `name`, `driver`, `driverOpts`, `labels` (all replace). Create
  adopts an existing volume of that name, as Docker does; refresh drops a volume that is gone.

Provider configuration: `host` (e.g. unix:///var/run/docker.sock, tcp://..., ssh://user@host[:port]),
else DOCKER_HOST, else the local socket; `sshOpts` (extra OpenSSH client options for an ssh:// host,
e.g. `-i key -o StrictHostKeyChecking=yes`; the real provider passes them to `ssh` too). Any other property fails at check with a message that
names it and says this is the stand-in.
"""
from __future__ import annotations

import io
import os
import tarfile
import time
from typing import Any

from standins.plugin import DiffResult, ProviderError, Resource, canonical, has_unknowns, serve

VERSION = "5.1.0"
STANDIN = "the offline stand-in for pulumi-docker"


class DialStdioBridge:
    """An ssh:// Docker host as a local unix socket: each connection to the socket runs
    ``ssh <sshOpts> -l USER -p PORT HOST docker system dial-stdio`` and pipes bytes both ways, as
    Docker's own connection helper does (and pulumi-docker's with sshOpts). docker-py's shell-out
    cannot be used in a gRPC server: it forks with a preexec_fn, and the child never reaches exec."""

    def __init__(self, url: str, opts: list[str]) -> None:
        import atexit
        import shutil
        import socket
        import tempfile
        import threading
        from urllib.parse import urlparse

        u = urlparse(url)
        self.argv = [shutil.which("ssh") or "/usr/bin/ssh", *opts, *(["-l", u.username] if u.username else []),
                     "-p", str(u.port or 22), "--", u.hostname or "", "docker system dial-stdio"]
        self.folder = tempfile.mkdtemp(prefix="rv-docker-ssh-")
        atexit.register(shutil.rmtree, self.folder, True)
        self.path = os.path.join(self.folder, "docker.sock")
        self.last_error = ""
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            conn, _ = self.server.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: Any) -> None:
        import socket
        import subprocess
        import threading

        proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

        def upstream() -> None:
            try:
                while chunk := conn.recv(65536):
                    proc.stdin.write(chunk)
                    proc.stdin.flush()
            except OSError:
                pass
            finally:
                try:
                    proc.stdin.close()
                except OSError:
                    pass

        def errors() -> None:
            err = proc.stderr.read().decode(errors="replace").strip()
            if err:
                self.last_error = err.splitlines()[-1]

        threads = [threading.Thread(target=upstream, daemon=True), threading.Thread(target=errors, daemon=True)]
        for t in threads:
            t.start()
        try:
            while chunk := proc.stdout.read1(65536):
                conn.sendall(chunk)
        except OSError:   # the client went away: so does its ssh
            proc.terminate()
        finally:
            proc.wait()
            threads[1].join(timeout=5)   # ssh's last words are in last_error before the client hears EOF
            # shutdown, not just close: the upstream thread may sit in recv on this socket, and a
            # close alone would then never send the client its end of file
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


_bridges: dict[tuple[str, tuple[str, ...]], DialStdioBridge] = {}


def client(config: dict[str, Any]) -> Any:
    import docker

    host = config.get("host") or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    bridge = None
    if host.startswith("ssh://"):
        opts = config.get("sshOpts") or []
        if isinstance(opts, str):   # provider inputs arrive JSON-encoded
            import json
            opts = json.loads(opts)
        key = (host, tuple(opts))
        if key not in _bridges:
            _bridges[key] = DialStdioBridge(host, list(opts))
        bridge = _bridges[key]
    try:
        c = docker.DockerClient(base_url=f"unix://{bridge.path}" if bridge else host, timeout=300)
        if bridge:
            c.ping()
        return c
    except Exception as exc:  # noqa: BLE001
        why = f"{exc}" + (f"; ssh: {bridge.last_error}" if bridge and bridge.last_error else "")
        raise ProviderError(f"cannot reach the Docker daemon at {host}: {why}") from None


def _errors() -> Any:
    import docker.errors

    return docker.errors


def _diff(spec: dict[str, tuple[bool, bool]], old_inputs: dict[str, Any], news: dict[str, Any],
          defaults: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(updated, replaced) property names. ``spec``: name -> (force_new, unordered)."""
    updates, replaces = [], []
    for key in sorted(set(old_inputs) | set(news)):
        if key not in spec:
            continue
        force_new, unordered = spec[key]
        old = old_inputs.get(key, defaults.get(key))
        new = news.get(key, defaults.get(key))
        if old in (None, [], {}) and new in (None, [], {}):
            continue
        if canonical(old, unordered) != canonical(new, unordered):
            (replaces if force_new else updates).append(key)
    return updates, replaces


def _unknown_check(spec: dict[str, Any], news: dict[str, Any], token: str) -> list[tuple[str, str]]:
    return [(k, f"{k!r} is not implemented by {STANDIN} ({token}); install the real plugin "
                f"(implemented: {', '.join(sorted(spec))})") for k in news if k not in spec]


# --------------------------------------------------------------------------- RemoteImage
def find_image(c: Any, name: str, log: Any) -> Any:
    """The local image ``name``, pulled when missing. A pull that fails after it started (a full
    disk, a blob the registry lost) reports its error inside the daemon's progress stream, which
    docker-py's ``images.pull`` drops (as the real plugin does: it only logs the stream at debug
    level, then says "no such image"); the stand-in names the daemon's own words."""
    from docker.utils import parse_repository_tag

    errors = _errors()
    try:
        return c.images.get(name)
    except errors.ImageNotFound:
        pass
    log(f"pulling {name}")
    repo, tag = parse_repository_tag(name)
    said = ""
    try:
        for event in c.api.pull(repo, tag=tag or "latest", stream=True, decode=True):
            said = event.get("error") or (event.get("errorDetail") or {}).get("message") or said
        if not said:
            return c.images.get(name if tag else f"{name}:latest")
    except errors.APIError as exc:
        said = exc.explanation or str(exc)
    raise ProviderError(f"Unable to read Docker image into resource: unable to pull image {name}: {said}")


def _repo_digest(image: Any, name: str) -> str:
    from docker.utils import parse_repository_tag

    digests = image.attrs.get("RepoDigests") or []
    repo = parse_repository_tag(name)[0]
    return next((d for d in digests if d.split("@")[0] == repo), digests[0] if digests else "")


class RemoteImage(Resource):
    token = "docker:index/remoteImage:RemoteImage"
    SPEC = {"name": (True, False), "keepLocally": (False, False), "forceRemove": (False, False),
            "pullTriggers": (True, True), "triggers": (True, False), "platform": (True, False)}

    def check(self, olds, news):
        failures = _unknown_check(self.SPEC, news, self.token)
        if not news.get("name"):
            failures.append(("name", "name: an image reference is required"))
        return news, failures

    def diff(self, id_, olds, old_inputs, news):
        updates, replaces = _diff(self.SPEC, old_inputs, news, {"platform": ""})
        return DiffResult(updates=updates, replaces=replaces)

    def _state(self, inputs: dict[str, Any], image: Any) -> tuple[str, dict[str, Any]]:
        return image.id + inputs["name"], {**inputs, "imageId": image.id,
                                           "repoDigest": _repo_digest(image, inputs["name"])}

    def create(self, ctx, inputs):
        if ctx.preview:
            return "", inputs
        return self._state(inputs, find_image(client(ctx.config), inputs["name"], ctx.log))

    def update(self, ctx, id_, olds, news):
        if ctx.preview:
            return {**olds, **news}
        return self._state(news, find_image(client(ctx.config), news["name"], ctx.log))[1]

    def read(self, ctx, id_, state, inputs):
        try:
            image = client(ctx.config).images.get(state.get("name") or inputs.get("name"))
        except _errors().ImageNotFound:
            return None
        new_id, new_state = self._state({**state}, image)
        return new_id, new_state, inputs

    def delete(self, ctx, id_, state):
        if state.get("keepLocally"):
            return
        try:
            client(ctx.config).images.remove(state["name"], force=bool(state.get("forceRemove")))
        except _errors().ImageNotFound:
            pass


# --------------------------------------------------------------------------- Volume
class Volume(Resource):
    token = "docker:index/volume:Volume"
    SPEC = {"name": (True, False), "driver": (True, False), "driverOpts": (True, False), "labels": (True, True)}

    def check(self, olds, news):
        return news, _unknown_check(self.SPEC, news, self.token)

    def diff(self, id_, olds, old_inputs, news):
        updates, replaces = _diff(self.SPEC, old_inputs, news, {})
        return DiffResult(updates=updates, replaces=replaces)

    def create(self, ctx, inputs):
        if ctx.preview:
            return "", inputs
        labels = {lab["label"]: lab["value"] for lab in inputs.get("labels") or []}
        vol = client(ctx.config).volumes.create(name=inputs.get("name"), driver=inputs.get("driver") or "local",
                                                driver_opts=inputs.get("driverOpts") or None, labels=labels or None)
        return vol.name, {**inputs, "name": vol.name, "driver": vol.attrs.get("Driver", "local"),
                          "mountpoint": vol.attrs.get("Mountpoint", "")}

    def read(self, ctx, id_, state, inputs):
        try:
            vol = client(ctx.config).volumes.get(id_)
        except _errors().NotFound:
            return None
        return id_, {**state, "mountpoint": vol.attrs.get("Mountpoint", "")}, inputs

    def delete(self, ctx, id_, state):
        errors = _errors()
        for _ in range(10):
            try:
                client(ctx.config).volumes.get(id_).remove(force=True)
                return
            except errors.NotFound:
                return
            except errors.APIError as exc:
                if "in use" not in str(exc):
                    raise ProviderError(f"Unable to remove volume {id_}: {exc.explanation or exc}") from None
                time.sleep(1)
        raise ProviderError(f"Unable to remove volume {id_}: it is still in use")


# --------------------------------------------------------------------------- Container
# name -> (force_new, unordered): the Terraform schema's ForceNew and TypeSet.
CONTAINER_SPEC = {
    "name": (True, False), "image": (True, False), "command": (True, False), "entrypoints": (True, False),
    "envs": (True, True), "labels": (True, True), "ports": (True, False), "mounts": (True, True),
    "volumes": (True, True), "uploads": (True, True), "shmSize": (True, False), "gpus": (True, False),
    "user": (True, False), "networkMode": (True, False), "ipcMode": (True, False), "privileged": (True, False),
    "capabilities": (True, False), "devices": (True, True), "hostname": (True, False), "workingDir": (True, False),
    "logDriver": (True, False), "logOpts": (True, False), "readOnly": (True, False), "hosts": (True, True),
    "init": (False, False), "tty": (True, False), "stdinOpen": (True, False), "stopSignal": (True, False),
    "stopTimeout": (True, False),
    "restart": (False, False), "maxRetryCount": (False, False), "mustRun": (False, False), "start": (False, False),
    "wait": (False, False), "waitTimeout": (False, False), "rm": (False, False),
    "destroyGraceSeconds": (False, False), "removeVolumes": (False, False), "healthcheck": (False, False),
}
CONTAINER_DEFAULTS = {"restart": "no", "mustRun": True, "start": True, "wait": False, "waitTimeout": 60, "rm": False,
                      "removeVolumes": True, "networkMode": "bridge", "readOnly": False, "tty": False,
                      "stdinOpen": False}
RESTARTS = ("no", "on-failure", "always", "unless-stopped")


def _duration_ns(text: str) -> int:
    units = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
    total, num = 0, ""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            num += ch
            i += 1
            continue
        unit = text[i:i + 2] if text[i:i + 2] in units else ch
        total += int(float(num or 0) * units[unit])
        num, i = "", i + len(unit)
    return total


def _gpu_request(gpus: str) -> Any:
    from docker.types import DeviceRequest

    value = gpus.strip().strip("'\"")
    if value == "all":
        return DeviceRequest(count=-1, capabilities=[["gpu"]])
    fields = dict(f.split("=", 1) for f in value.split(",") if "=" in f) if "=" in value else {}
    if "device" in fields or value.startswith("device="):
        ids = value.split("=", 1)[1].split(",")
        return DeviceRequest(device_ids=ids, capabilities=[["gpu"]])
    if "count" in fields:
        return DeviceRequest(count=int(fields["count"]), capabilities=[["gpu"]])
    return DeviceRequest(count=int(value), capabilities=[["gpu"]])


def _upload_tar(uploads: list[dict[str, Any]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for up in uploads:
            if up.get("source"):
                with open(up["source"], "rb") as fh:
                    data = fh.read()
            elif up.get("contentBase64"):
                import base64

                data = base64.b64decode(up["contentBase64"])
            else:
                data = str(up.get("content") or "").encode()
            if up.get("permissions"):
                mode = int(str(up["permissions"]), 8)
            else:
                mode = 0o744 if up.get("executable") else 0o644
            info = tarfile.TarInfo(up["file"].lstrip("/"))
            info.size, info.mode, info.mtime, info.uid, info.gid = len(data), mode, int(time.time()), 0, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _logs(container: Any, lines: int = 40) -> str:
    try:
        return container.logs(tail=lines).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001
        return ""


class Container(Resource):
    token = "docker:index/container:Container"

    def check(self, olds, news):
        failures = _unknown_check(CONTAINER_SPEC, news, self.token)
        for key in ("name", "image"):
            if not news.get(key):
                failures.append((key, f"{key} is required"))
        if news.get("restart", "no") not in RESTARTS:
            failures.append(("restart", f"restart {news['restart']!r}: one of {', '.join(RESTARTS)}"))
        inputs = {**{k: v for k, v in CONTAINER_DEFAULTS.items() if k not in news}, **news}
        ports = []
        for p in inputs.get("ports") or []:
            if not has_unknowns(p) and "internal" not in p:
                failures.append(("ports", f"port {p!r}: internal is required"))
            ports.append({"ip": "0.0.0.0", "protocol": "tcp", **p})
        if ports:
            inputs["ports"] = ports
        for i, up in enumerate(inputs.get("uploads") or []):
            given = [k for k in ("content", "contentBase64", "source") if up.get(k)]
            if not has_unknowns(up) and len(given) != 1:
                failures.append((f"uploads[{i}]", "error with upload content: exactly one of 'content', "
                                                  "'content_base64', or 'source' must be set"))
        return inputs, failures

    def diff(self, id_, olds, old_inputs, news):
        updates, replaces = _diff(CONTAINER_SPEC, old_inputs, news, CONTAINER_DEFAULTS)
        return DiffResult(updates=updates, replaces=replaces, delete_before_replace=True)

    def create(self, ctx, inputs):
        if ctx.preview:
            return "", inputs
        from docker.types import Mount

        errors = _errors()
        c = client(ctx.config)
        find_image(c, inputs["image"], ctx.log)
        mounts = []
        for m in inputs.get("mounts") or []:
            mounts.append(Mount(target=m["target"], source=m.get("source"), type=m.get("type", "volume"),
                                read_only=bool(m.get("readOnly")),
                                propagation=(m.get("bindOptions") or {}).get("propagation")))
        for v in inputs.get("volumes") or []:
            mounts.append(Mount(target=v["containerPath"], source=v.get("hostPath") or v.get("volumeName"),
                                type="bind" if v.get("hostPath") else "volume", read_only=bool(v.get("readOnly"))))
        ports: dict[str, Any] = {}
        for p in inputs.get("ports") or []:
            ports.setdefault(f"{p['internal']}/{p.get('protocol', 'tcp')}", []).append(
                (p.get("ip", "0.0.0.0"), p.get("external")) if p.get("external") else None)
        restart = inputs.get("restart", "no")
        kwargs: dict[str, Any] = dict(
            name=inputs["name"], command=inputs.get("command") or None, entrypoint=inputs.get("entrypoints") or None,
            environment=inputs.get("envs") or None,
            labels={lab["label"]: lab["value"] for lab in inputs.get("labels") or []},
            mounts=mounts, ports={k: (v[0] if len(v) == 1 else v) for k, v in ports.items()} or None,
            user=inputs.get("user") or None, network_mode=inputs.get("networkMode") or None,
            ipc_mode=inputs.get("ipcMode") or None, privileged=bool(inputs.get("privileged")),
            hostname=inputs.get("hostname") or None, working_dir=inputs.get("workingDir") or None,
            read_only=bool(inputs.get("readOnly")), init=inputs.get("init"), tty=bool(inputs.get("tty")),
            stdin_open=bool(inputs.get("stdinOpen")), stop_signal=inputs.get("stopSignal") or None,
            restart_policy={"Name": restart, **({"MaximumRetryCount": inputs["maxRetryCount"]}
                                                if restart == "on-failure" and inputs.get("maxRetryCount") else {})}
            if restart != "no" else None,
            auto_remove=bool(inputs.get("rm")),
            extra_hosts={h["host"]: h["ip"] for h in inputs.get("hosts") or []} or None,
        )
        if inputs.get("shmSize"):
            kwargs["shm_size"] = f"{int(inputs['shmSize'])}m"
        if inputs.get("gpus"):
            kwargs["device_requests"] = [_gpu_request(inputs["gpus"])]
        if inputs.get("capabilities"):
            kwargs["cap_add"] = inputs["capabilities"].get("adds") or None
            kwargs["cap_drop"] = inputs["capabilities"].get("drops") or None
        if inputs.get("devices"):
            kwargs["devices"] = [f"{d['hostPath']}:{d.get('containerPath') or d['hostPath']}:{d.get('permissions', 'rwm')}"
                                 for d in inputs["devices"]]
        if inputs.get("logDriver"):
            from docker.types import LogConfig

            kwargs["log_config"] = LogConfig(type=inputs["logDriver"], config=inputs.get("logOpts") or {})
        if inputs.get("healthcheck"):
            hc = inputs["healthcheck"]
            kwargs["healthcheck"] = {"test": hc.get("tests"), "interval": _duration_ns(hc.get("interval", "0s")),
                                     "timeout": _duration_ns(hc.get("timeout", "0s")),
                                     "start_period": _duration_ns(hc.get("startPeriod", "0s")),
                                     "retries": int(hc.get("retries", 0))}
        try:
            container = c.containers.create(inputs["image"], detach=True, **kwargs)
        except errors.APIError as exc:
            raise ProviderError(f"Unable to create container: {exc.explanation or exc}") from None
        try:
            if inputs.get("uploads"):
                container.put_archive("/", _upload_tar(inputs["uploads"]))
            if inputs.get("start", True):
                try:
                    container.start()
                except errors.APIError as exc:
                    raise ProviderError(f"Unable to start container: {exc.explanation or exc}") from None
                if inputs.get("wait"):
                    self._wait_healthy(container, int(inputs.get("waitTimeout") or 60))
        except BaseException:
            # the real provider records a half-made container as tainted; this one removes it
            try:
                container.remove(force=True)
            except errors.APIError:
                pass
            raise
        return container.id, self._state(container, inputs)

    @staticmethod
    def _wait_healthy(container: Any, timeout: int) -> None:
        deadline = time.monotonic() + timeout
        while True:
            container.reload()
            health = (container.attrs.get("State") or {}).get("Health")
            if health is None:
                raise ProviderError("you have supplied a 'wait' argument, but the container does not have a "
                                    "healthcheck defined. Please remove the 'wait' argument or add a 'healthcheck' attribute")
            if health.get("Status") == "healthy":
                return
            if time.monotonic() > deadline:
                raise ProviderError(f"container {container.name} failed to be in healthy state in time; "
                                    f"last log lines:\n{_logs(container)}")
            time.sleep(1)

    @staticmethod
    def _state(container: Any, inputs: dict[str, Any]) -> dict[str, Any]:
        container.reload()
        attrs = container.attrs
        cfg = attrs.get("Config") or {}
        networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
        return {**inputs,
                "command": inputs.get("command") or cfg.get("Cmd") or [],
                "entrypoints": inputs.get("entrypoints") or cfg.get("Entrypoint") or [],
                "bridge": "", "exitCode": None, "containerLogs": None,
                "networkDatas": [{"networkName": n, "ipAddress": v.get("IPAddress", ""),
                                  "ipPrefixLength": v.get("IPPrefixLen", 0), "gateway": v.get("Gateway", ""),
                                  "macAddress": v.get("MacAddress", "")} for n, v in networks.items()]}

    def read(self, ctx, id_, state, inputs):
        try:
            container = client(ctx.config).containers.get(id_)
        except _errors().NotFound:
            return None
        running = (container.attrs.get("State") or {}).get("Running", False)
        if not running and state.get("mustRun", True):
            # as the real provider: a stopped container reads as mustRun=false; the next up starts it
            return id_, {**state, "mustRun": False}, {**inputs, "mustRun": False}
        return id_, state, inputs

    def update(self, ctx, id_, olds, news):
        state = {**olds, **news}
        if ctx.preview:
            return state
        c = client(ctx.config)
        try:
            container = c.containers.get(id_)
        except _errors().NotFound:
            raise ProviderError(f"container {id_} is gone; run `pulumi refresh`") from None
        if news.get("restart", "no") != olds.get("restart", "no") or news.get("maxRetryCount") != olds.get("maxRetryCount"):
            restart = news.get("restart", "no")
            container.update(restart_policy={"Name": restart if restart != "no" else "",
                                             "MaximumRetryCount": int(news.get("maxRetryCount") or 0)})
        if news.get("mustRun", True) and news.get("start", True):
            container.reload()
            if not container.attrs["State"].get("Running"):
                container.start()
                if news.get("wait"):
                    self._wait_healthy(container, int(news.get("waitTimeout") or 60))
        return self._state(container, state)

    def delete(self, ctx, id_, state):
        errors = _errors()
        c = client(ctx.config)
        try:
            container = c.containers.get(id_)
        except errors.NotFound:
            return
        try:
            container.stop(timeout=int(state.get("destroyGraceSeconds") or 0))
        except errors.APIError:
            pass
        try:
            container.remove(force=True, v=bool(state.get("removeVolumes", True)))
        except errors.NotFound:
            return
        except errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise ProviderError(f"Error deleting container {id_}: {exc.explanation or exc}") from None
        for _ in range(100):
            try:
                c.containers.get(id_)
            except errors.NotFound:
                return
            time.sleep(0.1)


def main() -> None:
    serve("docker", VERSION, [Container(), RemoteImage(), Volume()])


if __name__ == "__main__":
    main()
