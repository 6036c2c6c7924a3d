"""KubeStack: the whole graph on a Kubernetes cluster (``target: kubernetes``).

    KubeCluster (provider, namespace, Secret) -> KubeS3Server (StatefulSet + claim + Service, or
    external) -> credential check -> Bucket -> per model: ModelUpload -> KubeMount (rclone DaemonSet)
    -> KubeModel (Deployment + Service) -> SmokeTest through the Service

The bucket and the uploads are the Docker path's own resources, from this machine to the endpoint
it reaches (``rustfsEndpoint``; for RustFS on the cluster ``kubeNodeAddress:kubeS3NodePort``). Each
model's chain is its own, as on Docker: adding, changing or removing one model touches only its
upload, DaemonSet, Deployment, Service and smoke completion. Kubernetes places and balances the
pods; there is no balancer of ours.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

import pulumi

from components.config.spec import KubeSpec, StackConfig
from components.kube.cluster import KubeCluster, KubeClusterArgs
from components.kube.model import KubeModel, KubeModelArgs
from components.kube.mount import KubeMount, KubeMountArgs
from components.kube.s3 import KubeS3Server, KubeS3ServerArgs
from components.serving import streamer
from components.serving.smoke import SmokeTest, SmokeTestArgs
from components.stack_outputs import curl, metrics
from components.storage.bucket import Bucket, BucketArgs
from components.storage.model_upload import ModelUpload, ModelUploadArgs


@dataclass
class KubeStackArgs:
    config: StackConfig


class KubeStack(pulumi.ComponentResource):
    def __init__(self, name: str, args: KubeStackArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:index:KubeStack", name, None, opts)
        cfg = self.cfg = args.config
        kube: KubeSpec = cfg.kube  # type: ignore[assignment]
        self.kube = kube
        access_key, secret_key = pulumi.Output.secret(cfg.access_key), pulumi.Output.secret(cfg.secret_key)
        self.cluster = KubeCluster("cluster", KubeClusterArgs(
            stack=cfg.stack, kubeconfig=kube.kubeconfig, namespace=kube.namespace, name_prefix=cfg.name_prefix,
            access_key=access_key, secret_key=secret_key, api_key=pulumi.Output.secret(cfg.vllm_api_key),
            ca_bundle=cfg.ca_bundle), pulumi.ResourceOptions(parent=self))
        self.server = KubeS3Server("s3", KubeS3ServerArgs(
            kind=cfg.s3_server, cluster=self.cluster, name_prefix=cfg.name_prefix, image=cfg.rustfs_image,
            endpoint=cfg.rustfs_endpoint, node_port=kube.s3_node_port, storage_class=kube.storage_class,
            storage_size=kube.storage_size, access_key=access_key, secret_key=secret_key,
            defaults_allowed=cfg.uses_default_credentials, ca_bundle=cfg.ca_bundle),
            pulumi.ResourceOptions(parent=self))
        # where the objects live: another namespace or server kind behind the same endpoint is another store
        store = f"external {cfg.rustfs_endpoint}" if cfg.s3_server == "external" else \
            f"{cfg.s3_server} on kubernetes namespace {kube.namespace}"
        after_server = pulumi.ResourceOptions(parent=self, depends_on=self.server.ready)
        self.bucket = Bucket("bucket", BucketArgs(
            endpoint=cfg.rustfs_endpoint, bucket=cfg.bucket, access_key=access_key, secret_key=secret_key,
            purge=cfg.purge_on_destroy, store=store, ca_bundle=cfg.ca_bundle), after_server)
        self.uploads: dict[str, ModelUpload] = {}
        self.models: dict[str, KubeModel] = {}
        self.smoke: dict[str, SmokeTest] = {}
        for m in cfg.models:
            upload = self.uploads[m.name] = ModelUpload(f"model-{m.prefix}", ModelUploadArgs(
                endpoint=cfg.rustfs_endpoint, bucket=self.bucket.name, prefix=m.prefix, source=m.source,
                access_key=access_key, secret_key=secret_key, cache_dir=os.path.join(cfg.state_dir, "hash-cache"),
                purge=cfg.purge_on_destroy, store=store, ca_bundle=cfg.ca_bundle, stack=cfg.stack), after_server)
            after: list[pulumi.Resource] = [upload]
            if m.load_format != streamer.LOAD_FORMAT:
                after.append(KubeMount(f"mount-{m.prefix}", KubeMountArgs(
                    cluster=self.cluster, name_prefix=cfg.name_prefix, model=m.name, prefix=m.prefix,
                    bucket=self.bucket.name, endpoint=self.server.cluster_endpoint, image=kube.rclone_image,
                    mount_path=cfg.mount_path, cache_dir=f"{cfg.mount_cache_dir}/{m.prefix}",
                    flags=cfg.mount_flags, revision=upload.revision, has_ca=bool(cfg.ca_bundle)),
                    pulumi.ResourceOptions(parent=self, depends_on=[upload])).daemonset)
            model = self.models[m.name] = KubeModel(f"vllm-{m.prefix}", KubeModelArgs(
                cluster=self.cluster, name_prefix=cfg.name_prefix, served_name=m.name, prefix=m.prefix,
                image=cfg.vllm_image, dtype=m.dtype, max_model_len=m.max_model_len, node_port=m.port,
                node_address=kube.node_address, replicas=m.replicas, mount_path=cfg.mount_path,
                revision=upload.revision, bucket=cfg.bucket, load_format=m.load_format,
                s3_endpoint=self.server.cluster_endpoint, gpu_memory_utilization=m.gpu_memory_utilization,
                kv_cache_space_gib=m.kv_cache_space_gib, extra_args=m.extra_args, env={**cfg.vllm_env, **m.env},
                has_api_key=bool(cfg.vllm_api_key), has_ca=bool(cfg.ca_bundle), shm_size=cfg.vllm_shm_size,
                gpus=m.gpus if m.gpus is not None else cfg.vllm_gpus, ready_timeout=cfg.vllm_ready_timeout,
                weights_bytes=sum(int(e["size"]) for e in upload.manifest.values()), memory_gib=m.memory_gib,
                cpus=m.cpus),
                pulumi.ResourceOptions(parent=self, depends_on=after))
            if cfg.smoke_test:
                self.smoke[m.name] = SmokeTest(f"smoke-{m.prefix}", SmokeTestArgs(
                    base_url=model.base_url, model=m.name, container_id=model.rollout, prompt=cfg.smoke_prompt,
                    max_tokens=cfg.smoke_max_tokens, api_key=pulumi.Output.secret(cfg.vllm_api_key)),
                    pulumi.ResourceOptions(parent=self, depends_on=[model.deployment, model.service]))
        self.register_outputs({})

    def exports(self) -> dict[str, Any]:
        """The stack's outputs: the Docker stack's shape, with the cluster's objects per model."""
        cfg = self.cfg
        first = cfg.models[0]
        out: dict[str, Any] = {
            "target": "kubernetes", "namespace": self.cluster.namespace,
            "s3_server": self.server.kind, "s3_endpoint": self.server.endpoint,
            "s3_cluster_endpoint": self.server.cluster_endpoint,
            "bucket": self.bucket.name, "bucket_adopted": self.bucket.adopted, "mount_path": cfg.mount_path,
            "models": {m.name: {
                "base_url": self.models[m.name].base_url, "served_name": m.name,
                "metrics_url": metrics(self.models[m.name].base_url),
                "prefix": f"s3://{cfg.bucket}/{m.prefix}/", "load_format": m.load_format, "replicas": m.replicas,
                "deployment": self.models[m.name].deployment.metadata.apply(lambda md: f"{md.namespace}/{md.name}"),
                "service": self.models[m.name].service.metadata.apply(lambda md: f"{md.namespace}/{md.name}")}
                for m in cfg.models},
            "curl": curl(self, self.models[first.name].base_url, first.name),  # type: ignore[arg-type]
        }
        if cfg.smoke_test:
            out["smoke_completions"] = {name: t.text for name, t in self.smoke.items()}
        return out
