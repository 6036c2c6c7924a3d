"""The files of node N in $STATE/nodes/<n>/: containerd's configuration and registry hosts, the CNI
configuration (bridge cni0 + host-local + portmap, the node's pod range), resolv.conf, the kubelet's and
kube-proxy's configurations and the holder's init script. containerd needs restrict_oom_score_adj (root here
lacks CAP_SYS_RESOURCE); the kubelets use cgroupfs under /rvk8s-<n> in every cgroup v1 hierarchy. The sandbox
image registry.k8s.io/pause:3.10.1 is a docker-archive made here from the toolchain's static pause
(pause_tar below)."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile

from . import shell as sh
from .config import CLUSTER_CIDR, NODE_IP, NODE_PODS, PAUSE_IMAGE, Config
from .fsutil import nonempty, put, rm_rf

NODE_FOLDERS = ("containerd", "containerd-state", "kubelet", "kubelet-pki", "cni-conf", "cni-state", "pods",
                "containers", "cg", "mnt")
# The nodes' disk is this machine's, shared with everything else on it (seen: 252 GB in all, 7-28 GB free):
# a share of it ("5%": 12.6 GB) put both nodes under disk pressure while the vLLM image unpacked with
# 11% free, and the kubelet evicted every vLLM pod. An absolute floor keeps the nodes working down to it.
EVICT_BELOW = "2Gi"
TAR_FLAGS = ("--owner=0", "--group=0", "--numeric-owner", "--mtime=@0")


def containerd_toml(d: str) -> str:
    return f"""version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    discard_unpacked_layers = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
"""


def docker_io_hosts(c: Config) -> str:
    return f"""server = "https://registry-1.docker.io"
[host."https://{c.reg_addr}"]
  capabilities = ["pull", "resolve"]
  ca = "{c.pki}/ca.crt"
"""


def registry_hosts(c: Config) -> str:
    # the CA under a [host] table: containerd 1.6.20 ignored a top-level `ca` (a pull by the registry's own name,
    # e.g. a mount pod's rcloneImage pinned by digest, failed "x509: certificate signed by unknown authority")
    return f"""server = "https://{c.reg_addr}"
[host."https://{c.reg_addr}"]
  capabilities = ["pull", "resolve"]
  ca = "{c.pki}/ca.crt"
"""


def cni_conflist(pods: str) -> str:
    return f"""{{"cniVersion": "0.4.0", "name": "rvk8s", "plugins": [
  {{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "{pods}"}}]], "routes": [{{"dst": "0.0.0.0/0"}}]}}}},
  {{"type": "portmap", "capabilities": {{"portMappings": true}}}}]}}
"""


def kubelet_config(c: Config, n: str) -> str:
    d = c.nodedir(n)
    return f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {c.pki}/ca.crt}}
authorization: {{mode: Webhook}}
cgroupDriver: cgroupfs
cgroupRoot: /rvk8s-{n}
cgroupsPerQOS: true
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
podCIDR: {NODE_PODS[n]}
address: {NODE_IP[n]}
healthzBindAddress: 127.0.0.1
clusterDomain: cluster.local
resolvConf: {d}/resolv.conf
podLogsDir: /var/log/pods
registerNode: true
serializeImagePulls: false
evictionHard: {{memory.available: "100Mi", nodefs.available: "{EVICT_BELOW}", imagefs.available: "{EVICT_BELOW}"}}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
"""


def kube_proxy_config(c: Config, n: str) -> str:
    return f"""apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {c.nodedir(n)}/kube-proxy.kubeconfig}}
hostnameOverride: {n}
mode: iptables
clusterCIDR: {CLUSTER_CIDR}
bindAddress: {NODE_IP[n]}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {{maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
nodePortAddresses: [primary]
"""


def holder_init(c: Config, n: str) -> str:
    """What the holder runs (bash, in its new mount namespace, node.holder_up), ending as `sleep infinity`."""
    d = c.nodedir(n)
    return f"""set -e
mount --make-rslave /
mount --rbind /sys/fs/cgroup {d}/cg
umount -l /sys
mount -t sysfs sysfs /sys
mount --move {d}/cg /sys/fs/cgroup
mount --bind {d}/containerd /var/lib/containerd
mount --bind {d}/containerd-state /run/containerd
mount --bind {d}/kubelet /var/lib/kubelet
mount --bind {d}/cni-conf /etc/cni/net.d
mount --bind {d}/cni-state /var/lib/cni
mount --bind {d}/pods /var/log/pods
mount --bind {d}/containers /var/log/containers
mount --bind {d}/mnt /mnt
mount --make-rshared /
echo $$ > {c.run}/{n}.holder.pid
exec sleep infinity
"""


def node_files(c: Config, n: str) -> None:
    d = c.nodedir(n)
    for sub in NODE_FOLDERS:
        os.makedirs(f"{d}/{sub}", exist_ok=True)
    for sub in ("mnt", "pods", "containers", "cni-conf"):
        os.chmod(f"{d}/{sub}", 0o755)   # as on a real node (a cold `up` once made them 0700)
    put(f"{d}/containerd.toml", containerd_toml(d))
    # docker.io images come from the cluster's registry (load-image pushes them there), as do images
    # named $REG_ADDR/...; Docker Hub itself is never reached here (no route), only named as the server.
    os.makedirs(f"{d}/certs.d/docker.io", exist_ok=True)
    os.makedirs(f"{d}/certs.d/{c.reg_addr}", exist_ok=True)
    put(f"{d}/certs.d/docker.io/hosts.toml", docker_io_hosts(c))
    put(f"{d}/certs.d/{c.reg_addr}/hosts.toml", registry_hosts(c))
    put(f"{d}/cni-conf/10-rvk8s.conflist", cni_conflist(NODE_PODS[n]))
    put(f"{d}/resolv.conf", "nameserver 127.0.0.1\n")
    put(f"{d}/kubelet-config.yaml", kubelet_config(c, n))
    put(f"{d}/kube-proxy.yaml", kube_proxy_config(c, n))
    # the holder: `ip netns exec` would mount a sysfs without the cgroup mounts, hence this
    put(f"{d}/holder-init.sh", holder_init(c, n))


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def pause_tar(c: Config) -> str:
    """The pause image as a docker-archive (what `docker save` writes), made from the static pause."""
    out = f"{c.state}/images/pause.tar"
    if nonempty(out):
        return out
    os.makedirs(f"{c.state}/images", exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="tmp.")
    try:
        shutil.copyfile(f"{c.k8s_bin}/pause", f"{tmp}/pause")   # install -m 0755
        os.chmod(f"{tmp}/pause", 0o755)
        sh.run(["tar", "-C", tmp, *TAR_FLAGS, "-cf", f"{tmp}/layer.tar", "pause"])
        diff = _sha256(f"{tmp}/layer.tar")
        os.mkdir(f"{tmp}/img")
        os.mkdir(f"{tmp}/img/{diff}")
        os.replace(f"{tmp}/layer.tar", f"{tmp}/img/{diff}/layer.tar")
        with open(f"{tmp}/cfg.json", "w") as f:
            f.write('{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},'
                    '"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' % diff)
        cfg = _sha256(f"{tmp}/cfg.json")
        os.replace(f"{tmp}/cfg.json", f"{tmp}/img/{cfg}.json")
        with open(f"{tmp}/img/manifest.json", "w") as f:
            f.write('[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' % (cfg, PAUSE_IMAGE, diff))
        sh.run(["tar", "-C", f"{tmp}/img", *TAR_FLAGS, "-cf", f"{out}.tmp", "."])
        os.replace(f"{out}.tmp", out)
    finally:
        rm_rf(tmp)
    return out
