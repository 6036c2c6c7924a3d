"""Dynamic providers of a platform's tenant keys (issue 45; components/storage/tenant_policy.py says what
each may do). A tenant gets two RustFS users, each made like a stack's read key (the same providers:
components/providers/read_key.py and read_grant.py), through the admin API with the platform's root keys:

- ``TenantKey``: the user the serving stack uploads, claims, registers and purges with (its policy:
  tenant_policy); the ``ReadKey`` made beside it is the one its serving hosts mount with (read_policy);
- ``TenantGrant``: the policy of either one, attached. Its delete refuses while the tenant is still
  registered on the store (``.rustfs-vllm/stacks/<fqn>.json``): taking a tenant out of ``tenants`` (or
  destroying the platform) would pull the keys out from under a stack still serving; the line names the
  stack and what to do. A rotation is not a removal: the old key goes at once (issue 57).

Their secrets are outputs of the platform's state only (secret there): the platform exports none of
them, since every stack that reads the platform by reference holds all its outputs in its own state.
``scripts/tenant-key`` hands a tenant its pair (into that stack's config, as a secret, over stdin).
"""
from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, Resource, UpdateResult

from components.dynamic import secret_outputs
from components.errors import ProviderError
from components.providers import succession
from components.providers.read_grant import ReadGrantProvider
from components.providers.read_key import ReadKeyResource
from components.storage import owners, s3


def _key_record(props: dict[str, Any]) -> str:
    return owners.tenant_key_record(props["tenant"], props.get("key_kind") or "key")


class TenantGrantProvider(ReadGrantProvider):
    """The grant of a tenant's key. Each tenant's key has a record in the platform's bucket
    (``.rustfs-vllm/tenant-keys/<fqn>/<kind>.json``: its user now, and the grant instance holding it), written
    at create and update, so the delete tells the three cases apart (issue 57):

    - a rotation (``pulumi up --replace`` of the TenantKey, a new server behind the store): the record names
      another user: this grant's user, the old key, is removed, whether the tenant is registered or not;
    - ``pulumi up --replace`` of the grant (the same user): another instance holds the record: nothing goes;
    - the tenant taken out of ``tenants``, or the platform destroyed: refused while the tenant is registered,
      else the user, its policy and the record go."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        made = super().create(props)
        self._record(made.outs)
        return made

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        done = super().update(_id, olds, news)
        self._record(done.outs)
        return done

    @staticmethod
    def _record(props: dict[str, Any]) -> None:
        if not (props.get("tenant") and props.get("bucket")):
            return
        try:
            owners.write_record(s3.client_for(props), props["bucket"], _key_record(props),
                                {"tenant": props["tenant"], "user": props["user"], succession.KEY: props[succession.KEY]})
        except Exception as exc:  # noqa: BLE001
            raise ProviderError(s3.explain(exc, props["endpoint"], f"the key record of {props['tenant']}")) from None

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        tenant, bucket = props.get("tenant") or "", props.get("bucket") or ""
        if not (tenant and bucket):
            return super().delete(id_, props)
        c = s3.client_for(props)
        try:
            record = owners.read_record(c, bucket, _key_record(props))
            still = owners.is_registered(c, bucket, tenant)
        except Exception as exc:  # noqa: BLE001 - no server or bucket left: nobody reads with the key
            if not (s3.is_missing(exc) or s3.is_unreachable(exc)):
                raise ProviderError(s3.explain(exc, props["endpoint"], f"the registration of {tenant}")) from None
            record, still = None, False
        now = str((record or {}).get("user") or "")
        if now and now != props["user"]:      # rotated: this is the old key
            print(f"tenant {tenant}: its old key {props['user']} is removed (its key is {now} now; hand it over with "
                  "scripts/tenant-key)", flush=True)
            return super().delete(id_, props)
        if succession.successor(record, props):
            return      # this grant was replaced by one for the same user: the key stays
        if still:
            raise ProviderError(
                f"tenant {tenant} still uses this store (its record {owners.stack_key(tenant)} in bucket {bucket}): "
                f"its keys stay while it is registered; destroy that stack first (pulumi destroy -s {tenant}), or "
                "keep it in rustfs-vllm:tenants")
        super().delete(id_, props)
        if record is not None:
            try:
                owners.remove_record(c, bucket, _key_record(props))
            except Exception:  # noqa: BLE001 - the user is gone; a record left names a user that no longer is
                pass


class TenantKeyResource(ReadKeyResource, module="rustfs-vllm", name="TenantKey"):
    """The tenant's key: a ReadKey's user (the same provider) of its own type, its policy the TenantGrant's."""


class TenantGrantResource(Resource, module="rustfs-vllm", name="TenantGrant"):
    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(TenantGrantProvider(), name, props, pulumi.ResourceOptions.merge(
            secret_outputs(opts), pulumi.ResourceOptions(additional_secret_outputs=["secret"])))
