"""What a test run stopped before its teardown (CI's time limit, a kill -9) left on this machine, and its
removal at the start of the next run (scripts/test).

A killed run leaves its stacks' containers, which the Docker engine starts again whenever it starts
(their restart policies): a CI run killed at its time limit on 2026-12-07 left a stack of two vLLM
servers, a router and RustFS that came back with the next session's engine and held 8 GB of the
machine's 24 while the next run's tests ran. Each test stack is therefore written down here when it is
made (its name, its namePrefix, the test process's pid) and struck off when the test removes it; an entry
whose process is gone is a leftover.

Only what a test stack of this ledger made is removed: containers and volumes labelled with its stack
name, its data volume (``<namePrefix>-data``), the mounts under ``/mnt/<namePrefix>`` and the host processes serving them, and root's folders
for it (``/var/lib/rustfs-vllm/<namePrefix>``, ``/var/log/rustfs-vllm/<namePrefix>``); never a stack of a
user's, which is in no ledger. The simulated hosts' own engines are tests/hosts/sim.py's to clean.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

LEDGER = Path(os.environ.get("RUSTFS_VLLM_TEST_LEDGER") or "/var/tmp/rustfs-vllm-tests/stacks")
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")     # what a test stack's name and namePrefix look like


def record(stack: str, prefix: str | None = None) -> None:
    """Writes down ``stack`` (and its namePrefix once known) as made by this process."""
    if not NAME.match(stack):
        return
    entry = LEDGER / stack
    old = _read(entry) or {}
    LEDGER.mkdir(parents=True, exist_ok=True)
    entry.write_text(json.dumps({"stack": stack, "prefix": prefix or old.get("prefix"), "pid": os.getpid()}))


def forget(stack: str) -> None:
    (LEDGER / stack).unlink(missing_ok=True)


def _read(entry: Path) -> dict | None:
    try:
        return json.loads(entry.read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        return "pytest" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def _mounts_under(root: str) -> list[str]:
    """Mount points at or under ``root``, deepest first."""
    points = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    return sorted({p for p in points if p == root or p.startswith(root + "/")}, key=len, reverse=True)


def _processes_on(root: str) -> list[int]:
    """Host processes with an argument at or under ``root``: the mount supervisors and rclone of the code
    before the keepers (the upgrade tests' earlier mains), which outlive a killed test."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = proc.joinpath("cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(a == root or a.startswith(root + "/") for a in argv[1:]):
            found.append(int(proc.name))
    return found


def remove_docker(stack: str, volumes: tuple[str, ...] = ()) -> list[str]:
    """Removes the containers and volumes labelled with ``stack`` (compile caches), and the named ``volumes``
    (the S3 server's data volume, which destroy keeps on purpose); returns what was removed, in words."""
    import docker

    client = docker.from_env()
    gone: list[str] = []
    for c in client.containers.list(all=True, filters={"label": f"rustfs-vllm.stack={stack}"}):
        if c.labels.get("rustfs-vllm.role") == "router" and c.status == "running":
            c.stop(timeout=20)        # its wrapper takes the router guard's rules out as it stops (issue 57)
        c.remove(force=True)
        gone.append(f"container {c.name}")
    found = client.volumes.list(filters={"label": f"rustfs-vllm.stack={stack}"})
    for name in volumes:
        try:
            found.append(client.volumes.get(name))
        except docker.errors.NotFound:
            pass
    for v in found:
        v.remove(force=True)
        gone.append(f"volume {v.name}")
    return gone


def remove(stack: str, prefix: str | None) -> list[str]:
    """Removes what test stack ``stack`` left (its containers first: none restarts what goes after);
    returns what was removed, in words."""
    import docker

    named = bool(prefix and NAME.match(prefix))
    try:
        gone = remove_docker(stack, (f"{prefix}-data",) if named else ())
    except docker.errors.APIError as exc:       # the sweep goes on; the next run tries again
        gone = [f"not all of its containers and volumes ({exc})"]
    if named:
        for pid in _processes_on(f"/mnt/{prefix}"):
            try:
                os.kill(pid, 9)
                gone.append(f"process {pid}")
            except OSError:
                pass
        for point in _mounts_under(f"/mnt/{prefix}"):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
            gone.append(f"mount {point}")
        for folder in (Path("/mnt") / prefix, Path("/var/lib/rustfs-vllm") / prefix,
                       Path("/var/log/rustfs-vllm") / prefix):
            if folder.is_dir() and not _mounts_under(str(folder)):
                shutil.rmtree(folder, ignore_errors=True)
                gone.append(f"folder {folder}")
    return gone


def sweep() -> dict[str, list[str]]:
    """Removes the leftovers of every ledger entry whose test process is gone; returns them by stack."""
    removed: dict[str, list[str]] = {}
    for entry in sorted(LEDGER.glob("*")) if LEDGER.is_dir() else []:
        data = _read(entry)
        if data is None or not _alive(int(data.get("pid", 0))):
            if data is not None and NAME.match(str(data.get("stack", ""))):
                removed[data["stack"]] = remove(data["stack"], data.get("prefix"))
            entry.unlink(missing_ok=True)
    return removed


if __name__ == "__main__":
    found = sweep()
    for name, what in found.items():
        print(f"    leftover of a test run that did not finish, stack {name}: removed {', '.join(what) or 'nothing left'}")
    print(f"test leftovers: {len(found)} stack(s) of unfinished runs cleaned" if found else
          "test leftovers: none")
    sys.exit(0)
