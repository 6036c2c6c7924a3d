"""ServingStack: the whole graph, from a validated StackConfig.

    S3Server (ready) -> Bucket -> per model: ModelUpload -> RcloneMount -> VllmServer -> SmokeTest
                                  MountRoot, MountCache (shared) --^

Each model's chain is its own: adding, removing or changing one model replaces only that model's
resources. Readiness and ordering are ``depends_on`` edges, not values threaded into inputs, so
replacing the server container never replaces the bucket or an upload, and re-mounting a model
never replaces its container.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_docker as docker

from . import machine
from .bucket import Bucket, BucketArgs
from .config import StackConfig
from .model_upload import ModelUpload, ModelUploadArgs
from .mount import MountCache, MountCacheArgs, MountRoot, MountRootArgs, RcloneMount, RcloneMountArgs, remote_name
from .s3_server import S3Server, S3ServerArgs
from .smoke import SmokeTest, SmokeTestArgs
from .vllm import VllmServer, VllmServerArgs


@dataclass
class ServingStackArgs:
    config: StackConfig


class ServingStack(pulumi.ComponentResource):
    def __init__(self, name: str, args: ServingStackArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:index:ServingStack", name, None, opts)
        cfg = args.config
        access_key = pulumi.Output.secret(cfg.access_key)
        secret_key = pulumi.Output.secret(cfg.secret_key)
        child = pulumi.ResourceOptions(parent=self)

        self.server = S3Server("s3", S3ServerArgs(
            kind=cfg.s3_server, stack=cfg.stack, name_prefix=cfg.name_prefix, image=cfg.rustfs_image,
            endpoint=cfg.rustfs_endpoint, port=cfg.rustfs_port, console_port=cfg.rustfs_console_port,
            console_enable=cfg.rustfs_console_enable, volume=cfg.rustfs_volume, bind_address=cfg.bind_address,
            access_key=access_key, secret_key=secret_key, defaults_allowed=cfg.uses_default_credentials,
            ca_bundle=cfg.ca_bundle), child)
        endpoint = cfg.rustfs_endpoint
        # Where the objects live: a new volume or server kind behind the same endpoint is another store.
        store = f"external {endpoint}" if cfg.s3_server == "external" else f"{cfg.s3_server} volume {cfg.rustfs_volume}"
        after_server = pulumi.ResourceOptions(parent=self, depends_on=self.server.ready)
        self.bucket = Bucket("bucket", BucketArgs(
            endpoint=endpoint, bucket=cfg.bucket, access_key=access_key, secret_key=secret_key,
            purge=cfg.purge_on_destroy, store=store, ca_bundle=cfg.ca_bundle), after_server)

        self.uploads: dict[str, ModelUpload] = {}
        for m in cfg.models:
            self.uploads[m.name] = ModelUpload(f"model-{m.prefix}", ModelUploadArgs(
                endpoint=endpoint, bucket=self.bucket.name, prefix=m.prefix, source=m.source,
                access_key=access_key, secret_key=secret_key, cache_dir=os.path.join(cfg.state_dir, "hash-cache"),
                purge=cfg.purge_on_destroy, store=store, ca_bundle=cfg.ca_bundle), after_server)

        os.makedirs(os.path.join(cfg.state_dir, "logs"), exist_ok=True)
        # The root is made only once the storage answers with our keys: a failed up leaves no mount.
        self.mount_root = MountRoot("mount-root", MountRootArgs(path=cfg.mount_path),
                                    pulumi.ResourceOptions(parent=self, depends_on=[self.bucket]))
        # Deleted after every mount (they depend on it): destroy then purges or reports the cache.
        self.mount_cache = MountCache("mount-cache", MountCacheArgs(path=cfg.mount_cache_dir, purge=cfg.purge_on_destroy),
                                      pulumi.ResourceOptions(parent=self, depends_on=[self.bucket]))
        self.mounts: dict[str, RcloneMount] = {}
        for m in cfg.models:
            upload = self.uploads[m.name]
            self.mounts[m.name] = RcloneMount(f"mount-{m.prefix}", RcloneMountArgs(
                remote=remote_name(cfg.name_prefix), endpoint=endpoint, bucket=self.bucket.name, prefix=m.prefix,
                access_key=access_key, secret_key=secret_key, root=cfg.mount_path,
                cache_dir=os.path.join(cfg.mount_cache_dir, m.prefix), rclone=cfg.rclone_binary,
                flags=cfg.mount_flags, manifest=upload.manifest, revision=upload.revision, ca_bundle=cfg.ca_bundle,
                log_file=os.path.join(cfg.state_dir, "logs", f"rclone-{cfg.stack}-{m.prefix}.log"),
                marker_file=os.path.join(cfg.state_dir, "mounts", cfg.stack, f"{m.prefix}.json"),
                alive=machine.mount_alive), pulumi.ResourceOptions(parent=self, depends_on=[self.mount_root, self.mount_cache]))

        # One image resource for all models: pulled by `up` when missing, kept on destroy.
        self.vllm_image = docker.RemoteImage("vllm-image", docker.RemoteImageArgs(
            name=cfg.vllm_image, keep_locally=True), child)

        self.servers: dict[str, VllmServer] = {}
        self.smoke: dict[str, SmokeTest] = {}
        for m in cfg.models:
            server = VllmServer(f"vllm-{m.prefix}", VllmServerArgs(
                stack=cfg.stack, container_name=f"{cfg.name_prefix}-vllm-{m.prefix.lower()}",
                image_id=self.vllm_image.image_id,
                model_dir=f"/models/{m.prefix}", served_name=m.name, dtype=m.dtype, max_model_len=m.max_model_len,
                port=m.port, mount_path=cfg.mount_path, revision=self.uploads[m.name].revision,
                bind_address=cfg.bind_address,
                gpu_memory_utilization=m.gpu_memory_utilization, kv_cache_space_gib=m.kv_cache_space_gib,
                extra_args=m.extra_args, env={**cfg.vllm_env, **m.env}, api_key=pulumi.Output.secret(cfg.vllm_api_key),
                has_api_key=bool(cfg.vllm_api_key),
                shm_size=cfg.vllm_shm_size, gpus=cfg.vllm_gpus if m.gpus is None else m.gpus, restart=cfg.vllm_restart,
                ready_timeout=cfg.vllm_ready_timeout),
                pulumi.ResourceOptions(parent=self, depends_on=[self.mount_root, self.mounts[m.name]]))
            self.servers[m.name] = server
            if cfg.smoke_test:
                self.smoke[m.name] = SmokeTest(f"smoke-{m.prefix}", SmokeTestArgs(
                    base_url=server.base_url, model=m.name, container_id=server.container_id,
                    prompt=cfg.smoke_prompt, max_tokens=cfg.smoke_max_tokens,
                    api_key=pulumi.Output.secret(cfg.vllm_api_key)),
                    pulumi.ResourceOptions(parent=self, depends_on=[server.ready]))
        self.register_outputs({})
