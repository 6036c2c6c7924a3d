"""S3Server: the object store the weights live in.

Kinds:
- ``rustfs``: the RustFS image (``rustfsImage``), data in a named Docker volume owned by uid 10001;
- ``rclone-serve-s3``: ``rclone serve s3`` in a locally built image, an S3-compatible STAND-IN
  for machines that cannot pull RustFS. It is named as what it is in every output;
- ``external``: an existing endpoint; no container.

Readiness: the container resource returns only once the server answers (RustFS: ``/health/ready``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi

from .resources import ContainerResource

KIND_LABELS = {
    "rustfs": "RustFS",
    "rclone-serve-s3": "rclone serve s3 (S3-compatible stand-in, not RustFS)",
    "external": "external S3 endpoint",
}


@dataclass
class S3ServerArgs:
    kind: str
    stack: str
    name_prefix: str
    image: str
    endpoint: str
    port: int
    console_port: int
    console_enable: bool
    volume: str
    bind_address: pulumi.Input[str]
    access_key: pulumi.Input[str]
    secret_key: pulumi.Input[str]


class S3Server(pulumi.ComponentResource):
    endpoint: pulumi.Output[str]
    kind: pulumi.Output[str]
    ready: pulumi.Output[str]

    def __init__(self, name: str, args: S3ServerArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:storage:S3Server", name, None, opts)
        self.container: Optional[ContainerResource] = None
        labels = {"rustfs-vllm.stack": args.stack, "rustfs-vllm.role": "s3-server", "rustfs-vllm.kind": args.kind}
        ports = [{"internal": 9000, "external": args.port, "ip": args.bind_address}]
        creds = pulumi.Output.all(args.access_key, args.secret_key)
        if args.kind == "rustfs":
            env = {"RUSTFS_VOLUMES": "/data", "RUSTFS_ADDRESS": ":9000",
                   "RUSTFS_CONSOLE_ENABLE": "true" if args.console_enable else "false",
                   "RUSTFS_CONSOLE_ADDRESS": ":9001"}
            secret_env = creds.apply(lambda c: {"RUSTFS_ACCESS_KEY": c[0], "RUSTFS_SECRET_KEY": c[1]})
            if args.console_enable:
                ports.append({"internal": 9001, "external": args.console_port, "ip": args.bind_address})
            command: list[str] = []
            ready_url, any_status = f"http://127.0.0.1:{args.port}/health/ready", False
        elif args.kind == "rclone-serve-s3":
            # rclone reads --auth-key from RCLONE_AUTH_KEY; the quotes keep "ak,sk" one CSV field.
            env = {}
            secret_env = creds.apply(lambda c: {"RCLONE_AUTH_KEY": f'"{c[0]},{c[1]}"'})
            command = ["serve", "s3", "/data", "--addr", ":9000", "--config", "/dev/null"]
            ready_url, any_status = f"http://127.0.0.1:{args.port}/", True
        else:
            env = None
        if env is not None:
            self.container = ContainerResource(f"{name}-container", {
                "name": f"{args.name_prefix}-s3",
                "image": args.image,
                "command": command,
                "env": env,
                # credentials reach the server from files mounted into the container, not its config
                "secret_env": pulumi.Output.secret(secret_env),
                "secrets": pulumi.Output.secret(creds.apply(list)),
                "labels": labels,
                "ports": ports,
                "mounts": [{"type": "volume", "source": args.volume, "target": "/data"}],
                "restart": "unless-stopped",
                "ready_url": ready_url,
                "ready_any_status": any_status,
                "ready_timeout": 120,
            }, pulumi.ResourceOptions(parent=self))
            self.ready = self.container.container_id
        else:
            self.ready = pulumi.Output.from_input("external")
        self.endpoint = pulumi.Output.from_input(args.endpoint)
        self.kind = pulumi.Output.from_input(KIND_LABELS[args.kind])
        self.register_outputs({"endpoint": self.endpoint, "kind": self.kind, "ready": self.ready})
