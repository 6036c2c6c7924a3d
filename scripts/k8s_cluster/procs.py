"""The processes this script starts, by name: a control-plane component (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler), ``registry``, or ``<node>.<component>`` (holder, containerd,
kubelet, kube-proxy). Each has a pid file, $STATE/run/<name>.pid."""
from __future__ import annotations

import os
import signal
import time
from typing import Optional

from . import shell as sh
from .config import Config
from .fsutil import rm_f
from .output import elapsed, note


def bin_of(c: Config, name: str) -> str:
    """The binary NAME runs ("" when a Debian one is not installed)."""
    if name == "etcd":
        return f"{c.etcd_bin}/etcd"
    if name == "registry":
        return sh.which("docker-registry")
    if name.endswith(".holder"):
        return sh.which("sleep")
    if name.endswith(".containerd"):
        return sh.which("containerd")
    if "." in name:
        return f"{c.k8s_bin}/{name.split('.', 1)[1]}"
    return f"{c.k8s_bin}/{name}"


def _resolved(path: str) -> str:
    """``readlink -f PATH`` ("" when it cannot be resolved)."""
    if not path:
        return ""
    try:
        return os.path.realpath(path)
    except OSError:
        return ""


def _read(path: str) -> Optional[str]:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def pid_of(c: Config, name: str) -> Optional[str]:
    """The pid in run/<name>.pid when that process is alive and is the binary we started (a node's
    processes: with that node's folder on their command line; its holder: in its network namespace)."""
    sh.reap()
    f = f"{c.run}/{name}.pid"
    pid = _read(f) if os.path.isfile(f) else None
    pid = (pid or "").rstrip("\n")
    if not pid or not os.path.isdir(f"/proc/{pid}"):
        return None
    if _resolved(f"/proc/{pid}/exe") != _resolved(bin_of(c, name)):
        return None
    node = name.split(".", 1)[0]
    if name.endswith(".holder"):
        try:
            net, ino = os.readlink(f"/proc/{pid}/ns/net"), str(os.stat(f"/run/netns/rvk8s-{node}").st_ino)
        except OSError:
            return None
        if net != f"net:[{ino}]":
            return None
    elif "." in name:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ")
        except OSError:
            return None
        if f"{c.state}/nodes/{node}/".encode() not in cmdline:
            return None
    return pid


def _wait_gone(pid: str, tenths: int) -> None:
    for _ in range(tenths):
        sh.reap()
        if not os.path.isdir(f"/proc/{pid}"):
            break
        time.sleep(0.1)


def stop(c: Config, name: str) -> None:
    """SIGTERM, 10 s, SIGKILL, up to 5 s more; the pid file goes either way."""
    pid = pid_of(c, name)
    if pid is None:
        rm_f(f"{c.run}/{name}.pid")
        return
    t0 = time.time()
    sh.kill(pid, signal.SIGTERM)
    _wait_gone(pid, 100)
    if os.path.isdir(f"/proc/{pid}"):
        note(f"{name} did not stop in 10 s: SIGKILL")
        sh.kill(pid, signal.SIGKILL)
    _wait_gone(pid, 50)
    rm_f(f"{c.run}/{name}.pid")
    note(f"{name} stopped (pid {pid}, {elapsed(t0)} s)")
