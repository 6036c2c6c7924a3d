"""Several serving hosts from one stack, through the real engine, on two SIMULATED hosts.

scripts/sim-hosts starts two hosts on this machine, each with its own sshd (127.0.0.2:2222 and
127.0.0.3:2222), its own Docker daemon and data root, its own mount namespace (its own /mnt, so
its FUSE mounts are its own), rclone and fuse3. The program reaches them only as it reaches real
hosts: Docker over ssh://, the mounts as remote commands over SSH. The hosts pull the vLLM image
from Debian's docker-registry on 127.0.0.1:5005 (kept between runs, as are the hosts' data roots).
They share this machine's network, so their s3Endpoint is this machine's loopback (a real host
would name the S3 server's address).

One model ("both") on hosts a and b, one ("one") on host a only. Steps, on one stack:
  preview -> up -> completions from every host through its own read-only mount -> no-change up
  -> change "one" (touches only host a's "one") -> kill rclone of "both" on host b while host a
  keeps serving (b's mount comes back by itself) -> destroy: no container or mount on any host,
  every object kept.
"""
from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml

from components.providers import s3
from tests import s3_under_test
from tests.helpers import ROOT, free_port
from tests.pulumi_cli import Stack

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
LOCAL_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
REGISTRY = "127.0.0.1:5005"
HOSTS = {"a": "127.0.0.2", "b": "127.0.0.3"}
SIM = ROOT / "scripts" / "sim-hosts"
BUCKET = "hosts-models"
RESULTS = ROOT / ".state" / f"e2e-hosts-{s3_under_test.KIND}.json"

pytestmark = pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                                reason="scripts/build-smollm2-model has not run (scripts/test runs it)")


def sim(*args: str, check: bool = True, timeout: int = 1200) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(SIM), *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"sim-hosts {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def on_host(host: str, script: str) -> str:
    return sim("exec", host, "bash", "-c", script).stdout


def rclone_mounts(host: str) -> list[list[str]]:
    """fuse.rclone mounts in the host's own mount namespace: [mount point, options]."""
    return [line.split()[1:4:2] for line in on_host(host, "cat /proc/mounts").splitlines()
            if line.split()[2] == "fuse.rclone"]


def containers(host: str, stack: str) -> dict[str, str]:
    out = on_host(host, f"docker ps -a --filter label=rustfs-vllm.stack={stack} --format '{{{{.Names}}}} {{{{.ID}}}}'")
    return dict(line.split() for line in out.splitlines() if line.strip())


def complete(base_url: str, model: str, timeout: float = 120) -> str:
    r = requests.post(f"{base_url}/completions", json={"model": model, "prompt": "RustFS is", "max_tokens": 8,
                                                       "temperature": 0}, timeout=timeout)
    r.raise_for_status()
    return r.json()["choices"][0]["text"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hosts")
    model = tmp / "SmolLM2"
    shutil.copytree(MODEL, model, ignore=shutil.ignore_patterns(".complete"))
    started = time.monotonic()
    sim("registry-up", LOCAL_IMAGE)
    sim("up", *[x for h, a in HOSTS.items() for x in (h, a)])
    timings = {"sim_hosts_up": round(time.monotonic() - started, 1)}
    tag = secrets.token_hex(3)
    stack = Stack(ROOT, f"hosts-{tag}")
    stack.init()
    s3_port = free_port()
    prefix = f"rvllm-hosts-{tag}"
    access, secret = f"hosts-access-{secrets.token_hex(6)}", secrets.token_urlsafe(18)
    for key, value in {
        "environment": "test", "namePrefix": prefix, **s3_under_test.stack_settings(),
        "rustfsPort": str(s3_port), "bindAddress": "127.0.0.1", "bucket": BUCKET,
        "mountPath": "/mnt/rv-hosts", "vllmReadyTimeout": "900", "smokeMaxTokens": "8",
        "vllmImage": f"{REGISTRY}/{LOCAL_IMAGE}",
    }.items():
        stack.set(key, value)
    stack.set("rustfsAccessKey", access, secret=True)
    stack.set("rustfsSecretKey", secret, secret=True)
    stack.set("sshPrivateKey", (ROOT / ".state" / "sim-hosts" / "client_key").read_text(), secret=True)
    cfg_file = ROOT / f"Pulumi.{stack.name}.yaml"
    data = yaml.safe_load(cfg_file.read_text())
    data["config"]["rustfs-vllm:hosts"] = [
        {"name": h, "docker": f"ssh://root@{a}:2222", "bindAddress": a,
         # the simulated hosts share this machine's network: its loopback is theirs
         "s3Endpoint": f"http://127.0.0.1:{s3_port}"} for h, a in HOSTS.items()]
    common = {"source": str(model), "dtype": "float32", "maxModelLen": 512, "kvCacheSpaceGib": 1,
              "extraArgs": ["--enforce-eager"]}
    data["config"]["rustfs-vllm:models"] = [
        {"name": "both", "prefix": "both", "port": 8101, "env": {"VLLM_CPU_OMP_THREADS_BIND": "0"}, **common},
        {"name": "one", "prefix": "one", "port": 8102, "hosts": ["a"], "env": {"VLLM_CPU_OMP_THREADS_BIND": "1"},
         **common}]
    cfg_file.write_text(yaml.safe_dump(data, sort_keys=False))
    ctx = {"stack": stack, "cfg_file": cfg_file, "prefix": prefix, "s3_port": s3_port, "access": access,
           "secret": secret, "timings": timings, "volume": f"{prefix}-data"}
    yield ctx
    stack.teardown(ctx["volume"])
    for h in HOSTS:   # whatever a failed test left on the hosts
        on_host(h, f"ids=$(docker ps -aq --filter label=rustfs-vllm.stack={stack.name}); "
                   "[ -z \"$ids\" ] || docker rm -f $ids >/dev/null")
    sim("down", *HOSTS, check=False)
    sim("registry-down", check=False)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({**stack.timings, **timings}, indent=2))
    print("two-host timings:", json.dumps({**stack.timings, **timings}))


def url(host: str, port: int) -> str:
    return f"http://{HOSTS[host]}:{port}/v1"


def test_two_hosts(env):
    stack: Stack = env["stack"]

    # 1. preview: each host's provider, tools, mounts, image and containers, nothing made yet
    steps = json.loads(stack.run("preview", "--json", label="preview_empty").stdout)["steps"]
    created = {s["urn"].split("::")[-1] for s in steps if s["op"] == "create"}
    assert {"a-docker", "b-docker", "a-host-tools-command", "b-host-tools-command", "a-mount-both-command",
            "b-mount-both-command", "a-mount-one-command", "a-vllm-both-container", "b-vllm-both-container",
            "a-vllm-one-container", "a-smoke-one-completion"} <= created
    assert not any(n.startswith("b-") and "one" in n for n in created), "model one runs on host a only"
    assert all(containers(h, stack.name) == {} for h in HOSTS)

    # 2. up: every host serves its models through its own read-only rclone mount
    stack.run("up", "--yes", "--skip-preview", label="up_two_hosts")
    outputs = stack.outputs()
    assert outputs["models"]["both"]["base_urls"] == [url("a", 8101), url("b", 8101)]
    assert outputs["models"]["one"]["base_urls"] == [url("a", 8102)]
    answers = {(h, m): complete(url(h, p), m) for h, m, p in (("a", "both", 8101), ("b", "both", 8101),
                                                            ("a", "one", 8102))}
    assert all(answers.values()), answers
    assert answers[("a", "both")] == answers[("b", "both")], "same weights, same greedy answer on both hosts"
    assert outputs["smoke_completions"]["both"]["b"]
    for h, models in (("a", {"both", "one"}), ("b", {"both"})):
        mounts = {Path(p).name: opts for p, opts in rclone_mounts(h)}
        assert set(mounts) == models, (h, mounts)
        assert all(o.split(",")[0] == "ro" for o in mounts.values()), mounts
        for name in models:
            cid = containers(h, stack.name)[f"{env['prefix']}-vllm-{name}"]
            binds = json.loads(on_host(h, f"docker inspect -f '{{{{json .Mounts}}}}' {cid}"))
            assert [(b["Source"], b["Destination"], b["RW"]) for b in binds] == [("/mnt/rv-hosts", "/models", False)]
    # the hosts' mounts are theirs: this machine has none of them
    assert "/mnt/rv-hosts" not in Path("/proc/mounts").read_text()
    # no credential on any host's process list or in a file others can read
    for h in HOSTS:
        ps = on_host(h, "ps -eo args")
        assert env["secret"] not in ps and env["access"] not in ps
        assert on_host(h, f"grep -rl -- {env['secret']} /var/lib/rustfs-vllm || true").strip() == ""
    state = json.dumps(stack.state())
    assert env["secret"] not in state and "PRIVATE KEY" not in state

    # 3. a second up changes nothing
    stack.run("preview", "--expect-no-changes", label="preview_no_change")

    # 4. a change of model "one" touches only host a's "one"
    before = {h: containers(h, stack.name) for h in HOSTS}
    data = yaml.safe_load(env["cfg_file"].read_text())
    data["config"]["rustfs-vllm:models"][1]["maxModelLen"] = 384
    env["cfg_file"].write_text(yaml.safe_dump(data, sort_keys=False))
    steps = json.loads(stack.run("preview", "--json").stdout)["steps"]
    changed = {s["urn"].split("::")[-1] for s in steps if s["op"] not in ("same", "read")}
    assert changed and all(n.startswith("a-") and "one" in n for n in changed), changed
    stack.run("up", "--yes", "--skip-preview", label="up_change_one")
    after = {h: containers(h, stack.name) for h in HOSTS}
    both = f"{env['prefix']}-vllm-both"
    assert after["a"][both] == before["a"][both] and after["b"] == before["b"]
    assert after["a"][f"{env['prefix']}-vllm-one"] != before["a"][f"{env['prefix']}-vllm-one"]
    assert complete(url("a", 8102), "one")

    # 5. host b's rclone dies: host a keeps serving, b's supervisor mounts again by itself
    on_host("b", "pkill -9 -f '^rclone mount [^ ]+ /mnt/rv-hosts/both '")
    killed = time.monotonic()
    assert complete(url("a", 8101), "both")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if complete(url("b", 8101), "both", timeout=20):
                break
        except requests.RequestException:
            time.sleep(1)
    else:
        raise AssertionError("host b never served again after its rclone was killed")
    env["timings"]["b_serving_again_s"] = round(time.monotonic() - killed, 1)
    assert complete(url("a", 8101), "both")

    # 6. destroy: no container or mount on any host; every object still in the bucket
    client = s3.client(f"http://127.0.0.1:{env['s3_port']}", env["access"], env["secret"])
    objects = sorted(o["Key"] for o in client.list_objects_v2(Bucket=BUCKET)["Contents"])
    stored = s3_under_test.volume_objects(env["volume"])
    assert len(objects) > 2 and stored
    stack.run("destroy", "--yes", "--skip-preview", label="destroy")
    for h in HOSTS:
        assert containers(h, stack.name) == {}, h
        assert rclone_mounts(h) == [], h
        assert on_host(h, f"ls -A /var/lib/rustfs-vllm/{env['prefix']} 2>/dev/null || true").strip() == ""
    assert s3_under_test.volume_objects(env["volume"]) == stored
