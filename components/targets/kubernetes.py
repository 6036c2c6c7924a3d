"""KubeTarget: the stack on a Kubernetes cluster (``target: kubernetes``).

    KubeCluster (provider, namespace, Secret) -> KubeS3Server (StatefulSet + claim + Service, or
    external) -> [core: check, bucket, uploads] -> per model: KubeMount (rclone DaemonSet; none
    with the streamer) -> KubeModel (Deployment + Service) -> [core: smoke completion through the Service];
    KubeRouter (the stack's one endpoint: vllm-router and nginx, a Deployment and a NodePort Service) over
    every model's Service, once every model's Deployment is ready.

The bucket and the uploads are the core's, from this machine to the endpoint it reaches
(``rustfsEndpoint``; for RustFS on the cluster ``kubeNodeAddress:kubeS3NodePort``). Each model's
chain is its own, as on Docker. Kubernetes places and balances the pods of a model behind its Service.
"""
from __future__ import annotations

from typing import Any

import pulumi

from components.config.spec import KubeSpec, ModelSpec, StackConfig
from components.core.outputs import curl, metrics, router_outputs
from components.core.target import Keys, S3Side, Served, Store, Target
from components.config import previous as last_up
from components.kube import image_pin, preflight
from components.kube.cluster import KubeCluster, KubeClusterArgs
from components.kube.model import KubeModel, KubeModelArgs
from components.kube.mount import KubeMount, KubeMountArgs
from components.kube.model import VLLM_PORT
from components.kube.router import KubeRouter, KubeRouterArgs
from components.kube.s3 import KubeS3Server, KubeS3ServerArgs
from components.serving import streamer


class KubeTarget(Target):
    name = "kubernetes"
    component_type = "rustfs-vllm:index:KubeStack"

    def __init__(self, cfg: StackConfig) -> None:
        super().__init__(cfg)
        self.kube: KubeSpec = cfg.kube  # type: ignore[assignment]
        self.models: dict[str, KubeModel] = {}
        self.router: KubeRouter | None = None
        self.mount_image = self.kube.rclone_image   # what the mount pods run (serve pins it by digest)

    @classmethod
    def accepts(cls, cfg: StackConfig) -> bool:
        return cfg.kube is not None

    def preflight(self) -> list[str]:
        return preflight.check(self.cfg)

    def s3_server(self, owner: pulumi.ComponentResource, keys: Keys) -> S3Side:
        cfg, kube = self.cfg, self.kube
        self.cluster = KubeCluster("cluster", KubeClusterArgs(
            stack=cfg.stack, kubeconfig=kube.kubeconfig, namespace=kube.namespace, name_prefix=cfg.name_prefix,
            access_key=keys.access_key, secret_key=keys.secret_key, api_key=pulumi.Output.secret(cfg.vllm_api_key),
            ca_bundle=cfg.ca_bundle, store_node_label=kube.store_node_label), pulumi.ResourceOptions(parent=owner))
        self.server = KubeS3Server("s3", KubeS3ServerArgs(
            kind=cfg.s3_server, cluster=self.cluster, name_prefix=cfg.name_prefix, image=cfg.rustfs_image,
            endpoint=cfg.rustfs_endpoint, node_port=kube.s3_node_port, storage_class=kube.storage_class,
            storage_size=kube.storage_size), pulumi.ResourceOptions(parent=owner))
        # where the objects live: another namespace or server kind behind the same endpoint is another store
        store = f"external {cfg.rustfs_endpoint}" if cfg.s3_server == "external" else \
            f"{cfg.s3_server} on kubernetes namespace {kube.namespace}"
        # the check retries up to 5 minutes: the StatefulSet's update is reported done before its pod has
        # restarted (components/providers/credentials.py); a wrong key fails once that time has gone
        return S3Side(component=self.server, ready=list(self.server.ready),
                      instance=self.server.statefulset.id if self.server.statefulset else "external",
                      endpoint=self.server.endpoint, kind=self.server.kind, store=store, check_wait_seconds=300)

    def serve(self, owner: pulumi.ComponentResource, store: Store, keys: Keys) -> list[Served]:
        if any(m.load_format != streamer.LOAD_FORMAT for m in self.cfg.models):   # the mounts' pods: by digest
            recorded = last_up.output("mount_image")
            self.mount_image, why = image_pin.pinned(self.kube.rclone_image,
                                                     recorded=recorded if isinstance(recorded, dict) else None)
            pulumi.log.info(image_pin.line(self.kube.rclone_image, self.mount_image, why))
        if store.read_key is not None:      # readKeys scoped: the pods read the readers' Secret
            self.cluster.use_read_keys(keys.access_key, keys.secret_key)
        served = []
        for m in self.cfg.models:
            model = self.models[m.name] = self._model(owner, store, m)
            served.append(Served(model=m.name, place=None, name_prefix="", base_url=model.base_url,
                                 instance=model.rollout, ready=[model.deployment, model.service]))
        if self.cfg.router and self.cfg.models:
            self.router = self._router(owner)
        return served

    def _router(self, owner: pulumi.ComponentResource) -> KubeRouter:
        """The stack's one endpoint, over each model's Service (its cluster IP: no cluster DNS needed)."""
        cfg = self.cfg
        routes = {m.name: self.models[m.name].service.spec.apply(
            lambda s: f"http://{s.cluster_ip or '<cluster IP, assigned at create>'}:{VLLM_PORT}") for m in cfg.models}
        return KubeRouter("router", KubeRouterArgs(
            cluster=self.cluster, name_prefix=cfg.name_prefix, image=cfg.router_image, policy=cfg.router_policy,
            node_port=self.kube.router_node_port, node_address=self.kube.node_address, routes=routes,
            # no max_model_len in the listing here: a model's change would roll the router's pod for it
            entries={},
            api_key=pulumi.Output.secret(cfg.vllm_api_key) if cfg.vllm_api_key else ""),
            pulumi.ResourceOptions(parent=owner, depends_on=[self.models[m.name].deployment for m in cfg.models]))

    def _model(self, owner: pulumi.ComponentResource, store: Store, m: ModelSpec) -> KubeModel:
        """``m``'s rclone DaemonSet (unless streamed) and its Deployment and Service."""
        cfg, kube, upload = self.cfg, self.kube, store.uploads[m.name]
        after: list[pulumi.Resource] = [upload]
        if m.load_format != streamer.LOAD_FORMAT:
            after.append(KubeMount(f"mount-{m.prefix}", KubeMountArgs(
                cluster=self.cluster, name_prefix=cfg.name_prefix, model=m.name, prefix=m.prefix,
                bucket=store.bucket.name, endpoint=self.server.cluster_endpoint, image=self.mount_image,
                mount_path=cfg.mount_path, cache_dir=f"{cfg.mount_cache_dir}/{m.prefix}",
                flags=cfg.mount_flags, revision=upload.revision, has_ca=bool(cfg.ca_bundle)),
                pulumi.ResourceOptions(parent=owner, depends_on=[upload])).daemonset)
        return KubeModel(f"vllm-{m.prefix}", KubeModelArgs(
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
            pulumi.ResourceOptions(parent=owner, depends_on=after))

    def outputs(self, store: Store) -> dict[str, Any]:
        """The Docker stack's shape, with the cluster's objects per model."""
        cfg = self.cfg
        first = cfg.models[0]
        return {
            "target": "kubernetes", "namespace": self.cluster.namespace,
            "s3_cluster_endpoint": self.server.cluster_endpoint, "mount_path": cfg.mount_path,
            "models": {m.name: {
                "base_url": self.models[m.name].base_url, "served_name": m.name,
                "metrics_url": metrics(self.models[m.name].base_url),
                "prefix": f"s3://{cfg.bucket}/{m.prefix}/", "load_format": m.load_format, "replicas": m.replicas,
                "deployment": self.models[m.name].deployment.metadata.apply(lambda md: f"{md.namespace}/{md.name}"),
                "service": self.models[m.name].service.metadata.apply(lambda md: f"{md.namespace}/{md.name}")}
                for m in cfg.models},
            "curl": curl(cfg, self.models[first.name].base_url, first.name),
            **router_outputs(cfg, self.router),
            # the mount pods' image as first resolved: kept by the next runs (components/kube/image_pin.py)
            "mount_image": image_pin.record(self.kube.rclone_image, self.mount_image),
        }
