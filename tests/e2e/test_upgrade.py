"""An upgrade as users make it: a stack deployed with an earlier main, then the current code in the
same folder. The new code's preview shows exactly what its new defaults need and says why (issue 36:
a model that names no loadFormat is read through the mount again: from the mains whose default was the
copy, its copy gives way to its mount, its container replaced once); `up` converges, a second preview
shows no changes, and destroy with the new code tears everything down. Real engine, real containers,
our vLLM image serving SmolLM2."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import urllib.request
from pathlib import Path

import docker
import pytest

from components.mounting import keeper_tool
from tests import s3_under_test
from tests.helpers import ROOT, free_port
from tests.pulumi_cli import Stack

PREFIX = "smollm2"
# what follows a replaced container: the readiness wait and the smoke test after it
FOLLOWERS = {f"vllm-{PREFIX}-container", f"vllm-{PREFIX}-ready-wait", f"smoke-{PREFIX}-completion"}
# issue 31, on real RustFS only (readKeys scoped is its default; the stand-in has no users): the stack's read key
# is made and handed to the model's mount or copy, an update of that command (the mount is remounted)
SCOPED = s3_under_test.KIND == "rustfs"


# issue 37: each host gets the order destroy reads purgeOnDestroy with (a record, nothing on the host yet);
# the bucket and the objects record the S3 server's container (a new one is checked again: they send nothing);
# a mount's keeper moves to rcloneImage (its image pulled, the mount remounted: an update of its command)
HARDENING = {("create", "purge-order"), ("update", "bucket-bucket"), ("update", f"model-{PREFIX}-objects")}
# issue 38: the root component records the stack's policy facts (its inputs, for policy/), and each upload its
# owner (the stack that owns its prefix: a record written, nothing uploaded)
POLICY_FACTS = {("update", "rustfs-vllm"), ("update", f"model-{PREFIX}-objects")}
# issue 57: the bucket records the stack that made it (its owner: a record written in the bucket, nothing else)
ISSUE_57 = {("update", "bucket-bucket")}
# issue 44: the stack's one endpoint, made beside what is there (the router's image, its two containers, its routes)
ROUTER = {("create", n) for n in ("router", "router-image", "router-container", "router-endpoint", "router-routes")}


def store_weight(stack: Stack) -> set[tuple[str, str]]:
    """Issue 46: the stack's own S3 server container at the fetch's CPU weight (keeper_tool.FETCH_CPU_SHARES),
    an update in place (test_a_stack_made_before_the_core_previews_and_ups_with_only_the_hardening checks that
    it neither replaces nor restarts the server, and that the keeper it makes has the weight too)."""
    own = any(r["urn"].endswith("::s3-container") for r in stack.state()["deployment"].get("resources", []))
    return {("update", "s3-container")} if own else set()


def endpoint_outputs(after: dict) -> dict:
    """The outputs less the one endpoint's (issue 44), the serving state's (issue 45), the stored models' (issue 57)
    and the servers' slots (issue 58), which must be there."""
    assert after.pop("endpoint").endswith("/v1") and after.pop("endpoint_models") == ["smollm2"]
    after.pop("endpoint_metrics"), after.pop("endpoint_curl")
    assert after.pop("model_states") == {"smollm2": {"local": "serving"}}
    assert after.pop("stored_models") == {PREFIX: f"s3://{after['bucket']}/{PREFIX}/"}     # issue 57
    assert after.pop("serving_slots") == "[secret]"       # issue 58: where each server is and what it is made of
    return after


def root_paths(load_format: str) -> set[tuple[str, str]]:
    """Issue 45: rclone's log moves to root's /var/log/rustfs-vllm, and a keeper runs its image by digest: an
    update of the model's mount (remounted) or copy command (its log only)."""
    return {("update", f"{'copy' if load_format == 'local_copy' else 'mount'}-{PREFIX}-command")}


def keeper_changes(load_format: str) -> set[tuple[str, str]]:
    return {("create", "rclone-image"), ("update", f"mount-{PREFIX}-command")} if load_format == "mount" else set()


# issue 37: CPU containers default to VLLM_CPU_OMP_THREADS_BIND=nobind: each is replaced once, with its followers
NOBIND = {("replace", f"vllm-{PREFIX}-container"), ("update", f"vllm-{PREFIX}-ready-wait"),
          ("replace", f"vllm-{PREFIX}-ready-wait"), ("update", f"smoke-{PREFIX}-completion"),
          ("replace", f"smoke-{PREFIX}-completion"), ("create-replacement", f"vllm-{PREFIX}-container")}


def read_key_changes(holder: str) -> set[tuple[str, str]]:
    return {("create", "read-key"), ("create", "read-grant"), ("update", holder)} if SCOPED else set()
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"

pytestmark = pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                                reason="scripts/build-smollm2-model makes the model")


def checkout(rev: str | None, into: Path) -> None:
    """The project's files at ``rev`` (None: this checkout's, uncommitted changes too) into ``into``,
    replacing the tracked files there; ignored files (.state, the stack's config) stay."""
    if rev is None:
        names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                               capture_output=True).stdout.decode().split("\0")
        for old in subprocess.run(["git", "ls-files", "-z"], cwd=into, capture_output=True).stdout.decode().split("\0"):
            if old and (into / old).is_file():
                (into / old).unlink()
        for name in filter(None, names):
            if (ROOT / name).is_file():
                (into / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, into / name)
        return
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=into, check=True)
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x"], cwd=into, input=archive, check=True)
    subprocess.run(["git", "add", "-A"], cwd=into, check=True)   # so `checkout(None)` knows the old files
    (into / ".venv").symlink_to(ROOT / ".venv")


def new_code(stack: Stack, app: Path) -> None:
    """This checkout's files in ``app``, and the stack's one endpoint (issue 44) on ports of its own."""
    from tests.helpers import free_ports

    checkout(None, app)
    stack.set("routerPort", str(free_ports(3)))


def changes(stack: Stack) -> list[tuple[str, str]]:
    steps = json.loads(stack.run("preview", "--json").stdout).get("steps", [])
    return [(s["op"], s["urn"].split("::")[-1]) for s in steps if s["op"] not in ("same", "read")]


def upload_outputs(stack: Stack) -> dict:
    return next(r["outputs"] for r in stack.state()["deployment"]["resources"]
                if r["urn"].endswith(f"::model-{PREFIX}-objects"))


def deployed_by(rev: str, tmp_path: Path, **model: object) -> tuple[Stack, Path, str, int]:
    """A stack configured (not yet deployed) in ``tmp_path/app`` with the project's files at ``rev``:
    (stack, app folder, namePrefix, the model's port)."""
    try:
        subprocess.run(["git", "cat-file", "-e", f"{rev}^{{commit}}"], cwd=ROOT, check=True)
    except subprocess.CalledProcessError:
        pytest.skip(f"this checkout's history lacks {rev}")
    app = tmp_path / "app"
    checkout(rev, app)
    src = tmp_path / "model"
    shutil.copytree(MODEL, src, ignore=shutil.ignore_patterns(".complete"))
    stack = Stack(app, f"upg-{secrets.token_hex(3)}")
    # an old main names `main: __main__.py`: its package from app/; and the folder's own .venv first on PATH,
    # as for a user whose checkout has its virtualenv (the new Pulumi.yaml names it: the same rclone path)
    stack.env.update(PYTHONPATH=str(app), PATH=f"{app / '.venv' / 'bin'}{os.pathsep}{stack.env['PATH']}")
    stack.init()
    prefix, port = f"rvllm-{stack.name}", free_port()
    stack.write_config({
        "environment": "test", "namePrefix": prefix, **s3_under_test.stack_settings(),
        "rustfsPort": str(free_port()), "bindAddress": "127.0.0.1", "bucket": "upg-models",
        "mountPath": f"/mnt/{prefix}", "mountCacheDir": str(tmp_path / "rclone-cache"), "vllmImage": VLLM_IMAGE,
        "vllmReadyTimeout": 600,
        "models": [{"name": "smollm2", "source": str(src), "prefix": PREFIX, "port": port,
                    "maxModelLen": 512, "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"], **model}]},
        router_port=False)      # a key the earlier mains do not know: new_code() sets it
    stack.set("rustfsAccessKey", f"upg-access-{secrets.token_hex(6)}", secret=True)
    stack.set("rustfsSecretKey", secrets.token_urlsafe(18), secret=True)
    return stack, app, prefix, port


# the last main whose default read path was the copy on the host's disk (issue 28 to issue 37)
COPY_DEFAULT_FROM = "4417b53"
# the move back to the mount (issue 36), and nothing else: the copy's resources go, the mount's and the
# keeper's image come, the container is replaced (with the readiness wait and smoke test after it)
BACK_TO_THE_MOUNT = {("delete", f"copy-{PREFIX}"), ("delete", f"copy-{PREFIX}-command"),
                     ("create", f"mount-{PREFIX}"), ("create", f"mount-{PREFIX}-command"), ("create", "rclone-image")}


def test_a_stack_made_with_the_copy_as_default_moves_back_to_the_mount(tmp_path):
    stack, app, prefix, port = deployed_by(COPY_DEFAULT_FROM, tmp_path)
    try:
        stack.run("up", "--yes", "--skip-preview", label="up_old")
        before = stack.outputs()
        assert before["models"]["smollm2"]["load_format"] == "local_copy"
        copy = Path(before["models"]["smollm2"]["weights_dir"])
        new_code(stack, app)
        preview = stack.run("preview", label="preview_new").stdout
        assert "models[smollm2] on local: loadFormat defaults to mount again" in preview, preview[-3000:]
        assert "set the model's loadFormat: local_copy" in preview
        changed, weight = set(changes(stack)), store_weight(stack)
        assert BACK_TO_THE_MOUNT | POLICY_FACTS | ROUTER | weight | ISSUE_57 <= changed, changed
        rest = changed - BACK_TO_THE_MOUNT - POLICY_FACTS - ROUTER - weight - ISSUE_57
        assert {name for _, name in rest} <= FOLLOWERS, rest
        assert ("replace", f"vllm-{PREFIX}-container") in rest or ("create-replacement", f"vllm-{PREFIX}-container") in rest
        stack.run("up", "--yes", "--skip-preview", label="up_new")
        assert changes(stack) == []
        after = endpoint_outputs(stack.outputs())
        assert {n: m.pop("load_format") for n, m in after["models"].items()} == {"smollm2": "mount"}
        assert "weights_dir" not in after["models"]["smollm2"]
        before["models"]["smollm2"].pop("load_format"), before["models"]["smollm2"].pop("weights_dir")
        after.pop("smoke_completions", None), before.pop("smoke_completions", None)
        assert after == before
        assert f" /mnt/{prefix}/{PREFIX} " in Path("/proc/mounts").read_text()    # served through the mount
        assert copy.is_dir(), "the copy stays on the host's disk (purgeOnDestroy is off): nothing lost"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
            assert "smollm2" in r.read().decode()
        logs = docker.from_env().containers.get(f"{prefix}-vllm-{PREFIX}").logs().decode(errors="replace")
        assert f"rustfs-vllm: warm-up of /models/{PREFIX}" in logs, logs[-2000:]
        stack.run("destroy", "--yes", "--skip-preview", label="destroy_new")
        assert docker.from_env().containers.list(all=True, filters={"label": f"rustfs-vllm.stack={stack.name}"}) == []
        assert f" /mnt/{prefix}" not in Path("/proc/mounts").read_text()
    finally:
        stack.teardown(f"{prefix}-data")


# main before issue 30 (the target-neutral core, the Docker target's resources in components/docker):
# a refactor, so a stack it deployed previews with no change but what later issues add (the read key of
# issue 31, issue 37's hardening), with either read path
BEFORE_CORE = "4412807"


def test_a_stack_made_before_the_core_previews_and_ups_with_only_the_hardening(tmp_path):
    """The oldest main users may still run (the mount its read path, as the default is again): every change
    the later issues add is planned and nothing else, the container replaced once (nobind); the S3 server's
    weight changes in place (issue 46: the same container, not restarted) and the new keeper has it. (A stack
    made from the copy's years is test_a_stack_made_with_the_copy_as_default_moves_back_to_the_mount's; a
    stack of main fd9419c, before issue 28, and this main's local_copy variant were cut on 2026-12-07 for CI's
    90 minutes: the same upgrade path, 318 s.)"""
    load_format = "mount"
    stack, app, prefix, port = deployed_by(BEFORE_CORE, tmp_path, loadFormat=load_format)
    try:
        stack.run("up", "--yes", "--skip-preview", label="up_old")
        before = stack.outputs()
        engine = docker.from_env()
        store = engine.containers.get(f"{prefix}-s3")
        assert store.attrs["HostConfig"]["CpuShares"] in (0, 1024)         # Docker's default before issue 46
        new_code(stack, app)
        assert (app / "components" / "core" / "plan.py").exists(), "the new code is in place"
        holder = f"{'copy' if load_format == 'local_copy' else 'mount'}-{PREFIX}-command"
        changed = set(changes(stack))
        expected = read_key_changes(holder) | HARDENING | keeper_changes(load_format) | POLICY_FACTS | ROUTER | \
            root_paths(load_format) | store_weight(stack) | ISSUE_57
        # else every resource the same; the CPU container's replacement (nobind) and what follows it
        assert expected <= changed and changed - expected <= NOBIND, changed
        assert ("replace", f"vllm-{PREFIX}-container") in changed or \
            ("create-replacement", f"vllm-{PREFIX}-container") in changed, changed
        preview = stack.run("preview").stdout
        assert "VLLM_CPU_OMP_THREADS_BIND=nobind (the default on CPU" in preview, preview[-3000:]
        if SCOPED:
            assert "readKeys now defaults to scoped" in preview
        stack.run("up", "--yes", "--skip-preview", label="up_new")
        assert changes(stack) == []
        after = endpoint_outputs(stack.outputs())
        assert after.pop("read_keys").startswith("scoped:" if SCOPED else "shared:")
        assert after == before
        now = engine.containers.get(f"{prefix}-s3")
        assert (now.id, now.attrs["State"]["StartedAt"]) == (store.id, store.attrs["State"]["StartedAt"])
        assert now.attrs["HostConfig"]["CpuShares"] == keeper_tool.FETCH_CPU_SHARES
        keeper = engine.containers.get(f"{prefix}-mount-{PREFIX.lower()}")
        assert keeper.attrs["HostConfig"]["CpuShares"] == keeper_tool.FETCH_CPU_SHARES
        assert f" /mnt/{prefix}/{PREFIX} " in Path("/proc/mounts").read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
            assert "smollm2" in r.read().decode()
        stack.run("destroy", "--yes", "--skip-preview", label="destroy_new")
        assert docker.from_env().containers.list(all=True, filters={"label": f"rustfs-vllm.stack={stack.name}"}) == []
        assert f" /mnt/{prefix}" not in Path("/proc/mounts").read_text()
        assert not Path(f"/mnt/{prefix}").exists()
    finally:
        stack.teardown(f"{prefix}-data")


# main before issue 44 (one endpoint): a model with balancerPort had an nginx entry point of its own
BEFORE_ROUTER = "b2709a3"


def test_a_stack_with_a_balancer_port_moves_to_the_one_endpoint(tmp_path):
    """The balancerPort stack of the last main: the new code's preview says the key is no longer used and
    plans exactly the move (the entry point's resources deleted, the router's created, the policy facts
    recorded, and the model's container replaced once for the warm-up's new text in its entrypoint); `up`
    converges, the old entry port is free, and the one endpoint serves the model to the OpenAI client."""
    import openai

    from tests.helpers import free_ports

    stack, app, prefix, port = deployed_by(BEFORE_ROUTER, tmp_path)
    entry = free_ports(1)
    path = app / f"Pulumi.{stack.name}.yaml"
    import yaml

    data = yaml.safe_load(path.read_text())
    data["config"]["rustfs-vllm:models"][0]["balancerPort"] = entry
    # the old balancer's nginx: the router image has Debian's nginx-light (the nginx image is no longer built)
    data["config"]["rustfs-vllm:balancerImage"] = "rustfs-vllm/vllm-router:0.1.17"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        stack.run("up", "--yes", "--skip-preview", label="up_old")
        with urllib.request.urlopen(f"http://127.0.0.1:{entry}/v1/models", timeout=10) as r:
            assert "smollm2" in r.read().decode()
        vllm_id = docker.from_env().containers.get(f"{prefix}-vllm-{PREFIX}").id
        new_code(stack, app)
        changed = changes(stack)
        moved = {(op, name) for op, name in changed if not name.startswith(("balancer", "router"))}
        # the policy facts name the router's image; the mount's log and keeper image move (issue 45); the
        # warm-up's text in the entrypoint changed since (2026-12-07: it waits for vLLM's disk reads), so the
        # model's container is replaced once, with the readiness wait and smoke test after it
        warm_text = {("replace", f"vllm-{PREFIX}-container"), ("replace", f"vllm-{PREFIX}-ready-wait"),
                     ("update", f"smoke-{PREFIX}-completion")}
        assert moved == {("update", "rustfs-vllm")} | root_paths("mount") | store_weight(stack) | warm_text | ISSUE_57, \
            changed
        assert {name for op, name in changed if op == "delete"} == {
            "balancer", "balancer-image", "balancer-container", f"balancer-{entry}-ready", f"balancer-{entry}-ready-wait"}, changed
        assert {name for op, name in changed if op == "create"} == {
            "router", "router-image", "router-container", "router-endpoint", "router-routes"}, changed
        preview = stack.run("preview").stdout
        assert f"models[smollm2].balancerPort ({entry}) is no longer used" in preview, preview[-3000:]
        stack.run("up", "--yes", "--skip-preview", label="up_new")
        assert changes(stack) == []
        assert docker.from_env().containers.get(f"{prefix}-vllm-{PREFIX}").id != vllm_id     # replaced once
        with pytest.raises(docker.errors.NotFound):
            docker.from_env().containers.get(f"{prefix}-balancer")
        client = openai.OpenAI(base_url=stack.outputs()["endpoint"], api_key="EMPTY")
        assert [m.id for m in client.models.list()] == ["smollm2"]
        assert client.completions.create(model="smollm2", prompt="RustFS is", max_tokens=8).choices[0].text
        stack.run("destroy", "--yes", "--skip-preview", label="destroy_new")
        assert docker.from_env().containers.list(all=True, filters={"label": f"rustfs-vllm.stack={stack.name}"}) == []
    finally:
        stack.teardown(f"{prefix}-data")
