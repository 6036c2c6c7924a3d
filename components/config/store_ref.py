"""A serving stack's store by reference (``store: <org>/<project>/<stack>``, issue 38): the platform
stack's outputs read through a StackReference, at preview as at `up`, and turned into the keys the
rest of the program reads (s3Server external, rustfsEndpoint, bucket, the CA bundle), so everything
downstream (preflight, the credential check, uploads) is what an external server gets.

The keys are this stack's own (issue 45): the platform lists its tenants (``tenants``) and makes each one
a key allowed only under its prefixes and a read key (components/core/tenants.py); the platform exports
none of them (whoever reads a stack by reference holds all its outputs), ``scripts/tenant-key`` sets
them in this stack's config as the secret ``storeKey``. This stack's prefixes must be among those the
store gives it (``store_tenants``).

The keys a store gives may not be set in the serving stack: each one set is a problem naming it.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional

import pulumi
# the SDK's own bridge from a coroutine to the program's synchronous code (what pulumi.runtime.invoke
# uses); the validated configuration needs the platform's values before any resource is declared
from pulumi.runtime.sync_await import _sync_await

from components.config import runtime
from components.config.schema import NAMESPACE, key as key_of

FROM_STORE = ("s3Server", "rustfsEndpoint", "rustfsCaBundle", "bucket", "rustfsAccessKey", "rustfsSecretKey")
# what a role: store stack exports (components/core/plan.py): no key among them
OUTPUTS = ("store_endpoint", "store_bucket", "store_ca", "store_tenants")
STORE_KEY = ("access_key", "secret_key", "read_access_key", "read_secret_key")


def read_outputs(name: str) -> dict[str, Any]:
    """The platform stack's store outputs, plain values."""
    ref = pulumi.StackReference("store", stack_name=name)
    out: dict[str, Any] = {}
    for key in OUTPUTS:
        details = _sync_await(ref.get_output_details(key))
        value = details.value if details.value is not None else details.secret_value
        if value is not None:
            out[key] = value
    return out


def resolve(raw: Mapping[str, Any], state_dir: str, stack: str, me: str = "",
            read: Any = read_outputs) -> tuple[dict[str, Any], list[str]]:
    """(raw with the store's endpoint, bucket and CA and this stack's own keys (storeKey), problems); ``raw``
    unchanged for a stack without ``store``. ``me``: this stack's fully qualified name (the tenant's)."""
    name = raw.get("store")
    if not name or raw.get("role") == "store":
        return dict(raw), []
    me = me or runtime.stack_fqn()
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
    if missing:
        return dict(raw), problems + [f"{NAMESPACE}:store = {name!r} is invalid: that stack exports no store "
                                      f"({', '.join(missing)} missing); name a role: store stack whose `pulumi up` "
                                      "has finished (with this version of the program)"]
    tenants = outs["store_tenants"] if isinstance(outs["store_tenants"], dict) else {}
    give = f"scripts/tenant-key {name} {me}"
    if me not in tenants:
        return dict(raw), problems + [f"{NAMESPACE}:store = {name!r} is invalid: that store has no tenant {me} (its "
                                      "rustfs-vllm:tenants lists " + (", ".join(sorted(tenants)) or "none") +
                                      "); ask its operator to add this stack with its model prefixes, run `pulumi up` "
                                      f"there, then `{give}`"]
    key, problem = store_key(raw.get("storeKey"), give)
    if problem:
        return dict(raw), problems + [problem]
    new = {**raw, "s3Server": "external", "rustfsEndpoint": outs["store_endpoint"], "bucket": outs["store_bucket"],
           "rustfsAccessKey": key["access_key"], "rustfsSecretKey": key["secret_key"],
           "storeReadAccessKey": key["read_access_key"], "storeReadSecretKey": key["read_secret_key"],
           "storePrefixes": list(tenants[me] or [])}
    ca = ca_file(outs.get("store_ca") or "", state_dir, stack)
    if ca:
        new["rustfsCaBundle"] = ca
    return new, problems


def store_key(value: Any, give: str) -> tuple[dict[str, str], str]:
    """storeKey read: (its four values, "") or ({}, the problem naming the key and the fix)."""
    if not value:
        return {}, (f"{NAMESPACE}:storeKey is not set: a stack on a store uses its own keys there, never the store's "
                    f"root keys; the store's operator gives them with `{give}`")
    try:
        key = json.loads(value)
    except ValueError:
        key = None
    if not isinstance(key, dict) or not all(isinstance(key.get(k), str) and key[k] for k in STORE_KEY):
        return {}, (f"{NAMESPACE}:storeKey = '<secret>' is invalid: a JSON object with {', '.join(STORE_KEY)} (what "
                    f"scripts/tenant-key sets); set it again with `{give}`")
    return {k: key[k] for k in STORE_KEY}, ""


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
