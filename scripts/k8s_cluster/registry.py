"""The image registry: Debian's docker-registry (distribution 2.8) on https://10.232.0.1:5000 ($REG_ADDR) with
TLS (a certificate of the cluster CA): Docker pushes to it (it trusts $DOCKER_CERTS/ca.crt,
/etc/docker/certs.d/10.232.0.1:5000/ca.crt, no daemon restart; Docker allows plain HTTP only to 127.0.0.0/8,
and a registry on loopback is not reachable from the nodes), the nodes' containerd pull from it. Each node's
containerd has that registry as the docker.io mirror (certs.d/docker.io/hosts.toml under the node's folder,
config_path) and discard_unpacked_layers = true, so `image: rustfs-vllm/x:t` resolves to
docker.io/rustfs-vllm/x:t and a kubelet pull (imagePullPolicy IfNotPresent or Always) comes from the registry
too (checked: 31 MB image pulled in 0.97 s, its layer not kept)."""
from __future__ import annotations

import filecmp
import hashlib
import json
import os
import shutil
import time

from . import shell as sh
from .config import Config
from .fsutil import put
from .output import die, log_start, note, now_s, tail_err
from .procs import bin_of, pid_of

MANIFEST_TYPES = "application/vnd.docker.distribution.manifest.v2+json,application/vnd.oci.image.manifest.v1+json"


def reg_curl(c: Config, *args: str) -> list[str]:
    return ["curl", "-sS", "--max-time", "10", "--cacert", f"{c.pki}/ca.crt", *args]


def registry_config(c: Config) -> str:
    with open(f"{c.pki}/ca.crt", "rb") as f:
        secret = hashlib.sha256(f.read()).hexdigest()[:16]
    return f"""version: 0.1
log: {{level: warn, accesslog: {{disabled: true}}}}
storage:
  filesystem: {{rootdirectory: {c.reg_dir}/data}}
  delete: {{enabled: true}}
http:
  addr: {c.reg_addr}
  secret: rvk8s-registry-{secret}
  tls: {{certificate: {c.pki}/registry.crt, key: {c.pki}/registry.key}}
"""


def _trust_in_docker(c: Config) -> None:
    """The cluster CA into $DOCKER_CERTS/ca.crt, when Docker is here and it is not there yet."""
    ca, dest = f"{c.pki}/ca.crt", f"{c.docker_certs}/ca.crt"
    try:
        same = filecmp.cmp(ca, dest, shallow=False)
    except OSError:
        same = False
    if os.path.isdir("/etc/docker") and not same:
        os.makedirs(c.docker_certs, exist_ok=True)
        shutil.copyfile(ca, dest)


def registry_up(c: Config) -> None:
    os.makedirs(f"{c.reg_dir}/data", exist_ok=True)
    _trust_in_docker(c)
    put(f"{c.reg_dir}/config.yml", registry_config(c))
    log = c.log("registry")
    pid = pid_of(c, "registry")
    if pid is not None:
        note(f"registry already running (pid {pid})")
    else:
        log_start(log, "start registry")
        pid = str(sh.spawn(["setsid", bin_of(c, "registry"), "serve", f"{c.reg_dir}/config.yml"], log))
        with open(f"{c.run}/registry.pid", "w") as f:
            f.write(pid + "\n")
        note(f"registry started on https://{c.reg_addr} (pid {pid}, data {c.reg_dir}/data)")
    deadline = now_s() + 20
    probe = reg_curl(c, "-o", "/dev/null", "-w", "%{http_code}", f"https://{c.reg_addr}/v2/")
    while sh.out(probe, stderr=sh.DEVNULL) != "200":
        if pid_of(c, "registry") is None:
            tail_err(log)
            die("registry exited")
        if not now_s() < deadline:
            die(f"registry not answering on {c.reg_addr} after 20 s")
        time.sleep(0.2)


def repo_of(ref: str) -> tuple[str, str]:
    """IMAGE -> (repository, tag) in docker.io terms (library/ for one-word names)."""
    if "@" in ref:
        die(f"{ref}: digests are not supported, name a tag")
    name, tag = ref.rsplit(":", 1) if ":" in ref else (ref, ref)
    if name == ref or "/" in tag:
        name, tag = ref, "latest"
    first = name.split("/", 1)[0]
    if "." in first or ":" in first or first == "localhost":
        if first != "docker.io":
            die(f"{ref}: only Docker Hub-style names (docker.io/...) map onto the nodes' registry mirror")
        name = name[len("docker.io/"):] if name.startswith("docker.io/") else name
    if "/" not in name:
        name = f"library/{name}"
    return name, tag


def registry_manifest(c: Config, repo: str, tag: str) -> tuple[str, str]:
    """(manifest digest, config digest) of REPO:TAG in the registry, ("", "") when absent."""
    url = f"https://{c.reg_addr}/v2/{repo}/manifests/{tag}"
    rc, head = sh.capture(reg_curl(c, "-fsI", "-H", f"Accept: {MANIFEST_TYPES}", url), stderr=sh.DEVNULL)
    if rc != 0:
        return "", ""
    digests = [line.split(": ")[1] if ": " in line else "" for line in head.replace("\r", "").split("\n")
               if line.split(": ")[0].lower() == "docker-content-digest"]
    digest = digests[0] if digests else ""
    _, body = sh.capture(reg_curl(c, "-fs", "-H", f"Accept: {MANIFEST_TYPES}", url))
    try:
        cfg = json.loads(body)["config"]["digest"]
    except (ValueError, KeyError, TypeError):
        cfg = ""
    return digest, cfg
