"""Dynamic provider: proof that the S3 server takes the configured keys, and not RustFS's defaults.

RustFS falls back to its built-in `rustfsadmin`/`rustfsadmin` when it did not get its keys (it
only warns), and still answers health checks: a server that never received the configured
credentials looks healthy. So after the server answers and before anything else, this check:

- signs a request with the configured keys: they must work;
- signs one with `rustfsadmin`/`rustfsadmin`: it must be refused, unless the configured keys are
  those defaults (allowed only when environment is dev);

and fails with the real cause: "the server runs on RustFS's default keys: it never received the
configured ones" is a different fix from "the keys are wrong". It runs again whenever the keys,
the endpoint or the server container change; nothing runs during preview.

``wait_seconds`` (the Kubernetes target): the check is retried until it passes or that many seconds
have gone, then fails with the last cause. pulumi-kubernetes 4.25.0 reports a StatefulSet's update
done before its controller has seen it (its await compares revisions without the observed
generation): on the test cluster the check ran 0.3 s after new keys were applied, while RustFS's pod
was restarting (unreachable), and a pod that has not restarted yet still holds the old keys.
"""
from __future__ import annotations

import time
from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, UpdateResult

from components.providers.base import Provider
from components.storage import s3
from components.dynamic import secret_outputs
from components.errors import ProviderError

DEFAULT_KEY = "rustfsadmin"
INPUTS = ("endpoint", "access_key", "secret_key", "defaults_allowed", "server", "kind", "ca_bundle", "wait_seconds",
          "probe")


def _works(props: dict[str, Any], access: str, secret: str, probe: str = "") -> tuple[bool, BaseException | None]:
    """Whether the server takes the keys: they list the buckets, or (``probe``: bucket/prefix/, a tenant's key,
    which may list only its prefixes) that prefix."""
    try:
        c = s3.client_for({**props, "access_key": access, "secret_key": secret}, retries=2)
        if probe:
            s3.list_probe(c, probe)
        else:
            c.list_buckets()
        return True, None
    except Exception as exc:  # noqa: BLE001 - classified by the caller
        return False, exc


def check_until(props: dict[str, Any]) -> None:
    """``check``, retried for ``wait_seconds`` (default: once)."""
    deadline = time.monotonic() + float(props.get("wait_seconds") or 0)
    while True:
        try:
            return check(props)
        except ProviderError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(2)


def check(props: dict[str, Any]) -> None:
    endpoint, kind = props["endpoint"], props.get("kind") or "external"
    ok, exc = _works(props, props["access_key"], props["secret_key"], props.get("probe") or "")
    if exc is not None and s3.error_code(exc) not in s3.AUTH_CODES:
        raise ProviderError(s3.explain(exc, endpoint, "credential check"))
    defaults_allowed = bool(props.get("defaults_allowed"))
    default_ok = False
    if not defaults_allowed:
        default_ok, _ = _works(props, DEFAULT_KEY, DEFAULT_KEY)
    hint = (" This program gives RustFS its keys as files (RUSTFS_ACCESS_KEY_FILE, RUSTFS_SECRET_KEY_FILE); "
            "see the server's log (/logs/rustfs.log in its container)." if kind == "rustfs" else "")
    if not ok and default_ok:
        raise ProviderError(
            f"credential check: the S3 server at {endpoint} rejects rustfs-vllm:rustfsAccessKey/rustfsSecretKey but "
            f"accepts RustFS's default credentials '{DEFAULT_KEY}': it runs on its built-in keys, so it never "
            f"received the configured ones.{hint}")
    if not ok:
        raise ProviderError(s3.explain(exc, endpoint, "credential check"))  # type: ignore[arg-type]
    if default_ok:
        raise ProviderError(
            f"credential check: the S3 server at {endpoint} accepts the configured keys and also RustFS's default "
            f"credentials '{DEFAULT_KEY}': anyone who knows the defaults can read and change the models. Remove the "
            f"default user from the server (or use environment dev, where the defaults are allowed).{hint}")


class CredentialCheckProvider(Provider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        check_until(props)
        return CreateResult(f"credentials-{props['endpoint']}", dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return DiffResult(changes=any(olds.get(k) != news.get(k) for k in INPUTS), replaces=[])

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        check_until(news)
        return UpdateResult(dict(news))


class CredentialCheckResource(Resource, module="rustfs-vllm", name="CredentialCheck"):
    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(CredentialCheckProvider(), name, props, secret_outputs(opts))
