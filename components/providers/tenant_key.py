"""Dynamic providers of a platform's tenant keys (issue 45; components/storage/tenant_policy.py says what
each may do). A tenant gets two RustFS users, each made like a stack's read key (the same providers:
components/providers/read_key.py and read_grant.py), through the admin API with the platform's root keys:

- ``TenantKey``: the user the serving stack uploads, claims, registers and purges with (its policy:
  tenant_policy); the ``ReadKey`` made beside it is the one its serving hosts mount with (read_policy);
- ``TenantGrant``: the policy of either one, attached. Its delete refuses while the tenant is still
  registered on the store (``.rustfs-vllm/stacks/<fqn>.json``): taking a tenant out of ``tenants`` (or
  destroying the platform) would pull the keys out from under a stack still serving; the line names the
  stack and what to do.

Their secrets are outputs of the platform's state only (secret there): the platform exports none of
them, since every stack that reads the platform by reference holds all its outputs in its own state.
``scripts/tenant-key`` hands a tenant its pair (into that stack's config, as a secret, over stdin).
"""
from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import Resource

from components.dynamic import secret_outputs
from components.errors import ProviderError
from components.providers.read_grant import ReadGrantProvider
from components.providers.read_key import ReadKeyResource
from components.storage import owners, s3


class TenantGrantProvider(ReadGrantProvider):
    def delete(self, id_: str, props: dict[str, Any]) -> None:
        tenant, bucket = props.get("tenant") or "", props.get("bucket") or ""
        if tenant and bucket:
            try:
                still = owners.is_registered(s3.client_for(props), bucket, tenant)
            except Exception as exc:  # noqa: BLE001 - no server or bucket left: nobody reads with the key
                if not (s3.is_missing(exc) or s3.is_unreachable(exc)):
                    raise ProviderError(s3.explain(exc, props["endpoint"], f"the registration of {tenant}")) from None
                still = False
            if still:
                raise ProviderError(
                    f"tenant {tenant} still uses this store (its record {owners.stack_key(tenant)} in bucket {bucket}): "
                    f"its keys stay while it is registered; destroy that stack first (pulumi destroy -s {tenant}), or "
                    "keep it in rustfs-vllm:tenants")
        super().delete(id_, props)


class TenantKeyResource(ReadKeyResource, module="rustfs-vllm", name="TenantKey"):
    """The tenant's key: a ReadKey's user (the same provider) of its own type, its policy the TenantGrant's."""


class TenantGrantResource(Resource, module="rustfs-vllm", name="TenantGrant"):
    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(TenantGrantProvider(), name, props, pulumi.ResourceOptions.merge(
            secret_outputs(opts), pulumi.ResourceOptions(additional_secret_outputs=["secret"])))
