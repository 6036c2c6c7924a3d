"""ModelUpload: one local Hugging Face folder uploaded under its prefix of the bucket.

The manifest (size, sha256, ETag of every file) is computed here, in the program, with a hash
cache, and passed as an input: the preview shows which files would be uploaded or deleted, and
an unchanged folder gives no diff at all, so a second `up` uploads nothing.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Optional

import pulumi

from components.storage import manifest as manifest_mod
from components.providers.model_upload import DEFAULT_FILE_WORKERS, DEFAULT_PART_WORKERS
from components.providers.model_upload import ModelUploadResource


@dataclass
class ModelUploadArgs:
    endpoint: pulumi.Input[str]
    bucket: pulumi.Input[str]
    prefix: str
    source: str
    access_key: pulumi.Input[str]
    secret_key: pulumi.Input[str]
    cache_dir: str
    purge: bool = False
    store: str = ""                  # where the objects live (server kind and volume, or endpoint)
    ca_bundle: str = ""              # rustfsCaBundle ("" = the system's CAs)
    file_workers: int = DEFAULT_FILE_WORKERS
    part_workers: int = DEFAULT_PART_WORKERS
    stack: str = ""                  # destroy reads purgeOnDestroy from Pulumi.<stack>.yaml as it is then
    server: pulumi.Input[str] = ""   # the S3 server's container (S3Side.instance): a new one is listed again
    owner: str = ""                  # the stack's fully qualified name: the prefix's owner record (issue 38)
    take_over: bool = False          # takeOverPrefixes: a prefix whose owner is no longer registered
    prune: bool = False              # pruneObjects: objects not in the folder may be deleted (issue 57)


class ModelUpload(pulumi.ComponentResource):
    prefix: pulumi.Output[str]
    files: pulumi.Output[list]
    revision: pulumi.Output[str]

    def __init__(self, name: str, args: ModelUploadArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:storage:ModelUpload", name, None, opts)
        key = hashlib.sha256(os.path.realpath(args.source).encode()).hexdigest()[:16]
        manifest = manifest_mod.build(args.source, os.path.join(args.cache_dir, f"hashes-{key}.json"))
        # One digest of the whole folder: what the mount and the server depend on.
        self.revision_digest = hashlib.sha256(
            "".join(f"{k}:{v['sha256']}\n" for k, v in sorted(manifest.items())).encode()).hexdigest()[:16]
        self.resource = ModelUploadResource(f"{name}-objects", {
            "endpoint": args.endpoint, "bucket": args.bucket, "prefix": args.prefix, "source": args.source,
            "manifest": manifest, "purge": args.purge, "store": args.store,
            **({"server": args.server} if args.server else {}),
            "file_workers": args.file_workers, "part_workers": args.part_workers,
            "access_key": pulumi.Output.secret(args.access_key), "secret_key": pulumi.Output.secret(args.secret_key),
            **({"ca_bundle": args.ca_bundle} if args.ca_bundle else {}),  # absent when unset: no diff for old stacks
            **({"stack": args.stack} if args.stack else {}),
            **({"owner": args.owner} if args.owner else {}),
            **({"take_over": True} if args.take_over else {}),
            **({"prune": True} if args.prune else {}),      # absent unless set: no diff for deployed stacks
        }, pulumi.ResourceOptions(parent=self, depends_on=opts.depends_on if opts else None))
        self.manifest = manifest
        self.prefix_value = args.prefix
        self.prefix = pulumi.Output.from_input(args.prefix)
        self.files = pulumi.Output.from_input(sorted(manifest))
        # Resolves after the upload finished: consumers wait for the objects to be there.
        self.revision = self.resource.id.apply(lambda _: self.revision_digest)
        self.register_outputs({"prefix": self.prefix, "files": self.files, "revision": self.revision})
