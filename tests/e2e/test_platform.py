"""One store, many stacks (issues 38 and 45) through the real engine, on the S3 server of tests/s3_under_test.py
(real RustFS under scripts/test; the tenants' keys need its admin API):

1. A platform stack (role: store) runs RustFS, makes the bucket and, for each tenant it lists, a RustFS user
   allowed only under that tenant's prefixes and a read key; it exports the endpoint, the bucket, the CA and
   the tenants' prefixes, and no key.
2. `scripts/tenant-key` gives each of two serving stacks (environments test and production) its keys; each
   uploads its model under its own prefix (an owner record each), registers on the store and serves
   through the mount. No serving stack's state holds the root keys or another tenant's key; the store
   itself refuses one tenant's key under another's prefix (PUT, DELETE, a multi-object DELETE, GET, LIST).
3. A stack the platform does not list, and a listed one naming another tenant's prefix, are refused at
   preview, each naming what to do.
4. The platform's destroy is refused while serving stacks are registered, naming them, and so is taking a
   registered tenant out of `tenants`; RustFS keeps serving them.
5. The second serving stack is destroyed with purgeOnDestroy while the OpenAI client polls the first:
   0 failed requests; its prefix and owner record are gone, the first one's objects untouched; the
   platform then takes it out of `tenants` and its users are gone.
6. The first is destroyed without purge (its objects and owner record stay); the platform's destroy
   then succeeds, and the volume keeps the bucket's data.
"""
from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from components.storage import owners, s3
from tests import s3_under_test
from tests.helpers import ROOT, free_port, process_command_lines
from tests.k8s.poller import Poller
from tests.pulumi_cli import Stack

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
BUCKET = "shared-models"

pytestmark = [
    pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                       reason="scripts/build-smollm2-model makes the model"),
    pytest.mark.skipif(s3_under_test.KIND != "rustfs", reason="serving stacks on a store read with scoped keys: "
                                                              "RustFS's admin API (the stand-in has no users)"),
]


def serving_config(name: str, store: str, prefix: str, environment: str, tmp_path: Path) -> dict:
    source = tmp_path / f"model-{prefix}"
    if not source.exists():
        shutil.copytree(MODEL, source, ignore=shutil.ignore_patterns(".complete"))
    return {"environment": environment, "store": store, "namePrefix": f"rvllm-{name}", "bindAddress": "127.0.0.1",
            "mountPath": f"/mnt/rvllm-{name}", "mountCacheDir": str(tmp_path / f"cache-{prefix}"),
            "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 600, "vllmCompileCache": False,
            "models": [{"name": "smollm2", "source": str(source), "prefix": prefix, "port": free_port(),
                        "maxModelLen": 512, "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"]}]}


def serving_stack(name: str, cfg: dict, api_key: str = "") -> Stack:
    stack = Stack(ROOT, name)
    stack.init()
    stack.write_config(cfg)
    if api_key:
        stack.set("vllmApiKey", api_key, secret=True)
    return stack


def fqn(stack: Stack) -> str:
    return f"organization/rustfs-vllm/{stack.name}"


def tenant_key(platform: Stack, tenant: str) -> subprocess.CompletedProcess:
    """scripts/tenant-key as the platform's operator runs it."""
    return subprocess.run([str(ROOT / "scripts" / "tenant-key"), platform.name, tenant], cwd=ROOT, env=platform.env,
                          capture_output=True, text=True, timeout=300)


def refused(fn) -> str:
    """The S3 error code of ``fn()`` ("" when the store let it through)."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the code is what the test reads
        return s3.error_code(exc) or type(exc).__name__
    return ""


def rotate_tenant_key(platform: Stack, tenant: Stack, old: dict, endpoint: str) -> dict:
    """Issue 57: the tenant's key rotated under a polling client (see the caller); the figures."""
    from components.storage import tenant_policy

    urn = next(r["urn"] for r in platform.state()["deployment"]["resources"]
               if r["urn"].endswith(f"::tenant-{tenant_policy.slug(fqn(tenant))}-key"))
    poll = Poller(tenant.outputs()["endpoint"], "smollm2").start()
    platform.run("up", "--yes", "--skip-preview", "--replace", urn, label="platform_rotate_tenant_key")
    given = tenant_key(platform, fqn(tenant))
    assert given.returncode == 0, given.stderr
    new = json.loads(tenant.run("config", "get", "storeKey").stdout)
    assert new["access_key"] != old["access_key"] and new["read_access_key"] == old["read_access_key"], (new, old)
    tenant.run("up", "--yes", "--skip-preview", label="tenant_up_new_key", timeout=1800)
    time.sleep(3)
    polled = poll.stop().summary()
    assert polled["failed"] == 0 and polled["requests"] >= 3, polled
    was = s3.client(endpoint, old["access_key"], old["secret_key"])
    now = s3.client(endpoint, new["access_key"], new["secret_key"])
    assert refused(lambda: was.list_objects_v2(Bucket=BUCKET, Prefix="team-a/")) in ("InvalidAccessKeyId", "AccessDenied")
    assert refused(lambda: now.list_objects_v2(Bucket=BUCKET, Prefix="team-a/")) == ""
    tenant.run("preview", "--expect-no-changes")
    return {"polled": polled, "old_key_refused": True}


def test_a_platform_stack_and_two_serving_stacks_share_one_store(tmp_path: Path):
    tag = secrets.token_hex(3)
    platform = Stack(ROOT, f"plat-{tag}")
    platform.init()
    volume = f"rvllm-plat-{tag}-data"
    access, secret_key = f"plat-access-{secrets.token_hex(6)}", secrets.token_urlsafe(18)
    a = serving_stack(f"tenant-a-{tag}", serving_config(f"tenant-a-{tag}", f"organization/rustfs-vllm/plat-{tag}",
                                                        "team-a", "test", tmp_path))
    stacks: list[Stack] = [a]
    tenants = {fqn(a): ["team-a"], f"organization/rustfs-vllm/tenant-b-{tag}": ["team-b"],
               f"organization/rustfs-vllm/tenant-c-{tag}": ["team-c"]}
    platform.write_config({"role": "store", "environment": "test", **s3_under_test.stack_settings(),
                           "rustfsPort": str(free_port()), "bindAddress": "127.0.0.1", "bucket": BUCKET,
                           "mountPath": f"/mnt/rvllm-plat-{tag}", "tenants": tenants})
    platform.set("rustfsAccessKey", access, secret=True)
    platform.set("rustfsSecretKey", secret_key, secret=True)
    ref = fqn(platform)
    try:
        # 1. the platform: RustFS, the bucket and its tenants' users; no key among its outputs
        platform.run("up", "--yes", "--skip-preview", label="platform_up")
        out = platform.outputs()
        assert out["role"] == "store" and out["store_bucket"] == BUCKET and "models" not in out
        assert out["store_tenants"] == {k: v for k, v in tenants.items()} and "store_admin" not in out
        shown = platform.run("stack", "output", "--json", "--show-secrets").stdout
        assert secret_key not in shown and access not in shown
        c = s3.client(out["store_endpoint"], access, secret_key)

        # 2. two serving stacks, two environments, each given its keys by the platform's operator
        b = serving_stack(f"tenant-b-{tag}", serving_config(f"tenant-b-{tag}", ref, "team-b", "production", tmp_path),
                          api_key=f"api-{secrets.token_urlsafe(12)}")
        stacks.append(b)
        keys = {}
        for s in (a, b):
            given = tenant_key(platform, fqn(s))
            assert given.returncode == 0 and f"{fqn(s)} now holds its own keys" in given.stdout, given.stderr
            keys[s.name] = json.loads(s.run("config", "get", "storeKey").stdout)
            assert keys[s.name]["secret_key"] not in given.stdout + given.stderr
            s.run("up", "--yes", "--skip-preview", label="serving_up", timeout=1800)
            o = s.outputs()
            assert o["read_keys"].startswith("scoped:") and f"made by the store {ref}" in o["read_keys"], o
            assert o["bucket"] == BUCKET and o["smoke_completions"]["smollm2"].strip()
        assert owners.registered(c, BUCKET) == sorted(fqn(s) for s in (a, b))
        assert owners.owner(c, BUCKET, "team-a") == fqn(a) and owners.owner(c, BUCKET, "team-b") == fqn(b)
        assert secret_key not in process_command_lines()          # no key on a command line
        assert not [k for k in keys.values() if k["secret_key"] in process_command_lines()]
        for s, other in ((a, b), (b, a)):                         # no root key, no other tenant's, in any state
            state = s.run("stack", "export", "--show-secrets").stdout
            assert secret_key not in state and access not in state, f"the root keys are in {s.name}'s state"
            assert keys[other.name]["secret_key"] not in state and keys[other.name]["read_secret_key"] not in state
        # the store enforces the prefixes: a's key under b's prefix, b's records
        ka = s3.client(out["store_endpoint"], keys[a.name]["access_key"], keys[a.name]["secret_key"])
        attempts = {
            "PUT team-b/": lambda: ka.put_object(Bucket=BUCKET, Key="team-b/model.safetensors", Body=b"overwritten"),
            "DELETE team-b/": lambda: ka.delete_object(Bucket=BUCKET, Key="team-b/config.json"),
            "GET team-b/": lambda: ka.get_object(Bucket=BUCKET, Key="team-b/config.json"),
            "LIST team-b/": lambda: ka.list_objects_v2(Bucket=BUCKET, Prefix="team-b/"),
            "LIST bucket": lambda: ka.list_objects_v2(Bucket=BUCKET),
            "PUT b's owner record": lambda: ka.put_object(Bucket=BUCKET, Key=owners.owner_key("team-b"), Body=b"{}"),
            "DELETE b's registration": lambda: ka.delete_object(Bucket=BUCKET, Key=owners.stack_key(fqn(b))),
            "CreateBucket": lambda: ka.create_bucket(Bucket=f"rvllm-{tag}-new"),
            # issue 57: nor the key names of another tenant's unfinished uploads
            "LIST team-b/ unfinished uploads": lambda: ka.list_multipart_uploads(Bucket=BUCKET, Prefix="team-b/"),
            "LIST every unfinished upload": lambda: ka.list_multipart_uploads(Bucket=BUCKET),
        }
        answers = {what: refused(fn) for what, fn in attempts.items()}
        assert all(code == "AccessDenied" for code in answers.values()), answers
        results: dict = {"refused_to_tenant_a": answers}
        before = {o["Key"]: o["ETag"] for o in c.list_objects_v2(Bucket=BUCKET, Prefix="team-b/")["Contents"]}
        ka.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in before]})
        assert {o["Key"]: o["ETag"] for o in c.list_objects_v2(Bucket=BUCKET, Prefix="team-b/")["Contents"]} == before
        assert refused(lambda: ka.put_object(Bucket=BUCKET, Key="team-a/probe.txt", Body=b"own")) == ""
        ka.delete_object(Bucket=BUCKET, Key="team-a/probe.txt")
        assert refused(lambda: ka.list_multipart_uploads(Bucket=BUCKET, Prefix="team-a/")) == ""

        # 2b. issue 57: a's key rotated on the platform (`pulumi up --replace` of its TenantKey) while a client
        #     polls a's model through a's endpoint; scripts/tenant-key hands a the new key, a's `up` takes it:
        #     0 failed, the old key refused, the new one works, and a's next preview changes nothing
        results["tenant_key_rotation"] = rotate_tenant_key(platform, a, keys[a.name], out["store_endpoint"])

        # 3. a stack the store does not list, and a listed one naming another's prefix: refused at preview
        stranger = serving_stack(f"tenant-d-{tag}", serving_config(f"tenant-d-{tag}", ref, "team-d", "test", tmp_path))
        stacks.append(stranger)
        said = stranger.run("preview", check=False)
        text = said.stdout + said.stderr
        assert said.returncode != 0 and f"that store has no tenant {fqn(stranger)}" in text \
            and f"scripts/tenant-key {ref} {fqn(stranger)}" in text, text[-3000:]
        results["stranger_preview"] = next(ln.strip() for ln in text.splitlines() if "that store has no tenant" in ln)
        clash = serving_stack(f"tenant-c-{tag}", serving_config(f"tenant-c-{tag}", ref, "team-a", "test", tmp_path))
        stacks.append(clash)
        assert tenant_key(platform, fqn(clash)).returncode == 0
        said = clash.run("preview", check=False)
        text = said.stdout + said.stderr
        assert said.returncode != 0 and "rustfs-vllm:models[smollm2].prefix = 'team-a' is invalid: one of the prefixes " \
            f"the store {ref} gives this stack (team-c)" in text, text[-3000:]
        assert "Traceback" not in text

        # 4. the platform will not go while they are on it, nor take a registered tenant's keys
        blocked = platform.run("destroy", "--yes", "--skip-preview", check=False)
        said_ = blocked.stdout + blocked.stderr
        assert blocked.returncode != 0 and f"still serves 2 stack(s): {fqn(a)}, {fqn(b)}" in said_, said_[-3000:]
        platform.set("tenants", json.dumps({fqn(a): ["team-a"], fqn(clash): ["team-c"]}))
        blocked = platform.run("up", "--yes", "--skip-preview", check=False)
        said_ = blocked.stdout + blocked.stderr
        assert blocked.returncode != 0 and f"tenant {fqn(b)} still uses this store" in said_, said_[-3000:]
        results["registered_tenant_removal"] = next(ln.strip() for ln in said_.splitlines()
                                                    if f"tenant {fqn(b)} still uses this store" in ln)
        assert b.outputs()["smoke_completions"]["smollm2"].strip()

        # 5. b goes with its data while a client polls a: a never fails; then the platform takes b's keys
        poll = Poller(a.outputs()["models"]["smollm2"]["base_url"], "smollm2").start()
        b.set("purgeOnDestroy", "true")
        b.run("destroy", "--yes", "--skip-preview", label="serving_destroy_purge", timeout=900)
        time.sleep(3)
        polled = poll.stop().summary()
        assert polled["failed"] == 0 and polled["requests"] > 3, polled
        listed = [o["Key"] for o in c.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
        assert not [k for k in listed if k.startswith("team-b/")] and owners.owner(c, BUCKET, "team-b") is None, listed
        assert any(k == "team-a/model.safetensors" for k in listed), listed
        assert owners.registered(c, BUCKET) == [fqn(a)]
        platform.run("up", "--yes", "--skip-preview", label="platform_tenant_removed")
        assert fqn(b) not in platform.outputs()["store_tenants"]
        gone = s3.client(out["store_endpoint"], keys[b.name]["access_key"], keys[b.name]["secret_key"])
        assert refused(lambda: gone.list_objects_v2(Bucket=BUCKET, Prefix="team-b/")) in ("InvalidAccessKeyId", "AccessDenied")

        # 6. a goes without purge (its objects and owner stay); then the platform goes, its volume kept
        a.run("destroy", "--yes", "--skip-preview", label="serving_destroy", timeout=900)
        assert owners.owner(c, BUCKET, "team-a") == fqn(a)
        platform.run("destroy", "--yes", "--skip-preview", label="platform_destroy")
        left = s3_under_test.volume_objects(volume)
        assert f"{BUCKET}/team-a/model.safetensors" in left, sorted(left)[:10]
        results.update(multi_delete_kept=len(before), timings={**platform.timings, **a.timings, **b.timings})
        (ROOT / ".state" / f"platform-tenants-{s3_under_test.KIND}.json").write_text(json.dumps(results, indent=1))
    finally:
        for s in stacks:
            s.teardown(f"rvllm-{s.name}-data")
        platform.teardown(volume)
