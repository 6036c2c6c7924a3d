"""The serving hosts: the ``hosts`` config key, validated into HostSpecs.

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
from dataclasses import dataclass
from typing import Any, Callable, Optional

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,23}$")
SSH_URL_RE = re.compile(r"^ssh://(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>[A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\])"
                        r"(?::(?P<port>[0-9]{1,5}))?/?$")
HOST_RE = re.compile(r"^[A-Za-z0-9.\-]+$|^\[?[0-9a-fA-F:]+\]?$")
IPV4_RE = re.compile(r"^([0-9]{1,3}\.){3}[0-9]{1,3}$")
FIELDS = ("name", "docker", "ssh", "hostKey", "address", "bindAddress", "gpus", "mountPath", "mountCacheDir",
          "s3Endpoint", "vllmImage")
LOCAL = "local"
# where a remote host keeps this program's scripts, logs and CA bundle (one folder per stack)
REMOTE_TOOLS_ROOT = "/var/lib/rustfs-vllm"


@dataclass(frozen=True)
class HostSpec:
    name: str
    local: bool                   # this machine: local commands and the local Docker socket
    docker_host: str              # "" (the local socket) or ssh://user@host:port
    ssh_host: str = ""
    ssh_port: int = 22
    ssh_user: str = "root"
    host_key: str = ""
    address: str = "127.0.0.1"    # where this machine reaches the host's published ports
    bind_address: str = "0.0.0.0"
    gpus: Optional[str] = None    # None: vllmGpus
    mount_path: str = ""
    mount_cache_dir: str = ""
    s3_endpoint: str = ""
    vllm_image: str = ""
    tools_dir: str = ""           # remote hosts: this stack's scripts and logs there
    implicit: bool = False        # the implicit local host of a stack without `hosts`

    @property
    def prefix(self) -> str:
        """Resource name prefix: none for the implicit host (its URNs are the ones stacks had)."""
        return "" if self.implicit else f"{self.name}-"


def implicit_host(*, bind_address: str, mount_path: str, mount_cache_dir: str, endpoint: str,
                  vllm_image: str) -> HostSpec:
    address = "127.0.0.1" if bind_address in ("0.0.0.0", "127.0.0.1") else bind_address
    return HostSpec(name=LOCAL, local=True, docker_host="", address=address, bind_address=bind_address,
                    mount_path=mount_path, mount_cache_dir=mount_cache_dir, s3_endpoint=endpoint,
                    vllm_image=vllm_image, implicit=True)


def is_loopback_endpoint(endpoint: str) -> bool:
    m = re.match(r"https?://(\[[^\]]+\]|[^:/]+)", endpoint)
    host = (m.group(1).strip("[]") if m else "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse(r: Any, raw: Any, *, name_prefix: str, mount_path: str, mount_cache_dir: str, endpoint: str,
          vllm_image: str, bind_address: str, gpus_re: re.Pattern[str],
          mount_point_problem: Callable[[str], Optional[str]], local_only: Callable[[str], bool]) -> list[HostSpec]:
    """``raw`` (the hosts config value, a list) as HostSpecs; problems are recorded on ``r``
    (config._Reader), each naming ``hosts[i].<field>``, the value and what is allowed."""
    if not isinstance(raw, list) or not raw:
        r.bad("hosts", raw, "a non-empty list of hosts, each with at least name and docker")
        return []
    hosts: list[HostSpec] = []
    names: set[str] = set()
    for i, h in enumerate(raw):
        key = f"hosts[{i}]"
        if not isinstance(h, dict):
            r.bad(key, h, f"an object with name, docker and optional {', '.join(FIELDS[2:])}")
            continue
        for unknown in sorted(set(h) - set(FIELDS)):
            r.bad(f"{key}.{unknown}", h[unknown], f"a known field: {', '.join(FIELDS)}")
        name = h.get("name")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            r.bad(f"{key}.name", name, "a host name: lower-case letters, digits and '-', at most 24 characters")
            name = f"host{i}"
        elif name in names:
            r.bad(f"{key}.name", name, "a name used by one host only (duplicate)")
        names.add(name)
        docker = h.get("docker", "")
        ssh = h.get("ssh") or {}
        if not isinstance(ssh, dict) or set(ssh) - {"host", "port", "user"}:
            r.bad(f"{key}.ssh", ssh, "an object with host and optional port and user")
            ssh = {}
        local = docker == LOCAL
        user, host, port = "root", "", 22
        if local:
            if ssh:
                r.bad(f"{key}.ssh", ssh, "nothing for a host whose docker is local (this machine runs its commands)")
        else:
            m = SSH_URL_RE.fullmatch(docker) if isinstance(docker, str) else None
            if not m:
                r.bad(f"{key}.docker", docker, "'local' (this machine's Docker socket) or ssh://[user@]host[:port]")
            else:
                user, host, port = m.group("user") or "root", m.group("host").strip("[]"), int(m.group("port") or 22)
        user = ssh.get("user", user)
        host = ssh.get("host", host)
        port = ssh.get("port", port)
        if not local:
            if not isinstance(user, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", user):
                r.bad(f"{key}.ssh.user", user, "a user name")
            if not isinstance(host, str) or not HOST_RE.fullmatch(host):
                r.bad(f"{key}.ssh.host", host, "a host name or IP address")
            if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
                r.bad(f"{key}.ssh.port", port, "an integer TCP port 1-65535")
                port = 22
        host_key = h.get("hostKey", "")
        if not isinstance(host_key, str) or (host_key and not re.fullmatch(
                r"(ssh-(ed25519|rsa)|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( .*)?", host_key.strip())):
            r.bad(f"{key}.hostKey", host_key, "the host's public key as in known_hosts: '<type> <base64>', "
                                              "e.g. the line of /etc/ssh/ssh_host_ed25519_key.pub")
            host_key = ""
        bind = h.get("bindAddress", bind_address if local else "0.0.0.0")
        if not isinstance(bind, str) or not IPV4_RE.fullmatch(bind):
            r.bad(f"{key}.bindAddress", bind, "an IPv4 address such as 0.0.0.0 or 127.0.0.1")
            bind = "0.0.0.0"
        default_address = ("127.0.0.1" if bind in ("0.0.0.0", "127.0.0.1") else bind) if local else \
            (bind if bind != "0.0.0.0" else str(host))
        address = h.get("address", default_address)
        if not isinstance(address, str) or not HOST_RE.fullmatch(address):
            r.bad(f"{key}.address", address, "a host name or IP address this machine reaches the host's ports on")
            address = default_address
        gpus = h.get("gpus")
        if gpus is not None and (not isinstance(gpus, str) or (gpus and not gpus_re.fullmatch(gpus))):
            r.bad(f"{key}.gpus", gpus, "empty (CPU), 'all', 'count=N' or device ids like '0,1' (overrides vllmGpus)")
            gpus = None
        mpath = h.get("mountPath", mount_path)
        if not isinstance(mpath, str) or not os.path.isabs(mpath) or \
                os.path.normpath(mpath) in ("/", "/mnt", "/tmp", "/var", "/home"):
            r.bad(f"{key}.mountPath", mpath, "an absolute path to a dedicated folder (not /, /mnt, /tmp, /var or /home)")
            mpath = mount_path
        elif local and mpath != mount_path:
            problem = mount_point_problem(mpath)
            if problem:
                r.bad(f"{key}.mountPath", mpath, problem)
        cache = h.get("mountCacheDir", mount_cache_dir)
        if not isinstance(cache, str) or not os.path.isabs(cache) or \
                os.path.normpath(cache).startswith(os.path.normpath(mpath) + os.sep) or \
                os.path.normpath(cache) == os.path.normpath(mpath):
            r.bad(f"{key}.mountCacheDir", cache, "an absolute folder path outside mountPath")
            cache = mount_cache_dir
        s3_endpoint = h.get("s3Endpoint", "")
        if s3_endpoint and (not isinstance(s3_endpoint, str) or
                            not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+(:[0-9]{1,5})?/?", s3_endpoint)):
            r.bad(f"{key}.s3Endpoint", s3_endpoint, "an http(s)://HOST:PORT URL without a path")
            s3_endpoint = ""
        if not s3_endpoint:
            s3_endpoint = endpoint
            if not local and is_loopback_endpoint(endpoint):
                r.bad(f"{key}.s3Endpoint", "", f"set for a remote host: rustfsEndpoint {endpoint!r} is this "
                                               "machine's loopback, which the host cannot reach; give the "
                                               "endpoint as the host reaches it (e.g. http://10.0.0.5:9000)")
        image = h.get("vllmImage", vllm_image)
        if not isinstance(image, str) or not image:
            r.bad(f"{key}.vllmImage", image, "a Docker image reference")
            image = vllm_image
        elif not local and local_only(image):
            r.bad(f"{key}.vllmImage" if "vllmImage" in h else "vllmImage", image,
                  f"an image host {name!r} can pull: this one is built on this machine only (no registry has it); "
                  "push it to a registry the host reaches and set hosts[i].vllmImage to that name")
        hosts.append(HostSpec(
            name=name, local=local, docker_host="" if local else f"ssh://{user}@{host}:{port}",
            ssh_host="" if local else str(host), ssh_port=int(port) if not local else 22, ssh_user=str(user),
            host_key=host_key.strip(), address=address, bind_address=bind, gpus=gpus,
            mount_path=os.path.normpath(mpath), mount_cache_dir=os.path.normpath(cache),
            s3_endpoint=s3_endpoint.rstrip("/"), vllm_image=image,
            tools_dir="" if local else f"{REMOTE_TOOLS_ROOT}/{name_prefix}"))
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
    return hosts
