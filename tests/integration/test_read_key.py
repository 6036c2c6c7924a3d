"""The stack's read key (readKeys scoped, issue 31) through the provider's own code against a real S3 server.

- On real RustFS 1.0.1 (the local image rustfs-vllm/rustfs:1.0.1-local, scripts/build-rustfs-image; skipped
  where this machine does not have it): the key reads its prefixes with boto3 and through a real rclone
  mount over FUSE; a PUT, a DELETE (single and multi-object), a read of another prefix and a listing of
  the bucket root are refused by RustFS; a new model list reaches the key in place (same key, no new
  login); destroy removes it (RustFS then refuses the key) and a second destroy succeeds; refresh of a
  removed key says it is gone; keys without admin rights and a policy the server rejects fail in one
  line naming the server's answer. (The ReadKey makes the user, its ReadGrant the policy; both as `up` runs them.)
- On the rclone serve s3 stand-in (NOT RustFS; no users, no policies): the key's creation fails in one
  line that says the server has no admin API and to set readKeys shared.
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import docker
import pytest

from components.errors import ProviderError
from components.providers import read_grant, read_key
from components.storage import admin_api, read_policy, s3
from tests import s3_under_test
from tests.helpers import free_port, s3_answer, wait_http

ROOT_KEYS = ("readkey-root-access-01", "readkey-root-secret-0001")
KEY, GRANT = read_key.ReadKeyProvider(), read_grant.ReadGrantProvider()
BUCKET = "models"
OBJECTS = {"stack-a/m1/config.json": b'{"a": 1}', "stack-a/m1/model.safetensors": os.urandom(300_000),
           "stack-a/m2/config.json": b'{"b": 2}', "stack-b/m3/config.json": b"other team", "top.txt": b"root",
           # prefixes that START with the key's prefix: another model (m1-x) and another stack's (m12)
           "stack-a/m1-x/config.json": b'{"x": 1}', "stack-a/m12/config.json": b'{"y": 2}'}


def _have_rustfs() -> bool:
    try:
        docker.from_env().images.get(s3_under_test.RUSTFS_IMAGE)
        return True
    except Exception:  # noqa: BLE001 - no engine or no image: skipped, said below
        return False


@pytest.fixture
def rustfs(tmp_path):
    if not _have_rustfs():
        pytest.skip(f"needs the local RustFS image {s3_under_test.RUSTFS_IMAGE} (scripts/build-rustfs-image; "
                    "`make test-rustfs` runs it)")
    client, port = docker.from_env(), free_port()
    box = client.containers.run(s3_under_test.RUSTFS_IMAGE, detach=True, name=f"rv-readkey-{secrets.token_hex(3)}",
                                environment={"RUSTFS_VOLUMES": "/data", "RUSTFS_ADDRESS": ":9000",
                                             "RUSTFS_ACCESS_KEY": ROOT_KEYS[0], "RUSTFS_SECRET_KEY": ROOT_KEYS[1]},
                                ports={"9000/tcp": ("127.0.0.1", port)})
    try:
        endpoint = f"http://127.0.0.1:{port}"
        assert wait_http(f"{endpoint}/health", 60), box.logs()[-2000:]
        root = s3.client(endpoint, *ROOT_KEYS)
        root.create_bucket(Bucket=BUCKET)
        for key, body in OBJECTS.items():
            root.put_object(Bucket=BUCKET, Key=key, Body=body)
        yield endpoint
    finally:
        box.remove(force=True, v=True)


def common(endpoint: str, keys: tuple[str, str] = ROOT_KEYS) -> dict:
    return {"endpoint": endpoint, "access_key": keys[0], "secret_key": keys[1], "store": "rustfs volume test"}


def make(endpoint: str, prefixes: list[str], keys: tuple[str, str] = ROOT_KEYS, stack: str = "rk-test"):
    """As `up` makes them: the ReadKey (the user), then its ReadGrant (the policy): (key's result, grant's)."""
    made = KEY.create({**common(endpoint, keys), "user_base": read_policy.user_base(stack, BUCKET)})
    granted = GRANT.create(grant_props(endpoint, made.outs["read_access_key"], prefixes, keys))
    return made, granted


def grant_props(endpoint: str, user: str, prefixes: list[str], keys: tuple[str, str] = ROOT_KEYS) -> dict:
    return {**common(endpoint, keys), "user": user, "policy": read_policy.policy_json(BUCKET, prefixes)}


def mounted_read(endpoint: str, key: tuple[str, str], prefix: str, tmp_path: Path) -> dict[str, bytes]:
    """Every file of ``prefix`` read through a real rclone mount (FUSE) made with ``key``."""
    point, remote = tmp_path / "mnt", "RK"
    point.mkdir(exist_ok=True)
    env = {**os.environ, f"RCLONE_CONFIG_{remote}_TYPE": "s3", f"RCLONE_CONFIG_{remote}_PROVIDER": "Other",
           f"RCLONE_CONFIG_{remote}_ENDPOINT": endpoint, f"RCLONE_CONFIG_{remote}_FORCE_PATH_STYLE": "true",
           f"RCLONE_CONFIG_{remote}_REGION": "us-east-1", f"RCLONE_CONFIG_{remote}_ACCESS_KEY_ID": key[0],
           f"RCLONE_CONFIG_{remote}_SECRET_ACCESS_KEY": key[1]}
    rclone = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "rclone")
    subprocess.run([rclone, "mount", f"{remote}:{BUCKET}/{prefix}", str(point), "--read-only", "--config", "/dev/null",
                    "--vfs-cache-mode", "full", "--cache-dir", str(tmp_path / "cache"), "--daemon"],
                   env=env, check=True, timeout=60)
    try:
        deadline = time.monotonic() + 30
        while not os.path.ismount(point) and time.monotonic() < deadline:
            time.sleep(0.2)
        return {str(p.relative_to(point)): p.read_bytes() for p in sorted(point.rglob("*")) if p.is_file()}
    finally:
        subprocess.run(["fusermount", "-u", str(point)], check=False)


def test_the_read_key_reads_its_prefixes_only_on_real_rustfs(rustfs, tmp_path):
    made, granted = make(rustfs, ["stack-a/m1"])
    key = (made.outs["read_access_key"], made.outs["read_secret_key"])
    assert key[0] == made.id and len(key[1]) == 40 and ROOT_KEYS[1] not in key
    c = s3.client(rustfs, *key)
    assert c.get_object(Bucket=BUCKET, Key="stack-a/m1/config.json")["Body"].read() == b'{"a": 1}'
    assert s3_answer(lambda: c.head_object(Bucket=BUCKET, Key="stack-a/m1/model.safetensors")) == "OK"
    listed = c.list_objects_v2(Bucket=BUCKET, Prefix="stack-a/m1/")
    assert sorted(o["Key"] for o in listed["Contents"]) == ["stack-a/m1/config.json", "stack-a/m1/model.safetensors"]
    refused = {
        "put": s3_answer(lambda: c.put_object(Bucket=BUCKET, Key="stack-a/m1/evil", Body=b"x")),
        "delete": s3_answer(lambda: c.delete_object(Bucket=BUCKET, Key="stack-a/m1/config.json")),
        "other stack": s3_answer(lambda: c.get_object(Bucket=BUCKET, Key="stack-b/m3/config.json")),
        "other model": s3_answer(lambda: c.get_object(Bucket=BUCKET, Key="stack-a/m2/config.json")),
        "list root": s3_answer(lambda: c.list_objects_v2(Bucket=BUCKET)),
        "list other": s3_answer(lambda: c.list_objects_v2(Bucket=BUCKET, Prefix="stack-b/")),
        # the bare prefix would list m1-x/... and m12/... too (names, sizes, ETags): refused
        "list bare prefix": s3_answer(lambda: c.list_objects_v2(Bucket=BUCKET, Prefix="stack-a/m1")),
        "list bare prefix, delimited": s3_answer(
            lambda: c.list_objects_v2(Bucket=BUCKET, Prefix="stack-a/m1", Delimiter="/")),
        "list a longer prefix": s3_answer(lambda: c.list_objects_v2(Bucket=BUCKET, Prefix="stack-a/m1-x/")),
        "read a longer prefix": s3_answer(lambda: c.get_object(Bucket=BUCKET, Key="stack-a/m1-x/config.json")),
        "create bucket": s3_answer(lambda: c.create_bucket(Bucket="another")),
    }
    assert refused == dict.fromkeys(refused, "AccessDenied"), refused
    multi = c.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": "stack-a/m1/config.json"}]})
    assert [e["Code"] for e in multi.get("Errors", [])] == ["AccessDenied"] and not multi.get("Deleted")
    root = s3.client(rustfs, *ROOT_KEYS)
    assert root.get_object(Bucket=BUCKET, Key="stack-a/m1/config.json")["Body"].read() == b'{"a": 1}'
    # through a real rclone mount over FUSE, as the serving hosts read
    files = mounted_read(rustfs, key, "stack-a/m1", tmp_path)
    assert files == {"config.json": b'{"a": 1}', "model.safetensors": OBJECTS["stack-a/m1/model.safetensors"]}

    # a model added: the same key reads it at once (the grant's policy changed in place, no new login)
    olds, news = granted.outs, grant_props(rustfs, key[0], ["stack-a/m1", "stack-a/m2"])
    assert not GRANT.diff(granted.id, olds, news).replaces
    updated = GRANT.update(granted.id, olds, news).outs
    assert c.get_object(Bucket=BUCKET, Key="stack-a/m2/config.json")["Body"].read() == b'{"b": 2}'
    assert GRANT.read(granted.id, updated).id == granted.id and KEY.read(made.id, made.outs).id == made.id

    # a replacement of the key (`pulumi up --replace`, a rotation): a user of its own, made and granted first;
    # the old grant's delete then removes the old user, and the new key goes on reading
    rotated, rotated_grant = make(rustfs, ["stack-a/m1", "stack-a/m2"])
    new_key = (rotated.outs["read_access_key"], rotated.outs["read_secret_key"])
    assert rotated.id != made.id and new_key[0].startswith(read_policy.user_base("rk-test", BUCKET))
    assert s3_answer(lambda: c.get_object(Bucket=BUCKET, Key="stack-a/m1/config.json")) == "OK", "both read meanwhile"
    GRANT.delete(granted.id, updated)
    KEY.delete(made.id, made.outs)
    fresh = s3.client(rustfs, *new_key)
    assert s3_answer(lambda: fresh.get_object(Bucket=BUCKET, Key="stack-a/m2/config.json")) == "OK"
    assert s3_answer(lambda: fresh.put_object(Bucket=BUCKET, Key="stack-a/m2/x", Body=b"")) == "AccessDenied"
    assert s3_answer(lambda: s3.client(rustfs, *key).get_object(Bucket=BUCKET, Key="stack-a/m1/config.json")) \
        == "InvalidAccessKeyId"
    assert KEY.read(made.id, made.outs).id is None and GRANT.read(granted.id, updated).id is None

    # destroy: RustFS refuses the key; a second destroy succeeds
    GRANT.delete(rotated_grant.id, rotated_grant.outs)
    KEY.delete(rotated.id, rotated.outs)
    assert s3_answer(lambda: fresh.get_object(Bucket=BUCKET, Key="stack-a/m1/config.json")) == "InvalidAccessKeyId"
    GRANT.delete(rotated_grant.id, rotated_grant.outs)


def test_admin_refusals_are_one_line_on_real_rustfs(rustfs):
    made, granted = make(rustfs, ["stack-a/m1"])
    reader = (made.outs["read_access_key"], made.outs["read_secret_key"])
    with pytest.raises(ProviderError) as e:           # keys without admin rights (here: a read key)
        make(rustfs, ["stack-b/m3"], keys=reader, stack="rk-other")
    line = str(e.value)
    assert line.startswith("read key: look up user rvread"), line   # looked up first: never overwritten
    assert f"at the S3 server {rustfs} was refused (403 AccessDenied" in line, line
    assert "have no admin rights there" in line and "\n" not in line, line
    bad = {**grant_props(rustfs, reader[0], []),
           "policy": json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Maybe", "Action": ["s3:GetObject"],
                                                                         "Resource": ["arn:aws:s3:::models/*"]}]})}
    with pytest.raises(ProviderError) as e:
        GRANT.update(granted.id, granted.outs, bad)
    assert "was refused (400 " in str(e.value) and "the server rejects the read policy" in str(e.value), str(e.value)
    GRANT.delete(granted.id, granted.outs)


def test_a_server_without_an_admin_api_says_to_share_the_keys(s3_server):
    props_ = {**s3_server.props(), "user_base": "rvreadstandin01", "store": "rclone-serve-s3"}
    with pytest.raises(ProviderError) as e:
        KEY.create(props_)
    line = str(e.value)
    assert line.startswith("read key: look up user rvreadstandin01")
    assert f"at the S3 server {s3_server.endpoint} failed (404 NoSuchBucket" in line
    assert "set rustfs-vllm:readKeys to shared" in line and "\n" not in line, line


def test_a_read_user_that_exists_is_never_overwritten_on_real_rustfs(rustfs, monkeypatch):
    """RustFS's add-user resets an existing user's secret: the ReadKey looks first and takes another name;
    when every name it tries is taken, create fails in one line naming them (nothing is overwritten)."""
    from components.storage import admin_api

    base = read_policy.user_base("rk-taken", BUCKET)
    admin = admin_api.admin_for(common(rustfs))
    taken = read_policy.user_name(base, "beef")
    admin.user_add(taken, "someone-elses-secret-0001")
    tags = iter(["beef", "cafe"])
    monkeypatch.setattr(read_key.secrets, "token_hex", lambda n: next(tags) if n == 2 else "ab" * n)
    made = KEY.create({**common(rustfs), "user_base": base})
    assert made.id == read_policy.user_name(base, "cafe")
    theirs = s3.client(rustfs, taken, "someone-elses-secret-0001")
    assert s3_answer(lambda: theirs.list_objects_v2(Bucket=BUCKET, Prefix="stack-a/m1/")) == "AccessDenied", \
        "the existing user still logs in with its own secret (refused only by its missing policy)"
    monkeypatch.setattr(read_key.secrets, "token_hex", lambda n: "beef" if n == 2 else "ab" * n)
    with pytest.raises(ProviderError) as e:
        KEY.create({**common(rustfs), "user_base": base})
    line = str(e.value)
    assert line.startswith("read key: every user name tried") and taken in line and "\n" not in line, line


def test_refresh_after_a_root_key_rotation_sees_a_deleted_read_user(tmp_path):
    """The ReadKey's state holds the root keys it was made with. After a rotation RustFS refuses them;
    the provider then looks with the stack's current root keys (what the engine hands a dynamic
    provider's ``configure``), so a read user deleted behind the program's back is seen as gone (and
    the next `up` makes a new one). On real RustFS 1.0.1, restarted on its volume with new root keys."""
    if not _have_rustfs():
        pytest.skip(f"needs the local RustFS image {s3_under_test.RUSTFS_IMAGE}")
    from pulumi.dynamic import ConfigureRequest
    from pulumi.dynamic.config import Config

    client, port, volume = docker.from_env(), free_port(), f"rv-readkey-rot-{secrets.token_hex(3)}"
    new_keys = ("readkey-root-access-02", "readkey-root-secret-0002")
    endpoint = f"http://127.0.0.1:{port}"

    def server(keys: tuple[str, str]):
        box = client.containers.run(s3_under_test.RUSTFS_IMAGE, detach=True, name=f"{volume}-{keys[0][-2:]}",
                                    environment={"RUSTFS_VOLUMES": "/data", "RUSTFS_ADDRESS": ":9000",
                                                 "RUSTFS_ACCESS_KEY": keys[0], "RUSTFS_SECRET_KEY": keys[1]},
                                    volumes={volume: {"bind": "/data", "mode": "rw"}},
                                    ports={"9000/tcp": ("127.0.0.1", port)})
        assert wait_http(f"{endpoint}/health", 60), box.logs()[-2000:]
        return box

    box = server(ROOT_KEYS)
    try:
        s3.client(endpoint, *ROOT_KEYS).create_bucket(Bucket=BUCKET)
        made, _ = make(endpoint, ["stack-a/m1"])
        user = made.outs["read_access_key"]
        box.remove(force=True)
        box = server(new_keys)                        # the rotation: same data, new root keys
        admin = admin_api.admin_for(common(endpoint, new_keys))
        for _ in range(60):                           # the admin API answers a little after /health
            try:
                json.loads(admin.user_info(user))     # the read user outlived the rotation
                break
            except Exception as exc:  # noqa: BLE001 - "server context is not ready" (503) for a moment
                if "not ready" not in str(exc):
                    raise
                time.sleep(0.5)
        # not configured (an engine that gives no configuration): the old keys are refused, nothing is said
        assert read_key.ReadKeyProvider().read(made.id, made.outs).id == made.id
        admin.user_remove(user)
        stale = read_key.ReadKeyProvider()
        assert stale.read(made.id, made.outs).id == made.id
        configured = read_key.ReadKeyProvider()
        configured.configure(ConfigureRequest(Config({"rustfs-vllm:rustfsAccessKey": new_keys[0],
                                                      "rustfs-vllm:rustfsSecretKey": new_keys[1]}, "rustfs-vllm")))
        assert configured.read(made.id, made.outs).id is None      # gone: the next up makes a new one
    finally:
        box.remove(force=True)
        client.volumes.get(volume).remove(force=True)
