"""A serving stack's store by reference (``store: <org>/<project>/<stack>``, issue 38): the platform
stack's outputs read through a StackReference, at preview as at `up`, and turned into the keys the
rest of the program reads (s3Server external, rustfsEndpoint, bucket, the admin keys, the CA bundle),
so everything downstream (preflight, the credential check, uploads, the read key) is what an external
server gets. The admin keys stay Pulumi secrets: the reference's secret output, then the stack's.

The keys a store gives may not be set in the serving stack: each one set is a problem naming it.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import pulumi
# the SDK's own bridge from a coroutine to the program's synchronous code (what pulumi.runtime.invoke
# uses); the validated configuration needs the platform's values before any resource is declared
from pulumi.runtime.sync_await import _sync_await

from components.config.schema import NAMESPACE, key as key_of

FROM_STORE = ("s3Server", "rustfsEndpoint", "rustfsCaBundle", "bucket", "rustfsAccessKey", "rustfsSecretKey")
# what a role: store stack exports (components/core/plan.py)
OUTPUTS = ("store_endpoint", "store_bucket", "store_ca", "store_admin")


def read_outputs(name: str) -> dict[str, Any]:
    """The platform stack's store outputs, plain values (secrets unwrapped here, wrapped again by the plan)."""
    ref = pulumi.StackReference("store", stack_name=name)
    out: dict[str, Any] = {}
    for key in OUTPUTS:
        details = _sync_await(ref.get_output_details(key))
        value = details.value if details.value is not None else details.secret_value
        if value is not None:
            out[key] = value
    return out


def resolve(raw: Mapping[str, Any], state_dir: str, stack: str,
            read: Any = read_outputs) -> tuple[dict[str, Any], list[str]]:
    """(raw with the store's keys, problems); ``raw`` unchanged for a stack without ``store``."""
    name = raw.get("store")
    if not name or raw.get("role") == "store":
        return dict(raw), []
    # (Pulumi.yaml's defaults arrive as values: a key at its declared default counts as unset)
    problems = [f"{NAMESPACE}:{k} is set, but the store stack {name} gives it: remove it "
                f"(pulumi config rm {k})" for k in FROM_STORE if k in raw and raw[k] != key_of(k).default]
    try:
        outs = read(name)
    except Exception as exc:  # noqa: BLE001 - one line, the reason, what to do
        reason = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else type(exc).__name__
        return dict(raw), problems + [f"{NAMESPACE}:store = {name!r} is invalid: its outputs could not be read "
                                      f"({reason}); name a stack of this backend that ran `pulumi up` with role: store"]
    missing = [o for o in OUTPUTS if o not in outs]
    admin = outs.get("store_admin") if isinstance(outs.get("store_admin"), dict) else {}
    if missing or not admin.get("access_key") or not admin.get("secret_key"):
        return dict(raw), problems + [f"{NAMESPACE}:store = {name!r} is invalid: that stack exports no store "
                                      f"({', '.join(missing) or 'store_admin keys'} missing); name a role: store "
                                      "stack whose `pulumi up` has finished"]
    new = {**raw, "s3Server": "external", "rustfsEndpoint": outs["store_endpoint"], "bucket": outs["store_bucket"],
           "rustfsAccessKey": admin["access_key"], "rustfsSecretKey": admin["secret_key"]}
    ca = ca_file(outs.get("store_ca") or "", state_dir, stack)
    if ca:
        new["rustfsCaBundle"] = ca
    return new, problems


def ca_file(pem: str, state_dir: str, stack: str) -> Optional[str]:
    """The store's CA bundle where the uploads, the check and rclone can read it (None: no CA)."""
    if not pem:
        return None
    path = os.path.join(state_dir, "store-ca", f"{stack}.pem")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not os.path.exists(path) or open(path, encoding="utf-8").read() != pem:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(pem)
    return path
