"""Bucket: the S3 bucket that holds every model, one prefix each. Created, or adopted if it exists.

The component's `depends_on` (the S3 server being ready) is passed to the bucket resource itself:
a component's dependencies do not reach its children on their own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi

from components.providers.bucket import BucketResource


@dataclass
class BucketArgs:
    endpoint: pulumi.Input[str]
    bucket: str
    access_key: pulumi.Input[str]
    secret_key: pulumi.Input[str]
    purge: bool = False
    store: str = ""                  # where the objects live (server kind and volume, or endpoint)
    ca_bundle: str = ""              # rustfsCaBundle ("" = the system's CAs)
    server: pulumi.Input[str] = ""   # the S3 server's container (S3Side.instance): a new one is checked again
    probe: str = ""                  # a tenant's key: bucket/prefix/ it lists instead of HeadBucket ("" = root keys)
    owner: str = ""                  # the stack's fully qualified name: the record of a bucket it created (issue 57)


class Bucket(pulumi.ComponentResource):
    name: pulumi.Output[str]
    adopted: pulumi.Output[bool]

    def __init__(self, name: str, args: BucketArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:storage:Bucket", name, None, opts)
        self.resource = BucketResource(f"{name}-bucket", {
            "endpoint": args.endpoint, "bucket": args.bucket, "purge": args.purge, "store": args.store,
            **({"server": args.server} if args.server else {}),
            "access_key": pulumi.Output.secret(args.access_key), "secret_key": pulumi.Output.secret(args.secret_key),
            **({"ca_bundle": args.ca_bundle} if args.ca_bundle else {}),  # absent when unset: no diff for old stacks
            **({"probe": args.probe} if args.probe else {}),
            **({"owner": args.owner} if args.owner else {}),
        }, pulumi.ResourceOptions(parent=self, depends_on=opts.depends_on if opts else None))
        self.name = self.resource.id
        self.adopted = self.resource.adopted
        self.register_outputs({"name": self.name, "adopted": self.adopted})
