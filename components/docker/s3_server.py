"""S3Server: the object store the weights live in.

Kinds:
- ``rustfs``: the RustFS image (``rustfsImage``); credentials through RustFS's own
  ``RUSTFS_ACCESS_KEY_FILE``/``RUSTFS_SECRET_KEY_FILE`` (files uploaded into the container);
- ``rclone-serve-s3``: ``rclone serve s3`` in a locally built image, an S3-compatible STAND-IN
  for machines that cannot pull RustFS, named as what it is in every output;
- ``external``: an existing endpoint; no container.

Declared with pulumi-docker: a ``RemoteImage`` (pulled by ``up`` when missing, kept on destroy), a
``Volume`` for ``/data`` (kept by destroy: ``retain_on_delete``), the ``Container`` (replaced
delete-first: fixed name and port; a low CPU weight, keeper_tool.FETCH_CPU_SHARES, as the mounts' keepers
have), and a readiness wait from this host (RustFS:
``/health/ready``). ``ready`` is the wait: the core's credential check (components.core.store), a
child of this component, runs after it; no value of it flows into its consumers' inputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_docker as docker

from components.hosts.docker_facts import image_label
from components.mounting import keeper_tool
from components.serving import secret_files
from components.serving.labels import labels
from components.serving.readiness import ReadinessWait, ReadinessWaitArgs
from components.storage.kinds import SOURCE_LABEL, describe

# The stand-in image's entrypoint (scripts/build-s3-standin-image): the secrets wrapper runs it.
STANDIN_ENTRYPOINT = ("/usr/local/bin/rclone",)


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

    def __init__(self, name: str, args: S3ServerArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:storage:S3Server", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.container: Optional[docker.Container] = None
        self.ready: list[pulumi.Resource] = []
        if args.kind != "external":
            creds = pulumi.Output.all(args.access_key, args.secret_key)
            ports = [docker.ContainerPortArgs(internal=9000, external=args.port, ip=args.bind_address)]
            if args.kind == "rustfs":
                envs = ["RUSTFS_VOLUMES=/data", "RUSTFS_ADDRESS=:9000",
                        f"RUSTFS_CONSOLE_ENABLE={'true' if args.console_enable else 'false'}",
                        "RUSTFS_CONSOLE_ADDRESS=:9001",
                        f"RUSTFS_ACCESS_KEY_FILE={secret_files.SECRETS_DIR}/RUSTFS_ACCESS_KEY",
                        f"RUSTFS_SECRET_KEY_FILE={secret_files.SECRETS_DIR}/RUSTFS_SECRET_KEY"]
                secret_env = creds.apply(lambda c: {"RUSTFS_ACCESS_KEY": c[0], "RUSTFS_SECRET_KEY": c[1]})
                entrypoints: Optional[list[str]] = None
                command: Optional[list[str]] = None
                if args.console_enable:
                    ports.append(docker.ContainerPortArgs(internal=9001, external=args.console_port,
                                                          ip=args.bind_address))
                ready_url, any_status = f"http://127.0.0.1:{args.port}/health/ready", False
            else:
                # rclone reads --auth-key from RCLONE_AUTH_KEY; the quotes keep "ak,sk" one CSV field.
                envs = []
                secret_env = creds.apply(lambda c: {"RCLONE_AUTH_KEY": f'"{c[0]},{c[1]}"'})
                entrypoints = secret_files.wrapped_entrypoint(STANDIN_ENTRYPOINT)
                command = ["serve", "s3", "/data", "--addr", ":9000", "--config", "/dev/null"]
                ready_url, any_status = f"http://127.0.0.1:{args.port}/", True
            self.image = docker.RemoteImage(f"{name}-image", docker.RemoteImageArgs(
                name=args.image, keep_locally=True), child)
            self.volume = docker.Volume(f"{name}-data", docker.VolumeArgs(name=args.volume), pulumi.ResourceOptions(
                parent=self, retain_on_delete=True))
            self.container = docker.Container(f"{name}-container", docker.ContainerArgs(
                name=f"{args.name_prefix}-s3",
                image=self.image.image_id,
                entrypoints=entrypoints,
                command=command,
                envs=envs,
                uploads=secret_files.uploads(secret_env),
                labels=labels(args.stack, "s3-server", kind=args.kind),
                ports=ports,
                mounts=[docker.ContainerMountArgs(type="volume", source=self.volume.name, target="/data")],
                restart="unless-stopped",
                # the store's reads at a low CPU weight where vLLM runs beside it (keeper_tool.FETCH_CPU_SHARES;
                # pulumi-docker 5.1.0 updates it in place: tried, same container, not restarted)
                cpu_shares=keeper_tool.FETCH_CPU_SHARES,
            ), pulumi.ResourceOptions(parent=self, delete_before_replace=True))
            wait = ReadinessWait(f"{name}-ready", ReadinessWaitArgs(
                container_id=self.container.id, container_name=f"{args.name_prefix}-s3", url=ready_url,
                any_status=any_status, timeout=120), child)
            self.ready = [wait]
        self.endpoint = pulumi.Output.from_input(args.endpoint)
        self.kind = pulumi.Output.from_input(describe(args.kind, args.image, image_label(args.image, SOURCE_LABEL)))
        self.register_outputs({"endpoint": self.endpoint, "kind": self.kind})
