"""Preflight of a stack's model prefixes in a shared bucket (issue 38): a prefix another stack owns is
refused at preview, one line naming the model's key, the owner and what to do; nothing is made.

The S3 server is asked only where it answers now: a stack whose own server is not up yet has no bucket
in which another stack could own anything, and keys the server refuses are the credential check's to
report at `up`. The upload checks again before its first object
(components/providers/model_upload.py), for a stack that raced this one.
"""
from __future__ import annotations

from components.config.schema import NAMESPACE
from components.config.spec import StackConfig
from components.config.runtime import stack_fqn
from components.storage import owners, s3


def problems(cfg: StackConfig) -> list[str]:
    if not cfg.models:
        return []
    c = s3.client(cfg.rustfs_endpoint, cfg.access_key, cfg.secret_key, retries=1, ca_bundle=cfg.ca_bundle)
    me, out = stack_fqn(), []
    for m in cfg.models:
        try:
            problem = owners.claim_problem(c, cfg.bucket, m.prefix, me, cfg.take_over_prefixes)
        except Exception:  # noqa: BLE001 - no server or bucket yet (nothing is owned there), or keys the
            return out     # credential check refuses at `up` with its own line; the upload checks again
        if problem:
            out.append(f"{NAMESPACE}:models[{m.name}].prefix = {m.prefix!r} is invalid: {problem}")
    return out
