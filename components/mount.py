"""RcloneMount: the bucket mounted read-only on this host with rclone over FUSE.

A LocalCommand runs ``scripts/rclone-mount``: create mounts (and waits until the model files are
visible), delete unmounts (and succeeds when nothing is mounted), refresh checks that the mount is
alive. Credentials reach rclone through RCLONE_CONFIG_<REMOTE>_* variables, never argv. Anything
that needs a remount (bucket, endpoint, path, flags, rclone binary) is in ``triggers``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Optional, Sequence

import pulumi

from .resources import CommandResource

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "rclone-mount")


@dataclass
class RcloneMountArgs:
    remote: str
    endpoint: pulumi.Input[str]
    bucket: pulumi.Input[str]
    access_key: pulumi.Input[str]
    secret_key: pulumi.Input[str]
    mount_path: str
    cache_dir: str
    rclone: str
    flags: Sequence[str] = ()
    wait_files: Sequence[pulumi.Input[str]] = ()
    log_file: str = "/dev/null"
    revisions: Sequence[pulumi.Input[str]] = field(default_factory=list)


def remote_name(name_prefix: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name_prefix).upper()


class RcloneMount(pulumi.ComponentResource):
    path: pulumi.Output[str]
    mount_id: pulumi.Output[str]

    def __init__(self, name: str, args: RcloneMountArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:serving:RcloneMount", name, None, opts)
        r = args.remote
        env = pulumi.Output.all(args.endpoint, args.bucket, args.access_key, args.secret_key,
                                pulumi.Output.all(*args.wait_files)).apply(lambda v: {
            "RV_RCLONE": args.rclone, "RV_REMOTE": r, "RV_BUCKET": v[1], "RV_MOUNT": args.mount_path,
            "RV_CACHE_DIR": args.cache_dir, "RV_FLAGS": "\n".join(args.flags), "RV_LOG": args.log_file,
            "RV_WAIT_FILES": "\n".join(v[4]),
            f"RCLONE_CONFIG_{r}_TYPE": "s3", f"RCLONE_CONFIG_{r}_PROVIDER": "Other",
            f"RCLONE_CONFIG_{r}_ENDPOINT": v[0], f"RCLONE_CONFIG_{r}_REGION": "us-east-1",
            f"RCLONE_CONFIG_{r}_FORCE_PATH_STYLE": "true",
            f"RCLONE_CONFIG_{r}_ACCESS_KEY_ID": v[2], f"RCLONE_CONFIG_{r}_SECRET_ACCESS_KEY": v[3],
        })
        self.command = CommandResource(f"{name}-command", {
            "create": f"{SCRIPT} mount",
            "delete": f"{SCRIPT} unmount",
            "read": f"{SCRIPT} status",
            "environment": pulumi.Output.secret(env),
            "secrets": pulumi.Output.secret(pulumi.Output.all(args.access_key, args.secret_key).apply(list)),
            "triggers": [args.endpoint, args.bucket, args.mount_path, args.cache_dir, list(args.flags), args.rclone,
                         *args.revisions],
            "timeout": 300,
        }, pulumi.ResourceOptions(parent=self))
        self.path = pulumi.Output.from_input(args.mount_path)
        self.mount_id = self.command.id
        self.register_outputs({"path": self.path, "mount_id": self.mount_id})
