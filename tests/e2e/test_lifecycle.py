"""End to end, on a local backend with the real engine, the real Docker engine, the S3 server of
tests/s3_under_test.py (real RustFS, local build, under `make test-rustfs`; else the rclone serve s3
stand-in, NOT RustFS), rclone over FUSE and a real vLLM serving SmolLM2-135M-Instruct. Every step
checks the machine itself (containers, /proc/mounts, objects in the server's volume), not
Pulumi's idea of it."""
from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import time
from pathlib import Path

import botocore.exceptions
import docker
import pytest
from openai import OpenAI

from components.storage import s3
from tests import s3_under_test
from tests.helpers import ROOT, free_port, free_ports
from tests.pulumi_cli import Stack
from tests.s3_under_test import volume_objects

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
SERVED = "smollm2"
PREFIX = "SmolLM2-135M-Instruct"
BUCKET = "e2e-models"
PROMPT = "RustFS is"
RESULTS = ROOT / ".state" / f"e2e-timings-{s3_under_test.KIND}.json"

pytestmark = pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                                reason="scripts/build-smollm2-model has not run (scripts/test runs it)")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def mounts_at(path: str) -> list[list[str]]:
    with open("/proc/mounts") as fh:
        return [line.split() for line in fh if line.split()[1] == path]


def complete(base_url: str, model: str) -> str:
    client = OpenAI(base_url=base_url, api_key="EMPTY", timeout=120)
    return client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0).choices[0].text


def wait_models(base_url: str, model: str, container, timeout: int = 600) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=5) as r:
                if model in r.read().decode():
                    return
        except OSError:
            pass
        container.reload()
        assert container.status == "running", container.logs(tail=30).decode()
        time.sleep(1)
    raise AssertionError("reference vLLM never got ready")


def last_transfer(stack: Stack) -> dict:
    [outs] = stack.resource_outputs("rustfs-vllm:ModelUpload")
    return outs["last_transfer"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    model = tmp / PREFIX
    shutil.copytree(MODEL, model, ignore=shutil.ignore_patterns(".complete"))
    tag = secrets.token_hex(3)
    stack = Stack(ROOT, f"e2e-{tag}")
    stack.init()
    s3_port, vllm_port = free_port(), free_port()
    prefix = f"rvllm-e2e-{tag}"
    access, secret = f"e2e-access-{secrets.token_hex(6)}", secrets.token_urlsafe(18)
    for key, value in {
        "environment": "test", "namePrefix": prefix, **s3_under_test.stack_settings(),
        "rustfsPort": str(s3_port), "bindAddress": "127.0.0.1", "bucket": BUCKET,
        "mountPath": f"/mnt/{prefix}", "mountCacheDir": str(tmp / "rclone-cache"), "vllmImage": VLLM_IMAGE,
        "vllmReadyTimeout": "600", "smokeMaxTokens": "12",
        # the stack's one endpoint on ports of its own: a stack of the default name deployed on this machine
        # (scripts/up) holds 8080-8082 (issue 57: the README's two commands pass in either order)
        "routerPort": str(free_ports(3)),
    }.items():
        stack.set(key, value)
    stack.set("rustfsAccessKey", access, secret=True)
    stack.set("rustfsSecretKey", secret, secret=True)
    models = [{"name": SERVED, "source": str(model), "prefix": PREFIX, "port": vllm_port, "dtype": "float32",
               "maxModelLen": 512, "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"],
               "loadFormat": "mount"}]   # the guide's read path: this test checks the mounts
    cfg_file = ROOT / f"Pulumi.{stack.name}.yaml"
    import yaml

    data = yaml.safe_load(cfg_file.read_text())
    data["config"]["rustfs-vllm:models"] = models
    cfg_file.write_text(yaml.safe_dump(data, sort_keys=False))
    ctx = {"stack": stack, "model": model, "prefix": prefix, "s3_port": s3_port, "vllm_port": vllm_port,
           "access": access, "secret": secret, "tmp": tmp, "mount": f"/mnt/{prefix}",
           "volume": f"{prefix}-data", "base_url": f"http://127.0.0.1:{vllm_port}/v1"}
    yield ctx
    stack.teardown(ctx["volume"])
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(stack.timings, indent=2))
    print("e2e timings:", json.dumps(stack.timings))


def test_lifecycle(env):
    stack: Stack = env["stack"]
    client = docker.from_env()
    ours = {"label": f"rustfs-vllm.stack={stack.name}"}
    model: Path = env["model"]

    # 1. preview of an empty stack lists every resource and creates nothing
    out = stack.run("preview", "--json", label="preview_empty").stdout
    steps = json.loads(out)["steps"]
    created = sorted(s["urn"].split("::")[-1] for s in steps if s["op"] == "create")
    assert {"s3-container", "bucket-bucket", f"model-{PREFIX}-objects", "mount-root-command", f"mount-{PREFIX}-command",
            f"vllm-{PREFIX}-container", f"smoke-{PREFIX}-completion"} <= set(created)
    assert client.containers.list(all=True, filters=ours) == []
    assert mounts_at(env["mount"]) == []
    with pytest.raises(docker.errors.NotFound):
        client.volumes.get(env["volume"])

    # 2. up, then the same answer as the same image serving the local copy directly
    stack.run("up", "--yes", "--skip-preview", label="up_cold")
    outputs = stack.outputs()
    assert outputs["s3_server"] == s3_under_test.expected_s3_server_output()
    served = complete(env["base_url"], SERVED)
    assert outputs["smoke_completions"][SERVED] == served
    ref_port = free_port()
    ref = client.containers.run(VLLM_IMAGE, ["--model", f"/models/{PREFIX}", "--served-model-name", SERVED,
                                             "--dtype", "float32", "--max-model-len", "512", "--enforce-eager"],
                                name=f"{env['prefix']}-reference", detach=True, shm_size="2g",
                                environment={"VLLM_CPU_KVCACHE_SPACE": "1"},
                                ports={"8000/tcp": ("127.0.0.1", ref_port)},
                                volumes={str(model): {"bind": f"/models/{PREFIX}", "mode": "ro"}})
    try:
        wait_models(f"http://127.0.0.1:{ref_port}/v1", SERVED, ref)
        assert complete(f"http://127.0.0.1:{ref_port}/v1", SERVED) == served
    finally:
        ref.remove(force=True)
    [vllm] = client.containers.list(filters={"label": [f"rustfs-vllm.stack={stack.name}", "rustfs-vllm.role=vllm"]})
    inside = vllm.exec_run(["sha256sum", f"/models/{PREFIX}/model.safetensors"]).output.decode().split()[0]
    assert inside == sha256(model / "model.safetensors")

    # 3. the machine: the model's read-only FUSE mount under the shared root, the rslave bind of the
    #    root and the argv, every object equal to its source
    [mnt] = mounts_at(f"{env['mount']}/{PREFIX}")
    assert mnt[2] == "fuse.rclone" and "ro" in mnt[3].split(",")
    vllm.reload()
    [bind] = [m for m in vllm.attrs["Mounts"] if m["Destination"] == "/models"]
    assert bind["Source"] == env["mount"] and bind["RW"] is False and bind["Propagation"] == "rslave"
    # the guide's argv, vLLM's drain (vllmDrainSeconds: a stopped server finishes what it serves), the model's own
    assert vllm.attrs["Config"]["Cmd"] == ["--model", f"/models/{PREFIX}", "--served-model-name", SERVED, "--dtype",
                                         "float32", "--max-model-len", "512", "--shutdown-timeout", "60",
                                         "--enforce-eager"]
    assert vllm.attrs["Config"]["StopTimeout"] == 90
    c = s3.client(f"http://127.0.0.1:{env['s3_port']}", env["access"], env["secret"])
    for f in sorted(p for p in model.iterdir() if p.is_file()):
        body = c.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{f.name}")["Body"].read()
        assert len(body) == f.stat().st_size and hashlib.sha256(body).hexdigest() == sha256(f), f.name

    # 3b. the server got the configured keys: they work (above), RustFS's default pair is refused,
    #     and no key is in the server container's inspect data (env, args, labels, mounts)
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        s3.client(f"http://127.0.0.1:{env['s3_port']}", "rustfsadmin", "rustfsadmin").list_buckets()
    assert refused.value.response["Error"]["Code"] in ("InvalidAccessKeyId", "AccessDenied",
                                                       "SignatureDoesNotMatch"), refused.value.response
    [server] = client.containers.list(filters={"label": [f"rustfs-vllm.stack={stack.name}", "rustfs-vllm.role=s3-server"]})
    inspect = json.dumps(client.api.inspect_container(server.id))
    assert env["access"] not in inspect and env["secret"] not in inspect

    # 4. no changes
    stack.run("preview", "--expect-no-changes", label="preview_noop")

    # 5. one small file changes: only the upload (and what follows it) changes; one object is sent
    before = volume_objects(env["volume"])
    gen = json.loads((model / "generation_config.json").read_text())
    gen["e2e_marker"] = stack.name
    (model / "generation_config.json").write_text(json.dumps(gen))
    preview = json.loads(stack.run("preview", "--json", label="preview_change").stdout)
    changed = {s["urn"].split("::")[-1]: s["op"] for s in preview["steps"] if s["op"] not in ("same", "read")}
    assert changed[f"model-{PREFIX}-objects"] == "update"
    # (new weights get a new, empty compile cache: vllmCompileCache names it by the revision)
    assert set(changed) <= {f"model-{PREFIX}-objects", f"mount-{PREFIX}-command", f"vllm-{PREFIX}-container",
                            f"vllm-{PREFIX}-ready-wait", f"smoke-{PREFIX}-completion",
                            f"vllm-{PREFIX}-compile-cache"}, changed
    stack.run("up", "--yes", "--skip-preview", label="up_one_file")
    after = volume_objects(env["volume"])
    rewritten = sorted(k for k in after if after[k] != before.get(k))
    assert rewritten == [f"{BUCKET}/{PREFIX}/generation_config.json"]
    assert last_transfer(stack)["bytes"] == (model / "generation_config.json").stat().st_size
    assert complete(env["base_url"], SERVED) == served

    # 6. refresh finds no drift
    stack.run("refresh", "--yes", "--expect-no-changes", label="refresh")

    # 7. destroy: containers and mount gone, objects kept; nothing asked for a purge, and no line speaks of one
    said = stack.run("destroy", "--yes", "--skip-preview", label="destroy")
    said = said.stdout + said.stderr
    assert "purgeOnDestroy is" not in said and "Traceback" not in said, said[-3000:]
    assert client.containers.list(all=True, filters=ours) == []
    assert mounts_at(env["mount"]) == [] and mounts_at(f"{env['mount']}/{PREFIX}") == []
    kept = volume_objects(env["volume"])
    models = lambda objects: {k: v for k, v in objects.items() if "/.rustfs-vllm/" not in k}  # noqa: E731
    assert models(kept) == models(after)         # every model object kept, untouched
    # the prefix's owner record stays with the data; the bucket's record (issue 57) goes with the stack
    assert f"{BUCKET}/.rustfs-vllm/owners/{PREFIX}.json" in kept and f"{BUCKET}/.rustfs-vllm/bucket.json" not in kept

    # 8. up again: serving again, nothing uploaded (the program's records name the new instances: issue 57)
    stack.run("up", "--yes", "--skip-preview", label="up_again")
    assert last_transfer(stack)["bytes"] == 0
    again = volume_objects(env["volume"])
    assert models(again) == models(kept)
    assert complete(env["base_url"], SERVED) == served

    # 9. destroy with purge: the model's prefix goes, a foreign object stays
    c = s3.client(f"http://127.0.0.1:{env['s3_port']}", env["access"], env["secret"])
    c.put_object(Bucket=BUCKET, Key="foreign/keep.txt", Body=b"not managed by the stack")
    stack.set("purgeOnDestroy", "true")
    stack.run("up", "--yes", "--skip-preview", label="up_purge_flag")
    purged = stack.run("destroy", "--yes", "--skip-preview", label="destroy_purge")
    left = volume_objects(env["volume"])
    assert sorted(left) == [f"{BUCKET}/foreign/keep.txt"]
    # and the host's rclone VFS cache with it, said in one line (until 2026-12-07 a stack of
    # tests/reliability/test_tls_and_cleanup.py stood up again to show it: cut for CI's 90 minutes)
    said = purged.stdout + purged.stderr
    cache = env["tmp"] / "rclone-cache"
    assert [ln for ln in said.splitlines() if "removed the rclone VFS cache at" in ln and str(cache) in ln], said[-3000:]
    assert not cache.exists(), sorted(str(p) for p in cache.rglob("*"))[:5]
