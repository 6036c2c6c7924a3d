"""KubeS3Server: the object store on the cluster, or an external one.

- ``rustfs``: RustFS as a one-pod StatefulSet (``rustfsImage``) with a PersistentVolumeClaim from
  its volume claim template (``kubeStorageClass``, ``rustfsStorageSize``). The claim is kept when the
  StatefulSet goes (retention policy Retain on delete and scale-down, and destroy keeps the
  namespace), so destroy never deletes the data; the next `up` binds the same claim again.
  Credentials: RustFS's own ``RUSTFS_ACCESS_KEY_FILE``/``RUSTFS_SECRET_KEY_FILE``, files from the
  stack's Secret. A NodePort Service: pods reach it at its cluster IP, this machine (uploads, the
  credential check) at ``kubeNodeAddress:kubeS3NodePort``.
- ``rclone-serve-s3``: the same with ``rclone serve s3`` (an S3-compatible STAND-IN, not RustFS).
- ``external``: nothing runs; pods and this machine use ``rustfsEndpoint``.

Pulumi's await logic gates readiness (the StatefulSet's rollout, its pod's readiness probe); then
the core's credential check (components.core.store, a child of this component), from this machine,
proves the keys work and RustFS's defaults do not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.kube import placement
from components.kube.cluster import ACCESS_KEY, RCLONE_AUTH_KEY, SECRET_KEY, KubeCluster
from components.kube import sizing
from components.kube.names import labels, meta
from components.storage.kinds import describe

S3_PORT = 9000
SECRETS = "/run/secrets/rustfs-vllm"
RUSTFS_UID = 10001     # USER rustfs of the RustFS image (and of the stand-in): the claim is made its group's


@dataclass
class KubeS3ServerArgs:
    kind: str                      # rustfs, rclone-serve-s3 or external
    cluster: KubeCluster
    name_prefix: str
    image: str
    endpoint: str                  # as this machine reaches it
    node_port: int
    storage_class: str
    storage_size: str


class KubeS3Server(pulumi.ComponentResource):
    endpoint: pulumi.Output[str]          # this machine's view
    cluster_endpoint: pulumi.Output[str]  # the pods' view
    kind: pulumi.Output[str]

    def __init__(self, name: str, args: KubeS3ServerArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:kube:S3Server", name, None, opts)
        c = args.cluster
        self.ready: list[pulumi.Resource] = []
        self.cluster_endpoint = pulumi.Output.from_input(args.endpoint)
        self.statefulset: Optional[k8s.apps.v1.StatefulSet] = None
        if args.kind != "external":
            self.statefulset, self.service = self._server(name, args)
            self.ready = [self.statefulset, self.service]
            # a preview of a new Service has no cluster IP yet (the API server assigns it at create)
            self.cluster_endpoint = self.service.spec.apply(
                lambda s: f"http://{s.cluster_ip or '<cluster IP, assigned at create>'}:{S3_PORT}")
        self.endpoint = pulumi.Output.from_input(args.endpoint)
        self.kind = pulumi.Output.from_input(describe(args.kind, args.image) + " on Kubernetes"
                                             if args.kind != "external" else describe(args.kind, args.image))
        self.register_outputs({"endpoint": self.endpoint, "cluster_endpoint": self.cluster_endpoint,
                               "kind": self.kind})

    def _server(self, name: str, args: KubeS3ServerArgs) -> tuple[k8s.apps.v1.StatefulSet, k8s.core.v1.Service]:
        c = args.cluster
        ns, stack = c.namespace_name, c.stack
        sts_name = f"{args.name_prefix}-s3"
        volumes = [c.secret_volume("keys", {ACCESS_KEY: "RUSTFS_ACCESS_KEY", SECRET_KEY: "RUSTFS_SECRET_KEY"})]
        if args.kind == "rustfs":
            env = [k8s.core.v1.EnvVarArgs(name=k, value=v) for k, v in (
                ("RUSTFS_VOLUMES", "/data"), ("RUSTFS_ADDRESS", f":{S3_PORT}"), ("RUSTFS_CONSOLE_ENABLE", "false"),
                ("RUSTFS_ACCESS_KEY_FILE", f"{SECRETS}/RUSTFS_ACCESS_KEY"),
                ("RUSTFS_SECRET_KEY_FILE", f"{SECRETS}/RUSTFS_SECRET_KEY"))]
            command, probe = None, k8s.core.v1.ProbeArgs(
                http_get=k8s.core.v1.HTTPGetActionArgs(path="/health/ready", port=S3_PORT),
                period_seconds=3, failure_threshold=2)
        else:   # rclone serve s3: its --auth-key from RCLONE_AUTH_KEY (the quotes keep "ak,sk" one CSV field)
            env = [c.secret_env("RCLONE_AUTH_KEY", RCLONE_AUTH_KEY)]
            command = ["rclone", "serve", "s3", "/data", "--addr", f":{S3_PORT}", "--config", "/dev/null"]
            probe = k8s.core.v1.ProbeArgs(tcp_socket=k8s.core.v1.TCPSocketActionArgs(port=S3_PORT),
                                          period_seconds=3, failure_threshold=2)
        select = labels(stack, "s3-server")
        claim = k8s.core.v1.PersistentVolumeClaimSpecArgs(
            access_modes=["ReadWriteOnce"], storage_class_name=args.storage_class or None,
            resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": args.storage_size}))
        sts = k8s.apps.v1.StatefulSet(f"{name}-statefulset", k8s.apps.v1.StatefulSetInitArgs(
            metadata=meta(sts_name, ns, stack, "s3-server"),
            spec=k8s.apps.v1.StatefulSetSpecArgs(
                service_name=sts_name, replicas=1,
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=select),
                persistent_volume_claim_retention_policy=k8s.apps.v1.StatefulSetPersistentVolumeClaimRetentionPolicyArgs(
                    when_deleted="Retain", when_scaled="Retain"),
                volume_claim_templates=[k8s.core.v1.PersistentVolumeClaimArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(name="data", labels=select), spec=claim)],
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=select),
                    spec=k8s.core.v1.PodSpecArgs(
                        node_selector=placement.store_selector(c.args.store_node_label),
                        security_context=k8s.core.v1.PodSecurityContextArgs(
                            run_as_user=RUSTFS_UID, run_as_group=RUSTFS_UID, fs_group=RUSTFS_UID),
                        containers=[k8s.core.v1.ContainerArgs(
                            name="s3", image=args.image, image_pull_policy="IfNotPresent", command=command, env=env,
                            ports=[k8s.core.v1.ContainerPortArgs(name="s3", container_port=S3_PORT)],
                            readiness_probe=probe,
                            resources=k8s.core.v1.ResourceRequirementsArgs(requests=sizing.S3_REQUEST,
                                                                           limits=sizing.S3_LIMIT),
                            volume_mounts=[k8s.core.v1.VolumeMountArgs(name="data", mount_path="/data"),
                                           k8s.core.v1.VolumeMountArgs(name="keys", mount_path=SECRETS,
                                                                       read_only=True)])],
                        volumes=volumes)))),
            c.child(self, depends_on=[c.ns, c.secret],
                    custom_timeouts=pulumi.CustomTimeouts(create="10m", update="10m")))
        svc = k8s.core.v1.Service(f"{name}-service", k8s.core.v1.ServiceInitArgs(
            metadata=meta(sts_name, ns, stack, "s3-server"),
            spec=k8s.core.v1.ServiceSpecArgs(type="NodePort", selector=select, ports=[k8s.core.v1.ServicePortArgs(
                name="s3", port=S3_PORT, target_port=S3_PORT, node_port=args.node_port)])),
            c.child(self, depends_on=[c.ns]))
        return sts, svc
