"""ModelCopy: a model's weights on the serving host's own disk (``loadFormat: local_copy``).

The two-phase load that peers use for bucket-backed serving (a node-local model cache; bucket ->
local NVMe): the host copies the model's upload revision from the bucket once, with many ranged
GETs in flight (``rclone copy``, no FUSE), checks every file against the upload manifest (size and
sha256), and vLLM then reads local disk at every start: ``up``, a restart after a crash or a host
reboot, a key rotation. The bucket stays the only source of truth: the copy is made again when the
model's revision changes (preview shows this resource replaced, with the revision), and when it
was lost (the program looks for it on this machine, as it does for dead mounts).

The copy lives at ``<mountCacheDir>/<prefix>/copy/<revision>`` and is bound read-only into the
vLLM container at ``/models/<prefix>`` (the guide's path: the argv does not change). Destroy keeps
it (the next ``up`` starts warm) and says where it is and how big; ``purgeOnDestroy`` removes it.

A pulumi-command command running ``scripts/rclone-mount copy-up`` on the host
(components/mounting/copy_tool.py); credentials reach rclone in the command's secret environment,
never argv.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pulumi

from components.hosts.types import Host
from components.mounting import copy_tool
from components.docker.mounts import next_generation, remote_env
from components.storage import tls


@dataclass
class ModelCopyArgs:
    remote: str
    endpoint: pulumi.Input[str]
    bucket: pulumi.Input[str]
    prefix: str
    access_key: pulumi.Input[str]
    secret_key: pulumi.Input[str]
    root: str                                          # <mountCacheDir>/<prefix>/copy
    manifest: Mapping[str, Mapping[str, object]]
    revision: pulumi.Input[str]                        # resolves once the upload is done
    revision_digest: str                               # the same, known at preview
    host: Host
    flags: Sequence[str] = ()                          # rclone copy flags ([] = copy_tool's defaults)
    ca_bundle: str = ""
    purge: bool = False


def expectations(manifest: Mapping[str, Mapping[str, object]]) -> dict[str, list]:
    """{file: [size, sha256]}: every file of the upload, checked whole after the copy."""
    return {rel: [int(e["size"]), str(e["sha256"])] for rel, e in sorted(manifest.items())}


def copy_root(mount_cache_dir: str, prefix: str) -> str:
    return os.path.join(mount_cache_dir, prefix, "copy")


def generation(marker_file: str, folder: str, local: bool) -> int:
    """The copy generation to ask for: the marker's, or the next one when the copy is gone."""
    return next_generation(marker_file, lambda: local and not os.path.isfile(os.path.join(folder, copy_tool.MARKER)),
                           f"the local copy at {folder} is gone (removed, or its disk replaced); this run copies "
                           "the model from the bucket again and replaces its container")


class ModelCopy(pulumi.ComponentResource):
    path: pulumi.Output[str]

    def __init__(self, name: str, args: ModelCopyArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:serving:ModelCopy", name, None, opts)
        host, r = args.host, args.remote
        folder = os.path.join(args.root, args.revision_digest)
        marker = host.marker_file(f"{args.prefix}.copy")
        gen = generation(marker, folder, bool(marker))
        expect = json.dumps(expectations(args.manifest))
        env = pulumi.Output.all(args.endpoint, args.bucket, args.access_key, args.secret_key).apply(lambda v: {
            "RV_TOKEN": hashlib.sha256(json.dumps([v[0], v[1], args.root, args.revision_digest, host.rclone,
                                                   list(args.flags), gen, args.ca_bundle]).encode()).hexdigest()[:16],
            "RV_RCLONE": host.rclone, "RV_REMOTE": r, "RV_SOURCE": f"{v[1]}/{args.prefix}",
            "RV_ROOT": args.root, "RV_COPY_ROOT": args.root, "RV_REVISION": args.revision_digest,
            "RV_COPY_FLAGS": "\n".join(args.flags), "RV_LOG": host.log_file(f"{args.prefix}-copy"),
            "RV_EXPECT": expect, "RV_MARKER": marker, "RV_GENERATION": str(gen),
            "RV_PURGE": "1" if args.purge else "0",
            **({"RV_CA_CERT": host.ca_path or args.ca_bundle} if args.ca_bundle else {}),
            **remote_env(r, v[0], v[2], v[3]),
        })
        self.command = host.command(
            self, name, "copy-up", "copy-down", pulumi.Output.secret(env),
            [args.endpoint, args.bucket, args.prefix, args.root, args.revision, host.rclone, list(args.flags),
             f"generation-{gen}", *([f"ca-{args.ca_bundle}-{tls.fingerprint(args.ca_bundle)}"] if args.ca_bundle else [])],
            # the new copy is made while the old container still serves from the old one; the old
            # resource's delete comes after the container was replaced
            opts, delete_first=False)
        # what vLLM reads: known at preview, resolved once the copy is complete
        self.path = self.command.id.apply(lambda _: folder)
        self.generation = gen
        self.register_outputs({"path": self.path})
