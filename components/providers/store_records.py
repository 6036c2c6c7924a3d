"""Dynamic providers of a shared store's records (issue 38; components.storage.owners keeps them):

- ``StoreTenant`` (a serving stack with ``store``): its registration on the platform's bucket, made by
  `up`, removed by destroy. The platform's destroy reads them.
- ``StoreGuard`` (a platform stack, role store): nothing to make; its delete, which destroy runs before
  the S3 server's, refuses while serving stacks are registered, naming each one.
"""
from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, UpdateResult

from components.providers.base import Provider
from components.dynamic import secret_outputs
from components.errors import ProviderError
from components.storage import owners, s3

KEYS = ("endpoint", "bucket", "access_key", "secret_key", "ca_bundle", "stack", "prefixes", "server")


def _changed(olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
    replaces = [k for k in ("endpoint", "bucket", "stack") if olds.get(k) != news.get(k)]
    return DiffResult(changes=bool(replaces) or any(olds.get(k) != news.get(k) for k in KEYS), replaces=replaces,
                      delete_before_replace=False)


class StoreTenantProvider(Provider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        self._register(props)
        return CreateResult(props["stack"], props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return _changed(olds, news)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        self._register(news)
        return UpdateResult(news)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        try:
            owners.unregister(s3.client_for(props), props["bucket"], props["stack"])
        except Exception as exc:  # noqa: BLE001
            if s3.is_missing(exc):
                return
            if s3.is_unreachable(exc):   # the store is gone: there is nothing left to be registered on
                print(f"store {props['endpoint']}: does not answer; this stack's registration there is left as it "
                      "is", flush=True)
                return
            raise ProviderError(s3.explain(exc, props["endpoint"], f"registration of {props['stack']}")) from None

    @staticmethod
    def _register(props: dict[str, Any]) -> None:
        try:
            owners.register(s3.client_for(props), props["bucket"], props["stack"], list(props.get("prefixes") or []))
        except Exception as exc:  # noqa: BLE001
            raise ProviderError(s3.explain(exc, props["endpoint"], f"registration of {props['stack']}")) from None


class StoreGuardProvider(Provider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(props["bucket"], props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return _changed(olds, news)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(news)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        try:
            tenants = owners.registered(s3.client_for(props), props["bucket"])
        except Exception as exc:  # noqa: BLE001
            if s3.is_missing(exc) or s3.is_unreachable(exc):
                return    # no bucket, or no server left: no serving stack can be reading from it
            raise ProviderError(s3.explain(exc, props["endpoint"], "the store's serving stacks")) from None
        if tenants:
            raise ProviderError(
                f"store {props['stack']} still serves {len(tenants)} stack(s): {', '.join(tenants)} (their records "
                f"under {owners.STACKS} in bucket {props['bucket']}); destroy each of them first (pulumi destroy -s "
                "<stack>), then this one")


class StoreTenantResource(Resource, module="rustfs-vllm", name="StoreTenant"):
    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(StoreTenantProvider(), name, props, secret_outputs(opts))


class StoreGuardResource(Resource, module="rustfs-vllm", name="StoreGuard"):
    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(StoreGuardProvider(), name, props, secret_outputs(opts))
