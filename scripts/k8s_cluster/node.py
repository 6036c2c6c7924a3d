"""Nodes a and b: each a network namespace (rvk8s-<n>, network.py) plus a mount namespace of its own running
containerd (the Debian package), kubelet and kube-proxy.

Each node's holder process (`sleep infinity`, pid file run/<n>.holder.pid) owns a mount namespace, entered by
nsenter, where per-node folders are bound over /var/lib/containerd, /run/containerd, /var/lib/kubelet,
/etc/cni/net.d, /var/lib/cni, /var/log/pods and /var/log/containers (mount points made on the host when
missing, removed by `down`) and a fresh sysfs with the host's cgroup mounts moved back (node_files.holder_init).

Mount propagation. Each node has its own /mnt ($STATE/nodes/<n>/mnt bound over it: a hostPath under /mnt is per
node, as on real machines) and `/` made rshared in its mount namespace (the host's `/` here is private, so the
namespace started private too). Without that, containerd refused both kinds of propagated volume: Bidirectional
with 'path "/mnt/rvk8s-test" is mounted on "/" but it is not a shared mount', HostToContainer with '... not a
shared or slave mount'. The nodes' peer groups are their own: a mount a pod makes is seen in its node's namespace
and its pods, never on the host nor on the other node (look with `nsenter -t $(cat run/<n>.holder.pid) -m`).
Checked (2026-12-02) on node a, hostPath /mnt/rvk8s-test (DirectoryOrCreate), rustfs-vllm/rclone-mount,
`rclone serve s3` on 10.232.0.1:9099 as the remote (pods reach the host's bridge address):
 - a privileged DaemonSet pod (Bidirectional at /mnt/h) running `rclone mount s3:bucket /mnt/h/models
   --read-only --allow-other`, and an unprivileged pod (HostToContainer, read-only at /data) started
   BEFORE it: the reader read the files 1.3 s after the DaemonSet's apply (same md5 as the source;
   in the reader the mount is fuse.rclone, ro, allow_other, propagation "private,slave"); an object
   uploaded through S3 appeared 4.8 s later (--dir-cache-time 5s). Privileged works here (unlike
   `docker run --privileged`): containerd grants the capabilities it has (CapEff 000001fffeffffff).
 - pod deleted (SIGTERM), nothing holding files: rclone logs "Unmounted rclone mount" and exits in
   about 1 s; the reader sees an empty folder, nothing stale.
 - pod deleted while the reader holds a file open (as vLLM does): rclone's unmount fails ("fusermount3:
   failed to unmount ...: Device or resource busy") and rclone exits, leaving a dead mount
   ("Transport endpoint is not connected") in the node and the reader. SIGKILL of rclone: the same.
   A container that then runs `mkdir -p` on the mount point fails ("cannot stat ...: Transport
   endpoint is not connected") and crash-loops.
 - what works: the DaemonSet's command clears the point first and detaches it after rclone exits:
     M=/mnt/h/models; fusermount3 -uz $M 2>/dev/null; mkdir -p $M
     rclone mount ... $M ... & pid=$!
     trap "kill -TERM $pid; wait $pid; fusermount3 -uz $M 2>/dev/null; exit 0" TERM INT; wait $pid
   deleted while a file was held open: no mount left in the node or the reader (lazy detach; the
   holder keeps its open file); after SIGKILL of rclone the container restarted (exit 137,
   restartCount 1), cleared the dead mount and mounted again: the reader, never restarted, read
   through the new mount 0.8-0.9 s after the kill; DaemonSet deleted and applied again: the same
   reader read the new mount 1.4 s after the apply.
"""
from __future__ import annotations

import os
import signal
import time

from . import shell as sh
from .cgroups import kill_cgroup_procs, node_cgroups_down, node_cgroups_up
from .config import NODE_IP, NODE_MOUNTS, NODE_PODS, NODES, PAUSE_IMAGE, Config
from .fsutil import rm_f, rm_rf
from .network import node_net_down
from .node_files import node_files, pause_tar
from .output import die, log_start, note, now_s, tail_err, write
from .procs import pid_of, stop

CTR = ["ctr", "--address", "/run/containerd/containerd.sock", "-n", "k8s.io"]


def in_node(c: Config, n: str, *cmd: str) -> list[str]:
    """CMD in node N's network and mount namespaces."""
    hp = pid_of(c, f"{n}.holder")
    if hp is None:
        die(f"node {n} has no holder process")
    return ["nsenter", "-t", hp, "-m", "-n", *cmd]


def node_ctr(c: Config, n: str, *args: str) -> list[str]:
    return in_node(c, n, *CTR, *args)


def _make_mount_points(c: Config) -> None:
    # mount points: made here when missing, removed by `down`
    for m in NODE_MOUNTS:
        missing, x = [], m
        while not os.path.isdir(x):
            missing.insert(0, x)
            x = os.path.dirname(x)
        if missing:
            os.makedirs(m, exist_ok=True)
            with open(f"{c.state}/nodes/created-dirs", "a") as f:
                f.write("".join(p + "\n" for p in missing))


def _clear_folder(folder: str) -> None:
    """``rm -rf FOLDER/*`` (its dot files stay)."""
    for entry in sorted(os.listdir(folder)):
        if not entry.startswith("."):
            rm_rf(os.path.join(folder, entry))


def _holder_start(c: Config, n: str) -> None:
    d, log = c.nodedir(n), c.log(f"{n}-holder")
    if pid_of(c, f"{n}.containerd") is not None:
        die(f"node {n}: containerd runs without its holder; run `{c.argv0} down` first")
    _make_mount_points(c)
    rm_f(f"{c.run}/{n}.holder.pid")
    open(f"{d}/containerd-state/.keep", "w").close()
    _clear_folder(f"{d}/containerd-state")
    log_start(log, "start holder")
    sh.spawn(["setsid", "nsenter", f"--net=/run/netns/rvk8s-{n}", "unshare", "--mount", "--propagation", "slave",
              "--fork", "bash", f"{d}/holder-init.sh"], log)
    deadline = now_s() + 20
    while (pid := pid_of(c, f"{n}.holder")) is None:
        if not now_s() < deadline:
            with open(log, errors="replace") as f:
                write(f.read(), err=True)
            die(f"node {n}: no holder after 20 s")
        time.sleep(0.1)
    note(f"node {n}: holder pid {pid} (netns rvk8s-{n}, own mount namespace)")


def holder_up(c: Config, n: str) -> None:
    d = c.nodedir(n)
    pid = pid_of(c, f"{n}.holder")
    if pid is None:
        _holder_start(c, n)
        return
    note(f"node {n}: holder already running (pid {pid})")
    # a holder started by an older version of this script: its /mnt and mount propagation
    if sh.out(in_node(c, n, "findmnt", "-n", "-o", "PROPAGATION", "/")) == "private":
        sh.run(in_node(c, n, "mount", "--make-rshared", "/"))
        note(f"node {n}: / made rshared in its mount namespace")
    if not sh.ok(in_node(c, n, "mountpoint", "-q", "/mnt"), stdout=None, stderr=None):
        sh.run(in_node(c, n, "mount", "--bind", f"{d}/mnt", "/mnt"))
        note(f"node {n}: its own /mnt ({d}/mnt) bound")


def node_start(c: Config, n: str, comp: str) -> None:
    log, d = c.log(f"{n}-{comp}"), c.nodedir(n)
    hp = pid_of(c, f"{n}.holder")
    if hp is None:
        die(f"node {n} has no holder process")
    cmd = {"containerd": lambda: [sh.which("containerd"), "--config", f"{d}/containerd.toml"],
           "kubelet": lambda: [f"{c.k8s_bin}/kubelet", f"--config={d}/kubelet-config.yaml",
                               f"--kubeconfig={d}/kubelet.kubeconfig", f"--hostname-override={n}",
                               f"--node-ip={NODE_IP[n]}", "--root-dir=/var/lib/kubelet",
                               f"--cert-dir={d}/kubelet-pki", "-v=1"],
           "kube-proxy": lambda: [f"{c.k8s_bin}/kube-proxy", f"--config={d}/kube-proxy.yaml", "-v=1"]}[comp]()
    log_start(log, f"start {comp}")
    pid = str(sh.spawn(["nsenter", "-t", hp, "-m", "-n", "setsid", *cmd], log))   # nsenter and setsid exec: $! stays
    with open(f"{c.run}/{n}.{comp}.pid", "w") as f:
        f.write(pid + "\n")
    note(f"node {n}: {comp} started (pid {pid}, log {log})")


def _mtime(path: str) -> int:
    """``stat -c %Y PATH``."""
    return os.stat(path).st_mtime_ns // 1_000_000_000


def containerd_up(c: Config, n: str) -> None:
    d = c.nodedir(n)
    pid = pid_of(c, f"{n}.containerd")
    if pid is not None and _mtime(f"{d}/containerd.toml") > _mtime(f"/proc/{pid}"):
        note(f"node {n}: containerd.toml changed since containerd started: restarting it (containers keep running)")
        stop(c, f"{n}.containerd")
    pid = pid_of(c, f"{n}.containerd")
    if pid is not None:
        note(f"node {n}: containerd already running (pid {pid})")
    else:
        node_start(c, n, "containerd")
    deadline = now_s() + c.timeout_s
    while not sh.ok(node_ctr(c, n, "version")):
        if pid_of(c, f"{n}.containerd") is None:
            tail_err(c.log(f"{n}-containerd"))
            die(f"node {n}: containerd exited")
        if not now_s() < deadline:
            die(f"node {n}: containerd not answering after {c.ready_timeout} s")
        time.sleep(0.2)
    rc, images = sh.capture(node_ctr(c, n, "images", "ls", "-q"))
    if rc != 0 or PAUSE_IMAGE not in images.split("\n"):
        sh.run(node_ctr(c, n, "images", "import", pause_tar(c)), stdout=sh.DEVNULL)
        note(f"node {n}: {PAUSE_IMAGE} imported")


def node_object(n: str) -> str:
    return f"""apiVersion: v1
kind: Node
metadata: {{name: {n}, labels: {{kubernetes.io/hostname: {n}, kubernetes.io/os: linux, kubernetes.io/arch: amd64}}}}
spec: {{podCIDR: "{NODE_PODS[n]}", podCIDRs: ["{NODE_PODS[n]}"]}}
"""


def node_up(c: Config, n: str) -> None:
    node_files(c, n)
    node_cgroups_up(n)
    holder_up(c, n)
    containerd_up(c, n)
    # the Node object with its podCIDR before the kubelet registers (then the two agree)
    sh.run([*c.kc, "apply", "-f", "-"], input=node_object(n), stdout=sh.DEVNULL)
    for m in ("kubelet", "kube-proxy"):
        pid = pid_of(c, f"{n}.{m}")
        if pid is not None:
            note(f"node {n}: {m} already running (pid {pid})")
        else:
            node_start(c, n, m)


def wait_nodes_ready(c: Config) -> None:
    deadline = now_s() + c.timeout_s
    for n in NODES:
        while True:
            rc, ready = sh.capture([*c.kc, "get", "node", n, "-o",
                                    'jsonpath={.status.conditions[?(@.type=="Ready")].status}'], stderr=sh.DEVNULL)
            if rc == 0 and ready == "True":
                break
            if pid_of(c, f"{n}.kubelet") is None:
                tail_err(c.log(f"{n}-kubelet"))
                die(f"node {n}: kubelet exited")
            if not now_s() < deadline:
                tail_err(c.log(f"{n}-kubelet"))
                die(f"node {n} not Ready after {c.ready_timeout} s")
            time.sleep(0.5)


def _unstopped(listing: str) -> bool:
    """``awk 'NR>1 && $3!="STOPPED"'`` of `ctr tasks ls` prints something (blank lines do not count)."""
    rows = [row for row in listing.split("\n")[1:] if (row.split()[2:3] or [""])[0] != "STOPPED"]
    return "\n".join(rows).rstrip("\n") != ""


def _kill_tasks(c: Config, n: str) -> None:
    """SIGKILL every containerd task of node N, wait up to 5 s for them to stop, delete them."""
    _, t = sh.capture(node_ctr(c, n, "tasks", "ls", "-q"), stderr=sh.DEVNULL)
    if not t:
        return
    for task in t.split():
        sh.ok(node_ctr(c, n, "tasks", "kill", "-s", "KILL", task))
    for _ in range(50):
        if not _unstopped(sh.out(node_ctr(c, n, "tasks", "ls"), stderr=sh.DEVNULL)):
            break
        time.sleep(0.1)
    for task in t.split():
        sh.ok(node_ctr(c, n, "tasks", "delete", task))
    note(f"node {n}: {len(t.split())} containerd tasks killed")


def _kill_in_mount_ns(hp: str, hmnt: str) -> None:
    """SIGKILL every process in the holder's mount namespace but the holder."""
    for p in sorted(e for e in os.listdir("/proc") if e[:1].isdigit()):
        if p == hp or not hmnt:
            continue
        try:
            if os.readlink(f"/proc/{p}/ns/mnt") == hmnt:
                sh.kill(p, signal.SIGKILL)
        except OSError:
            pass


def _node_down_with_holder(c: Config, n: str, hp: str) -> None:
    try:
        hmnt = os.readlink(f"/proc/{hp}/ns/mnt")
    except OSError:
        hmnt = ""
    if pid_of(c, f"{n}.containerd") is not None:
        _kill_tasks(c, n)
    # the pods' network namespaces: files in /run/netns, mounted in the node's mount namespace only
    mounts = sh.out(in_node(c, n, "findmnt", "-rn", "-o", "TARGET"), stderr=sh.DEVNULL)
    netns = [m for m in mounts.split("\n") if m.startswith("/run/netns/cni-")]
    stop(c, f"{n}.containerd")
    # left in the node's mount namespace (containerd shims): by namespace, then cgroups
    _kill_in_mount_ns(hp, hmnt)
    kill_cgroup_procs(n)
    stop(c, f"{n}.holder")
    for m in netns:
        rm_f(m)
    if netns:
        note(f"node {n}: {len(netns)} pod netns files removed")


def node_down(c: Config, n: str) -> None:
    d = c.nodedir(n)
    stop(c, f"{n}.kube-proxy")
    stop(c, f"{n}.kubelet")
    hp = pid_of(c, f"{n}.holder")
    if hp is not None:
        _node_down_with_holder(c, n, hp)
    else:
        stop(c, f"{n}.containerd")
        kill_cgroup_procs(n)
        rm_f(f"{c.run}/{n}.holder.pid")
    # the runtime's state folder and the IP reservations: of no use to the next start
    if os.path.isdir(d):
        rm_rf(f"{d}/containerd-state")
        rm_rf(f"{d}/cni-state")
    node_cgroups_down(n)
    node_net_down(n)
