"""The models, mounted read-only on this host with rclone over FUSE.

Layout (what users see is the guide's: ``<mountPath>/<prefix>/config.json``):

- ``MountRoot``: ``mountPath`` made a bind mount of itself with shared propagation. The vLLM
  containers bind it at ``/models`` with ``rslave`` propagation, so every mount made, re-made or
  removed under it after a container started reaches that container.
- ``RcloneMount``, one per model: ``<bucket>/<prefix>`` mounted at ``<mountPath>/<prefix>`` by its
  own rclone under a keeper container (``<namePrefix>-mount-<prefix>``, restart policy
  ``unless-stopped``: components/mounting/keeper_tool.py) that mounts again within seconds when
  rclone dies, and brings the mount (and the root's shared bind) back when the host or its Docker
  engine restarts, then starts the vLLM containers whose start failed for want of it. Adding,
  removing or changing one model touches only that model's mount; re-mounting one (new
  credentials, flags, a dead rclone) reaches its running container without replacing it.

- ``MountCache``: the stack's rclone VFS cache folder (``mountCacheDir``); deleted after every
  mount, it removes what rclone cached (``purgeOnDestroy``) or says where the cache is and how big.

All are pulumi-command commands running ``scripts/rclone-mount`` on their host (components.hosts): the
launcher of ``components/mounting/mount_tool.py``, the mount's one implementation. Credentials reach rclone
through RCLONE_CONFIG_<REMOTE>_* variables in the command's secret ``environment``, never argv.
A model mount's ``triggers`` hold what needs a new mount (endpoint, bucket, prefix, path, cache,
flags, rclone binary) and the model's revision: an updated model gets a fresh rclone, and the
mount returns only when every file is visible with the uploaded size (and the small files with
their sha256), so a vLLM started after it reads the new bytes.

A dead mount that its supervisor did not bring back (the supervisor itself killed): the real
command provider has no refresh, so the program looks itself. The mount script records each
mount's generation in a marker file; when the marker says a mount was made but no live rclone
mount is at its path, the program asks for the next generation (a trigger), so ``preview`` shows
that one mount replaced and ``up`` mounts it again; the containers are not replaced.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import pulumi

from components.storage import tls
from components.hosts.types import Host

HASHED_BELOW = 16 * 2**20   # files smaller than this are checked by sha256 through the mount


@dataclass
class MountRootArgs:
    path: str
    host: Host


class MountRoot(pulumi.ComponentResource):
    path: pulumi.Output[str]

    def __init__(self, name: str, args: MountRootArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:serving:MountRoot", name, None, opts)
        self.command = args.host.command(self, name, "root-up", "root-down", {"RV_ROOT": args.path}, [args.path], opts)
        self.path = pulumi.Output.from_input(args.path)
        self.register_outputs({"path": self.path})


@dataclass
class MountCacheArgs:
    path: str                  # mountCacheDir: one rclone --cache-dir per model below it
    host: Host
    purge: bool = False        # purgeOnDestroy


class MountCache(pulumi.ComponentResource):
    """The stack's rclone VFS cache folder. Destroy removes what rclone cached there when
    purgeOnDestroy is set, and otherwise says where the cache is and how big (it can hold a copy of
    every model's weights). A new mountCacheDir replaces it: the old folder is handled the same way."""

    def __init__(self, name: str, args: MountCacheArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:serving:MountCache", name, None, opts)
        self.command = args.host.command(self, name, "cache-up", "cache-down",
                                         {"RV_CACHE_ROOT": args.path, "RV_PURGE": "1" if args.purge else "0"},
                                         [args.path], opts)
        self.register_outputs({})


@dataclass
class RcloneMountArgs:
    remote: str
    endpoint: pulumi.Input[str]
    bucket: pulumi.Input[str]
    prefix: str
    access_key: pulumi.Input[str]
    secret_key: pulumi.Input[str]
    root: str
    cache_dir: str
    manifest: Mapping[str, Mapping[str, object]]
    revision: pulumi.Input[str]
    host: Host                                        # where it is mounted (rclone, log, marker, CA path)
    flags: Sequence[str] = ()
    ca_bundle: str = ""                               # rustfsCaBundle: rclone --ca-cert
    keeper_image: str = ""                            # the host's rcloneImage: runs the mount's keeper
    keeper_ref: pulumi.Input[str] = ""                # ... by its digest (keeper_ref()), "" = by keeper_image
    keeper_name: str = ""                             # the keeper container's name
    stack: str = ""                                   # whose vLLM containers the keeper starts
    command: str = "mount"                            # mountCommand: rclone mount or mount2
    read_ahead_kb: int = 0                            # mountReadAheadKb: the mount's bdi read-ahead (0: the kernel's)


def keeper_ref(image: Any) -> pulumi.Output[str]:
    """What a keeper runs (issue 45): the rcloneImage pulled by ``image`` (a RemoteImage) by its digest:
    the registry's ``repo@sha256:...``, or for a local build its image ID (``sha256:...``), never a tag
    that someone could move to other code (the keeper is root on its host)."""
    return pulumi.Output.all(image.repo_digest, image.image_id, image.name).apply(
        lambda v: v[0] if v[0] and "@sha256:" in v[0] else v[1] if v[1] and v[1].startswith("sha256:") else v[2])


def keeper_name(name_prefix: str, prefix: str) -> str:
    """The keeper container of ``prefix``'s mount: ``<namePrefix>-mount-<prefix>`` (Docker's name rules)."""
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", f"{name_prefix}-mount-{prefix.lower()}")


def remote_name(name_prefix: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name_prefix).upper()


def remote_env(remote: str, endpoint: str, access_key: str, secret_key: str) -> dict[str, str]:
    """rclone's remote ``remote`` for RustFS (path style, us-east-1), keys in RCLONE_CONFIG_* variables."""
    r = remote
    return {f"RCLONE_CONFIG_{r}_TYPE": "s3", f"RCLONE_CONFIG_{r}_PROVIDER": "Other",
            f"RCLONE_CONFIG_{r}_ENDPOINT": endpoint, f"RCLONE_CONFIG_{r}_REGION": "us-east-1",
            f"RCLONE_CONFIG_{r}_FORCE_PATH_STYLE": "true",
            f"RCLONE_CONFIG_{r}_ACCESS_KEY_ID": access_key, f"RCLONE_CONFIG_{r}_SECRET_ACCESS_KEY": secret_key}


def expectations(manifest: Mapping[str, Mapping[str, object]]) -> dict[str, list]:
    """{file: [size, sha256 or ""]}: what must be visible through the mount before it counts."""
    return {rel: [int(e["size"]), str(e["sha256"]) if int(e["size"]) < HASHED_BELOW else ""]
            for rel, e in sorted(manifest.items())}


def marked_generation(marker_file: str) -> Optional[int]:
    """The generation a marker file records (a mount's, a copy's); None when there is none."""
    try:
        with open(marker_file, encoding="utf-8") as fh:
            return int(json.load(fh).get("generation", 0))
    except (OSError, ValueError, AttributeError):
        return None


def next_generation(marker_file: str, lost: Callable[[], bool], warning: str) -> int:
    """The generation to ask for: 0 when nothing was made (or it was destroyed), the marker's, or the
    next one (with ``warning``) when what it made is ``lost``."""
    current = marked_generation(marker_file)
    if current is None:
        return 0
    if lost():
        pulumi.log.warn(warning)
        return current + 1
    return current


def _lost(mount_path: str, where: str = "", why: str = "") -> str:
    return (f"the rclone mount at {mount_path}{where} is not alive ("
            f"{why or 'rclone and its keeper died or were removed, or it was unmounted'}); "
            "this run mounts it again (the container reading it stays)")


def generation(marker_file: str, mount_path: str, alive: Optional[Callable[[str], bool]],
               why: Callable[[], str] = lambda: "") -> int:
    """The mount generation to ask for: the marker's, or the next one when that mount has died (the
    warning says ``why()``: a keeper that gave up, with its last error)."""
    current = marked_generation(marker_file)
    if current is None or alive is None or alive(mount_path):
        return current or 0
    pulumi.log.warn(_lost(mount_path, why=why()))
    return current + 1


def seen_generation(seen: Mapping[str, object], mount_path: str, host: str) -> int:
    """The same from a remote host's answer ({"generation": the marker's or None, "state": ...})."""
    current = seen.get("generation")
    if not isinstance(current, int):
        return 0
    if seen.get("state") != "live":
        pulumi.log.warn(_lost(mount_path, f" on host {host}"))
        return current + 1
    return current


class RcloneMount(pulumi.ComponentResource):
    path: pulumi.Output[str]

    def __init__(self, name: str, args: RcloneMountArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:serving:RcloneMount", name, None, opts)
        r = args.remote
        mount_path = os.path.join(args.root, args.prefix)
        host = args.host
        marker = host.mount_marker(args.prefix)
        seen = host.mount_seen(args.prefix, mount_path)
        gen = seen_generation(seen, mount_path, host.name) if seen is not None else \
            generation(marker, mount_path, host.mount_alive(), lambda: host.keeper_down(args.keeper_name))
        expect = json.dumps(expectations(args.manifest))
        env = pulumi.Output.all(args.endpoint, args.bucket, args.access_key, args.secret_key,
                                args.keeper_ref).apply(lambda v: {
            "RV_RCLONE": host.rclone, "RV_REMOTE": r, "RV_SOURCE": f"{v[1]}/{args.prefix}", "RV_ROOT": args.root,
            "RV_MOUNT": mount_path, "RV_CACHE_DIR": args.cache_dir, "RV_FLAGS": "\n".join(args.flags),
            "RV_LOG": host.log_file(args.prefix), "RV_EXPECT": expect, "RV_MARKER": marker,
            "RV_GENERATION": str(gen),
            # absent for the guide's `rclone mount` at the kernel's read-ahead (stacks before issue 36: no diff)
            **({"RV_MOUNT_COMMAND": args.command} if args.command != "mount" else {}),
            **({"RV_READ_AHEAD_KB": str(args.read_ahead_kb)} if args.read_ahead_kb else {}),
            **({"RV_CA_CERT": host.ca_path or args.ca_bundle} if args.ca_bundle else {}),
            **({"RV_KEEPER_IMAGE": v[4] or args.keeper_image, "RV_KEEPER_NAME": args.keeper_name,
                "RV_SPEC": host.keeper_spec(args.prefix), "RV_STACK": args.stack} if args.keeper_image else {}),
            **({"RV_SPEC_BEFORE": host.keeper_spec_before(args.prefix)}
               if args.keeper_image and host.keeper_spec_before(args.prefix) else {}),
            **remote_env(r, v[0], v[2], v[3]),
        })
        self.command = host.command(
            self, name, "mount", "unmount", pulumi.Output.secret(env),
            [args.endpoint, args.bucket, args.prefix, mount_path, args.cache_dir, list(args.flags),
             host.rclone, f"generation-{gen}", args.revision,
             # a new CA (path or content) needs a new rclone; absent when unset (old stacks: no diff)
             *([f"ca-{args.ca_bundle}-{tls.fingerprint(args.ca_bundle)}"] if args.ca_bundle else [])], opts)
        self.path = pulumi.Output.from_input(mount_path)
        self.register_outputs({"path": self.path})
