"""Shared pieces of the reliability tests: checks that look at the machine (containers, mounts,
volumes, buckets). The S3 server they run on is tests/s3_under_test.py's choice."""
from __future__ import annotations

import docker

from components.storage import layout

from tests.integration.conftest import ACCESS, SECRET  # noqa: F401


def leftovers(stack_name: str, mount_path: str, volume: str) -> list[str]:
    """What a failed run left on the machine (empty when nothing)."""
    found = []
    client = docker.from_env()
    for c in client.containers.list(all=True, filters={"label": f"rustfs-vllm.stack={stack_name}"}):
        found.append(f"container {c.name}")
    try:
        client.volumes.get(volume)
        found.append(f"volume {volume}")
    except docker.errors.NotFound:
        pass
    for v in client.volumes.list(filters={"label": f"rustfs-vllm.stack={stack_name}"}):   # compile caches
        found.append(f"volume {v.name}")
    with open("/proc/mounts") as fh:
        for line in fh:
            where, fstype = line.split()[1], line.split()[2]
            ours = fstype == "fuse.rclone" or (where == mount_path and layout.is_self_bind(where))
            if ours and (where == mount_path or where.startswith(mount_path + "/")):
                found.append(f"{fstype} mount {where}")
    return found


def tear_down(stack, server, results_file, results: list) -> None:
    """After a module's stack: destroy it (whatever state it is in), remove it and its S3 server,
    and write the module's results for docs/RELIABILITY.md."""
    import json

    stack.run("destroy", "--yes", "--skip-preview", check=False)
    stack.remove()
    server.remove()
    results_file.parent.mkdir(exist_ok=True)
    results_file.write_text(json.dumps(results, indent=2))
