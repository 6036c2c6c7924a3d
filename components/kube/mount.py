"""KubeMount: one model's prefix mounted read-only on every node, by an rclone DaemonSet.

The guide's layout on each node: ``<mountPath>/<prefix>`` is an rclone FUSE mount of
``<bucket>/<prefix>``. The DaemonSet's pod is privileged (``/dev/fuse``, and ``Bidirectional`` mount
propagation needs it) and binds the node's ``mountPath`` with ``Bidirectional`` propagation, so the
mount it makes there reaches the node, and from there every vLLM pod that binds the same folder with
``HostToContainer`` propagation, also one started before the mount. rclone's VFS cache is the node's
``<mountCacheDir>/<prefix>``, so a restarted pod reads the weights from local disk.

- Credentials: ``RCLONE_CONFIG_RV_*`` variables, the keys from the readers' Secret by reference (the read key
  with readKeys scoped, components/kube/cluster.py).
- A dead FUSE mount (``Transport endpoint is not connected``: rclone killed, or its unmount refused
  while vLLM holds a file open) is detached lazily before mounting, and again when rclone stops, so
  none stays in the node or the pods that bind it; the pods see the new mount when it comes.
- Ready once ``config.json`` is visible through the mount. The model's revision is an annotation
  of the pod template: new weights roll the DaemonSet (fresh rclone, fresh directory cache); new
  keys too (a new Secret, whose name the pod template holds).

One DaemonSet per model: adding, changing or removing one model touches only its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.kube import placement
from components.kube.cluster import ACCESS_KEY, CA_FILE, SECRET_KEY, KubeCluster
from components.kube import sizing
from components.kube.names import dns_name, labels, meta

REVISION = "rustfs-vllm/revision"
ROOT_IN_POD = "/mnt/root"
CACHE_IN_POD = "/cache"
CA_IN_POD = "/etc/rustfs-vllm/ca"
# sh -c script: $1 = the mount point, $2 = the remote source, then rclone's flags. A dead mount left
# behind ("Transport endpoint is not connected": rclone killed, or its unmount refused because vLLM
# holds a file open) is detached first; on SIGTERM rclone is stopped and the point detached lazily,
# so no dead mount stays in the node or its pods (tried on the test cluster, scripts/k8s-cluster).
SCRIPT = ('mp="$1"; src="$2"; shift 2; fusermount3 -uz "$mp" 2>/dev/null; mkdir -p "$mp" || exit 1; '
          'rclone mount "rv:$src" "$mp" --read-only --allow-other --config /dev/null "$@" & pid=$!; '
          'trap \'kill -TERM $pid 2>/dev/null; wait $pid; fusermount3 -uz "$mp" 2>/dev/null; exit 0\' TERM INT; '
          'wait $pid; code=$?; fusermount3 -uz "$mp" 2>/dev/null; exit $code')


@dataclass
class KubeMountArgs:
    cluster: KubeCluster
    name_prefix: str
    model: str
    prefix: str
    bucket: pulumi.Input[str]
    endpoint: pulumi.Input[str]          # the S3 endpoint as pods reach it
    image: str                           # rcloneImage
    mount_path: str                      # on the nodes
    cache_dir: str                       # on the nodes: this model's --cache-dir
    flags: Sequence[str]
    revision: pulumi.Input[str]
    has_ca: bool = False


class KubeMount(pulumi.ComponentResource):
    def __init__(self, name: str, args: KubeMountArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("rustfs-vllm:kube:Mount", name, None, opts)
        c = args.cluster
        point = f"{ROOT_IN_POD}/{args.prefix}"
        select = labels(c.stack, "mount", args.prefix)
        env = [k8s.core.v1.EnvVarArgs(name=f"RCLONE_CONFIG_RV_{k}", value=v) for k, v in (
            ("TYPE", "s3"), ("PROVIDER", "Other"), ("REGION", "us-east-1"), ("FORCE_PATH_STYLE", "true"))]
        env += [k8s.core.v1.EnvVarArgs(name="RCLONE_CONFIG_RV_ENDPOINT", value=args.endpoint),
                c.secret_env("RCLONE_CONFIG_RV_ACCESS_KEY_ID", ACCESS_KEY, reader=True),
                c.secret_env("RCLONE_CONFIG_RV_SECRET_ACCESS_KEY", SECRET_KEY, reader=True)]
        flags = ["--cache-dir", CACHE_IN_POD, *args.flags] + (["--ca-cert", f"{CA_IN_POD}/{CA_FILE}"]
                                                               if args.has_ca else [])
        mounts = [k8s.core.v1.VolumeMountArgs(name="root", mount_path=ROOT_IN_POD, mount_propagation="Bidirectional"),
                  k8s.core.v1.VolumeMountArgs(name="cache", mount_path=CACHE_IN_POD),
                  k8s.core.v1.VolumeMountArgs(name="fuse", mount_path="/dev/fuse")]
        volumes = [host_path("root", args.mount_path), host_path("cache", args.cache_dir),
                   k8s.core.v1.VolumeArgs(name="fuse", host_path=k8s.core.v1.HostPathVolumeSourceArgs(
                       path="/dev/fuse", type="CharDevice"))]
        if args.has_ca:
            mounts.append(k8s.core.v1.VolumeMountArgs(name="ca", mount_path=CA_IN_POD, read_only=True))
            volumes.append(c.secret_volume("ca", {CA_FILE: CA_FILE}, reader=True))
        annotations = pulumi.Output.from_input(args.revision).apply(lambda r: {REVISION: r})
        source = pulumi.Output.from_input(args.bucket).apply(lambda b: f"{b}/{args.prefix}")
        self.daemonset = k8s.apps.v1.DaemonSet(f"{name}-daemonset", k8s.apps.v1.DaemonSetInitArgs(
            metadata=meta(f"{args.name_prefix}-mount-{dns_name(args.prefix)}"[:63], c.namespace_name, c.stack,
                          "mount", args.prefix),
            spec=k8s.apps.v1.DaemonSetSpecArgs(
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=select),
                update_strategy=k8s.apps.v1.DaemonSetUpdateStrategyArgs(type="RollingUpdate"),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=select, annotations=annotations),
                    spec=k8s.core.v1.PodSpecArgs(
                        termination_grace_period_seconds=30,
                        affinity=placement.serving_affinity(c.args.store_node_label),
                        containers=[k8s.core.v1.ContainerArgs(
                            name="rclone", image=args.image, image_pull_policy="IfNotPresent",
                            command=["sh", "-c", SCRIPT, "rclone-mount"],
                            args=pulumi.Output.from_input(source).apply(lambda s: [point, s, *flags]),
                            env=env, volume_mounts=mounts,
                            security_context=k8s.core.v1.SecurityContextArgs(privileged=True),
                            resources=k8s.core.v1.ResourceRequirementsArgs(requests=sizing.MOUNT_REQUEST,
                                                                           limits=sizing.MOUNT_LIMIT),
                            readiness_probe=k8s.core.v1.ProbeArgs(
                                exec_=k8s.core.v1.ExecActionArgs(command=["test", "-e", f"{point}/config.json"]),
                                period_seconds=3, failure_threshold=2, timeout_seconds=10))],
                        volumes=volumes)))),
            c.child(self, depends_on=opts.depends_on if opts else None,
                    custom_timeouts=pulumi.CustomTimeouts(create="10m", update="10m")))
        self.register_outputs({})


def host_path(name: str, path: str) -> k8s.core.v1.VolumeArgs:
    """A folder of the node, made when missing."""
    return k8s.core.v1.VolumeArgs(name=name, host_path=k8s.core.v1.HostPathVolumeSourceArgs(
        path=path, type="DirectoryOrCreate"))
