"""Reaching a remote serving host over SSH from this machine: the options every SSH client of the
program uses (pulumi-docker's ``sshOpts``, the readiness wait's ``docker`` CLI, the preview probe),
the private key file they read, and the preview probe itself.

The key (the secret ``sshPrivateKey``) is written to ``.state/ssh/<stack>/id_key``: mode 0600 in a
0700 folder, only for the user who runs pulumi (who can decrypt the stack's config anyway); it is
never on a command line, in the state or in outputs. Host keys: the host's ``hostKey`` when given
(StrictHostKeyChecking=yes against a known_hosts file holding exactly it), otherwise trust on first
use in ``.state/ssh/<stack>/known_hosts`` (StrictHostKeyChecking=accept-new): a host whose key
later changes is refused.
"""
from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass

from components.config.spec import HostSpec

# What a serving host must have; checked at preview (and again by the host-tools command at `up`).
REQUIREMENTS = (
    ("docker", "command -v docker", "the docker CLI and a running Docker daemon (https://docs.docker.com/engine/install/)"),
    ("docker daemon", "docker info --format '{{.ServerVersion}}'", "a Docker daemon the SSH user can use "
                                                                   "(root, or a member of the docker group)"),
    ("rclone", "command -v rclone", "rclone on the SSH user's PATH (https://rclone.org/install/; Debian: apt install rclone)"),
    ("fusermount3", "command -v fusermount3", "fuse3 (Debian/Ubuntu: apt install fuse3)"),
    ("/dev/fuse", "test -c /dev/fuse", "FUSE: /dev/fuse (load the fuse module)"),
    ("python3", "command -v python3", "python3 (the mount tool, rclone-mount, runs with it)"),
)


@dataclass(frozen=True)
class SshFiles:
    folder: str          # .state/ssh/<stack>
    key_file: str        # "" when no sshPrivateKey is set (agent and ~/.ssh keys)
    known_hosts: str


def files(state_dir: str, stack: str, private_key: str, hosts: tuple[HostSpec, ...]) -> SshFiles:
    """Write the key and the pinned host keys under .state/ssh/<stack> (0700/0600) and say where."""
    folder = os.path.join(state_dir, "ssh", stack)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    key_file = ""
    if private_key:
        key_file = os.path.join(folder, "id_key")
        _write_private(key_file, private_key.rstrip("\n") + "\n")
    known_hosts = os.path.join(folder, "known_hosts")
    pinned = [f"{_known_name(h)} {h.host_key}" for h in hosts if h.host_key]
    if pinned:
        _write_private(os.path.join(folder, "pinned_hosts"), "\n".join(pinned) + "\n")
    return SshFiles(folder=folder, key_file=key_file, known_hosts=known_hosts)


def _write_private(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _known_name(h: HostSpec) -> str:
    return h.ssh_host if h.ssh_port == 22 else f"[{h.ssh_host}]:{h.ssh_port}"


def options(h: HostSpec, f: SshFiles) -> list[str]:
    """OpenSSH client options for host ``h`` (no secret among them: the key is a file path)."""
    opts = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=15"]
    if f.key_file:
        opts += ["-o", "IdentitiesOnly=yes", "-i", f.key_file]
    if h.host_key:
        opts += ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={os.path.join(f.folder, 'pinned_hosts')}"]
    else:
        opts += ["-o", "StrictHostKeyChecking=accept-new", "-o", f"UserKnownHostsFile={f.known_hosts}"]
    return opts


def ssh_argv(h: HostSpec, f: SshFiles) -> list[str]:
    return ["ssh", "-T", *options(h, f), "-p", str(h.ssh_port), "-l", h.ssh_user, "--", h.ssh_host]


def wrapper(h: HostSpec, f: SshFiles) -> str:
    """A folder whose ``ssh`` runs OpenSSH with ``options``: put first on PATH, it lets the docker CLI
    (DOCKER_HOST=ssh://...) reach the host with the stack's key. Returns the folder."""
    folder = os.path.join(f.folder, h.name, "bin")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    real = "/usr/bin/ssh" if os.path.exists("/usr/bin/ssh") else "ssh"
    path = os.path.join(folder, "ssh")
    text = "#!/bin/sh\n# made by rustfs-vllm: OpenSSH with this stack's options for host " + h.name + "\n" \
        f"exec {real} {' '.join(shlex.quote(o) for o in options(h, f))} \"$@\"\n"
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == text:
                return folder
    except OSError:
        pass
    _write_private(path, text)
    os.chmod(path, 0o700)
    return folder


def probe(h: HostSpec, f: SshFiles, timeout: float = 25) -> list[str]:
    """Preview's look at a remote host: can we log in, and does it have what serving needs?
    Problems, each naming the host; [] when all is there."""
    script = "; ".join(f"{check} >/dev/null 2>&1 || echo MISSING {i}" for i, (_, check, _) in enumerate(REQUIREMENTS))
    where = f"hosts[{h.name}]"
    try:
        proc = subprocess.run([*ssh_argv(h, f), script], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return [f"{where}: {h.ssh_user}@{h.ssh_host}:{h.ssh_port} did not answer over SSH within {timeout:.0f} s "
                "(is the host up and sshd running?)"]
    except OSError as exc:
        return [f"{where}: cannot run ssh ({exc}); install openssh-client"]
    if proc.returncode == 255:
        err = proc.stderr.strip().splitlines()
        cause = err[-1] if err else "ssh failed"
        hint = ("check sshPrivateKey and the host's authorized_keys" if "Permission denied" in cause else
                "the host's key changed or differs from hosts[].hostKey" if "Host key verification failed" in cause
                or "REMOTE HOST IDENTIFICATION HAS CHANGED" in proc.stderr else
                "is the host up, and sshd listening there?")
        return [f"{where}: cannot log in as {h.ssh_user}@{h.ssh_host}:{h.ssh_port} over SSH: {cause}; {hint}"]
    missing = [REQUIREMENTS[int(line.split()[1])] for line in proc.stdout.splitlines() if line.startswith("MISSING ")]
    return [f"{where}: the host lacks {what}; needed: {need}" for what, _, need in missing]


def probe_all(hosts: tuple[HostSpec, ...], f: SshFiles) -> list[str]:
    """``probe`` of every remote host, at once (a host that is down costs one timeout, not one each)."""
    from concurrent.futures import ThreadPoolExecutor

    remote = [h for h in hosts if not h.local]
    with ThreadPoolExecutor(max_workers=max(1, len(remote))) as pool:
        return [p for problems in pool.map(lambda h: probe(h, f), remote) for p in problems]
