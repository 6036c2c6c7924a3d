"""RcloneMount: the bucket mounted read-only on this host with rclone over FUSE.

A pulumi-command ``local.Command`` runs ``scripts/rclone-mount``: create mounts (and waits until the
model files are visible), delete unmounts (and succeeds when nothing is mounted). Credentials reach
rclone through RCLONE_CONFIG_<REMOTE>_* variables in the command's secret ``environment``, never
argv. Anything that needs a remount (bucket, endpoint, path, flags, rclone binary, the models'
revisions) is in ``triggers``; the command is replaced delete-first (one mount point).

A dead rclone (killed, crashed): the real command provider has no refresh, so the program looks
itself. The mount script records the mount's generation in a marker file; when the marker says a
mount was made but no live rclone mount is at the path, the program asks for the next generation
(a trigger), so ``preview`` shows the mount (and the containers bound to it) being replaced and
``up`` mounts again. Once remounted the marker holds that generation and plans are empty again.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import pulumi
import pulumi_command as command

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
    marker_file: str
    flags: Sequence[str] = ()
    wait_files: Sequence[pulumi.Input[str]] = ()
    log_file: str = "/dev/null"
    revisions: Sequence[pulumi.Input[str]] = field(default_factory=list)
    alive: Optional[Callable[[str], bool]] = None     # is a live rclone mount at this path?


def remote_name(name_prefix: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name_prefix).upper()


def generation(marker_file: str, mount_path: str, alive: Optional[Callable[[str], bool]]) -> int:
    """The mount generation to ask for: the marker's, or the next one when that mount has died."""
    try:
        with open(marker_file, encoding="utf-8") as fh:
            current = int(json.load(fh).get("generation", 0))
    except (OSError, ValueError, AttributeError):
        return 0  # never mounted (or destroyed): the first generation
    if alive is not None and not alive(mount_path):
        pulumi.log.warn(f"the rclone mount at {mount_path} is not alive (rclone died or was unmounted); "
                        "this run mounts it again and replaces the containers reading through it")
        return current + 1
    return current


class RcloneMount(pulumi.ComponentResource):
    path: pulumi.Output[str]
    mount_id: pulumi.Output[str]

    def __init__(self, name: str, args: RcloneMountArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:serving:RcloneMount", name, None, opts)
        r = args.remote
        gen = generation(args.marker_file, args.mount_path, args.alive)
        env = pulumi.Output.all(args.endpoint, args.bucket, args.access_key, args.secret_key,
                                pulumi.Output.all(*args.wait_files)).apply(lambda v: {
            "RV_RCLONE": args.rclone, "RV_REMOTE": r, "RV_BUCKET": v[1], "RV_MOUNT": args.mount_path,
            "RV_CACHE_DIR": args.cache_dir, "RV_FLAGS": "\n".join(args.flags), "RV_LOG": args.log_file,
            "RV_WAIT_FILES": "\n".join(v[4]), "RV_MARKER": args.marker_file, "RV_GENERATION": str(gen),
            f"RCLONE_CONFIG_{r}_TYPE": "s3", f"RCLONE_CONFIG_{r}_PROVIDER": "Other",
            f"RCLONE_CONFIG_{r}_ENDPOINT": v[0], f"RCLONE_CONFIG_{r}_REGION": "us-east-1",
            f"RCLONE_CONFIG_{r}_FORCE_PATH_STYLE": "true",
            f"RCLONE_CONFIG_{r}_ACCESS_KEY_ID": v[2], f"RCLONE_CONFIG_{r}_SECRET_ACCESS_KEY": v[3],
        })
        self.command = command.local.Command(
            f"{name}-command",
            create=f"{SCRIPT} mount",
            delete=f"{SCRIPT} unmount",
            environment=pulumi.Output.secret(env),
            triggers=[args.endpoint, args.bucket, args.mount_path, args.cache_dir, list(args.flags), args.rclone,
                      f"generation-{gen}", *args.revisions],
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True))
        self.path = pulumi.Output.from_input(args.mount_path)
        self.mount_id = self.command.id
        self.register_outputs({"path": self.path, "mount_id": self.mount_id})
