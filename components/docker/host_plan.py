"""HostPlan: one Docker host's part of the stack, children of the stack's root.

    MountRoot, MountCache, the vLLM image -> per model the host serves: its weights' way in (an
    rclone mount, a copy on the host's disk, or the streamer: nothing) -> its VllmServer

Names carry the host's name (none for the implicit local host: the names stacks had before hosts).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Mapping, Optional

import pulumi
import pulumi_docker as docker

from components.config import previous
from components.config.schema import LOCAL_COPY
from components.config.spec import ModelSpec, StackConfig
from components.core.target import Keys, Store
from components.docker import change_order
from components.docker.copies import ModelCopy, ModelCopyArgs, copy_root
from components.docker.mounts import (MountCache, MountCacheArgs, MountRoot, MountRootArgs, RcloneMount,
                                      RcloneMountArgs, keeper_name, keeper_ref, remote_name)
from components.docker.serving_state import Trouble
from components.hosts import machine
from components.hosts.docker_facts import DockerFacts
from components.hosts.types import Host
from components.providers.purge_order import PurgeOrderResource
from components.serving import streamer
from components.serving.vllm import (CPU_BIND, VllmServer, VllmServerArgs, change_parts, cpu_binding, drain_of,
                                     given_drain, stop_seconds)


class HostPlan:
    def __init__(self, owner: pulumi.Resource, host: Host, cfg: StackConfig, store: Store, keys: Keys,
                 facts: Optional[DockerFacts] = None, troubles: Optional[Mapping[str, Trouble]] = None,
                 rolls: Optional[dict[str, tuple[str, pulumi.Resource]]] = None) -> None:
        self.owner, self.host, self.cfg, self.store, self.keys = owner, host, cfg, store, keys
        # one host at a time (issue 58): model name -> (the host, the new server's readiness) of the last host of
        # this `up` whose server of that model changes; shared by the stack's hosts, in their order
        self.rolls = rolls if rolls is not None else {}
        self.facts = facts                         # the host's Docker as preflight saw it (None: unknown)
        self.troubles = dict(troubles or {})       # model name -> its container's trouble (serving_state)
        p = host.prefix
        host.setup(owner)
        after_bucket: list[pulumi.Resource] = [store.bucket, *host.after]
        # The root is made only once the storage answers with our keys: a failed up leaves no mount.
        self.mount_root = MountRoot(f"{p}mount-root", MountRootArgs(path=host.spec.mount_path, host=host),
                                    pulumi.ResourceOptions(parent=owner, depends_on=after_bucket))
        # Deleted after every mount (they depend on it): destroy then purges or reports the cache.
        self.cache = MountCache(f"{p}mount-cache", MountCacheArgs(
            path=host.spec.mount_cache_dir, host=host, purge=cfg.purge_on_destroy),
            pulumi.ResourceOptions(parent=owner, depends_on=after_bucket))
        # One image resource per host for all its models: pulled by `up` when missing, kept on destroy.
        self.on_docker = host.docker(owner)
        # Replaced create-first (a new tag: kept locally, nothing to delete): a resource replaced delete-first takes
        # every resource that depends on it down first (tried: a new tag of vllmImage stopped the vLLM servers
        # before their side-by-side replacements started), and the TF bridge makes named resources delete-first
        create_first = pulumi.ResourceOptions.merge(self.on_docker, pulumi.ResourceOptions(delete_before_replace=False))
        self.image = docker.RemoteImage(f"{p}vllm-image", docker.RemoteImageArgs(
            name=host.spec.vllm_image, keep_locally=True), create_first)
        # The mounts' keepers run from rcloneImage (small: rclone, fuse3, nsenter), never the vLLM image.
        self.keeper_image = docker.RemoteImage(f"{p}rclone-image", docker.RemoteImageArgs(
            name=host.spec.rclone_image, keep_locally=True), create_first) if any(
            m.mounted for m in cfg.models_on(host.name)) else None
        # the keepers run it by its digest (root on the host: never by a tag someone could move); said by preview
        self.keeper_ref: pulumi.Input[str] = keeper_ref(self.keeper_image) if self.keeper_image else ""
        if self.keeper_image:
            pulumi.Output.from_input(self.keeper_ref).apply(lambda ref: pulumi.log.info(
                f"mount keepers on {host.name} run rcloneImage {host.spec.rclone_image} as {ref}"
                + ("" if "sha256:" in ref else " (no digest known yet: pulled by this run)"), self.keeper_image))
        self.servers: dict[str, VllmServer] = {}
        self.slots: dict[str, dict] = {}          # model prefix -> its server's slot and change parts (change_order)
        self.reserved = 0                          # bytes this `up`'s side-by-side changes take on the host
        self.changing: set[str] = set()            # models whose server this `up` changes here (change_order)
        self.copies: dict[str, ModelCopy] = {}
        for m in cfg.models_on(host.name):
            self.servers[m.name] = self._model(m)
        # Deleted first by destroy (it depends on the host's copies and cache): purgeOnDestroy as configured then
        self.purge_order = PurgeOrderResource(f"{p}purge-order", {
            "host": host.name, "cache_root": host.spec.mount_cache_dir, "purge": cfg.purge_on_destroy,
            "stack": cfg.stack, "ssh": host.ssh_argv(),
            # a remote host's mount tool writes it there (issue 45: root's, never through a link)
            **({"tool": f"{host.spec.tools_dir}/rclone-mount"} if host.ssh_argv() else {})},
            pulumi.ResourceOptions(parent=owner, depends_on=[self.cache, *self.copies.values()]))

    def _model(self, m: ModelSpec) -> VllmServer:
        """``m``'s way in and its server on this host."""
        if m.load_format == streamer.LOAD_FORMAT:   # read from the bucket: no mount, after its upload
            pulumi.log.info(f"models[{m.name}] on {self.host.name}: weights streamed from "
                            f"{streamer.model_url(self.cfg.bucket, m.prefix)} by the Run:ai Model Streamer "
                            "(loadFormat runai_streamer; no mount)")
            return self._server(m, [self.store.uploads[m.name]], streamed=True)
        if m.load_format == LOCAL_COPY:   # copied to the host's disk once per revision; vLLM reads it there
            copy = self.copies[m.name] = self._copy(m)
            return self._server(m, [copy], copy=copy)
        return self._server(m, [self.mount_root, self._mount(m)])

    def _copy(self, m: ModelSpec) -> ModelCopy:
        host, cfg, upload = self.host, self.cfg, self.store.uploads[m.name]
        pulumi.log.info(f"models[{m.name}] on {host.name}: weights read from the host's copy of revision "
                        f"{upload.revision_digest} in {copy_root(host.spec.mount_cache_dir, m.prefix)} "
                        "(loadFormat local_copy; copied from the bucket when that revision is not there yet)")
        return ModelCopy(f"{host.prefix}copy-{m.prefix}", ModelCopyArgs(
            remote=remote_name(cfg.name_prefix), endpoint=host.spec.s3_endpoint, bucket=self.store.bucket.name,
            prefix=m.prefix, access_key=self.keys.access_key, secret_key=self.keys.secret_key,
            root=copy_root(host.spec.mount_cache_dir, m.prefix), manifest=upload.manifest,
            revision=upload.revision, revision_digest=upload.revision_digest, host=host,
            flags=cfg.copy_flags, ca_bundle=cfg.ca_bundle, purge=cfg.purge_on_destroy),
            pulumi.ResourceOptions(parent=self.owner, depends_on=[self.cache]))

    def _mount(self, m: ModelSpec) -> RcloneMount:
        host, cfg, upload = self.host, self.cfg, self.store.uploads[m.name]
        copied = host.marker_file(f"{m.prefix}.copy")
        if not m.load_format_given and copied and os.path.exists(copied):
            pulumi.log.warn(f"models[{m.name}] on {host.name}: loadFormat defaults to mount again (issue 36: the "
                            "guide's read path, one copy of the model in the bucket, read through the host's "
                            "read-only rclone mount, warmed while vLLM boots); this update replaces the model's "
                            "copy on the host's disk with its mount, and its container once. To keep the copy, "
                            "set the model's loadFormat: local_copy")
        return RcloneMount(f"{host.prefix}mount-{m.prefix}", RcloneMountArgs(
            remote=remote_name(cfg.name_prefix), endpoint=host.spec.s3_endpoint, bucket=self.store.bucket.name,
            prefix=m.prefix, access_key=self.keys.access_key, secret_key=self.keys.secret_key,
            root=host.spec.mount_path, cache_dir=os.path.join(host.spec.mount_cache_dir, m.prefix),
            flags=cfg.mount_flags, manifest=upload.manifest, revision=upload.revision, ca_bundle=cfg.ca_bundle,
            host=host, keeper_image=host.spec.rclone_image, keeper_name=keeper_name(cfg.name_prefix, m.prefix),
            keeper_ref=self.keeper_ref,
            stack=cfg.stack, command=cfg.mount_command, read_ahead_kb=cfg.mount_read_ahead_kb),
            pulumi.ResourceOptions(parent=self.owner, depends_on=[self.mount_root, self.cache, self.image,
                                                                  *([self.keeper_image] if self.keeper_image else [])]))

    def _server(self, m: ModelSpec, after: list[pulumi.Resource], streamed: bool = False,
                copy: Optional[ModelCopy] = None) -> VllmServer:
        """The model's vLLM container on this host, reading its mount or copy (or streaming from the
        bucket, given the keys); GPUs from the model, the host or the stack."""
        host, cfg = self.host, self.cfg
        gpus = m.gpus if m.gpus is not None else host.spec.gpus if host.spec.gpus is not None else cfg.vllm_gpus
        record = previous.output(change_order.OUTPUT)
        decision_before = record.get(f"{host.name}/{m.prefix}") if isinstance(record, dict) else None
        was = change_order.slot(cfg, m, str(decision_before.get("slot", "a")) if isinstance(decision_before, dict)
                                else "a")
        name = was.container
        before = self.facts.health.get(name) if self.facts is not None else None
        if cpu_binding(gpus) and CPU_BIND not in {**cfg.vllm_env, **m.env} and before is not None and not before.cpu_bind:
            # said only when this update changes it: a container made before the default
            pulumi.log.info(f"models[{m.name}] on {host.name}: {CPU_BIND}=nobind (the default on CPU: vLLM's own binding "
                            "pins every server's worker to the same cores, and two models on one host starve each "
                            f"other): its container {name}, made before this default, is replaced once. Set the "
                            f"model's env {CPU_BIND} to bind it yourself")
        trouble = self.troubles.get(m.name)
        stream = dict(load_format=m.load_format, s3_endpoint=host.spec.s3_endpoint, access_key=self.keys.access_key,
                      secret_key=self.keys.secret_key, ca_bundle=cfg.ca_bundle) if streamed else {}
        args = VllmServerArgs(
            stack=cfg.stack, container_name=was.container, image_id=self.image.image_id,
            model_dir=streamer.model_url(cfg.bucket, m.prefix) if streamed else f"/models/{m.prefix}",
            served_name=m.name, dtype=m.dtype, max_model_len=m.max_model_len,
            port=was.port, mount_path=host.spec.mount_path, revision=self.store.uploads[m.name].revision,
            bind_address=host.spec.bind_address, gpu_memory_utilization=m.gpu_memory_utilization,
            kv_cache_space_gib=m.kv_cache_space_gib, extra_args=m.extra_args, env={**cfg.vllm_env, **m.env},
            api_key=pulumi.Output.secret(cfg.vllm_api_key), has_api_key=bool(cfg.vllm_api_key),
            shm_size=cfg.vllm_shm_size, gpus=gpus, restart=cfg.vllm_restart, ready_timeout=cfg.vllm_ready_timeout,
            drain_seconds=cfg.vllm_drain_seconds, compile_cache=cfg.vllm_compile_cache, memory_gib=m.memory_gib,
            recheck=trouble.recheck if trouble else "", recheck_id=trouble.container_id if trouble else "",
            trouble=trouble.summary if trouble else "",
            **host.readiness(), **stream,
            **({"weights_dir": copy.path, "copy_generation": copy.generation} if copy else {}))
        args = self._slot(m, args, gpus, decision_before)
        if before is not None and before.stop_timeout != stop_seconds(args):
            # said only when this update changes it: a container made before vllmDrainSeconds, or with another drain
            drain = given_drain(m.extra_args)
            words = (f"vllmDrainSeconds {cfg.vllm_drain_seconds}" if drain is None
                     else f"--shutdown-timeout {drain} in its extraArgs")
            made = "before vllmDrainSeconds" if not before.stop_timeout else "with another stop timeout"
            pulumi.log.info(f"models[{m.name}] on {host.name}: a stopped vLLM server finishes what it serves for up to "
                            f"{drain_of(args)} s ({words}): its container {name}, made {made}, is replaced once "
                            + ("(side by side)" if not args.delete_before_replace else
                               "(requests for the model on this host wait for the new one)"))
        changes = m.name in self.changing
        rolled = self.rolls.get(m.name) if changes else None
        if rolled:
            # its change on this host waits until the previous host's new server answers: a failure there stops the
            # roll before this host's server is touched, and this one keeps serving
            pulumi.log.info(f"models[{m.name}] on {host.name}: changes once its new server on {rolled[0]} answers "
                            "(one host at a time)")
        server = VllmServer(f"{host.prefix}vllm-{m.prefix}", args, pulumi.ResourceOptions(
            parent=self.owner, depends_on=[*after, *([rolled[1]] if rolled else [])],
            providers=[self.on_docker.provider] if self.on_docker.provider else None))
        if changes:
            self.rolls[m.name] = (host.name, server.ready)
        return server

    def _slot(self, m: ModelSpec, args: VllmServerArgs, gpus: str, before: object) -> VllmServerArgs:
        """Where the model's server goes this `up` (components.docker.change_order): its slot's name and port,
        replaced create-first when the change goes side by side; preview says which way and why."""
        host, cfg = self.host, self.cfg
        parts = change_parts(args, host.spec.vllm_image, self.store.uploads[m.name].revision_digest, cfg.vllm_api_key)
        judged: list[change_order.Fit] = []

        def judge() -> change_order.Fit:
            # the host's available memory less what this `up`'s earlier side-by-side changes on it take
            available = self.facts.mem_available if self.facts is not None else None
            left = None if available is None else available - self.reserved
            judged.append(change_order.fit(m, gpus, args.env, change_order.weights_bytes(m.source), left))
            return judged[-1]

        decision = change_order.decide(cfg, m, host.name, before if isinstance(before, dict) else None, parts, judge)
        if decision.side_by_side and host.spec.local and machine.port_checker(cfg.stack)(
                host.spec.bind_address, decision.slot.port):
            # the new server's port is another process's here: the change waits for the old one instead
            key = f"models[{m.name}].changePort" if decision.slot.letter == "b" else f"models[{m.name}].port"
            decision = change_order.Decision(decision.was, decision.was, False, decision.line.split(": side by side")[0]
                                             + f": stop-first (the new server's port {decision.slot.port}, {key}, is "
                                             "in use on this machine by another process: free it, or set "
                                             f"{key} to a free port, to change it side by side)")
        if decision.side_by_side and judged:
            self.reserved += judged[-1].need
        if decision.line:
            pulumi.log.info(decision.line)
            self.changing.add(m.name)
        self.slots[m.prefix] = {"slot": decision.slot.letter, "parts": parts}
        return dataclasses.replace(args, container_name=decision.slot.container, port=decision.slot.port,
                                   delete_before_replace=not decision.side_by_side)
