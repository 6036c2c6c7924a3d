"""Dynamic provider: what `pulumi destroy` tells a serving host about purgeOnDestroy before the host's
copies and VFS caches go.

``pulumi destroy`` works from the deployed state: the copies' and the VFS cache's delete commands carry
the purgeOnDestroy of the last ``up`` (RV_PURGE). This resource depends on them, so destroy deletes it
first; its delete decides purgeOnDestroy as the uploads' delete does (components/providers/destroy_config.py)
and writes it, with the time, to the host's root-owned order for that cache folder
(``/var/lib/rustfs-vllm/purge-orders/<digest>.json``, never through a link; over SSH, by the host's
mount tool, for a remote one); the mount tool's ``copy-down`` and ``cache-down`` follow a fresh order over RV_PURGE
(components/mounting/vfs_cache.py). A host that cannot be told is said in one line; its copies and
cache then follow the deployed value. Create and update record the values and do nothing else.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, UpdateResult

from components.errors import ProviderError
from components.providers.base import Provider
from components.mounting import vfs_cache
from components.mounting.tool_base import env_stdin
from components.mounting.vfs_cache import PURGE_ORDER as ORDER
from components.providers.destroy_config import purge_at_destroy


def write_order(props: dict[str, Any], purge: bool) -> Optional[str]:
    """The order on the host (root's, in root's folder: vfs_cache.order_file; over SSH with the host's
    mount tool); why it could not be written, or None."""
    root = props["cache_root"]
    ssh = props.get("ssh") or []
    try:
        if not ssh:
            vfs_cache.write_order(root, purge)
            return None
        if props.get("tool"):
            argv = [*ssh, f"{props['tool']} purge-order --env-stdin"]
            text = env_stdin({"RV_CACHE_ROOT": root, "RV_PURGE": "1" if purge else "0"})
        else:     # deployed before issue 45: the host's tools read the order in its cache folder
            argv = [*ssh, f"[ -d {shlex.quote(root)} ] || exit 0; cat > {shlex.quote(os.path.join(root, ORDER))}"]
            text = json.dumps({"purge": purge, "at": time.time()})
        proc = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=40, check=False)
        return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)


class PurgeOrderProvider(Provider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"purge-order-{props['host']}", dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = ("host", "cache_root", "purge", "stack", "ssh", "tool")
        return DiffResult(changes=any(olds.get(k) != news.get(k) for k in keys), replaces=[],
                          delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(dict(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        host, root = props["host"], props["cache_root"]
        purge = purge_at_destroy(props, f"host {host}", f"the copies and VFS caches under {root}")
        trouble = write_order(props, purge)
        if trouble and purge != bool(props.get("purge")):
            # what destroy asks differs from what the host would do: not lost silently; this order stays in
            # the state and the next destroy tells the host (issue 45)
            raise ProviderError(f"host {host}: could not tell it purgeOnDestroy is {str(purge).lower()} ({trouble}); "
                                f"its copies and VFS caches under {root} would follow the last up's value "
                                f"({str(bool(props.get('purge'))).lower()}): run destroy again once the host answers")
        if trouble:
            print(f"host {host}: could not tell it purgeOnDestroy is {str(purge).lower()} ({trouble}); its "
                  f"copies and VFS caches under {root} follow the last up's value, the same", flush=True)


class PurgeOrderResource(Resource, module="rustfs-vllm", name="PurgeOrder"):
    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(PurgeOrderProvider(), name, props, opts)
