"""A platform stack's tenants (role store, ``tenants``): for each serving stack it lists, a key of its own
for its prefixes and a read key for its serving hosts (components/providers/tenant_key.py), made with the
platform's root keys, which no serving stack then holds.

    per tenant: TenantKey -> TenantGrant (tenant_policy)   ReadKey -> TenantGrant (read_policy)
"""
from __future__ import annotations

import pulumi

from components.config.spec import StackConfig
from components.core.target import Keys, S3Side
from components.providers.read_key import ReadKeyResource
from components.providers.tenant_key import TenantGrantResource, TenantKeyResource
from components.storage import read_policy, tenant_policy


def build_tenants(owner: pulumi.Resource, cfg: StackConfig, server: S3Side, common: dict,
                  opts: pulumi.ResourceOptions) -> list[pulumi.Resource]:
    """Every tenant's two keys and their grants, children of ``owner``; the grants (what the guard waits on)."""
    grants: list[pulumi.Resource] = []
    for fqn, prefixes in sorted(cfg.tenants.items()):
        name = f"tenant-{tenant_policy.slug(fqn)}"
        props = {**common, "store": server.store, "tenant": fqn}
        for suffix, key_class, base, policy in (
                ("key", TenantKeyResource, tenant_policy.user_base(fqn, cfg.bucket),
                 tenant_policy.policy_json(cfg.bucket, fqn, prefixes)),
                ("read-key", ReadKeyResource, tenant_policy.read_base(fqn, cfg.bucket),
                 read_policy.policy_json(cfg.bucket, prefixes))):
            key = key_class(f"{name}-{suffix}", {**props, "user_base": base}, opts)
            grants.append(TenantGrantResource(f"{name}-{suffix}-grant", {
                **props, "bucket": cfg.bucket, "user": key.read_access_key, "server": server.instance, "key_kind": suffix,
                "secret": pulumi.Output.secret(key.read_secret_key), "policy": policy,
            }, pulumi.ResourceOptions(parent=owner, depends_on=[key])))
    return grants


def tenants_export(cfg: StackConfig) -> dict[str, list[str]]:
    """The ``store_tenants`` output: each tenant and its prefixes (no key: scripts/tenant-key hands those)."""
    return {fqn: sorted(ps) for fqn, ps in sorted(cfg.tenants.items())}
