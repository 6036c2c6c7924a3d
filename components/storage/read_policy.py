"""What a stack's read key may do: its RustFS user's name, its policy's name and the policy itself.

One read identity per stack, not per model: every serving host and pod of a stack reads the same set
of models (a Docker host mounts only its own, but the hosts are one trust domain managed by one
`pulumi up`), so one key per stack is what a reader needs; per model would add a user, a policy and a
secret per model and per host without taking anything from a host an attacker already holds.

The policy, tried on RustFS 1.0.1 with the read key (rclone mount, rclone lsf/cat, boto3):

- ``s3:GetObject`` on ``<bucket>/<prefix>/*`` and on ``<bucket>/<prefix>`` itself: rclone's mount
  first sends HEAD ``/<bucket>/<prefix>`` (is the remote a file?); with the object ARN it gets 404
  (no such object) instead of 403. GetObject also grants HeadObject and ranged GETs.
- ``s3:ListBucket`` on ``<bucket>`` only where ``s3:prefix`` is ``<prefix>/`` or under it: rclone
  lists ``prefix=<prefix>/`` with and without a delimiter, the streamer and the copies the same. The
  bare ``<prefix>`` is NOT allowed: a listing with ``Prefix=<prefix>`` would also name the keys of
  every prefix that starts with it (``<prefix>-x/...``, ``<prefix>2/...``, other stacks' models). A
  listing of the bucket root, of the bare prefix or of another prefix is refused (403 AccessDenied).
- nothing else: PUT, DELETE and multi-object DELETE of the model's own objects, CreateBucket and
  reads of other prefixes are refused (403; multi-delete answers 200 with AccessDenied per key and
  deletes nothing). HeadBucket is refused too; neither rclone nor the Run:ai streamer needs it.
"""
from __future__ import annotations

import hashlib
import json
from typing import Iterable

MAX_USER = 20          # RustFS (as MinIO) takes access keys of 3-20 characters for its users


def user_base(stack: str, bucket: str) -> str:
    """The start of the stack's read users' access keys: ``rvread`` and 10 hex of the stack and bucket."""
    return "rvread" + hashlib.sha256(f"{stack}/{bucket}".encode()).hexdigest()[:10]


def made_record(state_dir: str, base: str) -> str:
    """The file that says this project made (or refreshed) a read key of ``base`` (no key in it): the
    program's note on the scoped default is said only while there is none (this update makes the key)."""
    return f"{state_dir}/read-keys/{base}"


def record_made(state_dir: str, base: str) -> None:
    """made_record written (best effort: a note, not a state)."""
    import os

    path = made_record(state_dir, base)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError:
        pass


def user_name(base: str, tag: str) -> str:
    """One read user: the base and 4 hex of its own (20 characters): each key the stack makes is a user
    of its own, so a replacement (a rotation) makes the new one before the old one goes."""
    return f"{base}{tag}"[:MAX_USER]


def policy_name(user: str) -> str:
    return f"rustfs-vllm-{user}"


def policy(bucket: str, prefixes: Iterable[str]) -> dict:
    """The canned policy of a read key for ``prefixes`` of ``bucket`` (see the module's text)."""
    ps = sorted(set(prefixes))
    objects = [f"arn:aws:s3:::{bucket}/{p}{tail}" for p in ps for tail in ("", "/*")]
    listed = [f"{p}{tail}" for p in ps for tail in ("/", "/*")]
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "ReadModels", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": objects},
        {"Sid": "ListModels", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [f"arn:aws:s3:::{bucket}"],
         "Condition": {"StringLike": {"s3:prefix": listed}}},
    ]}


def policy_json(bucket: str, prefixes: Iterable[str]) -> str:
    return json.dumps(policy(bucket, prefixes), sort_keys=True)


INSTANCE_ID = "rustfs-vllm-grant-"      # a policy document's Id: the grant instance that wrote it (issue 57)


def with_instance(document: dict, instance: str) -> dict:
    """``document`` naming the grant instance that writes it (its ``ID``, as RustFS 1.0.1 spells it: ``Id`` is
    refused, 400 unknown field; unchanged without one)."""
    return {**document, "ID": f"{INSTANCE_ID}{instance}"} if instance else document


def instance_of(text: str) -> str:
    """The grant instance a policy document (as the admin API answers it) names ("" when none)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return ""
    for wrapper in ("policy", "Policy"):    # RustFS 1.0.1 answers {"policy_name", "policy": {...}, ...}; MinIO the document
        if isinstance(doc, dict) and isinstance(doc.get(wrapper), dict):
            doc = doc[wrapper]
    found = str(doc.get("Id") or doc.get("ID") or "") if isinstance(doc, dict) else ""
    return found[len(INSTANCE_ID):] if found.startswith(INSTANCE_ID) else ""
