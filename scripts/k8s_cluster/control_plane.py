"""The control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler as background
processes (setsid, pid files in run/), their flags, their health checks, start and wait."""
from __future__ import annotations

import socket
import time

from . import shell as sh
from .config import ADDR, CLUSTER_CIDR, HOST_IP, SERVICE_CIDR, Config
from .output import die, log_start, note, now_s, tail_err
from .procs import bin_of, pid_of


def port_of(c: Config, name: str) -> str:
    return {"etcd": c.etcd_port, "kube-apiserver": c.api_port, "kube-controller-manager": c.cm_port,
            "kube-scheduler": c.sched_port}.get(name, "")


def port_busy(port: str) -> bool:
    """Something accepts connections on 127.0.0.1:PORT (the bash opened /dev/tcp/127.0.0.1/PORT)."""
    try:
        with socket.create_connection((ADDR, int(port)), timeout=5):
            return True
    except (OSError, ValueError):
        return False


def etcd_curl(c: Config, path: str) -> list[str]:
    return ["curl", "-sS", "--max-time", "5", "--cacert", f"{c.pki}/etcd-ca.crt",
            "--cert", f"{c.pki}/apiserver-etcd-client.crt", "--key", f"{c.pki}/apiserver-etcd-client.key",
            f"https://{ADDR}:{c.etcd_port}{path}"]


def api_curl(c: Config, path: str) -> list[str]:
    return ["curl", "-sS", "--max-time", "5", "--cacert", f"{c.pki}/ca.crt", "--cert", f"{c.pki}/admin.crt",
            "--key", f"{c.pki}/admin.key", f"https://{ADDR}:{c.api_port}{path}"]


def healthz_curl(port: str) -> list[str]:
    # controller-manager and scheduler serve /healthz to anyone (--authorization-always-allow-paths)
    # over a self-signed certificate of their own.
    return ["curl", "-sS", "--max-time", "5", "-k", f"https://{ADDR}:{port}/healthz"]


def healthy(c: Config, name: str) -> bool:
    check = {"etcd": (etcd_curl(c, "/health"), '{"health":"true","reason":""}'),
             "kube-apiserver": (api_curl(c, "/readyz"), "ok"),
             "kube-controller-manager": (healthz_curl(c.cm_port), "ok"),
             "kube-scheduler": (healthz_curl(c.sched_port), "ok")}.get(name)
    return check is not None and sh.out(check[0], stderr=sh.DEVNULL) == check[1]


def _etcd_args(c: Config) -> list[str]:
    pki, peer = c.pki, f"http://{ADDR}:{c.etcd_peer_port}"
    return [
        "--name=rustfs-vllm-k8s", f"--data-dir={c.state}/etcd",
        f"--listen-client-urls=https://{ADDR}:{c.etcd_port}", f"--advertise-client-urls=https://{ADDR}:{c.etcd_port}",
        f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=rustfs-vllm-k8s={peer}",
        f"--cert-file={pki}/etcd-server.crt", f"--key-file={pki}/etcd-server.key",
        "--client-cert-auth", f"--trusted-ca-file={pki}/etcd-ca.crt",
        "--snapshot-count=10000", "--log-level=warn"]


def _apiserver_args(c: Config) -> list[str]:
    pki = c.pki
    return [
        f"--advertise-address={HOST_IP}", f"--bind-address={c.api_bind}", f"--secure-port={c.api_port}",
        f"--etcd-servers=https://{ADDR}:{c.etcd_port}", f"--etcd-cafile={pki}/etcd-ca.crt",
        f"--etcd-certfile={pki}/apiserver-etcd-client.crt", f"--etcd-keyfile={pki}/apiserver-etcd-client.key",
        f"--client-ca-file={pki}/ca.crt",
        f"--tls-cert-file={pki}/apiserver.crt", f"--tls-private-key-file={pki}/apiserver.key",
        f"--kubelet-client-certificate={pki}/apiserver-kubelet-client.crt",
        f"--kubelet-client-key={pki}/apiserver-kubelet-client.key",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki}/sa.pub", f"--service-account-signing-key-file={pki}/sa.key",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
        f"--requestheader-client-ca-file={pki}/front-proxy-ca.crt", "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki}/front-proxy-client.crt",
        f"--proxy-client-key-file={pki}/front-proxy-client.key",
        "--allow-privileged=true", "--anonymous-auth=false", "--profiling=false",
        # the nodes' names do not resolve: logs and exec go to their InternalIP
        "--kubelet-preferred-address-types=InternalIP,Hostname"]


def _controller_manager_args(c: Config) -> list[str]:
    kubeconfig = f"{c.state}/controller-manager.kubeconfig"
    return [
        f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={ADDR}", f"--secure-port={c.cm_port}", "--leader-elect=false",
        f"--root-ca-file={c.pki}/ca.crt", f"--service-account-private-key-file={c.pki}/sa.key",
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={c.pki}/ca.crt", f"--cluster-signing-key-file={c.pki}/ca.key",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # `up` makes the Node objects with the podCIDRs their CNI configurations use
        "--allocate-node-cidrs=false", f"--cluster-cidr={CLUSTER_CIDR}", "--profiling=false"]


def _scheduler_args(c: Config) -> list[str]:
    kubeconfig = f"{c.state}/scheduler.kubeconfig"
    return [
        f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={ADDR}", f"--secure-port={c.sched_port}", "--leader-elect=false", "--profiling=false"]


def args_of(c: Config, name: str) -> list[str]:
    """The flags of control-plane component NAME."""
    return {"etcd": _etcd_args, "kube-apiserver": _apiserver_args,
            "kube-controller-manager": _controller_manager_args, "kube-scheduler": _scheduler_args}[name](c)


def start(c: Config, name: str) -> None:
    log = c.log(name)
    pid = pid_of(c, name)
    if pid is not None:
        note(f"{name} already running (pid {pid})")
        return
    port = port_of(c, name)
    if port_busy(port):
        die(f"{ADDR}:{port} is taken by another process; {name} cannot listen there (set the K8S_*_PORT variables)")
    args = args_of(c, name)
    log_start(log, f"start {name}")
    pid = str(sh.spawn(["setsid", bin_of(c, name), *args], log))
    with open(f"{c.run}/{name}.pid", "w") as f:
        f.write(pid + "\n")
    note(f"{name} started (pid {pid}, log {log})")


def wait_healthy(c: Config, name: str) -> None:
    log, deadline = c.log(name), now_s() + c.timeout_s
    while not healthy(c, name):
        if pid_of(c, name) is None:
            tail_err(log)
            die(f"{name} exited; log: {log}")
        if not now_s() < deadline:
            tail_err(log)
            die(f"{name} not healthy after {c.ready_timeout} s")
        time.sleep(0.5)
