"""HostTools: what the program needs on a remote serving host, put there and checked over SSH.

One pulumi-command ``remote.Command`` per host copies this program's mount tool (the launcher
``scripts/rclone-mount`` and ``components/mounting/mount_tool.py`` beside it) and, with rustfsCaBundle,
the CA bundle into ``/var/lib/rustfs-vllm/<namePrefix>`` on the host (root-only, 0700), as a
gzipped tar on the command's stdin; then it checks the host has what serving needs (Docker, rclone,
fuse3, /dev/fuse, python3) and fails naming what is missing and how to get it. Its ``triggers``
hold the files' sha256: a new version of a script is copied again on the next ``up``, nothing else
is. Destroy (after every mount on the host is gone) removes the folder.
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import shlex
import tarfile
from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_command as command

from components.hosts.ssh import REQUIREMENTS
from components.mounting import mount_tool
from components.paths import SCRIPTS

# the launcher finds mount_tool.py beside itself in the host's tools folder
TOOLS = {"rclone-mount": os.path.join(SCRIPTS, "rclone-mount"), "mount_tool.py": os.path.abspath(mount_tool.__file__),
         # mount_tool's copy-* actions (loadFormat local_copy) load it from beside itself
         "copy_tool.py": os.path.join(os.path.dirname(os.path.abspath(mount_tool.__file__)), "copy_tool.py"),
         "keeper_tool.py": os.path.join(os.path.dirname(os.path.abspath(mount_tool.__file__)), "keeper_tool.py"),
         # mount_tool's parts (one job each: mount table, supervisor, hints, mount root, ...) load from beside it
         **{f"{part}.py": os.path.join(os.path.dirname(os.path.abspath(mount_tool.__file__)), f"{part}.py")
            for part in mount_tool.PARTS}}
CA_FILE = "ca.pem"


@dataclass
class HostToolsArgs:
    host: str                                    # the host's name (messages)
    connection: command.remote.ConnectionArgs
    tools_dir: str
    ca_bundle: str = ""                          # local PEM file, copied as <tools_dir>/ca.pem


def bundle(ca_bundle: str = "") -> bytes:
    """The tools as a reproducible .tar.gz (same files, same bytes: no diff on the next up)."""
    files = dict(TOOLS)
    if ca_bundle:
        files[CA_FILE] = ca_bundle
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            with open(files[name], "rb") as fh:
                data = fh.read()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime, info.uid, info.gid = len(data), 0o644 if name == CA_FILE else 0o755, 0, 0, 0
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def check_script(host: str) -> str:
    """Shell that fails naming every requirement the host lacks."""
    lines = ["missing=0"]
    for what, check, need in REQUIREMENTS:
        msg = f"rustfs-vllm: host {host} lacks {what}; needed: {need}"
        lines.append(f"{check} >/dev/null 2>&1 || {{ echo {shlex.quote(msg)} >&2; missing=1; }}")
    lines.append('[ "$missing" = 0 ]')
    return "; ".join(lines)


class HostTools(pulumi.ComponentResource):
    def __init__(self, name: str, args: HostToolsArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:serving:HostTools", name, None, opts)
        data = bundle(args.ca_bundle)
        sha = hashlib.sha256(data).hexdigest()
        d = shlex.quote(args.tools_dir)
        self.ca_path = f"{args.tools_dir}/{CA_FILE}" if args.ca_bundle else ""
        # Replaced (new scripts): the new copy is made first, then the old one's delete runs and
        # finds another version there, so it leaves the folder alone. Destroy removes it.
        self.command = command.remote.Command(
            f"{name}-command",
            connection=args.connection,
            create=f"{check_script(args.host)} && umask 077 && mkdir -p {d}/logs && base64 -d | tar -xzf - -C {d} "
                   f"&& echo {sha} > {d}/.version "
                   f"&& echo \"rustfs-vllm tools in {args.tools_dir} on host {args.host}; $(rclone version | head -n 1)\"",
            delete=f"if [ \"$(cat {d}/.version 2>/dev/null)\" = {sha} ]; then rm -rf {d}; "
                   f"echo \"removed {args.tools_dir} from host {args.host}\"; fi",
            stdin=base64.b64encode(data).decode() + "\n",
            add_previous_output_in_env=False,
            triggers=[sha],
            opts=pulumi.ResourceOptions(parent=self, depends_on=opts.depends_on if opts else None))
        self.register_outputs({})
