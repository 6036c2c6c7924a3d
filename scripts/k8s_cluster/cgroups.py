"""The nodes' cgroups: the kubelets use cgroupfs under /rvk8s-<n> in every cgroup v1 hierarchy."""
from __future__ import annotations

import glob
import os
import signal
import time

from . import shell as sh
from .output import note


def cgroup_dirs(all_: bool = False) -> list[str]:
    """The v1 hierarchies kubelet's cgroupfs driver uses (cpu -> cpu,cpuacct links counted once);
    ``all_``: also the hybrid layout's cgroup2 (unified), where runc makes folders too."""
    found = set()
    for c in glob.glob("/sys/fs/cgroup/*/"):
        if os.path.basename(c.rstrip("/")) == "unified" and not all_:
            continue
        found.add(os.path.realpath(c))
    return sorted(found)


def node_cgroups_up(n: str) -> None:
    # kubelet --cgroup-root: the folder must exist in every hierarchy (else "missing paths")
    for m in cgroup_dirs():
        os.makedirs(f"{m}/rvk8s-{n}", exist_ok=True)
    cpuset = f"/sys/fs/cgroup/cpuset/rvk8s-{n}"
    if os.path.isdir(cpuset):
        for f in ("cpuset.cpus", "cpuset.mems"):
            with open(f"/sys/fs/cgroup/cpuset/{f}") as src:
                value = src.read()
            with open(f"{cpuset}/{f}", "w") as dst:
                dst.write(value)


def _procs_in(folder: str) -> set[int]:
    pids = set()
    for d, _, files in os.walk(folder):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(d, "cgroup.procs")) as f:
                    pids.update(int(p) for p in f.read().split())
            except (OSError, ValueError):
                pass
    return pids


def kill_cgroup_procs(n: str) -> None:
    """SIGKILL whatever is left in node N's cgroups (containers)."""
    for m in cgroup_dirs(all_=True):
        if os.path.isdir(f"{m}/rvk8s-{n}"):
            for pid in sorted(_procs_in(f"{m}/rvk8s-{n}")):
                sh.kill(pid, signal.SIGKILL)


def _rmdir_tree(folder: str) -> None:
    """``find FOLDER -depth -type d -exec rmdir {} + 2>/dev/null || true``."""
    for d, _, _ in os.walk(folder, topdown=False):
        try:
            os.rmdir(d)
        except OSError:
            pass


def node_cgroups_down(n: str) -> None:
    for m in cgroup_dirs(all_=True):
        folder = f"{m}/rvk8s-{n}"
        if not os.path.isdir(folder):
            continue
        for _ in range(50):
            _rmdir_tree(folder)
            if not os.path.isdir(folder):
                break
            kill_cgroup_procs(n)
            time.sleep(0.1)
        if os.path.isdir(folder):
            note(f"node {n}: could not remove {folder}")
