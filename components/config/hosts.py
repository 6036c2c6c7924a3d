"""The ``hosts`` key, validated into HostSpecs.

A stack serves from one or more hosts. Without ``hosts`` there is one implicit host, this machine
(``local``), configured by the top-level keys as before (mountPath, mountCacheDir, bindAddress,
vllmGpus, vllmImage), so existing stacks keep their resources and URNs. With ``hosts``, each
entry is a host of its own:

    - name: gpu-a                       # required: letters, digits, '-'
      docker: ssh://root@10.0.0.11      # how Docker is reached: "local" (this machine's socket)
                                        #   or ssh://[user@]host[:port]
      ssh: {host: 10.0.0.11, port: 22, user: root}   # optional: default from `docker`
      hostKey: "ssh-ed25519 AAAA..."    # optional: the host's public key, checked when given
      address: 10.0.0.11                # optional: where this machine reaches its ports (default ssh host)
      bindAddress: 0.0.0.0              # optional: address its vLLM ports are published on
      gpus: all                         # optional: over vllmGpus (a model's own gpus wins)
      mountPath: /mnt/vllm-models       # optional: default mountPath, or /mnt/<namePrefix>
      mountCacheDir: /var/cache/...     # optional
      s3Endpoint: http://10.0.0.5:9000  # optional: the S3 endpoint as this host reaches it
      vllmImage: registry:5000/vllm...  # optional: over vllmImage (a remote host pulls it)

The SSH private key is the secret ``sshPrivateKey`` (one key for every host); unset, the hosts are
reached with the SSH agent and ~/.ssh keys of the user running pulumi.
"""
from __future__ import annotations

import ipaddress
import os
import re
from typing import Any, Mapping, Sequence

from components.storage import layout
from components.config.reader import Reader
from components.config.rules import FORBIDDEN_MOUNT_ROOTS, LOCAL_ONLY_PREFIXES, inside
from components.config.schema import HOST_FIELDS
from components.config.spec import LOCAL, REMOTE_TOOLS_ROOT, HostSpec, ModelSpec

FIELD = {f.name: f for f in HOST_FIELDS}
SSH_URL_RE = re.compile(r"^ssh://(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>[A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\])"
                        r"(?::(?P<port>[0-9]{1,5}))?/?$")
HOST_RE = re.compile(r"^[A-Za-z0-9.\-]+$|^\[?[0-9a-fA-F:]+\]?$")
HOST_KEY_RE = re.compile(r"(ssh-(ed25519|rsa)|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( .*)?")
URL_RE = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+(:[0-9]{1,5})?/?")


def implicit_host(*, bind_address: str, mount_path: str, mount_cache_dir: str, endpoint: str,
                  vllm_image: str, rclone_image: str) -> HostSpec:
    address = "127.0.0.1" if bind_address in ("0.0.0.0", "127.0.0.1") else bind_address
    return HostSpec(name=LOCAL, local=True, docker_host="", address=address, bind_address=bind_address,
                    mount_path=mount_path, mount_cache_dir=mount_cache_dir, s3_endpoint=endpoint,
                    vllm_image=vllm_image, rclone_image=rclone_image, implicit=True)


def is_loopback_endpoint(endpoint: str) -> bool:
    m = re.match(r"https?://(\[[^\]]+\]|[^:/]+)", endpoint)
    host = (m.group(1).strip("[]") if m else "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse(r: Reader, raw: Any, v: Mapping[str, Any]) -> list[HostSpec]:
    """``raw`` (the hosts config value) as HostSpecs, with the stack-wide values ``v`` as defaults;
    problems are recorded on ``r``, each naming ``hosts[i].<field>``, the value and what is allowed."""
    if not raw:
        r.bad("hosts", raw, "a non-empty list of hosts, each with at least name and docker")
        return []
    hosts: list[HostSpec] = []
    names: set[str] = set()
    for i, h in enumerate(raw):
        if not isinstance(h, dict):
            r.bad(f"hosts[{i}]", h, "an object with name, docker and optional "
                                    + ", ".join(f.name for f in HOST_FIELDS[2:]))
            continue
        spec = _host(r, i, h, v)
        if spec.name in names and spec.name == h.get("name"):
            r.bad(f"hosts[{i}].name", spec.name, "a name used by one host only (duplicate)")
        names.add(spec.name)
        hosts.append(spec)
    _distinct_machines(r, hosts)
    return hosts


def _host(r: Reader, i: int, h: Mapping[str, Any], v: Mapping[str, Any]) -> HostSpec:
    key = f"hosts[{i}]"
    for unknown in sorted(set(h) - set(FIELD)):
        r.bad(f"{key}.{unknown}", h[unknown], f"a known field: {', '.join(FIELD)}")
    name = r.field(FIELD["name"], h, key) or f"host{i}"
    local = h.get("docker") == LOCAL
    user, host, port = _ssh(r, key, h, local)
    host_key = r.field(FIELD["hostKey"], h, key)
    if host_key and not HOST_KEY_RE.fullmatch(host_key.strip()):
        r.bad(f"{key}.hostKey", host_key, FIELD["hostKey"].allowed)
        host_key = ""
    bind = r.field(FIELD["bindAddress"], h, key, v["bind_address"] if local else "0.0.0.0")
    default_address = ("127.0.0.1" if bind in ("0.0.0.0", "127.0.0.1") else bind) if local else \
        (bind if bind != "0.0.0.0" else str(host))
    address = r.field(FIELD["address"], h, key, default_address)
    if not HOST_RE.fullmatch(address):
        r.bad(f"{key}.address", address, FIELD["address"].allowed)
        address = default_address
    mpath, cache = _mount(r, key, h, v, local)
    return HostSpec(
        name=name, local=local, docker_host="" if local else f"ssh://{user}@{host}:{port}",
        ssh_host="" if local else str(host), ssh_port=int(port) if not local else 22, ssh_user=str(user),
        host_key=host_key.strip(), address=address, bind_address=bind, gpus=r.field(FIELD["gpus"], h, key),
        mount_path=os.path.normpath(mpath), mount_cache_dir=os.path.normpath(cache),
        s3_endpoint=_s3_endpoint(r, key, h, v, local), vllm_image=_image(r, key, h, v, local, name),
        rclone_image=_image(r, key, h, v, True, name, "rcloneImage", "rclone_image"),   # pulled: keepers_pullable
        tools_dir="" if local else f"{REMOTE_TOOLS_ROOT}/{v['name_prefix']}")


def _ssh(r: Reader, key: str, h: Mapping[str, Any], local: bool) -> tuple[Any, Any, Any]:
    """(user, host, port) SSH reaches the host with: from ``docker``, over by ``ssh``."""
    docker, ssh = h.get("docker", ""), h.get("ssh") or {}
    if not isinstance(ssh, dict) or set(ssh) - {"host", "port", "user"}:
        r.bad(f"{key}.ssh", ssh, FIELD["ssh"].allowed)
        ssh = {}
    user, host, port = "root", "", 22
    if local:
        if ssh:
            r.bad(f"{key}.ssh", ssh, "nothing for a host whose docker is local (this machine runs its commands)")
        return ssh.get("user", user), "", 22
    m = SSH_URL_RE.fullmatch(docker) if isinstance(docker, str) else None
    if not m:
        r.bad(f"{key}.docker", docker, FIELD["docker"].allowed)
    else:
        user, host, port = m.group("user") or "root", m.group("host").strip("[]"), int(m.group("port") or 22)
    user, host, port = ssh.get("user", user), ssh.get("host", host), ssh.get("port", port)
    if not isinstance(user, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", user):
        r.bad(f"{key}.ssh.user", user, "a user name")
    if not isinstance(host, str) or not HOST_RE.fullmatch(host):
        r.bad(f"{key}.ssh.host", host, "a host name or IP address")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        r.bad(f"{key}.ssh.port", port, "an integer TCP port 1-65535")
        port = 22
    return user, host, port


def _mount(r: Reader, key: str, h: Mapping[str, Any], v: Mapping[str, Any], local: bool) -> tuple[str, str]:
    mpath = h.get("mountPath", v["mount_path"])
    if not isinstance(mpath, str) or not os.path.isabs(mpath) or os.path.normpath(mpath) in FORBIDDEN_MOUNT_ROOTS:
        r.bad(f"{key}.mountPath", mpath, FIELD["mountPath"].allowed)
        mpath = v["mount_path"]
    elif local and mpath != v["mount_path"]:
        problem = layout.mount_point_problem(mpath)
        if problem:
            r.bad(f"{key}.mountPath", mpath, problem)
    cache = h.get("mountCacheDir", v["mount_cache_dir"])
    if not isinstance(cache, str) or not os.path.isabs(cache) or inside(cache, mpath):
        r.bad(f"{key}.mountCacheDir", cache, FIELD["mountCacheDir"].allowed)
        cache = v["mount_cache_dir"]
    return mpath, cache


def _s3_endpoint(r: Reader, key: str, h: Mapping[str, Any], v: Mapping[str, Any], local: bool) -> str:
    endpoint = v["rustfs_endpoint"]
    s3_endpoint = h.get("s3Endpoint", "")
    if s3_endpoint and (not isinstance(s3_endpoint, str) or not URL_RE.fullmatch(s3_endpoint)):
        r.bad(f"{key}.s3Endpoint", s3_endpoint, FIELD["s3Endpoint"].allowed)
        s3_endpoint = ""
    if s3_endpoint:
        return s3_endpoint.rstrip("/")
    if not local and is_loopback_endpoint(endpoint):
        r.bad(f"{key}.s3Endpoint", "", f"set for a remote host: rustfsEndpoint {endpoint!r} is this "
                                       "machine's loopback, which the host cannot reach; give the "
                                       "endpoint as the host reaches it (e.g. http://10.0.0.5:9000)")
    return endpoint


def _image(r: Reader, key: str, h: Mapping[str, Any], v: Mapping[str, Any], local: bool, name: str,
           field: str = "vllmImage", setting: str = "vllm_image") -> str:
    """The host's ``field`` (vllmImage, rcloneImage): its own or the stack's, one a remote host can pull."""
    image = h.get(field, v[setting])
    if not isinstance(image, str) or not image:
        r.bad(f"{key}.{field}", image, FIELD[field].allowed)
        return v[setting]
    if not local and image.startswith(LOCAL_ONLY_PREFIXES):
        r.bad(f"{key}.{field}" if field in h else field, image,
              f"an image host {name!r} can pull: this one is built on this machine only (no registry has it); "
              f"push it to a registry the host reaches and set hosts[i].{field} to that name")
    return image


def keepers_pullable(r: Reader, hosts: Sequence[HostSpec], models: Sequence[ModelSpec], raw_hosts: Any) -> None:
    """A remote host with mounted models pulls rcloneImage for their keepers: not one built here only."""
    for i, h in enumerate(hosts):
        if not h.local and h.rclone_image.startswith(LOCAL_ONLY_PREFIXES) and any(
                m.mounted and h.name in m.hosts for m in models):
            own = isinstance(raw_hosts, list) and i < len(raw_hosts) and "rcloneImage" in (raw_hosts[i] or {})
            r.bad(f"hosts[{i}].rcloneImage" if own else "rcloneImage", h.rclone_image,
                  f"an image host {h.name!r} can pull for its mounts' keepers: this one is built on this machine "
                  "only (no registry has it); push it to a registry the host reaches and set hosts[i].rcloneImage "
                  "to that name")


def _distinct_machines(r: Reader, hosts: list[HostSpec]) -> None:
    """One local host at most, and no two hosts on the same SSH address and port."""
    if sum(1 for h in hosts if h.local) > 1:
        r.bad("hosts", [h.name for h in hosts if h.local], "at most one host whose docker is local (this machine)")
    seen: dict[tuple[str, int], str] = {}
    for h in hosts:
        if h.local:
            continue
        where = (h.ssh_host, h.ssh_port)
        if where in seen:
            r.bad(f"hosts[{h.name}].ssh.host", f"{h.ssh_host}:{h.ssh_port}",
                  f"a machine of its own: host {seen[where]!r} is reached there too")
        seen[where] = h.name
