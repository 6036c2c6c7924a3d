"""scripts/k8s_cluster (the test cluster of scripts/k8s-cluster)'s pure parts, without root or a cluster: the
verbs and their usage errors, the environment's defaults, each control-plane binary's flags (args_of), the
certificates it asks openssl for (openssl run for real into a tmp folder), the kubeconfigs, each node's files,
the pause image archive, the network commands in their order (a recording fake in place of the commands), the
StorageClass and PVs, the docker.io name mapping (repo_of) and the small parsers of ctr/kubectl output."""
from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

from k8s_cluster import cli, config, network, node_files, pki  # noqa: E402
from k8s_cluster import shell as sh  # noqa: E402
from k8s_cluster.cgroups import cgroup_dirs  # noqa: E402
from k8s_cluster.control_plane import args_of, port_of  # noqa: E402
from k8s_cluster.fsutil import put  # noqa: E402
from k8s_cluster.images import field, layer_labels, read2, unpacked  # noqa: E402
from k8s_cluster.node import _unstopped, node_object  # noqa: E402
from k8s_cluster.output import Die, tail  # noqa: E402
from k8s_cluster.registry import registry_config, repo_of  # noqa: E402
from k8s_cluster.storage import storage_manifest  # noqa: E402

SCRIPT = "/r/scripts/k8s-cluster"


def cfg(tmp_path=None, **env) -> config.Config:
    environ = {"HOME": "/home/u", **env}
    if tmp_path is not None:
        environ.setdefault("K8S_STATE_DIR", str(tmp_path / "state"))
    return config.load(environ, SCRIPT, "scripts/k8s-cluster")


class Recorder:
    """In place of shell.run: records each command, answers with ``answer(cmd) -> (rc, stdout)``."""

    def __init__(self, answer=lambda cmd: (0, "")):
        self.cmds: list[list[str]] = []
        self.answer = answer

    def __call__(self, cmd, *, check=True, input=None, stdout=None, stderr=None, env=None):
        cmd = [str(a) for a in cmd]
        self.cmds.append(cmd)
        rc, out = self.answer(cmd)
        if check and rc != 0:
            raise sh.Failed(cmd, rc)
        return subprocess.CompletedProcess(cmd, rc, out if stdout is sh.PIPE else None, "")


# ---------------------------------------------------------------- configuration and verbs

def test_defaults_follow_the_bash_and_empty_variables_count_as_unset():
    c = cfg()
    assert c.root == "/r" and c.state == "/r/.state/k8s" and c.log_dir == "/r/.state/logs"
    assert c.cache == "/home/u/.cache/rustfs-vllm"
    assert c.k8s_bin == "/home/u/.cache/rustfs-vllm/toolchain/k8s-v1.34.4/bin"
    assert c.etcd_bin == "/home/u/.cache/rustfs-vllm/toolchain/etcd-v3.6.4/bin"
    assert (c.api_port, c.etcd_port, c.etcd_peer_port, c.cm_port, c.sched_port) == ("6443", "12379", "12380",
                                                                                     "10257", "10259")
    assert (c.api_bind, c.ready_timeout, c.reg_addr, c.pv_count, c.pv_size) == ("0.0.0.0", "180", "10.232.0.1:5000",
                                                                                "4", "20Gi")
    assert c.docker_certs == "/etc/docker/certs.d/10.232.0.1:5000"
    assert c.kc == ["/home/u/.cache/rustfs-vllm/toolchain/k8s-v1.34.4/bin/kubectl", "--kubeconfig",
                    "/r/.state/k8s/admin.kubeconfig"]
    assert cfg(XDG_CACHE_HOME="/x").cache == "/x/rustfs-vllm"
    assert cfg(RUSTFS_VLLM_CACHE="", K8S_APISERVER_PORT="").cache == "/home/u/.cache/rustfs-vllm"
    c = cfg(RUSTFS_VLLM_CACHE="/c", K8S_STATE_DIR="/s", K8S_APISERVER_PORT="7443", K8S_ETCD_PORT="2379",
            K8S_CONTROLLER_MANAGER_PORT="1", K8S_SCHEDULER_PORT="2", K8S_READY_TIMEOUT="9", K8S_APISERVER_BIND="1.2.3.4",
            K8S_APISERVER_EXTRA_SANS="IP:10.0.0.1", K8S_REGISTRY_PORT="5001", K8S_LOCAL_PVS="2", K8S_LOCAL_PV_SIZE="1Gi")
    assert (c.cache, c.state, c.pki, c.run, c.reg_dir) == ("/c", "/s", "/s/pki", "/s/run", "/s/registry")
    assert (c.api_port, c.etcd_peer_port, c.cm_port, c.sched_port, c.timeout_s) == ("7443", "2380", "1", "2", 9)
    assert (c.api_bind, c.extra_sans, c.reg_addr, c.pv_count, c.pv_size) == ("1.2.3.4", "IP:10.0.0.1",
                                                                             "10.232.0.1:5001", "2", "1Gi")
    assert [port_of(c, n) for n in config.COMPONENTS] == ["2379", "7443", "1", "2"]


def test_root_is_the_launchers_parent_as_bash_cd_and_pwd_gave_it(tmp_path, monkeypatch):
    real = tmp_path / "real"
    (real / "scripts").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(tmp_path / "link")
    environ = {"PWD": str(tmp_path / "link")}
    assert config.logical_dir("scripts/..", environ) == str(tmp_path / "link")      # not .../real
    assert config.logical_dir("/a/b/../c", environ) == "/a/c"
    assert config.logical_dir("scripts/..", {"PWD": "/elsewhere"}) == os.getcwd()   # a stale PWD is not used


def test_each_verb_and_its_arguments():
    for verb, fn in [("up", cli.cmd_up), ("down", cli.cmd_down), ("status", cli.cmd_status),
                     ("stop-node", cli.cmd_stop_node)]:
        assert cli.parse(["k8s-cluster", verb]) == (fn, [])
    assert cli.parse(["k8s-cluster", "down", "--purge"]) == (cli.cmd_down, ["--purge"])
    assert cli.parse(["k8s-cluster", "load-image", "x:1", "y:2"])[1] == ["x:1", "y:2"]
    assert cli.parse(["k8s-cluster", "import-image", "x:1"])[0] is cli.VERBS["import-image"]
    assert cli.parse(["k8s-cluster", "free-volumes"])[0] is cli.VERBS["free-volumes"]
    assert set(cli.VERBS) == {"up", "down", "status", "stop-node", "load-image", "import-image", "free-volumes"}
    for argv in (["k8s-cluster"], ["k8s-cluster", ""], ["k8s-cluster", "--help"], ["k8s-cluster", "Up"]):
        assert cli.parse(argv) == (None, [])


@pytest.mark.parametrize("argv,rc,err", [
    ([], 2, "usage: scripts/k8s-cluster up | down [--purge] | status | stop-node N | load-image IMAGE... | "
            "import-image IMAGE | free-volumes\n"),
    (["bogus"], 2, "usage: scripts/k8s-cluster up | down [--purge] | status | stop-node N | load-image IMAGE... | "
                   "import-image IMAGE | free-volumes\n"),
    (["stop-node"], 1, "k8s-cluster: error: usage: scripts/k8s-cluster stop-node a|b\n"),
    (["stop-node", "c"], 1, "k8s-cluster: error: usage: scripts/k8s-cluster stop-node a|b\n"),
    (["load-image"], 1, "k8s-cluster: error: usage: scripts/k8s-cluster load-image IMAGE...\n"),
    (["import-image"], 1, "k8s-cluster: error: usage: scripts/k8s-cluster import-image IMAGE\n"),
    (["import-image", ""], 1, "k8s-cluster: error: usage: scripts/k8s-cluster import-image IMAGE\n"),
])
def test_usage_errors_and_their_exit_status(argv, rc, err, capsys, monkeypatch):
    monkeypatch.setattr(sh, "run", Recorder(lambda cmd: pytest.fail(f"ran {cmd}")))
    assert cli.dispatch(["scripts/k8s-cluster", *argv], SCRIPT) == rc
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", err)


def test_a_failed_command_exits_with_its_status_and_die_with_1(tmp_path, capsys, monkeypatch):
    def failed(c, args):
        raise sh.Failed(["ip", "link", "add"], 3)
    monkeypatch.setenv("K8S_STATE_DIR", str(tmp_path))
    monkeypatch.setitem(cli.VERBS, "status", failed)
    assert cli.dispatch(["k", "status"], SCRIPT) == 3
    monkeypatch.setitem(cli.VERBS, "status", lambda c, args: cli.die("node a has no holder process"))
    assert cli.dispatch(["k", "status"], SCRIPT) == 1
    assert capsys.readouterr().err == "k8s-cluster: error: node a has no holder process\n"


def test_status_of_a_stopped_cluster(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sh, "run", Recorder(lambda cmd: (7, "")))    # curl: connection refused
    c = cfg(tmp_path)
    assert cli.cmd_status(c, []) == 1
    assert capsys.readouterr().out == (
        "    etcd                     stopped\n"
        "    kube-apiserver           stopped\n"
        "    kube-controller-manager  stopped\n"
        "    kube-scheduler           stopped\n"
        "    registry                 stopped\n"
        "    node a (10.232.0.11)      holder stopped, containerd stopped, kubelet stopped, kube-proxy stopped\n"
        "    node b (10.232.0.12)      holder stopped, containerd stopped, kubelet stopped, kube-proxy stopped\n")
    assert sh.run.cmds == [["curl", "-sS", "--max-time", "5", "--cacert", f"{c.pki}/ca.crt", "--cert",
                            f"{c.pki}/admin.crt", "--key", f"{c.pki}/admin.key", "https://127.0.0.1:6443/readyz"]]


# ---------------------------------------------------------------- control plane

def test_args_of_each_control_plane_binary():
    c = cfg(K8S_STATE_DIR="/s", K8S_ETCD_PORT="2379", K8S_APISERVER_BIND="10.0.0.9")
    assert args_of(c, "etcd") == [
        "--name=rustfs-vllm-k8s", "--data-dir=/s/etcd", "--listen-client-urls=https://127.0.0.1:2379",
        "--advertise-client-urls=https://127.0.0.1:2379", "--listen-peer-urls=http://127.0.0.1:2380",
        "--initial-advertise-peer-urls=http://127.0.0.1:2380", "--initial-cluster=rustfs-vllm-k8s=http://127.0.0.1:2380",
        "--cert-file=/s/pki/etcd-server.crt", "--key-file=/s/pki/etcd-server.key", "--client-cert-auth",
        "--trusted-ca-file=/s/pki/etcd-ca.crt", "--snapshot-count=10000", "--log-level=warn"]
    assert args_of(c, "kube-apiserver") == [
        "--advertise-address=10.232.0.1", "--bind-address=10.0.0.9", "--secure-port=6443",
        "--etcd-servers=https://127.0.0.1:2379", "--etcd-cafile=/s/pki/etcd-ca.crt",
        "--etcd-certfile=/s/pki/apiserver-etcd-client.crt", "--etcd-keyfile=/s/pki/apiserver-etcd-client.key",
        "--client-ca-file=/s/pki/ca.crt", "--tls-cert-file=/s/pki/apiserver.crt",
        "--tls-private-key-file=/s/pki/apiserver.key", "--kubelet-client-certificate=/s/pki/apiserver-kubelet-client.crt",
        "--kubelet-client-key=/s/pki/apiserver-kubelet-client.key",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--service-account-key-file=/s/pki/sa.pub", "--service-account-signing-key-file=/s/pki/sa.key",
        "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction", "--requestheader-client-ca-file=/s/pki/front-proxy-ca.crt",
        "--requestheader-allowed-names=front-proxy-client", "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--proxy-client-cert-file=/s/pki/front-proxy-client.crt", "--proxy-client-key-file=/s/pki/front-proxy-client.key",
        "--allow-privileged=true", "--anonymous-auth=false", "--profiling=false",
        "--kubelet-preferred-address-types=InternalIP,Hostname"]
    assert args_of(c, "kube-controller-manager") == [
        "--kubeconfig=/s/controller-manager.kubeconfig", "--authentication-kubeconfig=/s/controller-manager.kubeconfig",
        "--authorization-kubeconfig=/s/controller-manager.kubeconfig", "--bind-address=127.0.0.1",
        "--secure-port=10257", "--leader-elect=false", "--root-ca-file=/s/pki/ca.crt",
        "--service-account-private-key-file=/s/pki/sa.key", "--use-service-account-credentials=true",
        "--cluster-signing-cert-file=/s/pki/ca.crt", "--cluster-signing-key-file=/s/pki/ca.key",
        "--service-cluster-ip-range=10.96.0.0/16", "--allocate-node-cidrs=false", "--cluster-cidr=10.233.0.0/16",
        "--profiling=false"]
    assert args_of(c, "kube-scheduler") == [
        "--kubeconfig=/s/scheduler.kubeconfig", "--authentication-kubeconfig=/s/scheduler.kubeconfig",
        "--authorization-kubeconfig=/s/scheduler.kubeconfig", "--bind-address=127.0.0.1", "--secure-port=10259",
        "--leader-elect=false", "--profiling=false"]


# ---------------------------------------------------------------- certificates and kubeconfigs

CERTS = {  # name: (subject, issuer, subjectAltName, extendedKeyUsage)
    "etcd-server": ("CN = etcd", "rustfs-vllm-k8s-etcd-ca", "IP Address:127.0.0.1, DNS:localhost",
                    "TLS Web Server Authentication, TLS Web Client Authentication"),
    "apiserver-etcd-client": ("CN = kube-apiserver-etcd-client", "rustfs-vllm-k8s-etcd-ca", None,
                              "TLS Web Client Authentication"),
    "apiserver": ("CN = kube-apiserver", "rustfs-vllm-k8s-ca",
                  "IP Address:127.0.0.1, IP Address:10.232.0.1, IP Address:10.96.0.1, DNS:localhost, DNS:kubernetes, "
                  "DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local, "
                  "IP Address:10.0.0.1", "TLS Web Server Authentication"),
    "apiserver-kubelet-client": ("O = system:masters, CN = kube-apiserver-kubelet-client", "rustfs-vllm-k8s-ca", None,
                                 "TLS Web Client Authentication"),
    "registry": ("CN = rvk8s-registry", "rustfs-vllm-k8s-ca", "IP Address:10.232.0.1", "TLS Web Server Authentication"),
    "admin": ("O = system:masters, CN = kubernetes-admin", "rustfs-vllm-k8s-ca", None, "TLS Web Client Authentication"),
    "controller-manager": ("CN = system:kube-controller-manager", "rustfs-vllm-k8s-ca", None,
                           "TLS Web Client Authentication"),
    "scheduler": ("CN = system:kube-scheduler", "rustfs-vllm-k8s-ca", None, "TLS Web Client Authentication"),
    "front-proxy-client": ("CN = front-proxy-client", "rustfs-vllm-k8s-front-proxy-ca", None,
                           "TLS Web Client Authentication"),
    "kube-proxy": ("CN = system:kube-proxy", "rustfs-vllm-k8s-ca", None, "TLS Web Client Authentication"),
    "node-a": ("O = system:nodes, CN = system:node:a", "rustfs-vllm-k8s-ca", None, "TLS Web Client Authentication"),
    "node-b": ("O = system:nodes, CN = system:node:b", "rustfs-vllm-k8s-ca", None, "TLS Web Client Authentication"),
}


def x509(path, *args) -> str:
    return subprocess.run(["openssl", "x509", "-in", str(path), "-noout", *args], capture_output=True, text=True,
                          check=True).stdout


def spy_run(monkeypatch) -> list[list[str]]:
    """Record the commands while they run for real."""
    calls, real = [], sh.run

    def run(cmd, **kw):
        calls.append([str(a) for a in cmd])
        return real(cmd, **kw)
    monkeypatch.setattr(sh, "run", run)
    return calls


@pytest.fixture(scope="module")
def made_pki(tmp_path_factory):
    """make_pki run once, for real (openssl): (config, the commands it ran, what it printed)."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed")
    c = cfg(tmp_path_factory.mktemp("pki"), K8S_APISERVER_EXTRA_SANS="IP:10.0.0.1")
    buf = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(buf):
        calls = spy_run(mp)
        pki.make_pki(c)
    return c, calls, buf.getvalue()


def test_pki_asks_openssl_for_these_subjects_in_this_order(made_pki):
    c, calls, printed = made_pki
    assert printed == f"    certificates and kubeconfigs written ({c.pki})\n"
    subjects = [cmd[cmd.index("-subj") + 1] for cmd in calls if "-subj" in cmd]
    assert subjects == ["/CN=rustfs-vllm-k8s-ca", "/CN=rustfs-vllm-k8s-etcd-ca", "/CN=etcd",
                        "/CN=kube-apiserver-etcd-client", "/CN=kube-apiserver",
                        "/O=system:masters/CN=kube-apiserver-kubelet-client", "/CN=rvk8s-registry",
                        "/O=system:masters/CN=kubernetes-admin", "/CN=system:kube-controller-manager",
                        "/CN=system:kube-scheduler", "/CN=rustfs-vllm-k8s-front-proxy-ca", "/CN=front-proxy-client",
                        "/CN=system:kube-proxy", "/O=system:nodes/CN=system:node:a", "/O=system:nodes/CN=system:node:b"]
    apiserver = next(cmd for cmd in calls if "-extfile" in cmd and cmd[cmd.index("-in") + 1].endswith("/apiserver.csr"))
    assert apiserver[:12] == ["openssl", "x509", "-req", "-in", f"{c.pki}/apiserver.csr", "-CA", f"{c.pki}/ca.crt",
                              "-CAkey", f"{c.pki}/ca.key", "-CAcreateserial", "-days", "825"]
    assert calls[-1] == ["openssl", "x509", "-req", "-in", f"{c.pki}/node-b.csr", "-CA", f"{c.pki}/ca.crt", "-CAkey",
                         f"{c.pki}/ca.key", "-CAcreateserial", "-days", "825", "-sha256", "-extfile",
                         f"{c.pki}/node-b.ext", "-out", f"{c.pki}/node-b.crt.tmp"]
    assert ["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out",
            f"{c.pki}/sa.key"] in calls


def test_pki_certificates_as_made(made_pki):
    c = made_pki[0]
    for name, (subject, issuer, sans, eku) in CERTS.items():
        text = x509(f"{c.pki}/{name}.crt", "-subject", "-issuer", "-ext",
                    "subjectAltName,extendedKeyUsage,basicConstraints,keyUsage")
        assert text.startswith(f"subject={subject}\nissuer=CN = {issuer}\n"), name
        assert (f"X509v3 Subject Alternative Name: \n    {sans}\n" in text) if sans else "Alternative" not in text, name
        assert f"X509v3 Extended Key Usage: \n    {eku}\n" in text and "CA:FALSE" in text, name
        assert "Digital Signature, Key Encipherment" in text, name
        assert os.stat(f"{c.pki}/{name}.key").st_mode & 0o777 == 0o600
    for ca in ("ca", "etcd-ca", "front-proxy-ca"):
        assert "CA:TRUE" in x509(f"{c.pki}/{ca}.crt", "-ext", "basicConstraints")
    assert "ASN1 OID: prime256v1" in subprocess.run(["openssl", "pkey", "-in", f"{c.pki}/admin.key", "-noout", "-text"],
                                                    capture_output=True, text=True).stdout
    assert "Private-Key: (2048 bit" in subprocess.run(["openssl", "pkey", "-in", f"{c.pki}/sa.key", "-noout", "-text"],
                                                      capture_output=True, text=True).stdout
    assert os.stat(c.pki).st_mode & 0o777 == 0o700 and os.stat(c.state).st_mode & 0o777 == 0o700
    assert not [f for f in os.listdir(c.pki) if f.endswith((".csr", ".ext", ".tmp"))]
    for kubeconfig in ("admin", "controller-manager", "scheduler", "nodes/a/kubelet", "nodes/b/kube-proxy"):
        assert os.stat(f"{c.state}/{kubeconfig}.kubeconfig").st_mode & 0o777 == 0o600


def test_pki_again_makes_nothing_but_a_stale_apiserver_certificate(made_pki, monkeypatch, capsys):
    c = made_pki[0]
    before = {f: os.stat(f"{c.pki}/{f}").st_mtime_ns for f in os.listdir(c.pki)}
    calls = spy_run(monkeypatch)
    pki.make_pki(c)                                          # all there: nothing made, nothing said
    check = ["openssl", "x509", "-in", f"{c.pki}/apiserver.crt", "-noout", "-ext", "subjectAltName"]
    assert calls == [check] and capsys.readouterr().out == ""
    assert {f: os.stat(f"{c.pki}/{f}").st_mtime_ns for f in os.listdir(c.pki)} == before
    # an apiserver certificate from before the nodes (without 10.232.0.1) is made again
    pki.new_cert(c, "apiserver-old", "kube-apiserver", "", "IP:127.0.0.1,DNS:localhost", "serverAuth")
    os.replace(f"{c.pki}/apiserver-old.crt", f"{c.pki}/apiserver.crt")
    calls.clear()
    pki.make_pki(c)
    assert [cmd[:2] for cmd in calls] == [["openssl", "x509"], ["openssl", "req"], ["openssl", "x509"]]
    assert "IP Address:10.232.0.1" in x509(f"{c.pki}/apiserver.crt", "-ext", "subjectAltName")
    assert capsys.readouterr().out == ""                     # as many files as before: no note (as in the bash)


def fake_pki(c):
    os.makedirs(c.pki)
    for name in ("ca.crt", "admin.crt", "admin.key", "node-a.crt", "node-a.key"):
        with open(f"{c.pki}/{name}", "w") as f:
            f.write(f"PEM of {name}\n")


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_kubeconfig_content_and_mode(tmp_path):
    c = cfg(tmp_path)
    fake_pki(c)
    os.makedirs(c.nodedir("a"))
    pki.kubeconfig(c, "admin", "admin")
    pki.kubeconfig(c, "nodes/a/kubelet", "node-a", "10.232.0.1")
    ca, crt, key = (b64(f"PEM of {name}\n") for name in ("ca.crt", "node-a.crt", "node-a.key"))
    with open(f"{c.state}/nodes/a/kubelet.kubeconfig") as f:
        assert f.read() == f"""apiVersion: v1
kind: Config
clusters:
- name: rustfs-vllm
  cluster:
    server: https://10.232.0.1:6443
    certificate-authority-data: {ca}
users:
- name: node-a
  user:
    client-certificate-data: {crt}
    client-key-data: {key}
contexts:
- name: node-a@rustfs-vllm
  context: {{cluster: rustfs-vllm, user: node-a}}
current-context: node-a@rustfs-vllm
"""
    with open(c.admin_kubeconfig) as f:
        assert "    server: https://127.0.0.1:6443\n" in f.read()
    assert os.stat(c.admin_kubeconfig).st_mode & 0o777 == 0o600
    with open(c.admin_kubeconfig, "w") as f:
        f.write("kept\n")
    pki.kubeconfig(c, "admin", "admin")                      # there: not written again
    with open(c.admin_kubeconfig) as f:
        assert f.read() == "kept\n"


def test_kubeconfig_restores_the_umask(tmp_path):
    c = cfg(tmp_path)
    fake_pki(c)
    old = os.umask(0o022)
    try:
        pki.kubeconfig(c, "admin", "admin")
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(old)


# ---------------------------------------------------------------- nodes

def read(path) -> str:
    with open(path) as f:
        return f.read()


def test_node_files(tmp_path):
    c = cfg(tmp_path)
    node_files.node_files(c, "b")
    d = c.nodedir("b")
    assert sorted(os.listdir(d)) == sorted([*node_files.NODE_FOLDERS, "certs.d", "containerd.toml", "resolv.conf",
                                            "kubelet-config.yaml", "kube-proxy.yaml", "holder-init.sh"])
    for sub in ("mnt", "pods", "containers", "cni-conf"):
        assert os.stat(f"{d}/{sub}").st_mode & 0o777 == 0o755
    kubelet = read(f"{d}/kubelet-config.yaml")
    for line in (f"  x509: {{clientCAFile: {c.pki}/ca.crt}}", "cgroupDriver: cgroupfs", "cgroupRoot: /rvk8s-b",
                 "podCIDR: 10.233.2.0/24", "address: 10.232.0.12", f"resolvConf: {d}/resolv.conf",
                 'evictionHard: {memory.available: "100Mi", nodefs.available: "2Gi", imagefs.available: "2Gi"}'):
        assert line + "\n" in kubelet
    assert json.loads(read(f"{d}/cni-conf/10-rvk8s.conflist")) == {
        "cniVersion": "0.4.0", "name": "rvk8s", "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.233.2.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}}]}
    proxy = read(f"{d}/kube-proxy.yaml")
    for line in (f"clientConnection: {{kubeconfig: {d}/kube-proxy.kubeconfig}}", "hostnameOverride: b",
                 "clusterCIDR: 10.233.0.0/16", "bindAddress: 10.232.0.12", "nodePortAddresses: [primary]"):
        assert line + "\n" in proxy
    toml = read(f"{d}/containerd.toml")
    assert f'    config_path = "{d}/certs.d"\n' in toml and '  sandbox_image = "registry.k8s.io/pause:3.10.1"\n' in toml
    assert "restrict_oom_score_adj = true" in toml and "discard_unpacked_layers = true" in toml
    assert read(f"{d}/certs.d/docker.io/hosts.toml") == (
        f'server = "https://registry-1.docker.io"\n[host."https://10.232.0.1:5000"]\n'
        f'  capabilities = ["pull", "resolve"]\n  ca = "{c.pki}/ca.crt"\n')
    assert read(f"{d}/certs.d/10.232.0.1:5000/hosts.toml") == (   # the CA under [host]: see node_files.registry_hosts
        f'server = "https://10.232.0.1:5000"\n[host."https://10.232.0.1:5000"]\n  capabilities = ["pull", "resolve"]\n'
        f'  ca = "{c.pki}/ca.crt"\n')
    assert read(f"{d}/resolv.conf") == "nameserver 127.0.0.1\n"
    holder = read(f"{d}/holder-init.sh").split("\n")
    assert holder[:6] == ["set -e", "mount --make-rslave /", f"mount --rbind /sys/fs/cgroup {d}/cg", "umount -l /sys",
                          "mount -t sysfs sysfs /sys", f"mount --move {d}/cg /sys/fs/cgroup"]
    assert holder[6:14] == [f"mount --bind {d}/{src} {dst}" for src, dst in zip(
        ("containerd", "containerd-state", "kubelet", "cni-conf", "cni-state", "pods", "containers", "mnt"),
        config.NODE_MOUNTS)]
    assert holder[14:] == ["mount --make-rshared /", f"echo $$ > {c.run}/b.holder.pid", "exec sleep infinity", ""]


def test_put_writes_only_a_change(tmp_path):
    path = str(tmp_path / "f")
    put(path, "a\nb\n\n")
    assert read(path) == "a\nb\n"
    os.utime(path, ns=(1, 1))
    put(path, "a\nb")                                        # the same but for trailing newlines: not written
    assert os.stat(path).st_mtime_ns == 1
    put(path, "a\nc\n")
    assert read(path) == "a\nc\n" and not os.path.exists(path + ".tmp")


def test_node_object():
    assert node_object("a") == (
        "apiVersion: v1\nkind: Node\n"
        "metadata: {name: a, labels: {kubernetes.io/hostname: a, kubernetes.io/os: linux, kubernetes.io/arch: amd64}}\n"
        'spec: {podCIDR: "10.233.1.0/24", podCIDRs: ["10.233.1.0/24"]}\n')


@pytest.mark.skipif(not shutil.which("tar"), reason="no tar")
def test_pause_image_archive(tmp_path):
    c = cfg(tmp_path, RUSTFS_VLLM_CACHE=str(tmp_path / "cache"))
    os.makedirs(c.k8s_bin)
    with open(f"{c.k8s_bin}/pause", "wb") as f:
        f.write(b"\x7fELF static pause")
    out = node_files.pause_tar(c)
    assert out == f"{c.state}/images/pause.tar"
    with tarfile.open(out) as t:
        manifest = json.load(t.extractfile("./manifest.json"))
        [entry] = manifest
        assert entry["RepoTags"] == ["registry.k8s.io/pause:3.10.1"]
        cfg_json = json.load(t.extractfile("./" + entry["Config"]))
        layer = tarfile.open(fileobj=t.extractfile("./" + entry["Layers"][0]))
        member = layer.getmember("pause")
        assert (member.mode, member.uid, member.gid, member.mtime) == (0o755, 0, 0, 0)
        assert all(m.mtime == 0 and m.uid == 0 for m in t.getmembers())
    assert cfg_json["config"] == {"Entrypoint": ["/pause"], "User": "65535:65535"}
    assert cfg_json["rootfs"]["diff_ids"] == ["sha256:" + entry["Layers"][0].split("/")[0]]
    os.utime(out, ns=(1, 1))
    assert node_files.pause_tar(c) == out and os.stat(out).st_mtime_ns == 1     # made once


def test_an_image_counts_as_loaded_only_once_unpacked():
    """As `ctr content ls` printed it on node a after a pull whose unpack hit a full disk (config without the
    snapshot label), and for an image unpacked and stripped of its layers."""
    ls = ("DIGEST SIZE AGE LABELS\n"
          "sha256:m1 2.626kB 3 hours containerd.io/gc.ref.content.l.0=sha256:l0,containerd.io/gc.ref.content.config="
          "sha256:c1,containerd.io/distribution.source.docker.io=rustfs-vllm/vllm-openai-cpu\n"
          "sha256:c1 6.039kB 3 hours containerd.io/distribution.source.docker.io=rustfs-vllm/vllm-openai-cpu\n"
          "sha256:l0 3.359GB 3 hours containerd.io/distribution.source.docker.io=rustfs-vllm/vllm-openai-cpu\n"
          "sha256:m2 951B 1 hour containerd.io/gc.ref.content.config=sha256:c2\n"
          "sha256:c2 2.676kB 1 hour containerd.io/gc.ref.snapshot.overlayfs=sha256:24b3,"
          "containerd.io/distribution.source.docker.io=rustfs-vllm/rclone-mount\n")
    assert not unpacked(ls, "sha256:m1"), "fetched, not unpacked"
    assert unpacked(ls, "sha256:m2")
    assert not unpacked(ls, "sha256:absent") and not unpacked("", "sha256:m2")


def test_ctr_and_kubectl_output_parsers():
    images = "REF TYPE DIGEST SIZE\ndocker.io/x:1 application/vnd.oci sha256:abc 3.0 MiB linux/amd64 -\n"
    assert field(images, 2, 3) == "sha256:abc" and field("REF TYPE DIGEST\n", 2, 3) == "" and field("", 2, 3) == ""
    content = ("DIGEST SIZE AGE LABELS\n"
               "sha256:abc 1kB 2 minutes containerd.io/gc.ref.content.config=sha256:c,"
               "containerd.io/gc.ref.content.l.0=sha256:l0,containerd.io/gc.ref.content.l.1=sha256:l1,"
               "containerd.io/distribution.source.docker.io=x\n"
               "sha256:l0 1GB 2 minutes containerd.io/uncompressed=sha256:u\n")
    assert layer_labels(content, "sha256:abc") == ["containerd.io/gc.ref.content.l.0=", "containerd.io/gc.ref.content.l.1="]
    assert layer_labels(content, "sha256:l0") == [] and layer_labels(content, "") == []
    assert read2("sha256:m", "sha256:c") == ("sha256:m", "sha256:c")
    assert read2("", "") == ("", "") and read2("", "sha256:c") == ("sha256:c", "")
    assert not _unstopped("TASK PID STATUS\nabc 12 STOPPED\n\n")
    assert _unstopped("TASK PID STATUS\nabc 12 RUNNING\n") and not _unstopped("TASK PID STATUS")
    version = '{\n  "clientVersion": {\n    "gitVersion": "v1.34.4",\n  },\n  "serverVersion": {\n    "gitVersion": "v1.34.5"\n'
    assert cli.git_version(version) == "v1.34.5" and cli.git_version("") == ""


def test_tail(tmp_path):
    path = str(tmp_path / "log")
    with open(path, "w") as f:
        f.write("".join(f"line {i}\n" for i in range(10000)))
    assert tail(path, 2) == "line 9998\nline 9999\n"
    with open(path, "w") as f:
        f.write("a\nb")
    assert tail(path, 20) == "a\nb" and tail(str(tmp_path / "none"), 5) == ""


# ---------------------------------------------------------------- network

def test_net_up_runs_the_bashs_commands_in_order(monkeypatch, capsys):
    rec = Recorder(lambda cmd: (1, "") if cmd[:3] in (["ip", "link", "show"], ["iptables", "-C", "FORWARD"]) else (0, ""))
    monkeypatch.setattr(sh, "run", rec)
    monkeypatch.setattr(network.os.path, "exists", lambda p: False)
    network.net_up()
    rule = "-i rvk8s0 -o rvk8s0 -m comment --comment rvk8s -j ACCEPT"
    node_a = ["ip netns add rvk8s-a", "ip link show rvk8s-ah",
              "ip link add rvk8s-ah type veth peer name eth0 netns rvk8s-a", "ip link set rvk8s-ah master rvk8s0 up",
              "ip -n rvk8s-a addr replace 10.232.0.11/24 dev eth0", "ip -n rvk8s-a link set lo up",
              "ip -n rvk8s-a link set eth0 up", "ip -n rvk8s-a route replace default via 10.232.0.1",
              "ip route replace 10.233.1.0/24 via 10.232.0.11 dev rvk8s0",
              "ip -n rvk8s-a route replace 10.233.2.0/24 via 10.232.0.12 dev eth0"]
    node_b = [cmd.replace("rvk8s-a", "rvk8s-b").replace("10.232.0.11/24", "10.232.0.12/24")
              .replace("10.233.1.0/24 via 10.232.0.11", "10.233.2.0/24 via 10.232.0.12") for cmd in node_a[:-1]]
    node_b.append("ip -n rvk8s-b route replace 10.233.1.0/24 via 10.232.0.11 dev eth0")
    assert [" ".join(cmd) for cmd in rec.cmds] == [
        "ip link show rvk8s0", "ip link add rvk8s0 type bridge", "ip addr replace 10.232.0.1/24 dev rvk8s0",
        "ip link set rvk8s0 up", f"iptables -C FORWARD {rule}", f"iptables -I FORWARD 1 {rule}", *node_a, *node_b]
    assert capsys.readouterr().out == ("    bridge rvk8s0 10.232.0.1/24\n"
                                       "    netns rvk8s-a: eth0 10.232.0.11/24, pods 10.233.1.0/24\n"
                                       "    netns rvk8s-b: eth0 10.232.0.12/24, pods 10.233.2.0/24\n")


def test_net_down_removes_the_rule_until_gone_and_the_mount_points_deepest_first(tmp_path, monkeypatch, capsys):
    answers = iter([0, 0, 1, 0, 0])                          # -D twice, -D fails, link show, link del
    rec = Recorder(lambda cmd: (next(answers), ""))
    monkeypatch.setattr(sh, "run", rec)
    c = cfg(tmp_path)
    (tmp_path / "made" / "deeper").mkdir(parents=True)
    os.makedirs(f"{c.state}/nodes")
    with open(f"{c.state}/nodes/created-dirs", "w") as f:
        f.write(f"{tmp_path}/made\n{tmp_path}/made/deeper\n")
    network.net_down(c)
    assert [cmd[:2] for cmd in rec.cmds] == [["iptables", "-D"]] * 3 + [["ip", "link"]] * 2
    assert rec.cmds[-1] == ["ip", "link", "del", "rvk8s0"]
    assert not (tmp_path / "made").exists() and not os.path.exists(f"{c.state}/nodes/created-dirs")
    assert capsys.readouterr().out == "    bridge rvk8s0 removed\n"


def test_cgroup_dirs_are_real_folders():
    assert all(os.path.isabs(d) and not os.path.islink(d) for d in cgroup_dirs(all_=True))
    assert set(cgroup_dirs()) <= set(cgroup_dirs(all_=True))


# ---------------------------------------------------------------- prerequisites

def test_missing_debian_packages_and_their_installation(monkeypatch, capsys):
    present = {"ctr", "unshare", "ip", "openssl"}
    monkeypatch.setattr(sh, "which", lambda name: f"/usr/bin/{name}" if name in present else "")
    monkeypatch.setattr(cli.os, "access", lambda p, mode: False)
    pkgs = cli.missing_packages()
    assert pkgs == ["containerd", "util-linux", "util-linux", "iptables", "conntrack", "docker-registry",
                    "containernetworking-plugins"]
    present.add("apt-get")
    rec = Recorder()
    monkeypatch.setattr(sh, "run", rec)
    cli.install_packages(pkgs)
    assert rec.cmds == [["apt-get", "update", "-qq"],
                        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "conntrack", "containerd",
                         "containernetworking-plugins", "docker-registry", "iptables", "util-linux"]]
    assert capsys.readouterr().out == ("    installing Debian containerd util-linux util-linux iptables conntrack "
                                       "docker-registry containernetworking-plugins\n")
    rec = Recorder(lambda cmd: (100, ""))                    # a failed update: no install, `up` goes on
    monkeypatch.setattr(sh, "run", rec)
    cli.install_packages(["iptables"])
    assert rec.cmds == [["apt-get", "update", "-qq"]]
    present.discard("apt-get")
    with pytest.raises(Die, match=r"^install iptables \(Debian package names\) first$"):
        cli.install_packages(["iptables"])


# ---------------------------------------------------------------- registry, images, storage

@pytest.mark.parametrize("ref,repo,tag", [
    ("rustfs-vllm/vllm-openai-cpu:0.30.0", "rustfs-vllm/vllm-openai-cpu", "0.30.0"),
    ("busybox", "library/busybox", "latest"), ("busybox:1.36", "library/busybox", "1.36"),
    ("docker.io/library/busybox:1", "library/busybox", "1"), ("docker.io/x/y", "x/y", "latest"),
    ("a/b:c/d", "a/b:c/d", "latest"), ("a/b/c:d", "a/b/c", "d"), ("x:", "library/x", ""),
])
def test_repo_of(ref, repo, tag):
    assert repo_of(ref) == (repo, tag)


@pytest.mark.parametrize("ref,why", [
    ("a@sha256:00", "digests are not supported, name a tag"),
    ("quay.io/a/b:c", "only Docker Hub-style names (docker.io/...) map onto the nodes' registry mirror"),
    ("localhost/x", "only Docker Hub-style names"), ("localhost:5000/x:1", "only Docker Hub-style names"),
    ("registry:5000/a", "only Docker Hub-style names"), ("a:b:c", "only Docker Hub-style names"),
])
def test_repo_of_refuses(ref, why):
    with pytest.raises(Die) as e:
        repo_of(ref)
    assert str(e.value).startswith(f"{ref}: {why}")


def test_registry_configuration(tmp_path):
    c = cfg(tmp_path)
    fake_pki(c)
    text = registry_config(c)
    assert text.startswith("version: 0.1\nlog: {level: warn, accesslog: {disabled: true}}\n")
    assert f"  filesystem: {{rootdirectory: {c.reg_dir}/data}}\n" in text and "  addr: 10.232.0.1:5000\n" in text
    assert f"  tls: {{certificate: {c.pki}/registry.crt, key: {c.pki}/registry.key}}\n" in text
    assert f"  secret: rvk8s-registry-{hashlib.sha256(b'PEM of ca.crt' + bytes([10])).hexdigest()[:16]}\n" in text


def test_storage_class_and_local_volumes(tmp_path):
    c = cfg(tmp_path, K8S_LOCAL_PVS="2", K8S_LOCAL_PV_SIZE="5Gi")
    docs = storage_manifest(c).split("---\n")
    assert docs[0] == ("apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: rustfs-vllm-local}\n"
                       "provisioner: kubernetes.io/no-provisioner\nvolumeBindingMode: WaitForFirstConsumer\n"
                       "reclaimPolicy: Retain\n")
    assert len(docs) == 3
    assert 'metadata: {name: a-local-2, labels: {rustfs-vllm/local-volume: "true"}}\n' in docs[2]
    assert "  capacity: {storage: 5Gi}\n" in docs[2] and f"  local: {{path: {c.state}/nodes/a/volumes/pv-2}}\n" in docs[2]
    assert "        - {key: kubernetes.io/hostname, operator: In, values: [a]}\n" in docs[2]
