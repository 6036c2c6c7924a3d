"""What an `up` deletes from the bucket, said at preview before it goes (issue 57).

A model's objects leave the bucket in an `up` only through its upload's delete with purgeOnDestroy (the
model left the stack, or it moved to another bucket: its old upload is deleted or replaced) or through an
update that drops files (the upload's diff says those, and refuses them without pruneObjects:
components/providers/model_upload.py). A removed resource gets no diff at preview, so the program says
the first kind itself: the last `up` exported where each model's objects are (``stored_models``); this
run reads that through a reference to its own stack and compares it with the configuration.

One line per prefix: how many objects and bytes would go, and why; or, without purge, that they stay.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import pulumi

from components.config import previous as last_up
from components.config.runtime import stack_fqn
from components.config.spec import StackConfig
from components.storage import owners, s3

OUTPUT = "stored_models"     # {prefix: "s3://bucket/prefix/"}: where each model's objects are


def stored(cfg: StackConfig) -> dict[str, str]:
    """The ``stored_models`` output of this run: where each model's objects are."""
    return {m.prefix: f"s3://{cfg.bucket}/{m.prefix}/" for m in cfg.models}


def previous() -> Optional[dict[str, str]]:
    """``stored_models`` as the last `up` of this stack exported it (None: no such `up`, or unreadable)."""
    value = last_up.output(OUTPUT)
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else None


def _split(url: str) -> tuple[str, str]:
    bucket, _, prefix = url.removeprefix("s3://").rstrip("/").partition("/")
    return bucket, prefix


def lines(cfg: StackConfig, before: Optional[Mapping[str, str]], count: Callable[[str, str], Any]) -> list[str]:
    """One line per prefix whose objects this `up` deletes, or keeps as they leave the stack.
    ``count(bucket, prefix)`` -> (objects, bytes, owner) of what is there now."""
    if not before:
        return []
    now, out = stored(cfg), []
    for prefix, url in sorted(before.items()):
        if now.get(prefix) == url:
            continue
        why = f"it moves to {now[prefix]}" if prefix in now else "no model of the stack is stored there now"
        try:
            n, size, owner = count(*_split(url))
        except Exception:  # noqa: BLE001 - the server does not answer (yet): say what can be said
            n, size, owner = None, 0, stack_fqn()
        if owner not in (None, stack_fqn()):
            continue        # another stack's prefix: neither purged nor this stack's to speak of
        what = f"{n} objects ({size / 2**20:.1f} MiB)" if n is not None else "its objects (the server does not answer)"
        if cfg.purge_on_destroy:
            out.append(f"model prefix {prefix}: this up deletes {what} under {url}: {why} and purgeOnDestroy is true")
        else:
            out.append(f"model prefix {prefix}: {what} under {url} stay in the bucket: {why} (purgeOnDestroy is false)")
    return out


def s3_count(cfg: StackConfig) -> Callable[[str, str], tuple[int, int, Optional[str]]]:
    def count(bucket: str, prefix: str) -> tuple[int, int, Optional[str]]:
        c = s3.client(cfg.rustfs_endpoint, cfg.access_key, cfg.secret_key, retries=1, ca_bundle=cfg.ca_bundle)
        n = size = 0
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
            for obj in page.get("Contents", []):
                n, size = n + 1, size + int(obj["Size"])
        return n, size, owners.owner(c, bucket, prefix)
    return count


def say(cfg: StackConfig) -> None:
    """The lines of this run (preview and `up` alike), as warnings of the stack."""
    if cfg.role == "store":
        return
    for line in lines(cfg, previous(), s3_count(cfg)):
        pulumi.log.warn(line)
