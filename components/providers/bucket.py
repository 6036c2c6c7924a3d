"""Dynamic provider: an S3 bucket that is created, or adopted when it already exists.

A bucket this stack adopted is never deleted. A bucket it created is deleted on destroy only when
it is empty (model prefixes are purged first when purge was configured); otherwise it is kept and
destroy still succeeds, so destroy never loses data it was not told to delete.

Identity is the bucket's name (issue 57): a new endpoint, keys or CA update the same bucket. A bucket
the stack created holds a record of it (``.rustfs-vllm/bucket.json``: the stack, and the ``instance``
holding it, components/providers/succession.py), written with the root keys (a tenant's key adopts its
platform's bucket and writes none): a replacement (``pulumi up --replace``) finds the bucket its stack
created still its own, and the replaced instance's delete leaves the bucket to its successor. "Empty"
is: nothing but that record. A destroy takes the record out with it (a bucket kept for what it holds is
then adopted by the next stack that names it, this one again too: as before issue 57).

``store`` names where the objects live (the server kind and its volume, or the external
endpoint). When it changes, e.g. a new ``rustfsVolume`` or ``s3Server``, the server answering on the
same endpoint is a different one: the update makes sure the bucket exists there (created or
adopted anew), instead of trusting the state about a server that is gone. ``server`` (the S3
server's container) does the same for a new container of the same server: its volume may have been
lost with it, and refresh could not tell while the server was down.
"""
from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import CheckFailure, CheckResult, CreateResult, DiffResult, ReadResult, Resource, UpdateResult

from components.providers import succession
from components.providers.base import Provider
from components.storage import owners, s3
from components.dynamic import secret_outputs
from components.errors import ProviderError

REPLACE_ON = ("bucket",)       # what the data is; the endpoint, keys and CA are how it is reached


def look(c: Any, props: dict[str, Any], bucket: str) -> None:
    """Raises when ``bucket`` is not there: HeadBucket, or with a tenant's key (``probe``: bucket/prefix/, which
    may not head the bucket) a listing of its own prefix."""
    if props.get("probe"):
        s3.list_probe(c, props["probe"])
    else:
        c.head_bucket(Bucket=bucket)


class BucketProvider(Provider):
    REPLACE_ON = REPLACE_ON

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = []
        name = news.get("bucket")
        if not isinstance(name, str) or not (3 <= len(name) <= 63):
            failures.append(CheckFailure("bucket", f"bucket {name!r}: an S3 bucket name of 3-63 characters"))
        return CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> CreateResult:
        props = {**props, succession.KEY: succession.new_instance()}
        return CreateResult(props["bucket"], {**props, "adopted": self._ensure(props)})

    @staticmethod
    def _ensure(props: dict[str, Any], ours: bool = False) -> bool:
        """Creates the bucket when it is missing; True when it existed (adopted) and this stack did not create
        it (``ours``: the deployed state says it did). The bucket's record names the instance holding it when
        this stack created it."""
        c = s3.client_for(props)
        bucket = props["bucket"]
        adopted = True
        try:
            look(c, props, bucket)
        except Exception as exc:  # noqa: BLE001 - classified below
            if not s3.is_missing(exc):
                raise ProviderError(s3.explain(exc, props["endpoint"], f"bucket {bucket}")) from None
            if props.get("probe"):
                raise ProviderError(f"bucket {bucket}: the store at {props['endpoint']} has no such bucket; its "
                                    "platform stack makes it: run `pulumi up` there, then here") from None
            adopted = False
            try:
                c.create_bucket(Bucket=bucket)
            except Exception as exc2:  # noqa: BLE001
                if s3.error_code(exc2) not in ("BucketAlreadyOwnedByYou",):
                    raise ProviderError(s3.explain(exc2, props["endpoint"], f"create bucket {bucket}")) from None
        if props.get("probe") or not props.get("owner"):
            return adopted
        try:
            record = owners.read_record(c, bucket, owners.BUCKET_RECORD)
            if adopted and (ours or (record and record.get("stack") == props["owner"] and record.get("created"))):
                adopted = False      # this stack created it (an instance before this one): still its own
            if not adopted and (record or {}).get(succession.KEY) != props[succession.KEY]:
                owners.write_record(c, bucket, owners.BUCKET_RECORD, {
                    "stack": props["owner"], "created": True, succession.KEY: props[succession.KEY]})
        except Exception as exc:  # noqa: BLE001
            raise ProviderError(s3.explain(exc, props["endpoint"], f"record of bucket {bucket}")) from None
        return adopted

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in REPLACE_ON if olds.get(k) != news.get(k)]
        changed = replaces or any(olds.get(k) != news.get(k)
                                    for k in ("endpoint", "access_key", "secret_key", "purge", "store", "ca_bundle", "server", "probe",
                                              "owner"))
        return DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        news = {**news, succession.KEY: succession.kept(olds)}
        if olds.get("store") != news.get("store") or olds.get("server") != news.get("server") or \
                not olds.get(succession.KEY) or olds.get("owner") != news.get("owner"):
            # another server behind the endpoint, or a new container of it (its volume may be new too: a
            # lost volume converges in one `up --refresh`): the bucket is made sure of there (and a bucket
            # made before issue 57 gets its record)
            return UpdateResult({**news, "adopted": self._ensure(news, not olds.get("adopted", True))})
        return UpdateResult({**news, "adopted": olds.get("adopted", True)})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        c = s3.client_for(props)
        try:
            look(c, props, id_)
        except Exception as exc:  # noqa: BLE001
            if s3.is_missing(exc):
                return ReadResult(None, {})
            if s3.is_unreachable(exc):
                # the server itself is lost (refresh sees its container gone; `up` makes it again):
                # nothing to tell of the bucket until it answers, so it stays as deployed
                return ReadResult(id_, props)
            raise ProviderError(s3.explain(exc, props["endpoint"], f"bucket {id_}")) from None
        return ReadResult(id_, props)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        if props.get("adopted", True):
            return  # not ours: never deleted
        c = s3.client_for(props)
        try:
            record = owners.read_record(c, id_, owners.BUCKET_RECORD)
            if succession.successor(record, props):
                print(f"bucket {id_}: replaced, not destroyed: it stays with the bucket resource that replaced this "
                      "one", flush=True)
                return
            listing = c.list_objects_v2(Bucket=id_, MaxKeys=2)
            if record is not None:      # the stack lets go of it: a later stack (this one again too) adopts it
                owners.remove_record(c, id_, owners.BUCKET_RECORD)
            if [o for o in listing.get("Contents", []) if o["Key"] != owners.BUCKET_RECORD]:
                return  # data in it: keep the bucket (purge removes only our prefixes)
            c.delete_bucket(Bucket=id_)
        except Exception as exc:  # noqa: BLE001
            if s3.is_missing(exc) or s3.error_code(exc) == "BucketNotEmpty":
                return
            if s3.is_unreachable(exc):   # the server is gone already: keeping is the safe side
                print(f"bucket {id_}: the S3 server at {props['endpoint']} does not answer; the bucket and what "
                      "it holds are left as they are (on the server's kept volume)", flush=True)
                return
            raise ProviderError(s3.explain(exc, props["endpoint"], f"delete bucket {id_}")) from None


class BucketResource(Resource, module="rustfs-vllm", name="Bucket"):
    adopted: pulumi.Output[bool]

    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(BucketProvider(), name, {"adopted": None, **props}, secret_outputs(opts))
