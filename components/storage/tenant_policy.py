"""What a tenant's key may do on a platform's store (issue 45): its RustFS user's name and its policy.

A platform stack (role store) lists its tenants in ``tenants`` (a serving stack's fully qualified name
and the model prefixes it may hold). For each one it makes two users through the admin API with the
root keys (components/core/tenants.py): this key, with which the serving stack uploads, claims and
purges, and a read key (components/storage/read_policy.py) its serving hosts mount with. The root
keys stay on the platform's side: a tenant's key has no admin rights. Tried on RustFS 1.0.1: a user whose
policy allows ``admin:CreateUser``, ``admin:CreatePolicy`` and ``admin:AttachUserOrGroupPolicy`` only on
``arn:aws:s3:::<bucket>/<its prefix>/*`` made a user, a policy of ``s3:*`` on everything, attached it (and
``consoleAdmin`` too), and that user listed the buckets and wrote under another prefix: the admin actions
ignore the Resource. So the platform makes each tenant's read user itself.

The policy, tried on RustFS 1.0.1 with such a user (boto3; tests/e2e/test_platform.py runs it through
the engine):

- ``s3:GetObject``, ``s3:PutObject``, ``s3:DeleteObject``, ``s3:AbortMultipartUpload`` and
  ``s3:ListMultipartUploadParts`` on ``<bucket>/<prefix>`` and ``<bucket>/<prefix>/*`` of each of its
  prefixes, on the owner record of each (``.rustfs-vllm/owners/<prefix>.json``) and on its own
  registration (``.rustfs-vllm/stacks/<fqn>.json``): uploads (multipart ones too), copies within its
  prefixes, deletes, multi-object deletes, the claims and the registration work;
- ``s3:GetObject`` on ``.rustfs-vllm/*``: a claim reads a prefix's owner and whether that owner is still
  registered (the records name stacks and prefixes, nothing secret);
- ``s3:ListBucket`` only where ``s3:prefix`` is ``<prefix>/`` or under it (as the read key's);
  ``s3:ListBucketMultipartUploads`` the same way (an upload aborts its own prefix's unfinished ones; tried
  on RustFS 1.0.1: a listing of another prefix's, or of the whole bucket's, is refused, 403, so a tenant
  does not see the key names of another's unfinished uploads: issue 57);
- nothing else: PUT, DELETE, GET or a listing under another tenant's prefix, another prefix's owner
  record, another stack's registration, a copy from another prefix, CreateBucket, ListBuckets and
  HeadBucket are refused (403 AccessDenied; a multi-object delete of another's keys answers 200 and
  deletes nothing). So the key's own checks (the credential check, the bucket) list its first prefix
  instead of the buckets.
"""
from __future__ import annotations

import hashlib
import json
from typing import Iterable

from components.storage import owners
from components.storage.read_policy import MAX_USER

WRITE = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"]


def user_base(fqn: str, bucket: str) -> str:
    """The start of a tenant key's access keys: ``rvten`` and 10 hex of the tenant and bucket (4 hex of the
    user's own follow: read_policy.user_name)."""
    return "rvten" + hashlib.sha256(f"{fqn}/{bucket}".encode()).hexdigest()[:10]


def read_base(fqn: str, bucket: str) -> str:
    """The start of a tenant's read key's access keys (``rvrd`` and 10 hex): apart from the stacks' own
    read keys (``rvread``), so a platform's tenant never takes a name a stack made for itself."""
    return "rvrd" + hashlib.sha256(f"read:{fqn}/{bucket}".encode()).hexdigest()[:10]


def slug(fqn: str) -> str:
    """A tenant's resource names: 8 hex of its fully qualified name (names stay short and URN-safe)."""
    return hashlib.sha256(fqn.encode()).hexdigest()[:8]


def policy(bucket: str, fqn: str, prefixes: Iterable[str]) -> dict:
    """The canned policy of the tenant ``fqn``'s key for ``prefixes`` of ``bucket`` (see the module's text)."""
    ps = sorted(set(prefixes))
    arn = f"arn:aws:s3:::{bucket}"
    written = [f"{arn}/{p}{tail}" for p in ps for tail in ("", "/*")] + \
              [f"{arn}/{owners.owner_key(p)}" for p in ps] + [f"{arn}/{owners.stack_key(fqn)}"]
    listed = [f"{p}{tail}" for p in ps for tail in ("/", "/*")]
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "WriteOwnPrefixes", "Effect": "Allow", "Action": WRITE, "Resource": written},
        {"Sid": "ReadRecords", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [f"{arn}/{owners.ROOT}/*"]},
        {"Sid": "ListOwnPrefixes", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [arn],
         "Condition": {"StringLike": {"s3:prefix": listed}}},
        {"Sid": "OwnUnfinishedUploads", "Effect": "Allow", "Action": ["s3:ListBucketMultipartUploads"],
         "Resource": [arn], "Condition": {"StringLike": {"s3:prefix": listed}}},
    ]}


def policy_json(bucket: str, fqn: str, prefixes: Iterable[str]) -> str:
    return json.dumps(policy(bucket, fqn, prefixes), sort_keys=True)


assert len(user_base("x", "y")) + 4 <= MAX_USER and len(read_base("x", "y")) + 4 <= MAX_USER
