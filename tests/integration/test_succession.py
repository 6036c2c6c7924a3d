"""A replacement is not a destruction (issue 57), through each provider's own code, in the order the engine
runs a replacement: the new instance's create, then the old instance's delete. The S3 resources on a real
S3 server process (rclone serve s3, NOT RustFS; the engine-driven test on real RustFS is
tests/e2e/test_replacements.py); the keys on real RustFS 1.0.1 (the local image; skipped without it).

For each: the old instance's delete leaves what its successor holds (objects, the owner record, the bucket,
a registration, a user); the successor's own delete (a destroy) still removes what a destroy removes."""
from __future__ import annotations

import secrets

import pytest

from components.errors import ProviderError
from components.providers import succession
from components.providers.bucket import BucketProvider
from components.providers.model_upload import ModelUploadProvider, list_prefix
from components.providers.read_grant import ReadGrantProvider
from components.providers.store_records import StoreGuardProvider, StoreTenantProvider
from components.providers.tenant_key import TenantGrantProvider
from components.storage import admin_api, owners, read_policy, s3, tenant_policy
from components.storage import manifest as manifest_mod
from tests.helpers import free_port, make_model
from tests.integration.test_read_key import BUCKET, KEY, ROOT_KEYS, common, rustfs  # noqa: F401 - a fixture

FQN = "organization/rustfs-vllm/succession"


def upload_props(s3_server, tmp_path, **extra) -> dict:
    model = make_model(tmp_path / "model")
    m = manifest_mod.build(str(model), str(tmp_path / "cache" / "hashes.json"))
    return s3_server.props(bucket="models", prefix="m1", source=str(model), manifest=m, purge=True, owner=FQN, **extra)


def test_a_replaced_upload_leaves_its_objects_to_its_successor_and_a_destroy_still_purges(s3_server, tmp_path, capsys):
    s3_server.client().create_bucket(Bucket="models")
    p, props = ModelUploadProvider(), upload_props(s3_server, tmp_path)
    old = p.create(props)
    new = p.create(props)                             # `pulumi up --replace`: the same prefix, a new instance
    assert old.outs[succession.KEY] != new.outs[succession.KEY]
    assert new.outs["last_transfer"]["files"] == 0    # nothing sent again
    p.delete(old.id, old.outs)                        # the old instance's delete, purge and all
    live = list_prefix(s3_server.client(), "models", "m1")
    assert sorted(live) == sorted(props["manifest"]), "the replaced upload's delete removed its successor's objects"
    record = owners.owner_record(s3_server.client(), "models", "m1")
    assert record["stack"] == FQN and record[succession.KEY] == new.outs[succession.KEY]
    assert "replaced, not destroyed" in capsys.readouterr().out
    p.delete(new.id, new.outs)                        # a destroy with purge: gone
    assert list_prefix(s3_server.client(), "models", "m1") == {}
    assert owners.owner_record(s3_server.client(), "models", "m1") is None


def test_another_spelling_or_port_of_the_endpoint_is_an_update_of_the_same_objects(s3_server, tmp_path):
    s3_server.client().create_bucket(Bucket="models")
    p, props = ModelUploadProvider(), upload_props(s3_server, tmp_path)
    made = p.create(props)
    for endpoint in (f"http://localhost:{s3_server.port}", f"http://127.0.0.1:{s3_server.port}/"):
        news = {**props, "endpoint": endpoint}
        diff = p.diff(made.id, made.outs, news)
        assert diff.changes and diff.replaces == [], endpoint
        made_outs = p.update(made.id, made.outs, news).outs
        assert made_outs[succession.KEY] == made.outs[succession.KEY]
        assert made_outs["last_transfer"]["files"] == 0
    for provider, news in ((BucketProvider(), {"bucket": "models", "endpoint": "http://localhost:1"}),
                           (StoreTenantProvider(), {"bucket": "models", "stack": FQN, "endpoint": "http://localhost:1"})):
        olds = {**news, "endpoint": "http://127.0.0.1:1"}
        assert provider.diff("id", olds, news).replaces == [], type(provider).__name__


def test_a_purge_the_server_cannot_answer_is_skipped_in_one_line(s3_server, tmp_path, capsys):
    s3_server.client().create_bucket(Bucket="models")
    p, props = ModelUploadProvider(), upload_props(s3_server, tmp_path)
    made = p.create(props)
    gone = {**made.outs, "endpoint": f"http://127.0.0.1:{free_port()}"}   # the port it was on: nobody answers
    p.delete(made.id, gone)                           # no error: an `up` is never wedged by an old endpoint
    said = capsys.readouterr().out
    assert "purge skipped" in said and "does not answer" in said, said
    assert sorted(list_prefix(s3_server.client(), "models", "m1")) == sorted(props["manifest"])


def test_a_replaced_bucket_stays_with_its_successor_which_knows_it_made_it(s3_server):
    p = BucketProvider()
    props = s3_server.props(bucket="made-here", purge=True, owner=FQN)
    old = p.create(props)
    assert old.outs["adopted"] is False
    new = p.create(props)                             # `pulumi up --replace`: the bucket exists, and it is ours
    assert new.outs["adopted"] is False
    p.delete(old.id, old.outs)
    s3_server.client().head_bucket(Bucket="made-here")     # still there
    p.delete(new.id, new.outs)                        # a destroy: empty but for its record, so it goes
    with pytest.raises(Exception) as gone:
        s3_server.client().head_bucket(Bucket="made-here")
    assert s3.is_missing(gone.value)
    other = p.create(s3_server.props(bucket="models-of-another", owner="organization/rustfs-vllm/other"))
    adopted = p.create(s3_server.props(bucket="models-of-another", owner=FQN))
    assert other.outs["adopted"] is False and adopted.outs["adopted"] is True


def test_a_replaced_registration_and_guard_leave_the_store_as_their_successors_hold_it(s3_server):
    s3_server.client().create_bucket(Bucket="shared")
    tenant = s3_server.props(bucket="shared", stack=FQN, prefixes=["m1"])
    t = StoreTenantProvider()
    old, new = t.create(tenant), t.create(tenant)
    t.delete(old.id, old.outs)
    assert owners.is_registered(s3_server.client(), "shared", FQN), "the replaced registration unregistered its successor"
    g = StoreGuardProvider()
    guard = s3_server.props(bucket="shared", stack="organization/rustfs-vllm/platform")
    g_old, g_new = g.create(guard), g.create(guard)
    g.delete(g_old.id, g_old.outs)                    # replaced: no refusal, though a tenant is registered
    with pytest.raises(ProviderError, match="still serves 1 stack"):
        g.delete(g_new.id, g_new.outs)                # a destroy of the platform: refused while one is registered
    t.delete(new.id, new.outs)
    assert not owners.is_registered(s3_server.client(), "shared", FQN)
    g.delete(g_new.id, g_new.outs)


def _works(endpoint: str, user: str, secret: str) -> bool:
    try:
        s3.client(endpoint, user, secret, retries=1).list_objects_v2(Bucket=BUCKET, Prefix="stack-a/m1/")
        return True
    except Exception as exc:  # noqa: BLE001
        assert s3.error_code(exc) in s3.AUTH_CODES, exc
        return False


def test_a_replaced_grant_keeps_the_user_a_rotation_removes_the_old_one_on_real_rustfs(rustfs):
    g = ReadGrantProvider()
    key = KEY.create({**common(rustfs), "user_base": read_policy.user_base("succ", BUCKET)}).outs
    user, secret = key["read_access_key"], key["read_secret_key"]
    props = {**common(rustfs), "user": user, "secret": secret, "policy": read_policy.policy_json(BUCKET, ["stack-a/m1"])}
    old, new = g.create(props), g.create(props)       # `pulumi up --replace` of the grant: the same user
    g.delete(old.id, old.outs)
    assert _works(rustfs, user, secret), "the replaced grant's delete removed the user its successor grants"
    rotated = KEY.create({**common(rustfs), "user_base": read_policy.user_base("succ", BUCKET)}).outs
    newest = g.create({**props, "user": rotated["read_access_key"], "secret": rotated["read_secret_key"]})
    g.delete(new.id, new.outs)                        # a rotation: the old user goes, the new one reads
    assert not _works(rustfs, user, secret)
    assert _works(rustfs, rotated["read_access_key"], rotated["read_secret_key"])
    g.delete(newest.id, newest.outs)


def test_a_tenants_key_rotates_while_it_is_registered_and_is_not_removed_while_it_is_on_real_rustfs(rustfs, capsys):
    tenant = "organization/rustfs-vllm/team-x"
    root = s3.client(rustfs, *ROOT_KEYS)
    owners.register(root, BUCKET, tenant, ["stack-a/m1"])
    g = TenantGrantProvider()

    def key() -> dict:
        return KEY.create({**common(rustfs), "user_base": tenant_policy.user_base(tenant, BUCKET)}).outs

    first = key()
    props = {**common(rustfs), "tenant": tenant, "bucket": BUCKET, "key_kind": "key",
             "policy": read_policy.policy_json(BUCKET, ["stack-a/m1"])}
    a = g.create({**props, "user": first["read_access_key"], "secret": first["read_secret_key"]})
    a2 = g.create({**props, "user": first["read_access_key"], "secret": first["read_secret_key"]})  # --replace
    g.delete(a.id, a.outs)
    assert _works(rustfs, first["read_access_key"], first["read_secret_key"])
    second = key()                                    # `pulumi up --replace` of the TenantKey: a new user
    b = g.create({**props, "user": second["read_access_key"], "secret": second["read_secret_key"]})
    g.delete(a2.id, a2.outs)                          # the old key goes, though the tenant is registered
    assert not _works(rustfs, first["read_access_key"], first["read_secret_key"])
    assert _works(rustfs, second["read_access_key"], second["read_secret_key"])
    assert "its old key" in capsys.readouterr().out
    with pytest.raises(ProviderError, match="still uses this store"):
        g.delete(b.id, b.outs)                        # taken out of `tenants` while registered: refused
    owners.unregister(root, BUCKET, tenant)
    g.delete(b.id, b.outs)
    assert not _works(rustfs, second["read_access_key"], second["read_secret_key"])
    assert owners.read_record(root, BUCKET, owners.tenant_key_record(tenant, "key")) is None
    with pytest.raises(Exception) as missing:
        admin_api.admin_for(common(rustfs)).user_info(second["read_access_key"])
    assert admin_api.is_missing(missing.value)


def test_every_provider_says_what_it_replaces_on():
    """The engine-driven test reads each provider's REPLACE_ON; each provider's diff replaces on those inputs
    and on no other (a provider whose diff and declaration disagreed would escape that test)."""
    from tests.e2e.test_replacements import providers

    for cls in providers():
        p = cls()
        base = {k: f"v-{k}" for k in ("endpoint", "bucket", "prefix", "stack", "user", "user_base", "store", "server",
                                       "access_key", "secret_key", "ca_bundle", "probe", "owner", "policy", "purge")}
        for key in base:
            diff = p.diff("id", base, {**base, key: f"other-{secrets.token_hex(2)}"})
            assert list(diff.replaces or []) == ([key] if key in cls.REPLACE_ON else []), (cls.__name__, key)
