"""Dynamic providers of a shared store's records (issue 38; components.storage.owners keeps them):

- ``StoreTenant`` (a serving stack with ``store``): its registration on the platform's bucket, made by
  `up`, removed by destroy. The platform's destroy reads them.
- ``StoreGuard`` (a platform stack, role store): nothing to make; its delete, which destroy runs before
  the S3 server's, refuses while serving stacks are registered, naming each one.

Nothing here is ever replaced by a change of its inputs (issue 57): another endpoint, keys or CA update
the same records; another bucket or stack name moves them (written at the new place, then removed from
the old one), and a platform's bucket does not move while serving stacks are registered in it (refused at
preview, naming them). Each record names the ``instance`` holding it (components/providers/succession.py):
the delete of an instance that ``pulumi up --replace`` took over neither unregisters the stack its
successor has just registered nor refuses on behalf of a guard that lives on.
"""
from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, UpdateResult

from components.providers import succession
from components.providers.base import Provider
from components.dynamic import secret_outputs
from components.errors import ProviderError
from components.storage import owners, s3

KEYS = ("endpoint", "bucket", "access_key", "secret_key", "ca_bundle", "stack", "prefixes", "server")


def _changed(olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
    return DiffResult(changes=any(olds.get(k) != news.get(k) for k in KEYS), replaces=[], delete_before_replace=False)


def _moved(olds: dict[str, Any], news: dict[str, Any]) -> bool:
    return (olds.get("bucket"), olds.get("stack")) != (news.get("bucket"), news.get("stack"))


def _unreachable(props: dict[str, Any], what: str) -> None:
    print(f"store {props['endpoint']}: does not answer; {what} is left as it is", flush=True)


class StoreTenantProvider(Provider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        props = {**props, succession.KEY: succession.new_instance()}
        self._register(props)
        return CreateResult(props["stack"], props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return _changed(olds, news)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        news = {**news, succession.KEY: succession.kept(olds)}
        self._register(news)
        if _moved(olds, news):      # registered at the new place: the old one goes (with the current keys)
            self.delete(_id, {**olds, **{k: news.get(k) for k in ("endpoint", "access_key", "secret_key", "ca_bundle")},
                              succession.KEY: news[succession.KEY]})
        return UpdateResult(news)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        c, bucket, fqn = s3.client_for(props), props["bucket"], props["stack"]
        try:
            if succession.successor(owners.registration(c, bucket, fqn), props):
                print(f"stack {fqn}: replaced, not destroyed: its registration on the store stays with the "
                      "resource that replaced this one", flush=True)
                return
            owners.unregister(c, bucket, fqn)
        except Exception as exc:  # noqa: BLE001
            if s3.is_missing(exc):
                return
            if s3.is_unreachable(exc):   # the store is gone: there is nothing left to be registered on
                _unreachable(props, "this stack's registration there")
                return
            raise ProviderError(s3.explain(exc, props["endpoint"], f"registration of {fqn}")) from None

    @staticmethod
    def _register(props: dict[str, Any]) -> None:
        try:
            owners.register(s3.client_for(props), props["bucket"], props["stack"], list(props.get("prefixes") or []),
                            props[succession.KEY])
        except Exception as exc:  # noqa: BLE001
            raise ProviderError(s3.explain(exc, props["endpoint"], f"registration of {props['stack']}")) from None


class StoreGuardProvider(Provider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        props = {**props, succession.KEY: succession.new_instance()}
        self._hold(props)
        return CreateResult(props["bucket"], props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        if olds.get("bucket") != news.get("bucket"):
            tenants = self._tenants(olds)
            if tenants:     # at preview: they would keep reading a bucket the platform no longer guards
                raise ProviderError(
                    f"rustfs-vllm:bucket = {news.get('bucket')!r} is refused: the store's serving stacks are registered "
                    f"in bucket {olds.get('bucket')} ({', '.join(tenants)}); move or destroy each of them first")
        return _changed(olds, news)

    @staticmethod
    def _tenants(props: dict[str, Any]) -> list[str]:
        try:
            return owners.registered(s3.client_for(props), props["bucket"])
        except Exception:  # noqa: BLE001 - no server, no bucket: nobody registered there that could be read
            return []

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        news = {**news, succession.KEY: succession.kept(olds)}
        self._hold(news)
        if olds.get("bucket") != news.get("bucket"):
            try:
                owners.remove_record(s3.client_for(news), olds["bucket"], owners.GUARD_RECORD)
            except Exception:  # noqa: BLE001 - a record left in a bucket no longer guarded names an old instance
                pass
        return UpdateResult(news)

    @staticmethod
    def _hold(props: dict[str, Any]) -> None:
        """The guard's record: the instance that guards the store now."""
        try:
            owners.write_record(s3.client_for(props), props["bucket"], owners.GUARD_RECORD,
                                {"stack": props["stack"], succession.KEY: props[succession.KEY]})
        except Exception as exc:  # noqa: BLE001
            raise ProviderError(s3.explain(exc, props["endpoint"], "the store's guard record")) from None

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        c, bucket = s3.client_for(props), props["bucket"]
        try:
            if succession.successor(owners.read_record(c, bucket, owners.GUARD_RECORD), props):
                return    # replaced: the new guard guards the store
            tenants = owners.registered(c, bucket)
        except Exception as exc:  # noqa: BLE001
            if s3.is_missing(exc) or s3.is_unreachable(exc):
                return    # no bucket, or no server left: no serving stack can be reading from it
            raise ProviderError(s3.explain(exc, props["endpoint"], "the store's serving stacks")) from None
        if tenants:
            raise ProviderError(
                f"store {props['stack']} still serves {len(tenants)} stack(s): {', '.join(tenants)} (their records "
                f"under {owners.STACKS} in bucket {props['bucket']}); destroy each of them first (pulumi destroy -s "
                "<stack>), then this one")
        try:
            owners.remove_record(c, bucket, owners.GUARD_RECORD)
        except Exception:  # noqa: BLE001 - a record left is harmless: the next guard writes its own
            pass


class StoreTenantResource(Resource, module="rustfs-vllm", name="StoreTenant"):
    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(StoreTenantProvider(), name, props, secret_outputs(opts))


class StoreGuardResource(Resource, module="rustfs-vllm", name="StoreGuard"):
    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(StoreGuardProvider(), name, props, secret_outputs(opts))
