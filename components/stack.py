"""ServingStack: the whole graph, from a validated StackConfig.

    S3Server (ready) -> Bucket -> per model: ModelUpload
                                  per host: MountRoot, MountCache -> per model on that host:
                                            RcloneMount (or ModelCopy) -> VllmServer -> SmokeTest

A host is this machine (local commands, the local Docker socket) or a remote one: then its Docker
is a pulumi-docker provider over ``ssh://``, its mounts are pulumi-command ``remote.Command``s,
and HostTools puts the mount script there first. Every name of a host's resources starts with
the host's name, except the implicit local host's (a stack without ``hosts`` keeps its URNs).
Models with a ``balancerPort`` get an entry point over their hosts: one nginx container on this
machine (Balancer), started once every server of those models answers.

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

from components.serving.balancer import Balancer, BalancerArgs, Route
from components.storage.bucket import Bucket, BucketArgs
from components.config.schema import LOCAL_COPY
from components.config.spec import ModelSpec, StackConfig
from components.hosts.types import Host, hosts_of
from components.storage.model_upload import ModelUpload, ModelUploadArgs
from components.mounting.copies import ModelCopy, ModelCopyArgs, copy_root
from components.mounting.mounts import MountCache, MountCacheArgs, MountRoot, MountRootArgs, RcloneMount, RcloneMountArgs, keeper_name, remote_name
from components.storage.s3_server import S3Server, S3ServerArgs
from components.serving import streamer
from components.serving.smoke import SmokeTest, SmokeTestArgs
from components.stack_outputs import exports
from components.serving.vllm import VllmServer, VllmServerArgs


@dataclass
class ServingStackArgs:
    config: StackConfig
    hosts: Optional[list[Host]] = None    # the stack's hosts (hosts_of(config) when not given)


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
                purge=cfg.purge_on_destroy, store=store, ca_bundle=cfg.ca_bundle, stack=cfg.stack), after_server)

        self.cfg = cfg
        self.hosts: list[Host] = args.hosts if args.hosts is not None else hosts_of(cfg)
        self.mount_roots: dict[str, MountRoot] = {}
        self.copies: dict[str, dict[str, ModelCopy]] = {}     # host -> model name -> its local copy
        # host -> model name -> server / smoke test
        self.servers: dict[str, dict[str, VllmServer]] = {}
        self.smoke: dict[str, dict[str, SmokeTest]] = {}
        for host in self.hosts:
            self._serve_on(host, access_key, secret_key)
        self.mount_root = self.mount_roots[cfg.hosts[0].name]
        self.balancer = self._entry_points()
        self.register_outputs({})

    def exports(self) -> dict[str, pulumi.Input[object]]:
        """The stack's outputs: what `pulumi stack output` shows (components.stack_outputs)."""
        return exports(self)

    def _entry_points(self) -> Optional[Balancer]:
        """One entry point per model that asks for one (balancerPort), over that model's hosts."""
        cfg = self.cfg
        routes = [Route(model=m.name, port=m.balancer_port,
                        upstreams=[f"{h.address}:{m.port}" for h in cfg.hosts if h.name in m.hosts])
                  for m in cfg.models if m.balancer_port]
        if not routes:
            return None
        ready = [self.servers[h][m.name].ready for m in cfg.models if m.balancer_port for h in m.hosts]
        return Balancer("balancer", BalancerArgs(
            stack=cfg.stack, container_name=f"{cfg.name_prefix}-balancer", image=cfg.balancer_image,
            bind_address=cfg.bind_address, routes=routes),
            pulumi.ResourceOptions(parent=self, depends_on=ready))

    def _serve_on(self, host: Host, access_key: pulumi.Output[str], secret_key: pulumi.Output[str]) -> None:
        """One host's part: mount root and cache, a read-only mount per model it serves, the vLLM
        image, and per model a container, its readiness wait and its smoke completion. Names carry
        the host's name (none for the implicit local host: the names stacks had before hosts)."""
        cfg, p = self.cfg, host.prefix
        host.setup(self)
        after_bucket: list[pulumi.Resource] = [self.bucket, *host.after]
        # The root is made only once the storage answers with our keys: a failed up leaves no mount.
        root = MountRoot(f"{p}mount-root", MountRootArgs(path=host.spec.mount_path, host=host),
                         pulumi.ResourceOptions(parent=self, depends_on=after_bucket))
        self.mount_roots[host.name] = root
        # Deleted after every mount (they depend on it): destroy then purges or reports the cache.
        cache = MountCache(f"{p}mount-cache", MountCacheArgs(path=host.spec.mount_cache_dir, host=host,
                                                             purge=cfg.purge_on_destroy),
                           pulumi.ResourceOptions(parent=self, depends_on=after_bucket))
        # One image resource per host for all its models: pulled by `up` when missing, kept on destroy.
        on_docker = host.docker(self)
        image = docker.RemoteImage(f"{p}vllm-image", docker.RemoteImageArgs(
            name=host.spec.vllm_image, keep_locally=True), on_docker)
        self.servers[host.name], self.smoke[host.name], self.copies[host.name] = {}, {}, {}
        for m in cfg.models_on(host.name):
            upload = self.uploads[m.name]
            if m.load_format == streamer.LOAD_FORMAT:   # read from the bucket: no mount, after its upload
                pulumi.log.info(f"models[{m.name}] on {host.name}: weights streamed from "
                                f"{streamer.model_url(cfg.bucket, m.prefix)} by the Run:ai Model Streamer "
                                "(loadFormat runai_streamer; no mount)")
                self._add_server(host, m, self._server(host, m, image, on_docker, [upload], access_key, secret_key))
                continue
            if m.load_format == LOCAL_COPY:   # copied to the host's disk once per revision; vLLM reads it there
                if not m.load_format_given and host.marker_file(m.prefix) and os.path.exists(host.marker_file(m.prefix)):
                    pulumi.log.warn(f"models[{m.name}] on {host.name}: loadFormat now defaults to local_copy (vLLM reads "
                                    "a copy on the host's disk: starts at local-disk speed, docs/PERFORMANCE.md section "
                                    "14); this update replaces the model's rclone mount with that copy and its container "
                                    "once. To keep the mount, set the model's loadFormat: mount")
                pulumi.log.info(f"models[{m.name}] on {host.name}: weights read from the host's copy of revision "
                                f"{upload.revision_digest} in {copy_root(host.spec.mount_cache_dir, m.prefix)} "
                                "(loadFormat local_copy; copied from the bucket when that revision is not there yet)")
                copy = ModelCopy(f"{p}copy-{m.prefix}", ModelCopyArgs(
                    remote=remote_name(cfg.name_prefix), endpoint=host.spec.s3_endpoint, bucket=self.bucket.name,
                    prefix=m.prefix, access_key=access_key, secret_key=secret_key,
                    root=copy_root(host.spec.mount_cache_dir, m.prefix), manifest=upload.manifest,
                    revision=upload.revision, revision_digest=upload.revision_digest, host=host,
                    flags=cfg.copy_flags, ca_bundle=cfg.ca_bundle, purge=cfg.purge_on_destroy),
                    pulumi.ResourceOptions(parent=self, depends_on=[cache]))
                self.copies[host.name][m.name] = copy
                self._add_server(host, m, self._server(host, m, image, on_docker, [copy], copy=copy))
                continue
            mount = RcloneMount(f"{p}mount-{m.prefix}", RcloneMountArgs(
                remote=remote_name(cfg.name_prefix), endpoint=host.spec.s3_endpoint, bucket=self.bucket.name,
                prefix=m.prefix, access_key=access_key, secret_key=secret_key, root=host.spec.mount_path,
                cache_dir=os.path.join(host.spec.mount_cache_dir, m.prefix), flags=cfg.mount_flags,
                manifest=upload.manifest, revision=upload.revision, ca_bundle=cfg.ca_bundle, host=host,
                keeper_image=host.spec.vllm_image, keeper_name=keeper_name(cfg.name_prefix, m.prefix),
                stack=cfg.stack),
                pulumi.ResourceOptions(parent=self, depends_on=[root, cache, image]))
            self._add_server(host, m, self._server(host, m, image, on_docker, [root, mount]))

    def _add_server(self, host: Host, m: ModelSpec, server: VllmServer) -> None:
        """Keep ``server`` as ``m``'s on ``host``, with its smoke completion once it answers."""
        cfg = self.cfg
        self.servers[host.name][m.name] = server
        if cfg.smoke_test:
            self.smoke[host.name][m.name] = SmokeTest(f"{host.prefix}smoke-{m.prefix}", SmokeTestArgs(
                base_url=server.base_url, model=m.name, container_id=server.container_id,
                prompt=cfg.smoke_prompt, max_tokens=cfg.smoke_max_tokens,
                api_key=pulumi.Output.secret(cfg.vllm_api_key)),
                pulumi.ResourceOptions(parent=self, depends_on=[server.ready]))

    def _server(self, host: Host, m: ModelSpec, image: docker.RemoteImage, on_docker: pulumi.ResourceOptions,
                after: list[pulumi.Resource], access_key: pulumi.Input[str] = "",
                secret_key: pulumi.Input[str] = "", copy: Optional[ModelCopy] = None) -> VllmServer:
        """The model's vLLM container on ``host``, reading its mount (or streaming from the bucket, given
        the keys); GPUs from the model, the host or the stack."""
        cfg = self.cfg
        gpus = m.gpus if m.gpus is not None else host.spec.gpus if host.spec.gpus is not None else cfg.vllm_gpus
        streamed = m.load_format == streamer.LOAD_FORMAT
        stream = dict(load_format=m.load_format, s3_endpoint=host.spec.s3_endpoint, access_key=access_key,
                      secret_key=secret_key, ca_bundle=cfg.ca_bundle) if streamed else {}
        return VllmServer(f"{host.prefix}vllm-{m.prefix}", VllmServerArgs(
            stack=cfg.stack, container_name=f"{cfg.name_prefix}-vllm-{m.prefix.lower()}", image_id=image.image_id,
            model_dir=streamer.model_url(cfg.bucket, m.prefix) if streamed else f"/models/{m.prefix}",
            served_name=m.name, dtype=m.dtype, max_model_len=m.max_model_len,
            port=m.port, mount_path=host.spec.mount_path, revision=self.uploads[m.name].revision,
            bind_address=host.spec.bind_address, gpu_memory_utilization=m.gpu_memory_utilization,
            kv_cache_space_gib=m.kv_cache_space_gib, extra_args=m.extra_args, env={**cfg.vllm_env, **m.env},
            api_key=pulumi.Output.secret(cfg.vllm_api_key), has_api_key=bool(cfg.vllm_api_key),
            shm_size=cfg.vllm_shm_size, gpus=gpus, restart=cfg.vllm_restart, ready_timeout=cfg.vllm_ready_timeout,
            compile_cache=cfg.vllm_compile_cache,
            **host.readiness(), **stream,
            **({"weights_dir": copy.path, "copy_generation": copy.generation} if copy else {})),
            pulumi.ResourceOptions(parent=self, depends_on=after,
                                   providers=[on_docker.provider] if on_docker.provider else None))
