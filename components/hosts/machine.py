"""Looks at this host during preview: listening ports, memory, local-only images, FUSE, the mount.

Read-only, and through the `docker` CLI only (containers, images and volumes are declared with
pulumi-docker; nothing here creates or changes anything, but for the throwaway container, removed
and without a network, that asks an image whether it has a Python module).
"""
from __future__ import annotations

import os
import socket
import subprocess
from typing import Callable, Optional

from components.config.rules import LOCAL_ONLY_PREFIXES
from components.mounting import mount_tool

# Images built on this host by scripts/build-images (config.rules.LOCAL_ONLY_PREFIXES): no registry
# has them, so `up` cannot pull them and a missing one is reported at preview. Any other image is
# pulled by `up` when missing.


def fuse_available() -> bool:
    """/dev/fuse is a character device here (the mount tool's own check)."""
    return mount_tool.fuse_device()


def memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _docker(*args: str) -> Optional[str]:
    """stdout of a docker CLI call, or None when Docker does not answer."""
    try:
        proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _our_ports(stack: str) -> set[int]:
    """Host ports published by this stack's own containers (they are not 'in use' for us)."""
    ids = (_docker("ps", "-aq", "--filter", f"label=rustfs-vllm.stack={stack}") or "").split()
    if not ids:
        return set()
    out = _docker("inspect", "-f", "{{range $p, $b := .HostConfig.PortBindings}}{{range $b}}{{.HostPort}} "
                                   "{{end}}{{end}}{{index .Config.Labels \"rustfs-vllm.ports\"}}", *ids) or ""
    # published ports, and the host-network ports our router's containers list in their label (8080,8081,8082)
    return {int(p) for p in out.replace(",", " ").split() if p.isdigit()}


def port_checker(stack: str) -> Callable[[str, int], bool]:
    ours = _our_ports(stack)

    def in_use(address: str, port: int) -> bool:
        if port in ours:
            return False
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((address if address != "0.0.0.0" else "", port))
            except OSError:
                return True
        return False

    return in_use


def image_present(image: str) -> Optional[bool]:
    """For a local-only image: True/False when Docker answers, None when it does not. Images a
    registry serves are not checked (None): `up` pulls them."""
    if not image.startswith(LOCAL_ONLY_PREFIXES):
        return None
    try:
        proc = subprocess.run(["docker", "image", "inspect", image], capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode == 0:
        return True
    return False if b"No such image" in proc.stderr or b"not found" in proc.stderr.lower() else None


FIND_MODULE = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)"


def image_has_module(image: str, module: str) -> Optional[bool]:
    """Whether ``image``'s ``python3`` can import ``module`` (found, not imported): None when the image
    is not here (`up` pulls it), Docker does not answer, or the image has no python3."""
    try:
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True, timeout=20,
                          check=False).returncode != 0:
            return None
        proc = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", image,
                               "-c", FIND_MODULE, module], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {0: True, 3: False}.get(proc.returncode)


def volume_format(name: str) -> Optional[str]:
    """What the Docker volume ``name`` holds: ``"rustfs"`` (RustFS's on-disk format, with its
    ``.rustfs.sys`` folder), ``"files"`` (objects as plain files, the way ``rclone serve s3`` keeps
    them), ``"empty"``; None when it does not exist or its folder cannot be read from here."""
    out = _docker("volume", "inspect", "-f", "{{.Mountpoint}}", name)
    if not out:
        return None
    try:
        entries = os.listdir(out.strip())
    except OSError:
        return None
    if ".rustfs.sys" in entries:
        return "rustfs"
    return "files" if entries else "empty"


def mount_alive(path: str) -> bool:
    """A live rclone FUSE mount is at ``path``: in the mount table, its rclone process running, and
    the folder answering a listing (a dead FUSE mount answers 'Transport endpoint is not
    connected', or hangs). The mount tool's own check (``unmount`` says "live" for the same)."""
    return mount_tool.mount_state(path, timeout=10) == "live"
