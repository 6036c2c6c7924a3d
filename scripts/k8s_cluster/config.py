"""Paths, ports and constants of the test cluster: every ``${VAR:-default}`` of the former bash script, read
once from the environment into a Config (an empty variable counts as unset, as ``:-`` did).

State: $ROOT/.state/k8s/ (pki/: openssl-made CA, etcd CA, serving and client certificates and the
service-account key pair; *.kubeconfig; etcd/: data; run/: pid files; registry/: the registry's configuration
and blobs; nodes/<n>/volumes/: the local PersistentVolumes), logs: $ROOT/.state/logs/k8s-<component>.log. The
admin kubeconfig: $ROOT/.state/k8s/admin.kubeconfig. Node state: $STATE/nodes/<n>/, logs:
$ROOT/.state/logs/k8s-<n>-<component>.log.
Everything but the apiserver and the nodes listens on 127.0.0.1 only. Ports (environment): K8S_APISERVER_PORT
(6443), K8S_ETCD_PORT (12379; peer port +1), K8S_CONTROLLER_MANAGER_PORT (10257), K8S_SCHEDULER_PORT (10259).
Also: K8S_STATE_DIR (instead of $ROOT/.state/k8s), K8S_READY_TIMEOUT (180 s per wait), K8S_APISERVER_EXTRA_SANS
(more subjectAltNames, e.g. IP:10.0.0.1, for the nodes to come), K8S_APISERVER_BIND (0.0.0.0),
RUSTFS_VLLM_CACHE (where scripts/k8s-toolchain put the binaries; else $XDG_CACHE_HOME/rustfs-vllm, else
$HOME/.cache/rustfs-vllm), K8S_REGISTRY_PORT (5000, on 10.232.0.1), K8S_LOCAL_PVS (4), K8S_LOCAL_PV_SIZE (20Gi).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

K8S_VERSION = "1.34.4"
ETCD_VERSION = "3.6.4"
ADDR = "127.0.0.1"
SERVICE_CIDR = "10.96.0.0/16"       # only allocated from: nothing routes it
SERVICE_IP = "10.96.0.1"            # the `kubernetes` Service: in the apiserver's certificate
CLUSTER_CIDR = "10.233.0.0/16"      # the nodes' pod ranges: 10.233.<i>.0/24
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
BRIDGE = "rvk8s0"
HOST_IP = "10.232.0.1"              # the host on the bridge: the apiserver's advertised address
NODES = ("a", "b")
NODE_IP = {"a": "10.232.0.11", "b": "10.232.0.12"}
NODE_PODS = {"a": "10.233.1.0/24", "b": "10.233.2.0/24"}
NODE_COMPONENTS = ("containerd", "kubelet", "kube-proxy")
NODE_MOUNTS = ("/var/lib/containerd", "/run/containerd", "/var/lib/kubelet", "/etc/cni/net.d", "/var/lib/cni",
               "/var/log/pods", "/var/log/containers", "/mnt")
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1"
SC = "rustfs-vllm-local"            # the StorageClass of the local PersistentVolumes (storage.storage_up)
PV_NODE = "a"


def _env(environ: Mapping[str, str], name: str, default: str) -> str:
    """``${NAME:-default}``: the default when the variable is unset or empty."""
    return environ.get(name) or default


def logical_dir(path: str, environ: Mapping[str, str]) -> str:
    """``cd PATH && pwd``: absolute, with ``..`` removed textually from $PWD as bash's logical ``cd`` does
    (a symlinked working folder stays as the caller named it, so paths match those of earlier runs)."""
    if not os.path.isabs(path):
        base = environ.get("PWD") or ""
        try:
            if not (os.path.isabs(base) and os.path.samefile(base, ".")):
                base = os.getcwd()
        except OSError:
            base = os.getcwd()
        path = os.path.join(base, path)
    return os.path.normpath(path)


@dataclass(frozen=True)
class Config:
    """What the bash script set at its top; ``argv0`` is its ``$0`` (the command as invoked, for messages)."""
    root: str
    argv0: str
    cache: str
    state: str
    api_port: str
    etcd_port: str
    cm_port: str
    sched_port: str
    ready_timeout: str
    api_bind: str
    extra_sans: str
    reg_port: str
    pv_count: str
    pv_size: str

    k8s_bin = property(lambda self: f"{self.cache}/toolchain/k8s-v{K8S_VERSION}/bin")
    etcd_bin = property(lambda self: f"{self.cache}/toolchain/etcd-v{ETCD_VERSION}/bin")
    pki = property(lambda self: f"{self.state}/pki")
    run = property(lambda self: f"{self.state}/run")
    log_dir = property(lambda self: f"{self.root}/.state/logs")
    etcd_peer_port = property(lambda self: str(int(self.etcd_port) + 1))
    # the image registry the nodes pull from (load-image)
    reg_addr = property(lambda self: f"{HOST_IP}:{self.reg_port}")
    reg_dir = property(lambda self: f"{self.state}/registry")
    # Docker trusts the registry's CA from here (no restart)
    docker_certs = property(lambda self: f"/etc/docker/certs.d/{self.reg_addr}")
    admin_kubeconfig = property(lambda self: f"{self.state}/admin.kubeconfig")

    @property
    def kc(self) -> list[str]:
        """kubectl with the admin kubeconfig (the bash's KC array)."""
        return [f"{self.k8s_bin}/kubectl", "--kubeconfig", self.admin_kubeconfig]

    @property
    def timeout_s(self) -> int:
        return int(self.ready_timeout)

    def nodedir(self, n: str) -> str:
        return f"{self.state}/nodes/{n}"

    def log(self, name: str) -> str:
        """$LOG_DIR/k8s-NAME.log (NAME: a component, or <node>-<component>)."""
        return f"{self.log_dir}/k8s-{name}.log"


def load(environ: Mapping[str, str], script: str, argv0: str) -> Config:
    """The Config of the launcher at path ``script`` (its folder's parent is the project's root)."""
    root = logical_dir(os.path.join(os.path.dirname(script) or ".", ".."), environ)
    home_cache = _env(environ, "XDG_CACHE_HOME", f"{environ.get('HOME', '')}/.cache")
    return Config(
        root=root, argv0=argv0,
        cache=_env(environ, "RUSTFS_VLLM_CACHE", f"{home_cache}/rustfs-vllm"),
        state=_env(environ, "K8S_STATE_DIR", f"{root}/.state/k8s"),
        api_port=_env(environ, "K8S_APISERVER_PORT", "6443"),
        etcd_port=_env(environ, "K8S_ETCD_PORT", "12379"),
        cm_port=_env(environ, "K8S_CONTROLLER_MANAGER_PORT", "10257"),
        sched_port=_env(environ, "K8S_SCHEDULER_PORT", "10259"),
        ready_timeout=_env(environ, "K8S_READY_TIMEOUT", "180"),
        api_bind=_env(environ, "K8S_APISERVER_BIND", "0.0.0.0"),
        extra_sans=environ.get("K8S_APISERVER_EXTRA_SANS", ""),
        reg_port=_env(environ, "K8S_REGISTRY_PORT", "5000"),
        pv_count=_env(environ, "K8S_LOCAL_PVS", "4"),
        pv_size=_env(environ, "K8S_LOCAL_PV_SIZE", "20Gi"),
    )
