"""Dynamic provider: a model folder uploaded under one prefix of the bucket.

Inputs carry the folder's manifest (file -> size, sha256, md5, ETag), computed by the program with
a hash cache, so the preview names every file that would be uploaded or deleted. Create and update
transfer only the files whose object is missing or differs (parallel multipart uploads), delete
the objects of files that left the folder, and verify every object against the manifest
afterwards. Destroy removes the prefix only when purge was configured.

``owner`` (the stack's fully qualified name) makes the prefix the stack's: an owner record in the
bucket (components.storage.owners) is written before the first object; another stack's prefix is
refused (``take_over``: unless that stack is no longer registered on the store), and a purge leaves
a prefix another stack owns as it is.

Identity is what the data is, not how it is reached (issue 57): only another bucket or prefix makes
another upload (a replacement). A new endpoint (its spelling, its port), keys, CA or server behind the
same store is an update of the same objects. The owner record names the upload's ``instance``
(components/providers/succession.py): the delete of an instance that a replacement has taken over
(``pulumi up --replace``) leaves the prefix as it is, purge or not; a purge that cannot reach the server
is skipped in one line, never a failed ``up``.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

import pulumi
from pulumi.dynamic import CheckFailure, CheckResult, CreateResult, DiffResult, ReadResult, Resource, UpdateResult

from components.providers.base import Provider
from components.providers.destroy_config import purge_at_destroy
from components.providers import succession
from components.storage import layout
from components.storage.manifest import MULTIPART_THRESHOLD, PART_SIZE
from components.storage import owners, s3, space
from components.dynamic import secret_outputs
from components.errors import ProviderError

# what the data is: another value is other objects (a replacement); everything else updates these ones
REPLACE_ON = ("bucket", "prefix")
# Files in flight and parts in flight per file: chosen by `make bench` (docs/PERFORMANCE.md).
DEFAULT_FILE_WORKERS = 4
DEFAULT_PART_WORKERS = 1
UPDATE_ON = ("endpoint", "manifest", "source", "access_key", "secret_key", "purge", "file_workers", "part_workers", "store",
             "ca_bundle", "stack", "server", "owner", "take_over", "prune")


PROGRESS_EVERY = 5.0  # seconds between progress lines of a running upload


class Progress:
    """Counts files and bytes sent and prints one line every PROGRESS_EVERY seconds while an
    upload runs (a dynamic provider's output reaches `pulumi up` as it is printed)."""

    def __init__(self, prefix: str, files: int, total: int, every: Optional[float] = None) -> None:
        self.prefix, self.files, self.total = prefix, files, total
        self.every = PROGRESS_EVERY if every is None else every
        self.done_files = 0
        self.done_bytes = 0
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._report, daemon=True)

    def add(self, nbytes: int = 0, files: int = 0) -> None:
        with self._lock:
            self.done_bytes += nbytes
            self.done_files += files

    def line(self) -> str:
        secs = max(time.monotonic() - self.started, 1e-6)
        return (f"upload {self.prefix}: {self.done_files}/{self.files} files, "
                f"{self.done_bytes / 2**20:.0f}/{self.total / 2**20:.0f} MiB, "
                f"{self.done_bytes / 2**20 / secs:.1f} MB/s")

    def _report(self) -> None:
        while not self._stop.wait(self.every):
            print(self.line(), flush=True)

    def __enter__(self) -> "Progress":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def _key(prefix: str, rel: str) -> str:
    return f"{prefix}/{rel}"


def list_prefix(c: Any, bucket: str, prefix: str) -> dict[str, dict[str, Any]]:
    """{relative path: {size, etag}} of the objects under ``prefix/``."""
    out: dict[str, dict[str, Any]] = {}
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for obj in page.get("Contents", []):
            out[obj["Key"][len(prefix) + 1:]] = {"size": obj["Size"], "etag": obj.get("ETag", "").strip('"')}
    return out


def object_matches(live: dict[str, Any] | None, want: dict[str, Any]) -> bool:
    return bool(live) and live["size"] == want["size"] and live["etag"] in (want["etag"], want["md5"])


def verify(c: Any, bucket: str, prefix: str, manifest: dict[str, dict[str, Any]]) -> list[str]:
    """The files whose object is missing or differs from the manifest (empty when all match)."""
    live = list_prefix(c, bucket, prefix)
    bad = []
    for rel, want in sorted(manifest.items()):
        got = live.get(rel)
        if not object_matches(got, want):
            seen = f"size {got['size']}, etag {got['etag']}" if got else "missing"
            bad.append(f"{rel} (expected size {want['size']}, etag {want['etag']}; found {seen})")
    return bad


def abort_incomplete(c: Any, bucket: str, prefix: str) -> int:
    """Abort multipart uploads left under the prefix by an interrupted run; how many."""
    n = 0
    try:
        resp = c.list_multipart_uploads(Bucket=bucket, Prefix=f"{prefix}/")
    except Exception:  # noqa: BLE001 - not every S3 server lists uploads
        return 0
    for up in resp.get("Uploads", []) or []:
        try:
            c.abort_multipart_upload(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
            n += 1
        except Exception:  # noqa: BLE001
            pass
    return n


def put_file(c: Any, bucket: str, key: str, path: str, want: dict[str, Any], part_workers: int,
             sent: Optional[Callable[[int], None]] = None) -> int:
    """Upload one file (multipart from MULTIPART_THRESHOLD on, ``part_workers`` parts in flight) and
    verify it: the ETag the server computed from the bytes it received must equal the one computed
    here. Returns the bytes sent. An unfinished multipart upload is aborted. ``sent`` is told the
    bytes of every part as it completes."""
    sent = sent or (lambda n: None)
    meta = {"sha256": want["sha256"]}
    size = int(want["size"])
    if size < MULTIPART_THRESHOLD:
        with open(path, "rb") as fh:
            etag = c.put_object(Bucket=bucket, Key=key, Body=fh.read(), Metadata=meta)["ETag"]
        sent(size)
    else:
        upload_id = c.create_multipart_upload(Bucket=bucket, Key=key, Metadata=meta)["UploadId"]

        def part(number: int) -> dict[str, Any]:
            with open(path, "rb") as fh:
                fh.seek((number - 1) * PART_SIZE)
                data = fh.read(PART_SIZE)
            resp = c.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data)
            sent(len(data))
            return {"PartNumber": number, "ETag": resp["ETag"]}

        numbers = range(1, (size + PART_SIZE - 1) // PART_SIZE + 1)
        try:
            if part_workers > 1:
                with ThreadPoolExecutor(max_workers=part_workers) as pool:
                    parts = list(pool.map(part, numbers))
            else:
                parts = [part(n) for n in numbers]
            etag = c.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                               MultipartUpload={"Parts": parts})["ETag"]
        except BaseException:
            try:
                c.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
            except Exception:  # noqa: BLE001 - the server may be the thing that failed
                pass
            raise
    etag = etag.strip('"')
    if etag not in (want["etag"], want["md5"]):
        raise ProviderError(f"verification of s3://{bucket}/{key} failed: the server's ETag {etag} is not the "
                            f"expected {want['etag']} (size {size}); the object was corrupted in transit")
    return size


def _head_matches(c: Any, bucket: str, key: str, want: dict[str, Any]) -> bool:
    try:
        head = c.head_object(Bucket=bucket, Key=key)
    except Exception as exc:  # noqa: BLE001
        if s3.is_missing(exc):
            return False
        raise
    return object_matches({"size": head["ContentLength"], "etag": head.get("ETag", "").strip('"')}, want)


def sync(props: dict[str, Any], old_manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    """Make the prefix equal the manifest; return transfer statistics.

    Create (no old manifest): list the prefix and send what is missing or different, so a run
    after an interrupted one sends only the rest. Update: only files whose manifest entry changed
    are candidates (one HEAD each: an interrupted update's finished files are not sent twice), and
    files that left the folder are deleted; unchanged objects are not touched (refresh reports
    drift). Every object sent is verified by the ETag the server computed.
    """
    endpoint, bucket, prefix, source = props["endpoint"], props["bucket"], props["prefix"], props["source"]
    manifest: dict[str, dict[str, Any]] = props["manifest"]
    file_workers = int(props.get("file_workers") or DEFAULT_FILE_WORKERS)
    part_workers = int(props.get("part_workers") or DEFAULT_PART_WORKERS)
    c = s3.client_for(props, max_pool=file_workers * part_workers + 4)
    started = time.monotonic()
    claim(c, props)
    try:
        abort_incomplete(c, bucket, prefix)
        if old_manifest is None:
            live = list_prefix(c, bucket, prefix)
            todo = [rel for rel, want in sorted(manifest.items()) if not object_matches(live.get(rel), want)]
            stale = sorted(set(live) - set(manifest))
        else:
            candidates = [rel for rel, want in sorted(manifest.items()) if old_manifest.get(rel) != want]
            todo = [rel for rel in candidates if not _head_matches(c, bucket, _key(prefix, rel), manifest[rel])]
            stale = sorted(set(old_manifest) - set(manifest))
    except Exception as exc:  # noqa: BLE001
        raise ProviderError(s3.explain(exc, endpoint, f"model {prefix}")) from None

    def upload(rel: str) -> int:
        full = os.path.join(source, rel)
        st = os.stat(full)
        if st.st_size != manifest[rel]["size"]:
            raise ProviderError(f"{full} changed since the preview (size {st.st_size}, manifest "
                                f"{manifest[rel]['size']}); run `pulumi up` again")
        size = put_file(c, bucket, _key(prefix, rel), full, manifest[rel], part_workers, progress.add)
        progress.add(files=1)
        return size

    progress = Progress(prefix, len(todo), sum(int(manifest[rel]["size"]) for rel in todo))
    try:
        with progress:
            if file_workers > 1:
                with ThreadPoolExecutor(max_workers=file_workers) as pool:
                    sent = sum(pool.map(upload, todo))
            else:
                sent = sum(upload(rel) for rel in todo)
        if todo:
            print(progress.line() + " (done)", flush=True)
        stale = delete_stale(c, props, stale)
    except RuntimeError:
        raise
    except Exception as exc:  # noqa: BLE001
        needed = sum(int(manifest[rel]["size"]) for rel in todo) - progress.done_bytes
        raise ProviderError(upload_error(exc, props, needed)) from None
    return {"files": len(todo), "bytes": sent, "deleted": len(stale),
            "seconds": round(time.monotonic() - started, 3)}


def delete_stale(c: Any, props: dict[str, Any], stale: list[str]) -> list[str]:
    """Deletes the objects of ``stale`` (files not in the folder) with pruneObjects; else says they stay, for
    the bucket's copy may be the only one (issue 57). What was deleted."""
    bucket, prefix = props["bucket"], props["prefix"]
    if stale and not props.get("prune"):
        print(f"model {prefix}: {len(stale)} objects under s3://{bucket}/{prefix}/ are not in {props['source']} and "
              f"are kept ({', '.join(stale[:5])}{', ...' if len(stale) > 5 else ''}); pruneObjects: true deletes them",
              flush=True)
        return []
    for i in range(0, len(stale), 1000):
        c.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": _key(prefix, r)} for r in stale[i:i + 1000]],
                                               "Quiet": True})
    return stale


def claim(c: Any, props: dict[str, Any]) -> None:
    """The prefix is this stack's (``owner``, its fully qualified name) before anything is sent: a prefix
    another stack owns is refused, naming it (issue 38; preflight said so at preview already)."""
    fqn, bucket, prefix = props.get("owner"), props["bucket"], props["prefix"]
    if not fqn:
        return
    try:
        problem = owners.claim_problem(c, bucket, prefix, fqn, bool(props.get("take_over")))
        record = owners.owner_record(c, bucket, prefix) or {}
        if not problem and (record.get("stack") != fqn or record.get(succession.KEY) != props.get(succession.KEY)):
            owners.claim(c, bucket, prefix, fqn, str(props.get(succession.KEY) or ""))
    except Exception as exc:  # noqa: BLE001
        raise ProviderError(s3.explain(exc, props["endpoint"], f"owner record of model {prefix}")) from None
    if problem:
        raise ProviderError(f"model {prefix}: prefix '{prefix}' is {problem}")


def upload_error(exc: BaseException, props: dict[str, Any], needed: int) -> str:
    """The one line for a failed upload; a server-side error also names the likely full disk, with
    the server volume's free space where this machine can read it and what was still to send."""
    message = s3.explain(exc, props["endpoint"], f"upload of model {props['prefix']}")
    if s3.error_code(exc) in space.SPACE_CODES:
        message += "; " + space.hint(str(props.get("store") or ""), needed)
    return message


def say_stale(olds: dict[str, Any], news: dict[str, Any]) -> None:
    """Preview's word on the objects an update deletes (files of the deployed revision that left the folder),
    in one line, before they go (issue 57): refused unless pruneObjects is true, for the bucket may hold the
    only copy of them (a folder that lost a shard by accident must not empty the bucket of it)."""
    old, new = olds["manifest"], news["manifest"]
    stale = sorted(set(old) - set(new))
    if not stale:
        return
    size = sum(int(old[r].get("size") or 0) for r in stale) / 2**20
    where = f"s3://{news.get('bucket')}/{news.get('prefix')}/"
    names = ", ".join(stale[:5]) + (", ..." if len(stale) > 5 else "")
    if not news.get("prune"):
        raise ProviderError(
            f"rustfs-vllm:models source {news.get('source')!r} is refused: {len(stale)} files of the deployed revision "
            f"are not in it ({names}); this up would delete their objects ({size:.1f} MiB) from {where}, which may be "
            "their only copy: put the files back, or set rustfs-vllm:pruneObjects true to delete them")
    print(f"model {news.get('prefix')}: this update deletes {len(stale)} objects ({size:.1f} MiB) of files that left "
          f"its folder from {where} ({names}; pruneObjects is true)", flush=True)


class ModelUploadProvider(Provider):
    REPLACE_ON = REPLACE_ON

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = []
        source = news.get("source")
        if isinstance(source, str):
            for problem in layout.folder_problems(source):
                failures.append(CheckFailure("source", f"model folder {source!r}: expected {problem}"))
        manifest = news.get("manifest")
        if isinstance(manifest, dict):
            for rel in manifest:
                if rel.startswith("/") or ".." in rel.split("/"):
                    failures.append(CheckFailure("manifest", f"file {rel!r} leaves the model folder"))
        return CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> CreateResult:
        props = {**props, succession.KEY: succession.new_instance()}
        stats = sync(props)
        return CreateResult(f"s3://{props['bucket']}/{props['prefix']}/", self._outs(props, stats))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in REPLACE_ON if olds.get(k) != news.get(k)]
        changed = replaces or [k for k in UPDATE_ON if olds.get(k) != news.get(k)]
        if not replaces and isinstance(olds.get("manifest"), dict) and isinstance(news.get("manifest"), dict):
            say_stale(olds, news)
        return DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        # another server behind the endpoint (``store`` changed): nothing of the old manifest is
        # known to be there, so compare with a listing, as a create does
        # (or a new container of the server, ``server``: its volume may be new, and empty)
        same_store = olds.get("store") == news.get("store") and olds.get("server") == news.get("server")
        news = {**news, succession.KEY: succession.kept(olds)}
        stats = sync(news, olds.get("manifest") if same_store else None)
        return UpdateResult(self._outs(news, stats))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        """Refresh: report the objects as they are, so drift (a deleted or changed object) shows
        as a manifest difference and the next `up` re-uploads just those files."""
        c = s3.client_for(props)
        try:
            live = list_prefix(c, props["bucket"], props["prefix"])
        except Exception as exc:  # noqa: BLE001
            if s3.is_missing(exc):
                return ReadResult(None, {})
            if s3.is_unreachable(exc):
                # the server itself is lost (refresh sees its container gone; `up` makes it again): the
                # objects stay as deployed until it answers; a server back empty shows at the next refresh
                return ReadResult(id_, props)
            raise ProviderError(s3.explain(exc, props["endpoint"], f"model {props.get('prefix')}")) from None
        manifest = props.get("manifest") or {}
        seen = {rel: want for rel, want in manifest.items() if object_matches(live.get(rel), want)}
        for rel in set(live) - set(manifest):
            seen[rel] = {"size": live[rel]["size"], "sha256": "", "md5": "", "etag": live[rel]["etag"]}
        return ReadResult(id_, {**props, "manifest": seen})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        if not purge_at_destroy(props, f"model {props.get('prefix')}", "the model's objects"):
            return  # the weights stay in the bucket: purge was not configured
        bucket, prefix, fqn = props["bucket"], props["prefix"], props.get("owner")
        c = s3.client_for(props)
        try:
            record = owners.owner_record(c, bucket, prefix) if fqn else None
            held = None if record is None else str(record.get("stack", ""))
            if held not in (None, fqn):     # never another stack's objects (issue 38)
                print(f"model {prefix}: purgeOnDestroy left the prefix as it is: it is owned by stack "
                      f"{held} (its owner record {owners.owner_key(prefix)}), not by this stack", flush=True)
                return
            if succession.successor(record, props):     # a replacement's new upload holds it (issue 57)
                print(f"model {prefix}: replaced, not destroyed: the objects under s3://{bucket}/{prefix}/ stay "
                      "with the upload that replaced this one", flush=True)
                return
            abort_incomplete(c, bucket, prefix)
            live = list_prefix(c, bucket, prefix)
            keys = list(live)
            for i in range(0, len(keys), 1000):
                c.delete_objects(Bucket=bucket,
                                 Delete={"Objects": [{"Key": _key(prefix, r)} for r in keys[i:i + 1000]],
                                         "Quiet": True})
            print(f"model {prefix}: purged {len(keys)} objects ({sum(int(o['size']) for o in live.values()) / 2**20:.1f} "
                  f"MiB) under s3://{bucket}/{prefix}/", flush=True)
            if fqn:
                owners.release(c, bucket, prefix)     # the prefix is free again
        except Exception as exc:  # noqa: BLE001
            if s3.is_missing(exc):
                return
            if s3.is_unreachable(exc):   # never a wedged stack (issue 57): said, and the objects stay
                print(f"model {prefix}: purge skipped: the S3 server at {props['endpoint']} does not answer; the "
                      f"objects under s3://{bucket}/{prefix}/ are left as they are (purge them with `rclone purge` "
                      "once it answers)", flush=True)
                return
            raise ProviderError(s3.explain(exc, props["endpoint"], f"purge of model {prefix}")) from None

    @staticmethod
    def _outs(props: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
        manifest = props["manifest"]
        return {**props, "last_transfer": stats, "file_count": len(manifest),
                "total_bytes": sum(int(e["size"]) for e in manifest.values())}


class ModelUploadResource(Resource, module="rustfs-vllm", name="ModelUpload"):
    last_transfer: pulumi.Output[dict]
    file_count: pulumi.Output[int]
    total_bytes: pulumi.Output[int]

    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(ModelUploadProvider(), name,
                         {"last_transfer": None, "file_count": None, "total_bytes": None, **props}, secret_outputs(opts))
