"""``scripts/tenant-key PLATFORM TENANT [--print]``: give a serving stack its keys on a platform's store.

The platform (role store) made the tenant's two users at its `up` (components/core/tenants.py) and keeps
their secrets in its own state only. This reads them from there (``pulumi stack export --show-secrets``
of the platform, which its operator may read) and sets them as the tenant stack's secret ``storeKey``
(``pulumi config set --secret``, the value on stdin: on no command line). ``--print`` writes the value to
stdout instead, for a tenant stack on another backend (its owner sets it with ``pulumi config set
--secret storeKey`` from that). Nothing else is printed with a secret in it.
"""
from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, Optional

TYPES = {"pulumi-python:dynamic/rustfs-vllm:TenantKey": ("access_key", "secret_key"),
         "pulumi-python:dynamic/rustfs-vllm:ReadKey": ("read_access_key", "read_secret_key")}


class Refused(Exception):
    """One line: what failed, why, what to do."""


def _plain(value: Any) -> Any:
    """A value of ``stack export --show-secrets``: secrets come as {"<sig>": ..., "plaintext": "<json>"}."""
    if isinstance(value, dict) and "plaintext" in value:
        return json.loads(value["plaintext"])
    return value


def _pulumi(args: list[str], stdin: Optional[str] = None) -> str:
    proc = subprocess.run(["pulumi", *args, "--non-interactive"], input=stdin, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise Refused(f"`pulumi {' '.join(args[:3])}` failed: {last}")
    return proc.stdout


def store_key(deployment: dict[str, Any], tenant: str) -> dict[str, str]:
    """The tenant's storeKey from the platform's exported deployment."""
    key: dict[str, str] = {}
    for res in deployment.get("resources") or []:
        fields = TYPES.get(res.get("type", ""))
        outs = res.get("outputs") or {}
        if not fields or _plain(outs.get("tenant")) != tenant:
            continue
        if res.get("delete") or res.get("pendingReplacement"):
            continue    # a key being retired (the old half of a rotation): only the live key is handed over
        access, secret = _plain(outs.get("read_access_key")), _plain(outs.get("read_secret_key"))
        if access and secret:
            key.update({fields[0]: access, fields[1]: secret})
    return key


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--print"]
    if len(args) != 2:
        print("usage: scripts/tenant-key PLATFORM_STACK TENANT_STACK [--print]   (TENANT_STACK as the platform's "
              "rustfs-vllm:tenants names it: <organization>/<project>/<stack>)", file=sys.stderr)
        return 2
    platform, tenant = args
    try:
        exported = json.loads(_pulumi(["stack", "export", "--show-secrets", "--stack", platform]))
        key = store_key(exported.get("deployment") or {}, tenant)
        if len(key) != 4:
            raise Refused(f"the store {platform} has no keys for {tenant}: list it in that stack's rustfs-vllm:tenants "
                          "with its model prefixes and run `pulumi up` there first")
        value = json.dumps(key, sort_keys=True)
        if "--print" in argv:
            print(value)
            return 0
        _pulumi(["config", "set", "--secret", "rustfs-vllm:storeKey", "--stack", tenant], stdin=value)
    except Refused as exc:
        print(f"tenant-key: {exc}", file=sys.stderr)
        return 1
    print(f"tenant-key: {tenant} now holds its own keys on the store {platform} (user {key['access_key']}, read user "
          f"{key['read_access_key']}) in its secret rustfs-vllm:storeKey; run `pulumi up` there")
    return 0
