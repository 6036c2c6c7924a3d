"""The simulated serving hosts of tests/hosts/sim-hosts, and a stack that serves from them; shared by
the two-host e2e (tests/hosts) and `make bench`'s one-host/two-host `up` comparison.

Each simulated host has its own sshd (on a loopback address), its own Docker daemon, data root and
mount namespace, rclone and fuse3; the program reaches it only over SSH. Images come from Debian's
docker-registry on 127.0.0.1:5005 (kept between runs, as are the hosts' data roots). The hosts
share this machine's network, so their s3Endpoint is this machine's loopback (a real host would
name the S3 server's address)."""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

import requests
import yaml

from tests import s3_under_test
from tests.helpers import ROOT, free_port, free_ports
from tests.pulumi_cli import Stack

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
LOCAL_IMAGE = "rustfs-vllm/vllm-openai-cpu:0.30.0"
RCLONE_IMAGE = "rustfs-vllm/rclone-mount:1.75.2"       # the mount keepers' (rcloneImage)
ROUTER_IMAGE = "rustfs-vllm/vllm-router:0.1.17"      # on this machine, where the stack's one endpoint runs
REGISTRY = "127.0.0.1:5005"
HOSTS = {"a": "127.0.0.2", "b": "127.0.0.3"}
SSH_PORT = 2222
SIM = ROOT / "tests" / "hosts" / "sim-hosts"
CACHE = Path(os.environ.get("RUSTFS_VLLM_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
             / "rustfs-vllm")
CLIENT_KEY = Path(os.environ.get("SIM_HOSTS_DIR") or CACHE / "sim-hosts") / "client_key"   # as sim-hosts' BASE
MOUNT_ROOT = "/mnt/rv-hosts"


def sim(*args: str, check: bool = True, timeout: int = 1200) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(SIM), *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"sim-hosts {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def start(hosts: dict[str, str] = HOSTS) -> None:
    sim("space", LOCAL_IMAGE, *hosts)       # a full disk fails here, saying so, not in the hosts' pulls
    sim("registry-up", LOCAL_IMAGE, RCLONE_IMAGE)
    sim("up", *[x for h, a in hosts.items() for x in (h, a)])


def stop(hosts: dict[str, str] = HOSTS) -> None:
    sim("down", *hosts, check=False)
    sim("registry-down", check=False)


def on_host(host: str, script: str) -> str:
    return sim("exec", host, "bash", "-c", script).stdout


def rclone_mounts(host: str) -> list[list[str]]:
    """The stacks' fuse.rclone mounts in the host's own mount namespace (under MOUNT_ROOT, their mountPath):
    [mount point, options]. A host's namespace starts as a copy of this machine's, so it also holds the
    mounts that tests beside it had made here when it started (scripts/test runs tests/hosts beside the
    e2e files: an upgrade test's mount showed on host b, started again at step 6, on 2026-12-07); those
    are not the host's."""
    return [line.split()[1:4:2] for line in on_host(host, "cat /proc/mounts").splitlines()
            if line.split()[2] == "fuse.rclone" and line.split()[1].startswith(MOUNT_ROOT + "/")]


def containers(host: str, stack: str) -> dict[str, str]:
    out = on_host(host, f"docker ps -a --filter label=rustfs-vllm.stack={stack} --format '{{{{.Names}}}} {{{{.ID}}}}'")
    return dict(line.split() for line in out.splitlines() if line.strip())


def rm_containers(label: str) -> str:
    """A host's shell line removing its containers labelled ``label`` (``key`` or ``key=value``)."""
    return f"ids=$(docker ps -aq --filter label={label}); [ -z \"$ids\" ] || docker rm -f $ids >/dev/null"


def remove_leftovers(stack: str, prefix: str, hosts: dict[str, str] = HOSTS) -> None:
    """Whatever a failed run left of ``stack`` on the hosts, and its rclone VFS caches: destroy
    keeps those unless purgeOnDestroy is set (the product's choice; the README says so), and each
    run's test stack is new, so kept caches would pile up a copy of the model per run and host."""
    for h in hosts:
        if sim("exec", h, "true", check=False).returncode == 0:
            on_host(h, f"{rm_containers(f'rustfs-vllm.stack={stack}')}; rm -rf /var/cache/rustfs-vllm/{prefix}")


def completions_served(host: str, container: str) -> int:
    """POST /v1/completions requests the container's vLLM answered (its access log)."""
    return int(on_host(host, f"docker logs {container} 2>&1 | grep -c 'POST /v1/completions HTTP/1.1\" 200' || true")
               .strip() or 0)


def url(host: str, port: int) -> str:
    return f"http://{HOSTS[host]}:{port}/v1"


def complete(base_url: str, model: str, timeout: float = 120) -> str:
    r = requests.post(f"{base_url}/completions", json={"model": model, "prompt": "RustFS is", "max_tokens": 8,
                                                       "temperature": 0}, timeout=timeout)
    r.raise_for_status()
    return r.json()["choices"][0]["text"]


def make_stack(tmp: Path, name: str, models: list[dict], hosts: dict[str, str] = HOSTS,
               bucket: str = "hosts-models", kind: str = s3_under_test.KIND) -> dict:
    """A stack serving ``models`` (entries without source/dtype/...: filled in with a copy of
    SmolLM2) from the simulated ``hosts``. Returns the context the tests read."""
    model = tmp / "SmolLM2"
    if not model.exists():
        shutil.copytree(MODEL, model, ignore=shutil.ignore_patterns(".complete"))
    tag = secrets.token_hex(3)
    stack = Stack(ROOT, f"{name}-{tag}")
    stack.init()
    s3_port = free_port()
    prefix = f"rvllm-{name}-{tag}"
    access, secret = f"hosts-access-{secrets.token_hex(6)}", secrets.token_urlsafe(18)
    for key, value in {
        "environment": "test", "namePrefix": prefix, **s3_under_test.stack_settings(kind),
        "rustfsPort": str(s3_port), "bindAddress": "127.0.0.1", "bucket": bucket,
        "mountPath": MOUNT_ROOT, "vllmReadyTimeout": "900", "smokeMaxTokens": "8",
        "vllmImage": f"{REGISTRY}/{LOCAL_IMAGE}", "routerImage": ROUTER_IMAGE,
        # the endpoint spreads requests over the hosts in turn (cache_aware would keep one prompt on one host)
        "routerPolicy": "round_robin", "routerPort": str(free_ports(3)),
        "rcloneImage": f"{REGISTRY}/{RCLONE_IMAGE}",
    }.items():
        stack.set(key, value)
    stack.set("rustfsAccessKey", access, secret=True)
    stack.set("rustfsSecretKey", secret, secret=True)
    stack.set("sshPrivateKey", CLIENT_KEY.read_text(), secret=True)
    cfg_file = ROOT / f"Pulumi.{stack.name}.yaml"
    data = yaml.safe_load(cfg_file.read_text())
    data["config"]["rustfs-vllm:hosts"] = [
        {"name": h, "docker": f"ssh://root@{a}:{SSH_PORT}", "bindAddress": a,
         # the simulated hosts share this machine's network: its loopback is theirs
         "s3Endpoint": f"http://127.0.0.1:{s3_port}"} for h, a in hosts.items()]
    common = {"source": str(model), "dtype": "float32", "maxModelLen": 512, "kvCacheSpaceGib": 1,
              "extraArgs": ["--enforce-eager"], "loadFormat": "mount"}   # the remote hosts' mounts
    data["config"]["rustfs-vllm:models"] = [{**common, **m} for m in models]
    cfg_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return {"stack": stack, "cfg_file": cfg_file, "prefix": prefix, "s3_port": s3_port, "access": access,
            "secret": secret, "volume": f"{prefix}-data"}


def tear_down(ctx: dict, hosts: dict[str, str] = HOSTS) -> None:
    ctx["stack"].teardown(ctx["volume"])
    remove_leftovers(ctx["stack"].name, ctx["prefix"], hosts)


def prewarm(hosts: dict[str, str] = HOSTS) -> None:
    """What the several-hosts test would otherwise wait for on a fresh machine: the vLLM image pushed to
    the loopback registry and pulled by every simulated host (about 4-5 minutes cold: 7.5 GB pushed once,
    unpacked per host; seconds when kept from an earlier run), and any stack's containers a killed run left
    on them removed. scripts/test runs it in its lane B, beside
    the end-to-end suite, so that tests/hosts starts on warm hosts. The hosts are stopped after."""
    start(hosts)
    try:
        for h in hosts:
            # the hosts are the tests' own: any stack's container on them is what a killed run left (their
            # engines start it again with the host), which tests/hosts would otherwise run beside
            on_host(h, rm_containers("rustfs-vllm.stack"))
            for image in (LOCAL_IMAGE, RCLONE_IMAGE):
                on_host(h, f"docker image inspect {REGISTRY}/{image} >/dev/null 2>&1 || "
                           f"docker pull -q {REGISTRY}/{image} >/dev/null")
    finally:
        stop(hosts)


if __name__ == "__main__":
    import sys
    import time

    if sys.argv[1:] != ["prewarm"]:
        sys.exit("usage: python -m tests.hosts.sim prewarm")
    t0 = time.monotonic()
    prewarm()
    print(f"sim-hosts prewarmed: the vLLM image in the registry and on hosts {', '.join(HOSTS)} "
          f"({time.monotonic() - t0:.0f} s)")
