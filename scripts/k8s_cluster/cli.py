"""The verbs of scripts/k8s-cluster (usage in that launcher), their order of steps, and main(): exit status 0,
1 (``k8s-cluster: error: ...``; a failed check), 2 (usage), or a failed command's own status where the bash
script's ``set -e`` stopped on it.

Measured (2 cores, control plane only): cold `up` (new certificates, empty etcd) 10 s, warm `up` (after `down`)
4-5 s on an idle machine, 27-45 s while other builds load it; `down` 10-15 s. Measured with the two nodes (2
shared cores, other work running): cold `up` (from nothing) 17 s (control plane 12-13 s, then both nodes Ready
4-5 s later), warm `up` 7.5-8 s, `up` when all runs 2-3 s, `down` 21-35 s (nodes about 15 s; with nodes the
apiserver mostly needs its SIGKILL at 10 s). With the registry and storage (2026-12-02, a Rust build running):
warm `up` 9.5 s, `down` 27 s."""
from __future__ import annotations

import os
import re
import signal
import sys
import time
from typing import Callable, Optional, Sequence

from . import config
from . import shell as sh
from .config import ADDR, COMPONENTS, HOST_IP, K8S_VERSION, NODE_COMPONENTS, NODE_IP, NODE_PODS, NODES, Config
from .control_plane import healthy, port_of, start, wait_healthy
from .fsutil import rm_rf
from .images import du_h, import_image, load_image
from .network import net_down, net_up
from .node import node_down, node_up, wait_nodes_ready
from .output import Die, die, elapsed, note, now_s, step, write
from .pki import make_pki
from .procs import bin_of, pid_of, stop
from .registry import registry_up
from .storage import free_volumes, storage_up

# what the nodes run, from Debian (installed when missing, like the rest of the project's tools): command, package
DEBIAN = (("containerd", "containerd"), ("ctr", "containerd"), ("nsenter", "util-linux"), ("unshare", "util-linux"),
          ("findmnt", "util-linux"), ("iptables", "iptables"), ("ip", "iproute2"), ("conntrack", "conntrack"),
          ("openssl", "openssl"), ("docker-registry", "docker-registry"))
CNI_PLUGINS = ("/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/portmap")


def usage_line(argv0: str) -> str:
    return (f"usage: {argv0} up | down [--purge] | status | stop-node N | load-image IMAGE... | import-image IMAGE"
            " | free-volumes")


def missing_packages() -> list[str]:
    """The Debian packages of the commands not installed (in the bash's order, repeats kept)."""
    pkgs = [pkg for cmd, pkg in DEBIAN if not sh.which(cmd)]
    if not all(os.access(p, os.X_OK) for p in CNI_PLUGINS):
        pkgs.append("containernetworking-plugins")
    return pkgs


def install_packages(pkgs: list[str]) -> None:
    if not pkgs:
        return
    note(f"installing Debian {' '.join(pkgs)}")
    if not sh.which("apt-get"):
        die(f"install {' '.join(pkgs)} (Debian package names) first")
    # `apt-get update -qq && apt-get install ...`: a failed update skips the install and `up` goes on
    if sh.run(["apt-get", "update", "-qq"], check=False).returncode == 0:
        sh.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *sorted(set(pkgs))],
               env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, stdout=sh.DEVNULL)


def _prerequisites(c: Config) -> None:
    if os.geteuid() != 0:
        die("the nodes need root (network and mount namespaces, cgroups)")
    install_packages(missing_packages())
    binaries = [bin_of(c, b) for b in COMPONENTS] + [f"{c.k8s_bin}/kubectl"]
    if not all(b and os.access(b, os.X_OK) for b in binaries):
        note("binaries missing: building them with scripts/k8s-toolchain (cached afterwards)")
        sh.run([f"{c.root}/scripts/k8s-toolchain"], env={**os.environ, "K8S_TOOLCHAIN_ONLY": "k8s etcd"})
    for folder in (c.state, c.run, c.log_dir):
        os.makedirs(folder, exist_ok=True)
    pid = pid_of(c, "kube-apiserver")
    if pid is not None:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().decode("utf-8", "replace").split("\0")
        except OSError:
            args = []
        if f"--advertise-address={HOST_IP}" not in args:
            die(f"the running kube-apiserver predates the nodes (not on {HOST_IP}): run `{c.argv0} down` first")


def git_version(version_json: str) -> str:
    """``sed -n 's/.*"gitVersion": "\\(v[^"]*\\)".*/\\1/p' | tail -1``: the server's (the last) gitVersion."""
    found = [m.group(1) for m in (re.match(r'.*"gitVersion": "(v[^"]*)".*', line) for line in
                                  version_json.split("\n")) if m]
    return found[-1] if found else ""


def _control_plane(c: Config, t0: float) -> None:
    make_pki(c)
    net_up()   # first: the apiserver advertises the bridge address
    registry_up(c)
    for b in COMPONENTS:
        start(c, b)
        # the apiserver needs etcd, the others the apiserver; the last two start together
        if b in ("etcd", "kube-apiserver"):
            wait_healthy(c, b)
            note(f"{b} healthy after {elapsed(t0)} s")
    wait_healthy(c, "kube-controller-manager")
    wait_healthy(c, "kube-scheduler")
    note(f"kubectl get --raw /readyz: {sh.out([*c.kc, 'get', '--raw', '/readyz'])}")
    # the controller-manager's service-account controllers at work: `default` appears in `default`
    deadline = now_s() + c.timeout_s
    while not sh.ok([*c.kc, "-n", "default", "get", "serviceaccount", "default"]):
        if not now_s() < deadline:
            die(f"no default ServiceAccount after {c.ready_timeout} s "
                f"(controller-manager log: {c.log('kube-controller-manager')})")
        time.sleep(0.5)
    note(f"server {git_version(sh.out([*c.kc, 'version', '-o', 'json']))}; default ServiceAccount present")
    note(f"control plane ready after {elapsed(t0)} s")


def _indented(cmd: list[str], stderr=None) -> None:
    """``CMD | sed 's/^/    /'`` under pipefail: CMD's failure stops the script with its status."""
    rc = sh.stream(cmd, "    ", stderr=stderr)
    if rc != 0:
        raise sh.Failed(cmd, rc)


def cmd_up(c: Config, args: Sequence[str]) -> int:
    t0 = time.time()
    step(f"Kubernetes v{K8S_VERSION} control plane on {ADDR} (state: {c.state})")
    _prerequisites(c)
    _control_plane(c, t0)
    step(f"Nodes {' '.join(NODES)} (containerd, kubelet, kube-proxy each; state: {c.state}/nodes)")
    for n in NODES:
        node_up(c, n)
    wait_nodes_ready(c)
    step("Storage")
    storage_up(c)
    _indented([*c.kc, "get", "nodes", "-o", "wide"])
    note(f"ready in {elapsed(t0)} s; KUBECONFIG={c.state}/admin.kubeconfig")
    return 0


def cmd_down(c: Config, args: Sequence[str]) -> int:
    step("Stopping the nodes")
    for n in reversed(NODES):
        node_down(c, n)
    stop(c, "registry")
    net_down(c)
    step("Stopping the control plane")
    for b in reversed(COMPONENTS):
        stop(c, b)
    if args[:1] == ["--purge"]:
        for n in NODES:
            if os.path.isdir(c.nodedir(n)):
                note(f"node {n}: {du_h(c.nodedir(n))} freed")
        if os.path.isdir(c.reg_dir):
            note(f"registry: {du_h(c.reg_dir)} freed")
        rm_rf(c.state)
        rm_rf(c.docker_certs)
        note(f"removed {c.state} (certificates, kubeconfigs, etcd data, the nodes' images, the registry) "
             f"and {c.docker_certs}")
    return 0


def _status_components(c: Config) -> int:
    rc = 0
    for b in COMPONENTS:
        pid = pid_of(c, b)
        if pid is None:
            write(f"    {b:<24} stopped\n")
            rc = 1
        elif healthy(c, b):
            write(f"    {b:<24} running (pid {pid}), healthy, {ADDR}:{port_of(c, b)}\n")
        else:
            write(f"    {b:<24} running (pid {pid}), NOT healthy\n")
            rc = 1
    pid = pid_of(c, "registry")
    if pid is not None:
        write(f"    {'registry':<24} running (pid {pid}), https://{c.reg_addr}\n")
    else:
        write(f"    {'registry':<24} stopped\n")
        rc = 1
    return rc


def _status_nodes(c: Config) -> int:
    rc = 0
    for n in NODES:
        line = ""
        for comp in ("holder", *NODE_COMPONENTS):
            pid = pid_of(c, f"{n}.{comp}")
            line += f" {comp} {pid}," if pid is not None else f" {comp} stopped,"
            rc = rc if pid is not None else 1
        write(f"    {f'node {n} ({NODE_IP[n]})':<24} {line[:-1] if line.endswith(',') else line}\n")
    return rc


def cmd_status(c: Config, args: Sequence[str]) -> int:
    """What runs, with health, and the nodes; 1 when anything is stopped or not healthy."""
    rc = _status_components(c)
    rc = _status_nodes(c) or rc
    if healthy(c, "kube-apiserver"):
        _indented([*c.kc, "get", "nodes", "-o", "wide"], stderr=sh.STDOUT)
    if os.path.isfile(c.admin_kubeconfig):
        note(f"KUBECONFIG={c.admin_kubeconfig}")
    return rc


def cmd_stop_node(c: Config, args: Sequence[str]) -> int:
    """Lose node N: its kubelet, kube-proxy, containerd, containers and network stop at once."""
    n = args[0] if args else ""
    if n not in NODE_PODS:
        die(f"usage: {c.argv0} stop-node a|b")
    step(f"node {n} lost: kubelet, kube-proxy, containerd, its containers and its network stopped")
    node_down(c, n)
    note(f"`{c.argv0} up` brings it back")
    return 0


VERBS: dict[str, Callable[[Config, Sequence[str]], int]] = {
    "up": cmd_up, "stop-node": cmd_stop_node, "down": cmd_down, "status": cmd_status,
    "import-image": lambda c, a: import_image(c, a) or 0, "load-image": lambda c, a: load_image(c, a) or 0,
    "free-volumes": lambda c, a: free_volumes(c) or 0}


def parse(argv: Sequence[str]) -> tuple[Optional[Callable[[Config, Sequence[str]], int]], list[str]]:
    """(the verb's function, its arguments); (None, []) for no verb or an unknown one (usage, exit 2)."""
    verb = argv[1] if len(argv) > 1 else ""
    return VERBS.get(verb), list(argv[2:])


def _die_of_sigint() -> int:
    """Interrupted: exit as bash does, by SIGINT itself (status 130 to a shell)."""
    sys.stdout.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    return 130


def dispatch(argv: Sequence[str], script: str) -> int:
    """Run the verb of ARGV (the launcher's sys.argv; ``script``: the launcher's path); its exit status."""
    c = config.load(os.environ, script, argv[0])
    fn, args = parse(argv)
    if fn is None:
        write(usage_line(c.argv0) + "\n", err=True)
        return 2
    try:
        return fn(c, args)
    except Die as e:
        write(f"k8s-cluster: error: {e}\n", err=True)
        return 1
    except sh.Failed as e:
        return e.rc
    except KeyboardInterrupt:
        return _die_of_sigint()
    except (OSError, ValueError) as e:
        # a file operation the bash did with mkdir, cp, mv, rm, chmod or `>` (or a K8S_* number that is not one):
        # its message, status 1, as bash under set -e
        write(f"k8s-cluster: {e}\n", err=True)
        return 1


def main(argv: Sequence[str], script: str) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)   # `k8s-cluster status | head -1`: no traceback
    # What this script starts inherits its umask: 022, whatever the caller's. A cold `up` used to leave
    # kubeconfig()'s 077 in force, and the kubelet then made hostPath DirectoryOrCreate folders 0700
    # (drwx------ /mnt/rvk8s-test: unreadable to a non-root pod). Secrets are 0600 in 0700 folders anyway.
    os.umask(0o022)
    return dispatch(argv, script)
