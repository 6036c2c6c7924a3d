"""Looks at this host during preview: listening ports, memory, local images. Read-only."""
from __future__ import annotations

import os
import socket
from typing import Callable


def fuse_available() -> bool:
    import stat

    try:
        return stat.S_ISCHR(os.stat("/dev/fuse").st_mode)
    except OSError:
        return False


def memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _our_ports(stack: str) -> set[int]:
    """Host ports published by this stack's own containers (they are not 'in use' for us)."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        ports: set[int] = set()
        for c in client.containers.list(all=True, filters={"label": f"rustfs-vllm.stack={stack}"}):
            for bindings in (c.attrs.get("HostConfig", {}).get("PortBindings") or {}).values():
                for b in bindings or []:
                    if b.get("HostPort"):
                        ports.add(int(b["HostPort"]))
        return ports
    except Exception:  # noqa: BLE001 - no Docker: nothing of ours holds a port
        return set()


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


def image_present(image: str) -> bool | None:
    """True/False when Docker answers, None when it does not."""
    try:
        import docker

        docker.from_env(timeout=10).images.get(image)
        return True
    except ImportError:
        return None
    except Exception as exc:  # noqa: BLE001
        return False if exc.__class__.__name__ == "ImageNotFound" else None
