"""Dynamic provider: one Docker container, driven through the Docker Engine API.

Stands in for pulumi-docker's `docker.Container`, whose provider plugin cannot be built here (its
Go module is refused by the module proxy). Semantics follow it where it matters:

- any input change replaces the container, deleting the old one first (fixed names and ports);
- `ready_url` (polled from this host) plays the part of healthcheck + `wait`: create returns only
  when the URL answers 2xx (and contains `ready_contains`), or fails with the container's last log
  lines when it exits or the timeout passes;
- refresh reports a container that is gone, so the next `up` recreates it;
- delete succeeds when the container is already gone.

A container left by an interrupted run (same name, our `rustfs-vllm.stack` label) is replaced on
create; a foreign container with the same name is an error, never removed.
"""
from __future__ import annotations

import os
import shutil
import time
import urllib.error
import urllib.request
from typing import Any

from pulumi.dynamic import CheckFailure, CheckResult, CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

LABEL_STACK = "rustfs-vllm.stack"
IN_PLACE = ("ready_timeout",)  # inputs whose change needs no new container
SECRETS_HOST_DIR = "/run/rustfs-vllm/secrets"     # tmpfs on most hosts: secrets never hit the disk
SECRETS_IN_CONTAINER = "/run/rustfs-vllm-secrets"
# Exports every file of the secrets folder as an environment variable, then runs the image's own
# entrypoint and command: the values are in the container's process environment but not in its
# configuration, so `docker inspect` shows only this script and the folder's path.
SECRET_ENTRYPOINT = ('for f in ' + SECRETS_IN_CONTAINER + '/*; do [ -f "$f" ] && '
                     'export "$(basename "$f")=$(cat "$f")"; done; exec "$@"')


def _secret_dir(name: str) -> str:
    return os.path.join(SECRETS_HOST_DIR, name)


def write_secret_files(name: str, secret_env: dict[str, str], uid: int, gid: int) -> str:
    """One mode-0400 file per variable, owned by the container's user; the folder's path."""
    folder = _secret_dir(name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(SECRETS_HOST_DIR, mode=0o711, exist_ok=True)
    os.makedirs(folder, mode=0o711)
    for key, value in secret_env.items():
        path = os.path.join(folder, key)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(str(value))
        os.chown(path, uid, gid)
    return folder


def _image_user(image: Any, override: str | None) -> tuple[int, int]:
    user = override or image.attrs.get("Config", {}).get("User") or "0"
    uid, _, gid = user.partition(":")
    return (int(uid) if uid.isdigit() else 0, int(gid) if gid.isdigit() else (int(uid) if uid.isdigit() else 0))


def _client() -> Any:
    import docker

    return docker.from_env(timeout=120)


def _redact(text: str, secrets: list[str]) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text


def _parse_size(size: str) -> int:
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    s = size.lower().rstrip("b")
    return int(float(s[:-1]) * units[s[-1]]) if s[-1] in units else int(float(s))


def wait_ready(container: Any, url: str, contains: str, timeout: int, secrets: list[str],
               headers: dict[str, str] | None = None, any_status: bool = False) -> float:
    """Poll ``url`` until it answers 2xx containing ``contains`` (any HTTP answer when
    ``any_status``); seconds waited."""
    start = time.monotonic()
    last = "no answer yet"
    while True:
        container.reload()
        if container.status in ("exited", "dead"):
            logs = _redact(container.logs(tail=40).decode("utf-8", "replace"), secrets)
            code = container.attrs.get("State", {}).get("ExitCode")
            raise RuntimeError(f"container {container.name} exited (code {code}) before {url} was ready; "
                               f"last log lines:\n{logs}")
        try:
            req = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(req, timeout=5) as resp:
                body = resp.read(1 << 20).decode("utf-8", "replace")
                if 200 <= resp.status < 300 and (not contains or contains in body):
                    return time.monotonic() - start
                last = f"HTTP {resp.status}, body without {contains!r}"
        except urllib.error.HTTPError as exc:
            if any_status:
                return time.monotonic() - start
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
        if time.monotonic() - start > timeout:
            logs = _redact(container.logs(tail=40).decode("utf-8", "replace"), secrets)
            raise RuntimeError(f"container {container.name}: {url} not ready after {timeout} s ({last}); "
                               f"last log lines:\n{logs}")
        time.sleep(1.0)


class ContainerProvider(ResourceProvider):
    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = []
        if not news.get("image"):
            failures.append(CheckFailure("image", "an image reference is required"))
        for p in news.get("ports") or []:
            if not 1 <= int(p.get("external", 0)) <= 65535:
                failures.append(CheckFailure("ports", f"port {p!r}: external must be 1-65535"))
        return CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> CreateResult:
        import docker
        from docker.types import DeviceRequest, Mount

        client = _client()
        name = props["name"]
        try:
            image = client.images.get(props["image"])
        except docker.errors.ImageNotFound:
            raise RuntimeError(f"image {props['image']!r} for container {name} is not on this Docker host; "
                               "pull or build it first (see README: images)") from None
        try:
            old = client.containers.get(name)
            if old.labels.get(LABEL_STACK) != props["labels"].get(LABEL_STACK):
                raise RuntimeError(f"a container named {name} exists and is not managed by this stack; "
                                   "remove it or change rustfs-vllm:namePrefix")
            old.remove(force=True)  # left by an interrupted run of this stack
        except docker.errors.NotFound:
            pass
        mounts = []
        for m in props.get("mounts") or []:
            if m.get("type") == "volume":
                mounts.append(Mount(target=m["target"], source=m["source"], type="volume",
                                    read_only=bool(m.get("read_only"))))
            else:
                mounts.append(Mount(target=m["target"], source=m["source"], type="bind",
                                    read_only=bool(m.get("read_only")), propagation=m.get("propagation") or None))
        ports = {f"{int(p['internal'])}/tcp": (p.get("ip", "0.0.0.0"), int(p["external"])) for p in props.get("ports") or []}
        device_requests = None
        gpus = props.get("gpus") or ""
        if gpus:
            if gpus == "all":
                device_requests = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
            elif gpus.startswith("count="):
                device_requests = [DeviceRequest(count=int(gpus[6:]), capabilities=[["gpu"]])]
            else:
                device_requests = [DeviceRequest(device_ids=gpus.split(","), capabilities=[["gpu"]])]
        restart = props.get("restart") or "no"
        entrypoint = props.get("entrypoint") or None
        command = props.get("command") or None
        secret_env = props.get("secret_env") or {}
        if secret_env:
            cfg = image.attrs.get("Config", {})
            folder = write_secret_files(name, secret_env, *_image_user(image, props.get("user")))
            mounts.append(Mount(target=SECRETS_IN_CONTAINER, source=folder, type="bind", read_only=True))
            inner = list(entrypoint or cfg.get("Entrypoint") or []) + list(command or cfg.get("Cmd") or [])
            entrypoint = ["/bin/sh", "-c", SECRET_ENTRYPOINT, "rustfs-vllm-secrets"]
            command = inner
        kwargs: dict[str, Any] = dict(
            name=name, command=command, entrypoint=entrypoint,
            environment=props.get("env") or {}, labels=props.get("labels") or {}, mounts=mounts, ports=ports,
            detach=True, restart_policy={"Name": restart} if restart != "no" else None,
            device_requests=device_requests, user=props.get("user") or None,
        )
        if props.get("shm_size"):
            kwargs["shm_size"] = _parse_size(props["shm_size"])
        try:
            c = client.containers.run(props["image"], **kwargs)
        except docker.errors.APIError as exc:
            explanation = getattr(exc, "explanation", None) or str(exc)
            try:  # created but not started (a port in use, say): leave nothing behind
                client.containers.get(name).remove(force=True)
            except docker.errors.NotFound:
                pass
            shutil.rmtree(_secret_dir(name), ignore_errors=True)
            raise RuntimeError(f"container {name}: Docker refused to start it: {explanation}") from None
        waited = 0.0
        if props.get("ready_url"):
            try:
                waited = wait_ready(c, props["ready_url"], props.get("ready_contains") or "",
                                    int(props.get("ready_timeout") or 60), props.get("secrets") or [],
                                    props.get("ready_headers") or None, bool(props.get("ready_any_status")))
            except Exception:
                c.remove(force=True)  # a container that never got ready is not left behind
                shutil.rmtree(_secret_dir(name), ignore_errors=True)
                raise
        c.reload()
        return CreateResult(c.id, {**props, "container_id": c.id, "ready_seconds": round(waited, 2)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = (set(olds) | set(news)) - {"container_id", "ready_seconds", "__provider"}
        changed = sorted(k for k in keys if olds.get(k) != news.get(k))
        replaces = [k for k in changed if k not in IN_PLACE]
        return DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=True)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult({**news, "container_id": olds.get("container_id"),
                             "ready_seconds": olds.get("ready_seconds", 0)})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        import docker

        try:
            c = _client().containers.get(id_)
        except docker.errors.NotFound:
            return ReadResult(None, {})
        if c.status in ("exited", "dead") and (props.get("restart") or "no") == "no":
            return ReadResult(None, {})
        return ReadResult(id_, props)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        import docker

        try:
            _client().containers.get(id_).remove(force=True)
        except docker.errors.NotFound:
            pass
        if props.get("name"):
            shutil.rmtree(_secret_dir(props["name"]), ignore_errors=True)
