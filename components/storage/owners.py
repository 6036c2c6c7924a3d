"""Who owns what in a shared bucket (issue 38): records kept in the bucket itself, beside the models,
under ``.rustfs-vllm/`` (no model prefix starts with a dot, and no read key reaches it).

- ``.rustfs-vllm/owners/<prefix>.json``: the stack that uploaded ``<prefix>`` first (its fully
  qualified name, ``<org>/<project>/<stack>``). Another stack's upload under it is refused, naming
  the owner; destroy and purgeOnDestroy of a stack touch only the prefixes it owns. A record outlives
  a destroy without purge (the data stays, and so does its owner); ``takeOverPrefixes`` lets another
  stack take it once the owner is no longer registered.
- ``.rustfs-vllm/stacks/<org>/<project>/<stack>.json``: a serving stack that keeps its models in a
  platform stack's store (``store: <org>/<project>/<stack>``), registered by its ``up``, removed by its
  destroy. The platform stack's destroy refuses while any is left.

Each record also names the ``instance`` of the resource that wrote it last (issue 57): a token its create
makes and its updates keep. A replacement's new instance writes the record before the old one's delete
runs (create before delete), so that delete sees the prefix or the registration is held by its successor
and leaves it as it is (components/providers/succession.py).
"""
from __future__ import annotations

import json
import time
from typing import Any, Optional

from components.storage import s3

ROOT = ".rustfs-vllm"
OWNERS = f"{ROOT}/owners/"
STACKS = f"{ROOT}/stacks/"
BUCKET_RECORD = f"{ROOT}/bucket.json"     # the stack that created the bucket, and the Bucket instance holding it
GUARD_RECORD = f"{ROOT}/store.json"       # a platform's store guard: the instance that holds it
TENANT_KEYS = f"{ROOT}/tenant-keys/"      # a platform's tenants: the user each of their keys is now


def owner_key(prefix: str) -> str:
    return f"{OWNERS}{prefix}.json"


def stack_key(fqn: str) -> str:
    return f"{STACKS}{fqn}.json"


def _read(c: Any, bucket: str, key: str) -> Optional[dict]:
    try:
        body = c.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as exc:  # noqa: BLE001 - classified: a missing record is None, the rest raises
        if s3.is_missing(exc):
            return None
        raise
    try:
        record = json.loads(body)
    except ValueError:
        return {"stack": f"<unreadable record {key}>"}
    return record if isinstance(record, dict) else {"stack": f"<unreadable record {key}>"}


def tenant_key_record(fqn: str, kind: str) -> str:
    return f"{TENANT_KEYS}{fqn}/{kind}.json"


def read_record(c: Any, bucket: str, key: str) -> Optional[dict]:
    """A record of the program's in the bucket (None: there is none)."""
    return _read(c, bucket, key)


def write_record(c: Any, bucket: str, key: str, body: dict) -> None:
    c.put_object(Bucket=bucket, Key=key, ContentType="application/json",
                 Body=json.dumps({**body, "since": int(time.time())}).encode())


def remove_record(c: Any, bucket: str, key: str) -> None:
    c.delete_object(Bucket=bucket, Key=key)


def owner_record(c: Any, bucket: str, prefix: str) -> Optional[dict]:
    """The owner record of ``prefix`` ({"stack", "since", "instance"}; None: no record)."""
    return _read(c, bucket, owner_key(prefix))


def owner(c: Any, bucket: str, prefix: str) -> Optional[str]:
    """The fully qualified name of the stack that owns ``prefix`` (None: no record)."""
    record = owner_record(c, bucket, prefix)
    return None if record is None else str(record.get("stack", ""))


def claim(c: Any, bucket: str, prefix: str, fqn: str, instance: str = "") -> None:
    body = {"stack": fqn, "since": int(time.time()), **({"instance": instance} if instance else {})}
    c.put_object(Bucket=bucket, Key=owner_key(prefix), ContentType="application/json", Body=json.dumps(body).encode())


def release(c: Any, bucket: str, prefix: str) -> None:
    c.delete_object(Bucket=bucket, Key=owner_key(prefix))


def registered(c: Any, bucket: str) -> list[str]:
    """The serving stacks registered on this bucket's store, by fully qualified name."""
    names: list[str] = []
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=STACKS):
        names += [o["Key"][len(STACKS):-len(".json")] for o in page.get("Contents", []) if o["Key"].endswith(".json")]
    return sorted(names)


def is_registered(c: Any, bucket: str, fqn: str) -> bool:
    return registration(c, bucket, fqn) is not None


def registration(c: Any, bucket: str, fqn: str) -> Optional[dict]:
    """A serving stack's registration ({"stack", "prefixes", "since", "instance"}; None: not registered)."""
    return _read(c, bucket, stack_key(fqn))


def register(c: Any, bucket: str, fqn: str, prefixes: list[str], instance: str = "") -> None:
    body = {"stack": fqn, "prefixes": sorted(prefixes), "since": int(time.time()),
            **({"instance": instance} if instance else {})}
    c.put_object(Bucket=bucket, Key=stack_key(fqn), ContentType="application/json", Body=json.dumps(body).encode())


def unregister(c: Any, bucket: str, fqn: str) -> None:
    c.delete_object(Bucket=bucket, Key=stack_key(fqn))


def claim_problem(c: Any, bucket: str, prefix: str, fqn: str, take_over: bool) -> str:
    """Why ``fqn`` may not upload under ``prefix`` ("" when it may): "owned by stack ..., what to do"."""
    held_by = owner(c, bucket, prefix)
    if held_by in (None, fqn):
        return ""
    if take_over and not is_registered(c, bucket, held_by):
        return ""
    where = f"its owner record {owner_key(prefix)} in bucket {bucket}"
    if take_over:
        return (f"owned by stack {held_by} ({where}), which is still registered on the store: takeOverPrefixes "
                "takes only a prefix whose owner is gone; choose another prefix")
    return (f"owned by stack {held_by} ({where}); choose another prefix, or, if that stack no longer exists, set "
            "takeOverPrefixes: true")
