"""readKeys (issue 31): the stack's read key in the graph, its policy, its config and its errors.

Under Pulumi mocks (the graph only); the read key against real RustFS is
tests/integration/test_read_key_rustfs.py."""
from __future__ import annotations

import dataclasses
import json
import os

import pytest

from components import config
from components.providers import read_grant, read_key
from components.storage import admin_api, read_policy
from tests.helpers import ROOT
from tests.unit.graph import READ_SECRET, READ_USER, build, config_from_file, unwrap

COMMAND = "command:local:Command"
KEYS = ("urn-test-access-key-0001", "urn-test-secret-0001")


def offline(tmp_path, **stack_keys) -> config.StackConfig:
    return config_from_file("offline", tmp_path, "/nonexistent-read-keys/mnt", stack_keys=stack_keys,
                            loadFormat="mount")


def inputs(g) -> dict[str, dict]:
    return {r.urn: unwrap(r.inputs) for r in g.resources if "::pulumi:pulumi:Stack::" not in r.urn}


# ------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("server, expected", [("rustfs", "scoped"), ("rclone-serve-s3", "shared"),
                                              ("external", "shared")])
def test_the_default_follows_the_server(tmp_path, server, expected):
    over = {"s3Server": server, "rustfsAccessKey": "a-sixteen-char-key-01"}
    if server == "external":
        over["rustfsEndpoint"] = "http://s3.example:9000"
    cfg = offline(tmp_path, **over)
    assert (cfg.read_keys, cfg.read_keys_given) == (expected, False)


def test_scoped_on_a_server_without_users_is_refused_naming_the_key(tmp_path):
    with pytest.raises(config.ConfigError) as e:
        offline(tmp_path, s3Server="rclone-serve-s3", rustfsAccessKey="a-sixteen-char-key-01", readKeys="scoped")
    assert e.value.problems == ["rustfs-vllm:readKeys = 'scoped' is invalid: shared with s3Server rclone-serve-s3 "
                                "(it has no users or policies to scope a key with)"]
    with pytest.raises(config.ConfigError) as e:
        offline(tmp_path, readKeys="narrow")
    assert "rustfs-vllm:readKeys = 'narrow' is invalid: one of scoped, shared" in str(e.value)


# ------------------------------------------------------------------------------------------- policy
def test_the_policy_reads_only_the_prefixes():
    p = read_policy.policy("models", ["b", "a", "a"])
    assert p["Statement"] == [
        {"Sid": "ReadModels", "Effect": "Allow", "Action": ["s3:GetObject"],
         "Resource": ["arn:aws:s3:::models/a", "arn:aws:s3:::models/a/*",
                      "arn:aws:s3:::models/b", "arn:aws:s3:::models/b/*"]},
        {"Sid": "ListModels", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": ["arn:aws:s3:::models"],
         "Condition": {"StringLike": {"s3:prefix": ["a/", "a/*", "b/", "b/*"]}}}]
    assert json.loads(read_policy.policy_json("models", ["b", "a"])) == p


def test_user_names_fit_rustfs_and_differ_per_stack_bucket_and_key():
    bases = {read_policy.user_base(s, b) for s in ("dev", "prod", "a-very-long-stack-name-" * 4)
             for b in ("vllm-models", "other")}
    assert len(bases) == 6 and read_policy.user_base("dev", "vllm-models") == read_policy.user_base("dev", "vllm-models")
    names = {read_policy.user_name(b, t) for b in bases for t in ("0000", "beef")}
    assert len(names) == 12 and all(len(n) == read_policy.MAX_USER and n.isalnum() for n in names)


# -------------------------------------------------------------------------------------------- graph
def test_scoped_adds_the_read_key_and_changes_only_the_readers_keys(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scoped_cfg = offline(tmp_path)
    shared = inputs(build(dataclasses.replace(scoped_cfg, read_keys="shared"), stack="offline"))
    g = build(scoped_cfg, stack="offline")
    scoped = inputs(g)
    key, grant = g.one("dynamic/rustfs-vllm:ReadKey"), g.one("dynamic/rustfs-vllm:ReadGrant")
    assert sorted(set(scoped) - set(shared)) == sorted([key.urn, grant.urn]) and not set(shared) - set(scoped)
    changed = sorted(u.split("::")[-1] for u in shared if shared[u] != scoped[u])
    # and the root's policy facts (issue 38: readKeys is one of them)
    assert changed == ["mount-SmolLM2-135M-Instruct-command", "rustfs-vllm"], changed
    mount = g.one(COMMAND, "mount-SmolLM2-135M-Instruct-command")
    env = mount.plain("environment")
    assert mount.is_secret("environment")
    assert (env["RCLONE_CONFIG_RVLLM_OFFLINE_ACCESS_KEY_ID"], env["RCLONE_CONFIG_RVLLM_OFFLINE_SECRET_ACCESS_KEY"]) \
        == (READ_USER, READ_SECRET)
    assert key.urn in mount.dependencies and grant.urn in mount.dependencies   # the key, once it may read
    # the root keys: only in what runs on this machine (check, bucket, uploads, the read key's admin calls)
    # and the S3 server's own container
    holders = sorted({r.name for r in g.resources for k, v in r.inputs.items()
                      if any(s in json.dumps(unwrap(v), default=str) for s in KEYS)})
    assert holders == ["bucket-bucket", "model-SmolLM2-135M-Instruct-objects", "read-grant", "read-key",
                       "s3-container", "s3-credentials"], holders


def test_the_read_key_is_made_after_the_check_with_secret_keys(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    g = build(offline(tmp_path), stack="offline")
    key, check = g.one("dynamic/rustfs-vllm:ReadKey"), g.one("dynamic/rustfs-vllm:CredentialCheck")
    grant = g.one("dynamic/rustfs-vllm:ReadGrant")
    assert check.urn in key.dependencies and key.urn in grant.dependencies
    for made_after in (g.one("dynamic/rustfs-vllm:Bucket"), g.one("dynamic/rustfs-vllm:ModelUpload")):
        assert grant.urn in made_after.dependencies, made_after.name   # a refused key stops up before them
    for r in (key, grant):
        assert r.is_secret("access_key") and r.is_secret("secret_key")
        assert r.plain("endpoint") == "http://127.0.0.1:9000"
    assert set(key.secret_outputs) >= {"read_access_key", "read_secret_key", "access_key", "secret_key"}
    assert key.plain("user_base") == read_policy.user_base("offline", "vllm-models") and "policy" not in key.inputs
    assert json.loads(grant.plain("policy")) == read_policy.policy("vllm-models", ["SmolLM2-135M-Instruct"])
    assert grant.plain("user") == READ_USER


# --------------------------------------------------------------------------------------- provider
def test_a_new_model_list_or_new_root_keys_change_the_grant_never_the_key():
    """The readers take their key from the ReadKey: it changes only for another user (stack, bucket, server),
    so preview never shows the readers' keys changing when they do not."""
    key = read_key.ReadKeyProvider()
    olds = {"user_base": "rvreadx", "endpoint": "http://h:9000", "access_key": "a", "secret_key": "s",
            "store": "rustfs volume v", "read_access_key": "rvreadx0000", "read_secret_key": "k" * 40}
    assert not key.diff("rvreadx0000", olds, {**olds, "access_key": "a2", "secret_key": "s2"}).changes
    assert key.diff("rvreadx0000", olds, {**olds, "user_base": "rvready"}).replaces == ["user_base"]
    assert key.diff("rvreadx0000", olds, {**olds, "store": "rustfs volume w"}).replaces == ["store"]
    grant = read_grant.ReadGrantProvider()
    g_olds = {"user": "rvreadx0000", "endpoint": "http://h:9000", "access_key": "a", "secret_key": "s",
              "store": "rustfs volume v", "policy": read_policy.policy_json("b", ["m1"])}
    for change in ({"policy": read_policy.policy_json("b", ["m1", "m2"])}, {"secret_key": "s2"}):
        d = grant.diff("p", g_olds, {**g_olds, **change})
        assert d.changes and not d.replaces, change
    assert not grant.diff("p", g_olds, dict(g_olds)).changes
    assert grant.diff("p", g_olds, {**g_olds, "user": "rvreadx1111"}).replaces == ["user"]


def _admin_exc(status: str, code: str, message: str) -> BaseException:
    from minio.error import MinioAdminException

    return MinioAdminException(status, f"<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>{message}"
                                       "</Message></Error>")


@pytest.mark.parametrize("status, code, expected", [
    ("403", "AccessDenied", "have no admin rights there; use the server's root keys, or set rustfs-vllm:readKeys to shared"),
    ("404", "NotFound", "the server has no RustFS/MinIO admin API (IAM) there; set rustfs-vllm:readKeys to shared"),
    ("501", "NotImplemented", "no RustFS/MinIO admin API"),
])
def test_admin_api_refusals_are_one_line_with_the_answer_and_the_fix(status, code, expected):
    props = {"endpoint": "http://s3.example:9000"}
    line = admin_api.explain(_admin_exc(status, code, "nope"), props, "add user rvreadx")
    assert line.startswith("read key: add user rvreadx at the S3 server http://s3.example:9000")
    assert f"{status} {code}: nope" in line and expected in line and "\n" not in line


def test_a_policy_the_server_rejects_is_named():
    line = admin_api.explain(_admin_exc("400", "InvalidRequest", "Matching variant not found"),
                            {"endpoint": "http://h:9000"}, "add policy rustfs-vllm-rvreadx")
    assert "was refused (400 InvalidRequest: Matching variant not found): the server rejects the read policy" in line


def test_missing_and_unreachable_are_told_apart():
    from urllib3.exceptions import MaxRetryError, NewConnectionError, ResponseError

    assert admin_api.is_missing(_admin_exc("404", "NoSuchResource", "user 'x' does not exist"))
    assert not admin_api.is_missing(_admin_exc("404", "NotFound", "no admin API"))
    refused = MaxRetryError(None, "/minio/admin/v3/add-user", NewConnectionError(None, "refused"))
    assert admin_api.is_unreachable(refused)
    assert not admin_api.is_unreachable(MaxRetryError(None, "/x", ResponseError("too many 500 error responses")))
    line = admin_api.explain(refused, {"endpoint": "http://h:9000"}, "add user rvreadx")
    assert "the server does not answer" in line and "check rustfsEndpoint" in line


def test_the_output_says_who_holds_which_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for keys, word in (("scoped", "read-only key for this stack's model prefixes"), ("shared", "root keys")):
        g = build(offline(tmp_path, readKeys=keys), stack="offline")
        assert word in g.stack.exports()["read_keys"], keys


def test_ssh_hosts_get_the_read_key_never_the_root_keys(tmp_path, monkeypatch):
    """Two hosts over SSH (their mounts' variables go base64-encoded on the command's stdin): each host's
    mount holds the read key; no resource that runs on a host holds a root key, plain or encoded."""
    import base64

    from tests.unit.test_hosts import load, raw_two_hosts

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}")
    raw = {**raw_two_hosts(tmp_path), "readKeys": "scoped"}
    cfg = load(raw)
    g = build(dataclasses.replace(cfg, state_dir=str(tmp_path / ".state")), stack="multi")
    encoded = [base64.b64encode(k.encode()).decode() for k in (cfg.access_key, cfg.secret_key)]
    for host in ("a", "b"):
        mount = g.one("command:remote:Command", f"{host}-mount-both-command")
        env = dict(line.split("=", 1) for line in mount.plain("stdin").splitlines() if "=" in line)
        assert base64.b64decode(env["RCLONE_CONFIG_RVLLM_MULTI_ACCESS_KEY_ID"]).decode() == READ_USER
        assert base64.b64decode(env["RCLONE_CONFIG_RVLLM_MULTI_SECRET_ACCESS_KEY"]).decode() == READ_SECRET
        assert mount.is_secret("stdin")
    on_hosts = [r for r in g.resources if r.typ.startswith(("command:remote:", "docker:"))]
    assert on_hosts
    for r in on_hosts:
        text = json.dumps(unwrap(r.inputs), default=str)
        assert not any(k in text for k in (cfg.access_key, cfg.secret_key, *encoded)), r.name
