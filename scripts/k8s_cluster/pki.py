"""Certificates (openssl) and kubeconfigs, in $STATE/pki and $STATE: made once, kept across ``down`` (only
``down --purge`` deletes them)."""
from __future__ import annotations

import base64
import os
import re

from . import shell as sh
from .config import ADDR, HOST_IP, NODES, SERVICE_IP, Config
from .output import die, note
from .fsutil import nonempty, rm_f


def subject(cn: str, o: str) -> str:
    return f"/O={o}/CN={cn}" if o else f"/CN={cn}"


def extensions(sans: str, eku: str) -> str:
    """The -extfile of a leaf certificate."""
    lines = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
             f"extendedKeyUsage={eku}"] + ([f"subjectAltName={sans}"] if sans else [])
    return "".join(line + "\n" for line in lines)


def new_cert(c: Config, name: str, cn: str, o: str, sans: str, eku: str, ca: str = "ca") -> None:
    """An EC P-256 key and a certificate signed by CA, unless NAME.crt exists."""
    p = f"{c.pki}/{name}"
    if nonempty(f"{p}.crt"):
        return
    sh.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-subj", subject(cn, o), "-keyout", f"{p}.key", "-out", f"{p}.csr"], stderr=sh.DEVNULL)
    with open(f"{p}.ext", "w") as f:
        f.write(extensions(sans, eku))
    sh.run(["openssl", "x509", "-req", "-in", f"{p}.csr", "-CA", f"{c.pki}/{ca}.crt", "-CAkey", f"{c.pki}/{ca}.key",
            "-CAcreateserial", "-days", "825", "-sha256", "-extfile", f"{p}.ext", "-out", f"{p}.crt.tmp"],
           stderr=sh.DEVNULL)
    os.replace(f"{p}.crt.tmp", f"{p}.crt")
    rm_f(f"{p}.csr")
    rm_f(f"{p}.ext")
    os.chmod(f"{p}.key", 0o600)


def new_ca(c: Config, name: str, cn: str) -> None:
    p = f"{c.pki}/{name}"
    if nonempty(f"{p}.crt"):
        return
    sh.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-days", "3650", "-sha256", "-subj", f"/CN={cn}", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,digitalSignature,keyCertSign,cRLSign",
            "-keyout", f"{p}.key", "-out", f"{p}.crt.tmp"], stderr=sh.DEVNULL)
    os.replace(f"{p}.crt.tmp", f"{p}.crt")
    os.chmod(f"{p}.key", 0o600)


def _b64(path: str) -> str:
    """``base64 -w0 < PATH``."""
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def kubeconfig_text(c: Config, cert: str, server: str) -> str:
    return f"""apiVersion: v1
kind: Config
clusters:
- name: rustfs-vllm
  cluster:
    server: https://{server}:{c.api_port}
    certificate-authority-data: {_b64(f"{c.pki}/ca.crt")}
users:
- name: {cert}
  user:
    client-certificate-data: {_b64(f"{c.pki}/{cert}.crt")}
    client-key-data: {_b64(f"{c.pki}/{cert}.key")}
contexts:
- name: {cert}@rustfs-vllm
  context: {{cluster: rustfs-vllm, user: {cert}}}
current-context: {cert}@rustfs-vllm
"""


def kubeconfig(c: Config, name: str, cert: str, server: str = ADDR) -> None:
    """A kubeconfig for the apiserver on loopback (or SERVER) with client certificate CERT,
    $STATE/NAME.kubeconfig (0600: written under umask 077, the umask restored after)."""
    file = f"{c.state}/{name}.kubeconfig"
    if nonempty(file):
        return
    text = kubeconfig_text(c, cert, server)
    mask = os.umask(0o077)
    try:
        with open(f"{file}.tmp", "w") as f:
            f.write(text)
        os.replace(f"{file}.tmp", file)
    finally:
        os.umask(mask)


def apiserver_sans(c: Config) -> str:
    extra = f",{c.extra_sans}" if c.extra_sans else ""
    return (f"IP:{ADDR},IP:{HOST_IP},IP:{SERVICE_IP},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
            f"DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local{extra}")


def _count_files(folder: str) -> int:
    """``find FOLDER -type f | wc -l``."""
    return sum(len([f for f in files if not os.path.islink(os.path.join(d, f))])
               for d, _, files in os.walk(folder))


def _apiserver_predates_nodes(c: Config) -> bool:
    """An apiserver certificate from before the nodes (without the bridge address): it is replaced."""
    crt = f"{c.pki}/apiserver.crt"
    if not nonempty(crt):
        return False
    rc, text = sh.capture(["openssl", "x509", "-in", crt, "-noout", "-ext", "subjectAltName"], stderr=sh.DEVNULL)
    return rc != 0 or not re.search(f"IP Address:{HOST_IP}\\b", text)


def _certificates(c: Config) -> None:
    new_ca(c, "ca", "rustfs-vllm-k8s-ca")
    # etcd has its own CA (as kubeadm does): the cluster CA also signs kubelets' CSRs, and no
    # certificate it signs may open etcd.
    new_ca(c, "etcd-ca", "rustfs-vllm-k8s-etcd-ca")
    new_cert(c, "etcd-server", "etcd", "", f"IP:{ADDR},DNS:localhost", "serverAuth,clientAuth", "etcd-ca")
    new_cert(c, "apiserver-etcd-client", "kube-apiserver-etcd-client", "", "", "clientAuth", "etcd-ca")
    if _apiserver_predates_nodes(c):
        rm_f(f"{c.pki}/apiserver.crt")
    new_cert(c, "apiserver", "kube-apiserver", "", apiserver_sans(c), "serverAuth")
    new_cert(c, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters", "", "clientAuth")
    new_cert(c, "registry", "rvk8s-registry", "", f"IP:{HOST_IP}", "serverAuth")
    new_cert(c, "admin", "kubernetes-admin", "system:masters", "", "clientAuth")
    new_cert(c, "controller-manager", "system:kube-controller-manager", "", "", "clientAuth")
    new_cert(c, "scheduler", "system:kube-scheduler", "", "", "clientAuth")
    # the aggregation layer's front proxy (kubeadm's layout): without it the controller-manager and
    # the scheduler log "missing content for CA bundle ... requestheader-client-ca-file"
    new_ca(c, "front-proxy-ca", "rustfs-vllm-k8s-front-proxy-ca")
    new_cert(c, "front-proxy-client", "front-proxy-client", "", "", "clientAuth", "front-proxy-ca")


def _service_account_key(c: Config) -> None:
    if nonempty(f"{c.pki}/sa.pub"):
        return
    sh.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", f"{c.pki}/sa.key"],
           stderr=sh.DEVNULL)
    os.chmod(f"{c.pki}/sa.key", 0o600)
    sh.run(["openssl", "pkey", "-in", f"{c.pki}/sa.key", "-pubout", "-out", f"{c.pki}/sa.pub"])


def make_pki(c: Config) -> None:
    os.makedirs(c.pki, exist_ok=True)
    os.chmod(c.state, 0o700)
    os.chmod(c.pki, 0o700)
    if not sh.which("openssl"):
        die("openssl is required")
    n0 = _count_files(c.pki)
    _certificates(c)
    _service_account_key(c)
    kubeconfig(c, "admin", "admin")
    kubeconfig(c, "controller-manager", "controller-manager")
    kubeconfig(c, "scheduler", "scheduler")
    new_cert(c, "kube-proxy", "system:kube-proxy", "", "", "clientAuth")
    for n in NODES:
        os.makedirs(c.nodedir(n), exist_ok=True)
        new_cert(c, f"node-{n}", f"system:node:{n}", "system:nodes", "", "clientAuth")
        kubeconfig(c, f"nodes/{n}/kubelet", f"node-{n}", HOST_IP)
        kubeconfig(c, f"nodes/{n}/kube-proxy", "kube-proxy", HOST_IP)
    if _count_files(c.pki) != n0:
        note(f"certificates and kubeconfigs written ({c.pki})")
