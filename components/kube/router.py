"""KubeRouter: the stack's one OpenAI endpoint on the cluster, as on Docker (components/docker/router.py):
vLLM's router (``vllm-router --enable-igw``) with nginx in front, two containers of one pod of
``routerImage``, a Deployment and a NodePort Service (``kubeRouterNodePort``).

- Each model's worker is its Service's cluster IP (``http://<cluster IP>:8000``): Kubernetes spreads a
  model's requests over its ready pods and takes a pod out of the Service while it rolls (readiness and
  preStop, components/kube/model.py), so a model's rolling step drops nothing through the endpoint
  either; the router health-checks each Service and answers 503 in OpenAI's shape (naming the model)
  for a model with no ready pod.
- The routes are files of the router's Secret (``nginx.conf`` and ``workers.json``: a Secret, since the
  nginx.conf holds the API key's check), mounted read-only; the router's wrapper registers the workers
  from ``workers.json`` at every start. A change of routes changes the pod template's checksum, and the
  Deployment rolls its one pod with a new one beside it first (maxSurge 1, maxUnavailable 0, readiness on
  the router's /health through nginx, preStop 5 s): the Service always has a ready endpoint pod.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Mapping, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.kube.cluster import KubeCluster
from components.kube.names import labels, meta
from components.serving import router_conf

PORTS = router_conf.Ports("0.0.0.0", 8080, 8081, 8082)      # in the pod: nginx, the router, its metrics
FILES = "/etc/rustfs-vllm/k8s"


@dataclass
class KubeRouterArgs:
    cluster: KubeCluster
    name_prefix: str
    image: str
    policy: str
    node_port: int
    node_address: str
    routes: Mapping[str, pulumi.Input[str]]          # served model name -> its Service's URL (cluster IP)
    entries: Mapping[str, dict]                       # served model name -> extra fields of its /v1/models entry
    api_key: pulumi.Input[str] = ""


def files(routes: Mapping[str, str], entries: Mapping[str, dict], api_key: str) -> dict[str, str]:
    """The Secret's files: nginx.conf (with the key's check) and the router's workers."""
    by_model = {m: [url] for m, url in routes.items()}
    conf = router_conf.nginx_conf(by_model, PORTS, api_key, created=0, entries=entries)
    return {"nginx.conf": conf, "workers.json": json.dumps(router_conf.workers(by_model, api_key))}


class KubeRouter(pulumi.ComponentResource):
    url: pulumi.Output[str]

    def __init__(self, name: str, args: KubeRouterArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:kube:Router", name, None, opts)
        c = args.cluster
        obj = f"{args.name_prefix}-router"[:63]
        select = labels(c.stack, "router")
        names = sorted(args.routes)
        content = pulumi.Output.all(pulumi.Output.from_input(args.api_key),
                                    *[pulumi.Output.from_input(args.routes[m]) for m in names]).apply(
            lambda v: files(dict(zip(names, v[1:])), args.entries, v[0]))
        secret_data = pulumi.Output.secret(content)
        self.secret = k8s.core.v1.Secret(f"{name}-files", k8s.core.v1.SecretInitArgs(
            metadata=meta(None, c.namespace_name, c.stack, "router"), string_data=secret_data),
            c.child(self, depends_on=[c.ns]))
        # a new pod when the routes (or the key) change: the checksum of the files, not the files
        checksum = content.apply(lambda f: hashlib.sha256(json.dumps(f, sort_keys=True).encode()).hexdigest()[:16])
        mount = k8s.core.v1.VolumeMountArgs(name="files", mount_path=FILES, read_only=True)
        health = k8s.core.v1.HTTPGetActionArgs(path="/health", port="http")
        self.deployment = k8s.apps.v1.Deployment(f"{name}-deployment", k8s.apps.v1.DeploymentInitArgs(
            metadata=meta(obj, c.namespace_name, c.stack, "router"),
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=1,
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=select),
                strategy=k8s.apps.v1.DeploymentStrategyArgs(type="RollingUpdate", rolling_update=
                    k8s.apps.v1.RollingUpdateDeploymentArgs(max_surge=1, max_unavailable=0)),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=select, annotations=checksum.apply(
                        lambda s: {"rustfs-vllm/routes": s})),
                    spec=k8s.core.v1.PodSpecArgs(
                        termination_grace_period_seconds=30,
                        containers=[
                            k8s.core.v1.ContainerArgs(
                                name="router", image=args.image, image_pull_policy="IfNotPresent",
                                command=router_conf.router_argv(args.policy, PORTS), volume_mounts=[mount],
                                env=[k8s.core.v1.EnvVarArgs(name="RV_ROUTER_WORKERS", value=f"{FILES}/workers.json")],
                                resources=k8s.core.v1.ResourceRequirementsArgs(
                                    requests={"cpu": "50m", "memory": "64Mi"}, limits={"memory": "512Mi"})),
                            k8s.core.v1.ContainerArgs(
                                name="endpoint", image=args.image, image_pull_policy="IfNotPresent",
                                command=["nginx", "-c", f"{FILES}/nginx.conf", "-g", "daemon off;"],
                                volume_mounts=[mount],
                                ports=[k8s.core.v1.ContainerPortArgs(name="http", container_port=PORTS.port)],
                                resources=k8s.core.v1.ResourceRequirementsArgs(
                                    requests={"cpu": "50m", "memory": "32Mi"}, limits={"memory": "256Mi"}),
                                readiness_probe=k8s.core.v1.ProbeArgs(http_get=health, period_seconds=2,
                                                                      failure_threshold=2),
                                lifecycle=k8s.core.v1.LifecycleArgs(pre_stop=k8s.core.v1.LifecycleHandlerArgs(
                                    sleep=k8s.core.v1.SleepActionArgs(seconds=5))))],
                        volumes=[k8s.core.v1.VolumeArgs(name="files", secret=k8s.core.v1.SecretVolumeSourceArgs(
                            secret_name=self.secret.metadata.name, default_mode=0o400))])))),
            c.child(self, depends_on=[self.secret]))
        self.service = k8s.core.v1.Service(f"{name}-service", k8s.core.v1.ServiceInitArgs(
            metadata=meta(obj, c.namespace_name, c.stack, "router"),
            spec=k8s.core.v1.ServiceSpecArgs(type="NodePort", selector=select, ports=[k8s.core.v1.ServicePortArgs(
                name="http", port=PORTS.port, target_port="http", node_port=args.node_port)])),
            c.child(self, depends_on=[c.ns]))
        self.url = pulumi.Output.from_input(f"http://{args.node_address}:{args.node_port}/v1")
        self.metrics_url = pulumi.Output.from_input(f"http://{args.node_address}:{args.node_port}/metrics")
        self.register_outputs({"url": self.url, "metrics_url": self.metrics_url})
