"""Store: where the weights live, built the same way for every target.

    S3 server (the target's) -> credential check -> [readKeys scoped: ReadKey -> ReadGrant, what the serving
    side reads with] -> Bucket -> per model: ModelUpload (its revision)

The credential check proves from this machine, once the server answers, that the configured keys
work and RustFS's default keys do not (a RustFS that never got its keys runs on them and still
answers health checks). It is a child of the target's server component, and a new server instance
(container, StatefulSet) runs it again. ``ready`` is the server and the check: the bucket and the
uploads order themselves after it with ``depends_on``; no value of it flows into their inputs.

The root keys go only to what runs here (the check, the bucket, the uploads, the read key's admin
calls) and to the server itself. What serving hosts and pods read with is ``Store.read_keys``: the
stack's read key (readKeys scoped: a RustFS user allowed only to read the stack's model prefixes), or
the root keys (readKeys shared).
"""
from __future__ import annotations

import os

import pulumi

from components.config.runtime import stack_fqn
from components.config.spec import StackConfig
from components.core.bucket import Bucket, BucketArgs
from components.core.model_upload import ModelUpload, ModelUploadArgs
from components.core.target import Keys, S3Side, Store
from components.core.tenants import build_tenants
from components.providers.credentials import CredentialCheckResource
from components.providers.read_grant import ReadGrantResource
from components.providers.read_key import ReadKeyResource
from components.providers.store_records import StoreGuardResource, StoreTenantResource
from components.storage import read_policy


def credential_check(server: S3Side, name: str, cfg: StackConfig, keys: Keys) -> CredentialCheckResource:
    """The check of ``server`` (its child, named ``<name>-credentials``), after it answers."""
    return CredentialCheckResource(f"{name}-credentials", {
        **probe(cfg),
        "endpoint": cfg.rustfs_endpoint, "kind": cfg.s3_server, "defaults_allowed": cfg.uses_default_credentials,
        "server": server.instance, "access_key": keys.access_key, "secret_key": keys.secret_key,
        **({"ca_bundle": cfg.ca_bundle} if cfg.ca_bundle else {}),
        **({"wait_seconds": server.check_wait_seconds} if server.check_wait_seconds else {}),
    }, pulumi.ResourceOptions(parent=server.component, depends_on=list(server.ready)))


def build_store(owner: pulumi.Resource, cfg: StackConfig, server: S3Side, keys: Keys) -> Store:
    """The check, the bucket and every model's upload, children of ``owner`` (the stack's root); with readKeys
    scoped, the read key and its grant first: a server that refuses them (no admin API, no admin rights)
    stops `up` before a bucket or an object is made."""
    credentials = credential_check(server, "s3", cfg, keys)
    after_server = pulumi.ResourceOptions(parent=owner, depends_on=[*server.ready, credentials])
    # on a platform's store the keys are the stack's own (storeKey): its read key is the store's to make
    read = scoped_read_key(owner, cfg, server, keys, after_server) \
        if cfg.read_keys == "scoped" and not cfg.store else None
    if read:
        after_server = pulumi.ResourceOptions(parent=owner, depends_on=[*server.ready, credentials, read[1]])
    bucket = the_bucket(cfg, server, keys, cfg.purge_on_destroy, after_server)
    uploads = {m.name: ModelUpload(f"model-{m.prefix}", ModelUploadArgs(
        endpoint=cfg.rustfs_endpoint, bucket=bucket.name, prefix=m.prefix, source=m.source,
        access_key=keys.access_key, secret_key=keys.secret_key, cache_dir=os.path.join(cfg.state_dir, "hash-cache"),
        purge=cfg.purge_on_destroy, store=server.store, ca_bundle=cfg.ca_bundle, stack=cfg.stack,
        server=server.instance, owner=stack_fqn(), take_over=cfg.take_over_prefixes, prune=cfg.prune_objects),
        after_server)
        for m in cfg.models}
    if cfg.store:    # registered on the platform's store: its destroy refuses while this stack is there
        StoreTenantResource("store-tenant", {
            **s3_props(cfg, keys), "bucket": bucket.name, "stack": stack_fqn(), "server": server.instance,
            "prefixes": sorted(m.prefix for m in cfg.models)}, after_server)
    if cfg.store:
        given = Keys(*(pulumi.Output.secret(k) for k in cfg.store_read_keys))
        return Store(server, credentials, bucket, uploads, given, given_by=cfg.store)
    if not read:
        return Store(server, credentials, bucket, uploads, keys)
    read_key, read_grant = read
    # the readers' keys come from the ReadKey and wait for its grant (a dependency, no value of it)
    read_keys = Keys(*(pulumi.Output.all(k, read_grant.id).apply(lambda v: v[0])
                       for k in (read_key.read_access_key, read_key.read_secret_key)))
    return Store(server, credentials, bucket, uploads, read_keys, read_key)


def probe(cfg: StackConfig) -> dict:
    """With a tenant's key (store): where its checks look (its first prefix: it may neither list the buckets
    nor head the bucket, components/storage/tenant_policy.py); {} with root keys."""
    return {"probe": f"{cfg.bucket}/{cfg.models[0].prefix}/"} if cfg.store and cfg.models else {}


def the_bucket(cfg: StackConfig, server: S3Side, keys: Keys, purge: bool, opts: pulumi.ResourceOptions) -> Bucket:
    """The stack's bucket on ``server`` (serving and platform stacks alike; a platform stack never purges)."""
    return Bucket("bucket", BucketArgs(
        endpoint=cfg.rustfs_endpoint, bucket=cfg.bucket, access_key=keys.access_key, secret_key=keys.secret_key,
        purge=purge, store=server.store, ca_bundle=cfg.ca_bundle, server=server.instance,
        probe=probe(cfg).get("probe", ""), owner=stack_fqn()), opts)


def s3_props(cfg: StackConfig, keys: Keys) -> dict:
    return {"endpoint": cfg.rustfs_endpoint, "access_key": keys.access_key, "secret_key": keys.secret_key,
            **({"ca_bundle": cfg.ca_bundle} if cfg.ca_bundle else {})}


def build_platform(owner: pulumi.Resource, cfg: StackConfig, server: S3Side, keys: Keys) -> Store:
    """A platform stack's store (role store): the check and the bucket, no model; its tenants' keys
    (components/core/tenants.py); and the guard whose delete (destroy runs it before the server's) refuses
    while serving stacks are registered."""
    credentials = credential_check(server, "s3", cfg, keys)
    after_server = pulumi.ResourceOptions(parent=owner, depends_on=[*server.ready, credentials])
    bucket = the_bucket(cfg, server, keys, False, after_server)
    grants = build_tenants(owner, cfg, server, s3_props(cfg, keys), after_server)
    # the guard's delete runs first at destroy (it waits on the grants): it names every stack still there
    StoreGuardResource("store-guard", {**s3_props(cfg, keys), "bucket": bucket.name, "stack": stack_fqn(),
                                       "server": server.instance},
                       pulumi.ResourceOptions(parent=owner, depends_on=[*server.ready, credentials, bucket, *grants]))
    return Store(server, credentials, bucket, {}, keys)


def scoped_read_key(owner: pulumi.Resource, cfg: StackConfig, server: S3Side, keys: Keys,
                    opts: pulumi.ResourceOptions) -> tuple[ReadKeyResource, ReadGrantResource]:
    """The stack's read key: a user of the server (ReadKey), and the policy that lets it read only the models'
    prefixes (ReadGrant)."""
    common = {**s3_props(cfg, keys), "store": server.store}
    key = ReadKeyResource("read-key", {**common, "user_base": read_policy.user_base(cfg.stack, cfg.bucket)}, opts)
    grant = ReadGrantResource("read-grant", {
        **common, "user": key.read_access_key, "server": server.instance,
        # with it, a grant on a new server (the old one lost with its volume) makes the user again: same key
        "secret": pulumi.Output.secret(key.read_secret_key),
        "policy": read_policy.policy_json(cfg.bucket, [m.prefix for m in cfg.models]),
    }, pulumi.ResourceOptions(parent=owner, depends_on=[key]))
    return key, grant
