"""A serving stack on a platform stack's store (issues 38 and 45), without the engine: what `store` turns into
(components/config/store_ref.py, the platform's outputs read through a fake reader, the stack's own keys from
its storeKey), and what role store, tenants and store refuse at preview, one line each naming the key."""
from __future__ import annotations

import json

import pytest

from components import config
from components.config import store_ref
from components.storage import tenant_policy
from tests.helpers import make_model

NAME = "organization/rustfs-vllm/platform"
ME = "organization/rustfs-vllm/team-a"
OUTS = {"store_endpoint": "http://127.0.0.1:19000", "store_bucket": "shared-models", "store_ca": "",
        "store_tenants": {ME: ["m1", "team-a"], "organization/rustfs-vllm/team-b": ["team-b"]}}
KEY = {"access_key": "rvten0123456789abcd", "secret_key": "s" * 40, "read_access_key": "rvrd0123456789abcd",
       "read_secret_key": "r" * 40}
MINE = {"store": NAME, "storeKey": json.dumps(KEY)}


def resolve(raw, tmp_path, read=lambda name: OUTS if name == NAME else {}):
    return store_ref.resolve(raw, str(tmp_path), "team-a", me=ME, read=read)


def test_store_gives_the_server_and_the_bucket_and_the_keys_are_the_stacks_own(tmp_path):
    raw, problems = resolve({**MINE, "environment": "test"}, tmp_path)
    assert problems == []
    assert raw["s3Server"] == "external" and raw["rustfsEndpoint"] == OUTS["store_endpoint"]
    assert raw["bucket"] == "shared-models" and raw["rustfsAccessKey"] == KEY["access_key"]
    assert raw["storeReadAccessKey"] == KEY["read_access_key"] and raw["storePrefixes"] == ["m1", "team-a"]
    assert "rustfsCaBundle" not in raw


def test_the_stores_ca_is_written_where_the_uploads_and_rclone_read_it(tmp_path):
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    raw, _ = resolve(MINE, tmp_path, read=lambda _: {**OUTS, "store_ca": pem})
    assert open(raw["rustfsCaBundle"], encoding="utf-8").read() == pem


@pytest.mark.parametrize("key", store_ref.FROM_STORE)
def test_a_key_the_store_gives_may_not_be_set_too(tmp_path, key):
    # Pulumi.yaml's defaults reach the program as values: those are not the user's
    defaults = {"s3Server": "rustfs", "bucket": "vllm-models"}
    assert resolve({**MINE, **defaults}, tmp_path)[1] == []
    _, problems = resolve({**MINE, key: "x"}, tmp_path)
    assert problems == [f"rustfs-vllm:{key} is set, but the store stack {NAME} gives it: remove it "
                        f"(pulumi config rm {key})"]


def test_a_store_that_cannot_be_read_or_exports_no_store_is_one_line(tmp_path):
    def gone(name):
        raise RuntimeError("unknown stack 'organization/rustfs-vllm/platform'")
    [line] = resolve(MINE, tmp_path, read=gone)[1]
    assert line.startswith(f"rustfs-vllm:store = '{NAME}' is invalid: its outputs could not be read (unknown stack")
    [line] = resolve(MINE, tmp_path, read=lambda _: {"store_endpoint": "x"})[1]
    assert "exports no store (store_bucket, store_ca, store_tenants missing)" in line and "role: store" in line
    # a platform from before the tenants (it exported its root keys): refused the same way, never used
    old = {k: v for k, v in OUTS.items() if k != "store_tenants"}
    [line] = resolve(MINE, tmp_path, read=lambda _: {**old, "store_admin": {"access_key": "a", "secret_key": "b"}})[1]
    assert "store_tenants missing" in line


def test_a_stack_the_store_does_not_list_or_without_its_key_is_told_what_to_run(tmp_path):
    other = {**OUTS, "store_tenants": {"organization/rustfs-vllm/team-b": ["team-b"]}}
    [line] = resolve(MINE, tmp_path, read=lambda _: other)[1]
    assert line == (f"rustfs-vllm:store = '{NAME}' is invalid: that store has no tenant {ME} (its rustfs-vllm:tenants "
                    "lists organization/rustfs-vllm/team-b); ask its operator to add this stack with its model "
                    f"prefixes, run `pulumi up` there, then `scripts/tenant-key {NAME} {ME}`")
    [line] = resolve({"store": NAME}, tmp_path)[1]
    assert line.startswith("rustfs-vllm:storeKey is not set: a stack on a store uses its own keys there, never the "
                           "store's root keys") and f"scripts/tenant-key {NAME} {ME}" in line
    [line] = resolve({"store": NAME, "storeKey": json.dumps({**KEY, "secret_key": ""})}, tmp_path)[1]
    assert line.startswith("rustfs-vllm:storeKey = '<secret>' is invalid: a JSON object with access_key") \
        and KEY["access_key"] not in line


def load(raw, tmp_path):
    return config.load(raw, "s", str(tmp_path))


def problems_of(raw, tmp_path) -> list[str]:
    with pytest.raises(config.ConfigError) as err:
        load(raw, tmp_path)
    return err.value.problems


def test_role_store_serves_no_model_and_runs_its_server(tmp_path):
    make_model(tmp_path / "m1")
    base = {"environment": "dev", "role": "store", "mountPath": str(tmp_path / "mnt")}
    cfg = load(base, tmp_path)
    assert cfg.role == "store" and cfg.models == ()
    found = problems_of({**base, "models": [{"name": "m1", "source": "m1"}], "s3Server": "external",
                         "rustfsEndpoint": "http://s3.internal:9000", "store": NAME}, tmp_path)
    assert any(p.startswith("rustfs-vllm:models = '<1 models>' is invalid: none with role store") for p in found), found
    assert any(p.startswith("rustfs-vllm:s3Server = 'external' is invalid: rustfs") for p in found), found
    assert any(p.startswith(f"rustfs-vllm:store = '{NAME}' is invalid: unset with role store") for p in found), found


def test_a_stack_on_a_store_reads_with_its_given_key_and_only_its_prefixes(tmp_path):
    make_model(tmp_path / "m1")
    make_model(tmp_path / "m2")
    base = {**MINE, "environment": "test", "mountPath": str(tmp_path / "mnt")}
    raw, _ = resolve({**base, "models": [{"name": "m1", "source": "m1"}]}, tmp_path)
    cfg = load(raw, tmp_path)
    assert cfg.read_keys == "scoped" and cfg.store_read_keys == (KEY["read_access_key"], KEY["read_secret_key"])
    assert cfg.access_key == KEY["access_key"]
    found = problems_of({**raw, "readKeys": "shared"}, tmp_path)
    assert found == [f"rustfs-vllm:readKeys = 'shared' is invalid: scoped with store (serving hosts read with the read "
                     f"key {NAME} made for this stack, never the store's root keys)"]
    raw, _ = resolve({**base, "models": [{"name": "m1", "source": "m1"}, {"name": "m2", "source": "m2",
                                                                          "prefix": "team-b"}]}, tmp_path)
    assert problems_of(raw, tmp_path) == [
        f"rustfs-vllm:models[m2].prefix = 'team-b' is invalid: one of the prefixes the store {NAME} gives this stack "
        "(m1, team-a): its operator lists them in rustfs-vllm:tenants"]


def test_tenants_are_a_platforms_each_prefix_one_tenants(tmp_path):
    base = {"environment": "dev", "role": "store", "mountPath": str(tmp_path / "mnt")}
    cfg = load({**base, "tenants": {ME: ["team-a", "shared-a"], "acme/p/b": ["team-b"]}}, tmp_path)
    assert cfg.tenants == {ME: ("shared-a", "team-a"), "acme/p/b": ("team-b",)}
    found = problems_of({**base, "tenants": {ME: ["team-a"], "acme/p/b": ["team-a"], "not-a-stack": ["x"],
                                             "acme/p/c": [".rustfs-vllm"], "acme/p/d": []}}, tmp_path)
    assert "rustfs-vllm:tenants.acme/p/b = ['team-a'] is invalid: prefixes of its own: 'team-a' is tenant " \
           f"{ME}'s" in found, found
    assert "rustfs-vllm:tenants = 'not-a-stack' is invalid: keys that are stacks' fully qualified names " \
           "<organization>/<project>/<stack>" in found, found
    assert any(p.startswith("rustfs-vllm:tenants.acme/p/c = ['.rustfs-vllm'] is invalid: a non-empty list") for p in found)
    assert any(p.startswith("rustfs-vllm:tenants.acme/p/d = [] is invalid: a non-empty list") for p in found)
    make_model(tmp_path / "m1")
    found = problems_of({"environment": "dev", "mountPath": str(tmp_path / "mnt"), "tenants": {ME: ["m1"]},
                         "models": [{"name": "m1", "source": "m1"}]}, tmp_path)
    assert found == [f"rustfs-vllm:tenants = {{'{ME}': ['m1']}} is invalid: unset on a serving stack (a platform "
                     "stack, role store, lists its tenants)"]


def test_a_tenants_policy_writes_only_its_prefixes_and_records():
    pol = tenant_policy.policy("shared", ME, ["team-a"])
    written = pol["Statement"][0]["Resource"]
    assert written == ["arn:aws:s3:::shared/team-a", "arn:aws:s3:::shared/team-a/*",
                       "arn:aws:s3:::shared/.rustfs-vllm/owners/team-a.json",
                       f"arn:aws:s3:::shared/.rustfs-vllm/stacks/{ME}.json"]
    assert pol["Statement"][2]["Condition"] == {"StringLike": {"s3:prefix": ["team-a/", "team-a/*"]}}
    assert not any("admin:" in a for st in pol["Statement"] for a in st["Action"])
    assert len(tenant_policy.user_base(ME, "shared")) + 4 <= 20 and tenant_policy.read_base(ME, "shared") != \
        tenant_policy.user_base(ME, "shared")


def test_tenant_key_reads_both_pairs_from_the_platforms_export_and_only_the_tenants():
    from components.core import tenant_handover

    def secret(v):   # how `pulumi stack export --show-secrets` writes a secret
        return {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "plaintext": json.dumps(v)}
    resources = [{"type": "pulumi-python:dynamic/rustfs-vllm:TenantKey",
                  "outputs": {"tenant": ME, "read_access_key": secret("rvtenA"), "read_secret_key": secret("sA")}},
                 {"type": "pulumi-python:dynamic/rustfs-vllm:ReadKey",
                  "outputs": {"tenant": ME, "read_access_key": secret("rvrdA"), "read_secret_key": secret("rA")}},
                 {"type": "pulumi-python:dynamic/rustfs-vllm:TenantKey",
                  "outputs": {"tenant": "acme/p/b", "read_access_key": secret("rvtenB"), "read_secret_key": secret("sB")}}]
    assert tenant_handover.store_key({"resources": resources}, ME) == {
        "access_key": "rvtenA", "secret_key": "sA", "read_access_key": "rvrdA", "read_secret_key": "rA"}
    assert tenant_handover.store_key({"resources": resources}, "acme/p/c") == {}
    # issue 57: a rotation's retired key (pending deletion, whichever comes first in the export) is never handed out
    retired = {"type": "pulumi-python:dynamic/rustfs-vllm:TenantKey", "delete": True,
               "outputs": {"tenant": ME, "read_access_key": secret("rvtenOLD"), "read_secret_key": secret("sOLD")}}
    for order in ([retired, *resources], [*resources, retired]):
        assert tenant_handover.store_key({"resources": order}, ME)["access_key"] == "rvtenA"
