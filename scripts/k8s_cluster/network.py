"""The nodes' network: bridge rvk8s0 10.232.0.1/24 on the host (the apiserver advertises 10.232.0.1 and listens
on K8S_APISERVER_BIND, 0.0.0.0: health checks and the host's kubeconfigs keep using 127.0.0.1); node a
10.232.0.11 with pods in 10.233.1.0/24, node b 10.232.0.12 with pods in 10.233.2.0/24 (CNI bridge cni0 +
host-local + portmap; the Node objects are made with these podCIDRs before the kubelets register), each a network
namespace rvk8s-<n> whose eth0 is a veth to the bridge (rvk8s-<n>h on the host). The host and every node route
each node's pod range via that node's IP, and one iptables rule (FORWARD -i rvk8s0 -o rvk8s0 ACCEPT, Docker's
policy is DROP and br_netfilter is loaded) lets nodes talk over the bridge."""
from __future__ import annotations

import os

from . import shell as sh
from .config import BRIDGE, HOST_IP, NODE_IP, NODE_PODS, NODES, Config
from .output import note
from .fsutil import rm_f

FORWARD_RULE = ["FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-m", "comment", "--comment", "rvk8s", "-j", "ACCEPT"]


def _node_net_up(n: str) -> None:
    ns = f"rvk8s-{n}"
    if not os.path.exists(f"/run/netns/{ns}"):
        sh.run(["ip", "netns", "add", ns])
    if not sh.ok(["ip", "link", "show", f"{ns}h"]):
        sh.run(["ip", "link", "add", f"{ns}h", "type", "veth", "peer", "name", "eth0", "netns", ns])
        note(f"netns {ns}: eth0 {NODE_IP[n]}/24, pods {NODE_PODS[n]}")
    sh.run(["ip", "link", "set", f"{ns}h", "master", BRIDGE, "up"])
    sh.run(["ip", "-n", ns, "addr", "replace", f"{NODE_IP[n]}/24", "dev", "eth0"])
    sh.run(["ip", "-n", ns, "link", "set", "lo", "up"])
    sh.run(["ip", "-n", ns, "link", "set", "eth0", "up"])
    sh.run(["ip", "-n", ns, "route", "replace", "default", "via", HOST_IP])
    sh.run(["ip", "route", "replace", NODE_PODS[n], "via", NODE_IP[n], "dev", BRIDGE])
    for m in NODES:
        if m != n:
            sh.run(["ip", "-n", ns, "route", "replace", NODE_PODS[m], "via", NODE_IP[m], "dev", "eth0"])


def net_up() -> None:
    if not sh.ok(["ip", "link", "show", BRIDGE]):
        sh.run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        note(f"bridge {BRIDGE} {HOST_IP}/24")
    sh.run(["ip", "addr", "replace", f"{HOST_IP}/24", "dev", BRIDGE])
    sh.run(["ip", "link", "set", BRIDGE, "up"])
    # br_netfilter sends bridged frames through the host's FORWARD chain (Docker: policy DROP)
    if not sh.ok(["iptables", "-C", *FORWARD_RULE], stdout=None):
        sh.run(["iptables", "-I", FORWARD_RULE[0], "1", *FORWARD_RULE[1:]])
    for n in NODES:
        _node_net_up(n)


def node_net_down(n: str) -> None:
    """Node N's route, veth and network namespace (the end of node.node_down)."""
    sh.run(["ip", "route", "del", NODE_PODS[n]], check=False, stderr=sh.DEVNULL)
    sh.run(["ip", "link", "del", f"rvk8s-{n}h"], check=False, stderr=sh.DEVNULL)
    if os.path.exists(f"/run/netns/rvk8s-{n}"):
        sh.run(["ip", "netns", "del", f"rvk8s-{n}"])
        note(f"node {n}: netns rvk8s-{n} removed")


def net_down(c: Config) -> None:
    while sh.ok(["iptables", "-D", *FORWARD_RULE], stdout=None):
        pass
    if sh.ok(["ip", "link", "show", BRIDGE]):
        sh.run(["ip", "link", "del", BRIDGE])
        note(f"bridge {BRIDGE} removed")
    # the mount points node.node_up made on the host, deepest first
    f = f"{c.state}/nodes/created-dirs"
    if os.path.isfile(f):
        with open(f, errors="replace") as fh:
            made = fh.read().split("\n")
        for m in reversed(made):
            try:
                os.rmdir(m.strip(" \t"))
            except OSError:
                pass
        rm_f(f)
