"""KubeModel: one model served on the cluster: a Deployment of vLLM pods and a NodePort Service.

- The pods run the vLLM image with the guide's argv (``components.serving.vllm.vllm_argv``): the
  model from ``/models/<prefix>``, the node's ``mountPath`` bound read-only with ``HostToContainer``
  propagation (the rclone DaemonSet's mount reaches them, also when it comes after them). An init
  container waits for ``config.json`` there, so vLLM never starts on an empty folder. A streamed
  model (``loadFormat: runai_streamer``) gets ``s3://<bucket>/<prefix>/`` and the AWS credentials file
  from the stack's Secret instead (components.serving.streamer).
- ``replicas`` pods spread over the nodes: a hard topology spread on the host name (maxSkew 1),
  counted among the pods of one rollout (``matchLabelKeys: [pod-template-hash]``: counted over old and
  new pods, a rolling update ended with both pods of 2 on one node, with ``ScheduleAnyway`` and with
  ``DoNotSchedule``, tried on the test cluster) and only on nodes that take pods
  (``nodeTaintsPolicy: Honor``: a lost node's taint takes it out, so its pods come back on the others);
  a rolling update adds a pod before it removes one (maxSurge 1, maxUnavailable 0), the readiness
  probe on ``/health`` gates the Service's endpoints, and ``preStop`` waits 5 s so a pod leaves
  the Service before vLLM stops: a client sees no failed request while a model rolls.
- A startup probe gives vLLM ``vllmReadyTimeout`` seconds to load; GPUs are ``nvidia.com/gpu``
  limits; ``/dev/shm`` is a memory volume of ``vllmShmSize``; memory and CPU requests and a memory
  limit come from the model (components.kube.sizing), so the pod is never BestEffort.
- The API key (``vllmApiKey``) reaches vLLM as ``VLLM_API_KEY`` from the Secret, by reference.
- Pulumi's await logic waits for the Deployment's rollout and the Service's endpoints; then the
  smoke completion goes through the Service, from this machine (``kubeNodeAddress:<port>``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.config.kube import gpu_count
from components.kube import placement
from components.kube.cluster import API_KEY, AWS_CREDENTIALS, CA_FILE, KubeCluster
from components.kube.mount import REVISION, host_path
from components.kube import sizing
from components.kube.names import dns_name, labels, meta
from components.serving import streamer
from components.serving.vllm import CPU_BIND, VllmServerArgs, mount_wait_entrypoint, shm_megabytes, vllm_argv

VLLM_PORT = 8000
AWS_DIR = "/run/secrets/rustfs-vllm"


@dataclass
class KubeModelArgs:
    cluster: KubeCluster
    name_prefix: str
    served_name: str
    prefix: str
    image: str
    dtype: str
    max_model_len: int
    node_port: int
    node_address: str
    replicas: int
    mount_path: str
    revision: pulumi.Input[str]
    bucket: str
    load_format: str = "mount"
    s3_endpoint: pulumi.Input[str] = ""      # the pods' view (streamed models)
    gpu_memory_utilization: Optional[float] = None
    kv_cache_space_gib: Optional[float] = None
    extra_args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    has_api_key: bool = False
    has_ca: bool = False
    shm_size: str = "2g"
    gpus: str = ""
    ready_timeout: int = 900
    weights_bytes: int = 0                   # the upload's bytes: the pod's memory request (kube.sizing)
    memory_gib: Optional[float] = None       # models[].memoryGib: the request instead of the estimate
    cpus: Optional[float] = None


def argv(args: KubeModelArgs) -> list[str]:
    """vLLM's argv: the Docker path's, without the --config file (the key comes from VLLM_API_KEY) and,
    for a streamed model, with only the loader (the pod's own port, not the host's)."""
    streamed = args.load_format == streamer.LOAD_FORMAT
    out = vllm_argv(VllmServerArgs(
        stack="", container_name="", image_id="", served_name=args.served_name, dtype=args.dtype,
        model_dir=streamer.model_url(args.bucket, args.prefix) if streamed else f"/models/{args.prefix}",
        max_model_len=args.max_model_len, port=VLLM_PORT, mount_path="", revision="",
        gpu_memory_utilization=args.gpu_memory_utilization, extra_args=args.extra_args))
    return out + (["--load-format", streamer.LOAD_FORMAT] if streamed else [])


class KubeModel(pulumi.ComponentResource):
    base_url: pulumi.Output[str]
    served_name: pulumi.Output[str]

    def __init__(self, name: str, args: KubeModelArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:kube:Model", name, None, opts)
        c = args.cluster
        select = labels(c.stack, "vllm", args.prefix)
        obj = f"{args.name_prefix}-vllm-{dns_name(args.prefix)}"[:63]
        env_vars = _environment(args)
        mounts, volumes, init = _volumes(args)
        gpus = gpu_count(args.gpus)
        health = k8s.core.v1.HTTPGetActionArgs(path="/health", port="http")
        annotations = pulumi.Output.from_input(args.revision).apply(lambda r: {REVISION: r})
        self.deployment = k8s.apps.v1.Deployment(f"{name}-deployment", k8s.apps.v1.DeploymentInitArgs(
            metadata=meta(obj, c.namespace_name, c.stack, "vllm", args.prefix),
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=args.replicas,
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=select),
                strategy=k8s.apps.v1.DeploymentStrategyArgs(type="RollingUpdate", rolling_update=
                    k8s.apps.v1.RollingUpdateDeploymentArgs(max_surge=1, max_unavailable=0)),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=select, annotations=annotations),
                    spec=k8s.core.v1.PodSpecArgs(
                        termination_grace_period_seconds=30,
                        affinity=placement.serving_affinity(c.args.store_node_label),
                        topology_spread_constraints=[k8s.core.v1.TopologySpreadConstraintArgs(
                            max_skew=1, topology_key="kubernetes.io/hostname", when_unsatisfiable="DoNotSchedule",
                            node_taints_policy="Honor", match_label_keys=["pod-template-hash"],
                            label_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=select))],
                        # a lost node's pods are replaced after 30 s, not the default 300 s (vLLM keeps no state)
                        tolerations=[k8s.core.v1.TolerationArgs(key=f"node.kubernetes.io/{t}", operator="Exists",
                                                                effect="NoExecute", toleration_seconds=30)
                                     for t in ("unreachable", "not-ready")],
                        init_containers=init or None,
                        containers=[k8s.core.v1.ContainerArgs(
                            name="vllm", image=args.image, image_pull_policy="IfNotPresent", args=argv(args),
                            # a mounted model: the warm-up of its files on this node's mount, then vllm serve
                            command=None if args.load_format == streamer.LOAD_FORMAT else mount_wait_entrypoint(),
                            env=env_vars, volume_mounts=mounts,
                            ports=[k8s.core.v1.ContainerPortArgs(name="http", container_port=VLLM_PORT)],
                            resources=k8s.core.v1.ResourceRequirementsArgs(**pod_size(args).requirements(gpus)),
                            startup_probe=k8s.core.v1.ProbeArgs(
                                http_get=health, period_seconds=5, failure_threshold=math.ceil(args.ready_timeout / 5)),
                            readiness_probe=k8s.core.v1.ProbeArgs(http_get=health, period_seconds=2,
                                                                  failure_threshold=2, timeout_seconds=5),
                            liveness_probe=k8s.core.v1.ProbeArgs(http_get=health, period_seconds=10,
                                                                 failure_threshold=6, timeout_seconds=10),
                            lifecycle=k8s.core.v1.LifecycleArgs(pre_stop=k8s.core.v1.LifecycleHandlerArgs(
                                sleep=k8s.core.v1.SleepActionArgs(seconds=5))))],
                        volumes=volumes)))),
            c.child(self, depends_on=opts.depends_on if opts else None, custom_timeouts=pulumi.CustomTimeouts(
                create=f"{args.ready_timeout + 120}s", update=f"{args.ready_timeout + 120}s")))
        self.service = k8s.core.v1.Service(f"{name}-service", k8s.core.v1.ServiceInitArgs(
            metadata=meta(obj, c.namespace_name, c.stack, "vllm", args.prefix),
            spec=k8s.core.v1.ServiceSpecArgs(type="NodePort", selector=select, ports=[k8s.core.v1.ServicePortArgs(
                name="http", port=VLLM_PORT, target_port="http", node_port=args.node_port)])),
            c.child(self, depends_on=[c.ns]))
        self.base_url = pulumi.Output.from_input(f"http://{args.node_address}:{args.node_port}/v1")
        self.served_name = pulumi.Output.from_input(args.served_name)
        # what the smoke completion re-runs for: a new rollout of the pods
        self.rollout = pulumi.Output.all(self.deployment.id, annotations).apply(lambda v: f"{v[0]} {sorted(v[1].items())}")
        self.register_outputs({"base_url": self.base_url, "served_name": self.served_name})


def pod_size(args: KubeModelArgs) -> sizing.PodSize:
    """The vLLM pod's requests and memory limit (components.kube.sizing)."""
    return sizing.vllm_pod(args.weights_bytes, args.kv_cache_space_gib, shm_megabytes(args.shm_size),
                           gpu_count(args.gpus), args.memory_gib, args.cpus)


def _environment(args: KubeModelArgs) -> list[k8s.core.v1.EnvVarArgs]:
    """vLLM's environment: no CPU pinning on CPU pods, the config's, the KV cache size, the streamer's (its
    keys as a file), and the API key from the Secret by reference."""
    c = args.cluster
    streamed = args.load_format == streamer.LOAD_FORMAT
    env = {**({CPU_BIND: "nobind"} if not gpu_count(args.gpus) else {}),
           **(streamer.TIMEOUTS if streamed else {}), **dict(args.env),
           **({"VLLM_CPU_KVCACHE_SPACE": f"{args.kv_cache_space_gib:g}"} if args.kv_cache_space_gib else {})}
    if not streamed:
        env["RV_MODEL_DIR"] = f"/models/{args.prefix}"     # the entrypoint's wait and warm-up read it
    if streamed:
        env.update(streamer.env("", args.has_ca))
        env.pop("AWS_ENDPOINT_URL")
        env["AWS_SHARED_CREDENTIALS_FILE"] = f"{AWS_DIR}/{AWS_CREDENTIALS}"
        if args.has_ca:
            env["AWS_CA_BUNDLE"] = f"{AWS_DIR}/{CA_FILE}"
    out = [k8s.core.v1.EnvVarArgs(name=k, value=v) for k, v in sorted(env.items())]
    if streamed:
        out.append(k8s.core.v1.EnvVarArgs(name="AWS_ENDPOINT_URL", value=args.s3_endpoint))
    if args.has_api_key:
        out.append(c.secret_env("VLLM_API_KEY", API_KEY, reader=True))
    return out


def _volumes(args: KubeModelArgs) -> tuple[list, list, list]:
    """(vLLM's volume mounts, the pod's volumes, its init containers): /dev/shm, and the node's mount
    root with the wait for the weights, or the streamer's keys."""
    mounts = [k8s.core.v1.VolumeMountArgs(name="shm", mount_path="/dev/shm")]
    volumes = [k8s.core.v1.VolumeArgs(name="shm", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(
        medium="Memory", size_limit=f"{shm_megabytes(args.shm_size)}Mi"))]
    if args.load_format == streamer.LOAD_FORMAT:
        mounts.append(k8s.core.v1.VolumeMountArgs(name="s3", mount_path=AWS_DIR, read_only=True))
        volumes.append(args.cluster.secret_volume("s3", {AWS_CREDENTIALS: AWS_CREDENTIALS,
                                                         **({CA_FILE: CA_FILE} if args.has_ca else {})}, reader=True))
        return mounts, volumes, []
    models = k8s.core.v1.VolumeMountArgs(name="models", mount_path="/models", read_only=True,
                                         mount_propagation="HostToContainer")
    wait = k8s.core.v1.ContainerArgs(
        name="wait-for-weights", image=args.image, image_pull_policy="IfNotPresent", volume_mounts=[models],
        command=["sh", "-c", f'until [ -s "/models/{args.prefix}/config.json" ]; do echo "waiting for the mount '
                             f'of {args.prefix} on this node"; sleep 2; done'])
    return [*mounts, models], [*volumes, host_path("models", args.mount_path)], [wait]
