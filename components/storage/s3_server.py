"""S3Server: the object store the weights live in.

Kinds:
- ``rustfs``: the RustFS image (``rustfsImage``); credentials through RustFS's own
  ``RUSTFS_ACCESS_KEY_FILE``/``RUSTFS_SECRET_KEY_FILE`` (files uploaded into the container);
- ``rclone-serve-s3``: ``rclone serve s3`` in a locally built image, an S3-compatible STAND-IN
  for machines that cannot pull RustFS, named as what it is in every output;
- ``external``: an existing endpoint; no container.

Declared with pulumi-docker: a ``RemoteImage`` (pulled by ``up`` when missing, kept on destroy), a
``Volume`` for ``/data`` (kept by destroy: ``retain_on_delete``), the ``Container`` (replaced
delete-first: fixed name and port), and a readiness wait from this host (RustFS:
``/health/ready``). Then, for every kind, a credential check proves that the configured keys work
and that RustFS's default keys do not (a RustFS that never got its keys runs on them and still
answers health checks). ``ready`` is the wait and the check: consumers order themselves after it
with ``depends_on``; no value of it flows into their inputs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import pulumi
import pulumi_docker as docker

from components.hosts.docker_facts import image_label
from components.serving import secret_files
from components.serving.readiness import ReadinessWait, ReadinessWaitArgs
from components.providers.credentials import CredentialCheckResource

if TYPE_CHECKING:
    from components.kube.s3 import KubeS3ServerArgs

KIND_LABELS = {
    "rustfs": "RustFS",
    "rclone-serve-s3": "rclone serve s3 (S3-compatible stand-in, not RustFS)",
    "external": "external S3 endpoint",
}
# scripts/build-rustfs-image tags its local builds rustfs-vllm/rustfs:<crate version>-local.
LOCAL_RUSTFS = re.compile(r"^rustfs-vllm/rustfs:(?P<version>[^-]+)-local$")


# The label scripts/build-rustfs-image puts on its images: where the binary came from.
SOURCE_LABEL = "rustfs-vllm.rustfs-source"


def describe(kind: str, image: str, source: str = "") -> str:
    """The ``s3_server`` output: which server, and for RustFS which build of it. ``source`` is the
    local image's SOURCE_LABEL (a binary compiled here, or a prebuilt one and its checksum)."""
    if kind != "rustfs":
        return KIND_LABELS[kind]
    local = LOCAL_RUSTFS.match(image)
    if local and source.startswith("prebuilt binary"):
        return f"RustFS {local['version']} (local image {image} packed from a {source}; not the official image)"
    if local:
        return (f"RustFS {local['version']} (local build from the crates.io rustfs crate, image {image}; "
                "not the official image)")
    return f"RustFS (image {image})"


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
    defaults_allowed: bool = False      # the configured keys are RustFS's defaults (dev only)
    ca_bundle: str = ""                 # rustfsCaBundle ("" = the system's CAs)


def labels(stack: str, role: str, **extra: str) -> list[docker.ContainerLabelArgs]:
    values = {"rustfs-vllm.stack": stack, "rustfs-vllm.role": role, **{f"rustfs-vllm.{k}": v for k, v in extra.items()}}
    return [docker.ContainerLabelArgs(label=k, value=v) for k, v in sorted(values.items())]


def credential_check(owner: pulumi.Resource, name: str, args: "S3ServerArgs | KubeS3ServerArgs",
                     server: pulumi.Input[str], wait_seconds: int = 0) -> CredentialCheckResource:
    """Proves from this machine, once the server answers (``owner.ready``), that the configured keys
    work and RustFS's defaults do not; ``server`` (its container or StatefulSet) re-runs it when replaced."""
    return CredentialCheckResource(f"{name}-credentials", {
        "endpoint": args.endpoint, "kind": args.kind, "defaults_allowed": args.defaults_allowed, "server": server,
        "access_key": pulumi.Output.secret(args.access_key), "secret_key": pulumi.Output.secret(args.secret_key),
        **({"ca_bundle": args.ca_bundle} if args.ca_bundle else {}),
        **({"wait_seconds": wait_seconds} if wait_seconds else {}),
    }, pulumi.ResourceOptions(parent=owner, depends_on=list(owner.ready)))  # type: ignore[attr-defined]


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
            ), pulumi.ResourceOptions(parent=self, delete_before_replace=True))
            wait = ReadinessWait(f"{name}-ready", ReadinessWaitArgs(
                container_id=self.container.id, container_name=f"{args.name_prefix}-s3", url=ready_url,
                any_status=any_status, timeout=120), child)
            self.ready = [wait]
        self.credentials = credential_check(self, name, args, self.container.id if self.container else "external")
        self.ready = [*self.ready, self.credentials]
        self.endpoint = pulumi.Output.from_input(args.endpoint)
        self.kind = pulumi.Output.from_input(describe(args.kind, args.image, image_label(args.image, SOURCE_LABEL)))
        self.register_outputs({"endpoint": self.endpoint, "kind": self.kind})
