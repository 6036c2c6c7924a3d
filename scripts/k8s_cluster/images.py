"""Images into the nodes: ``load-image`` (through the cluster's registry) and ``import-image`` (docker save |
ctr import).

load-image IMAGE...: `docker push` to the registry (gzip-compressed layers, once; skipped when the registry
holds this image ID), then each node's containerd pulls it (skipped when it has that manifest unpacked) as
docker.io/<name> (the name a pod's `image: <name>` resolves to) and drops the compressed layers once unpacked:
what the CRI does with discard_unpacked_layers = true (containerd.toml), done by hand for `ctr pull`: the
manifest's containerd.io/gc.ref.content.l.* labels are removed and a synchronous garbage collection deletes the
layer blobs. A node then holds only the unpacked snapshots. Pods use imagePullPolicy IfNotPresent or Never; a
pull the kubelet makes (Always, or an image not loaded yet) goes to the same registry.
Measured for rustfs-vllm/vllm-openai-cpu:0.30.0 (7.5 GB, a 6.76 GB layer), 2 cores shared with a Rust build:
`docker push` (gzip) 412 s, 3.4 GB in the registry; both nodes' pulls in parallel 160-164 s; 576 s in all. Each
node then holds 7.3 GB (snapshots; content 2.7 MB). A second load-image: 0.3 s per image. `import-image` instead:
each node keeps the uncompressed layers as well (measured with the 259 MB rclone-mount image: +254 MB of content
per node), i.e. about 14.6 GB per node for vLLM, 29 GB for two, plus a 7.5 GB `docker save` file while it runs.
`down --purge` deletes the nodes' images and the registry's blobs."""
from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from typing import Sequence

from . import shell as sh
from .config import NODES, Config
from .fsutil import rm_rf
from .node import CTR, in_node, node_ctr
from .output import Die, die, elapsed, log_start, note, step, tail, write
from .procs import pid_of
from .registry import registry_manifest, repo_of


def du_h(path: str, quiet: bool = False) -> str:
    """``du -sh PATH | cut -f1`` (``quiet``: du's errors to /dev/null)."""
    return sh.out(["du", "-sh", path], stderr=sh.DEVNULL if quiet else None).split("\t")[0]


def field(text: str, row: int, col: int) -> str:
    """``awk 'NR==ROW {print $COL}'``."""
    rows = text.split("\n")
    words = rows[row - 1].split() if len(rows) >= row else []
    return words[col - 1] if len(words) >= col else ""


def read2(digest: str, cfg: str) -> tuple[str, str]:
    """``read -r want pushed <<<"$digest $cfg"``: of the first line, the first word and the rest."""
    words = f"{digest} {cfg}".split("\n")[0].split(None, 1)
    return (words[0] if words else "", words[1].strip() if len(words) > 1 else "")


def layer_labels(content_ls: str, manifest: str) -> list[str]:
    """The manifest's containerd.io/gc.ref.content.l.* labels in `ctr content ls`, as ``NAME=`` (removal)."""
    labels = []
    for row in content_ls.split("\n"):
        words = row.split()
        if (words[0] if words else "") == manifest:
            for label in (words[-1] if words else row).split(","):
                if re.match(r"containerd.io/gc.ref.content.l\.", label):
                    labels.append(label.split("=", 1)[0] + "=" if "=" in label else label)
    return labels


def unpacked(content_ls: str, manifest: str) -> bool:
    """Whether the image whose manifest is MANIFEST is unpacked: its config blob carries the
    containerd.io/gc.ref.snapshot.<snapshotter> label the unpack writes. A pull that fetched the layers
    but failed to unpack them (a full disk) leaves the image listed without it."""
    rows = {w[0]: w[-1] for w in (r.split() for r in content_ls.split("\n")) if len(w) >= 3}
    config = re.search(r"containerd\.io/gc\.ref\.content\.config=(sha256:[0-9a-f]+)", rows.get(manifest, ""))
    return bool(config) and "containerd.io/gc.ref.snapshot." in rows.get(config.group(1), "")


def node_has(c: Config, n: str, ref: str, want: str) -> bool:
    """Node N holds REF at manifest WANT, unpacked."""
    manifest = field(sh.out(node_ctr(c, n, "images", "ls", f"name=={ref}")), 2, 3)
    return manifest == want and unpacked(sh.out(node_ctr(c, n, "content", "ls")), manifest)


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def check_room(c: Config, image: str, nodes: list[str]) -> None:
    """Refuse, in one line, a pull the disk cannot hold: each node keeps the image unpacked and, while it
    unpacks, its compressed layers too (about the image's size plus half of it, per node)."""
    size = int(sh.out(["docker", "image", "inspect", "-f", "{{.Size}}", image]) or 0)
    need, free = len(nodes) * size * 3 // 2, free_bytes(c.state)
    if need > free:
        gb = 1e9
        die(f"{image} needs about {need / gb:.1f} GB free under {c.state} to unpack on node(s) "
            f"{' '.join(nodes)} ({size / gb:.1f} GB each, plus its compressed layers while it unpacks); "
            f"{free / gb:.1f} GB is free: free space there, then run load-image again")


def node_disk(c: Config, n: str) -> str:
    """What node N's containerd keeps on disk (content store, snapshots), one line."""
    d = f"{c.nodedir(n)}/containerd"
    return (f"content {du_h(f'{d}/io.containerd.content.v1.content', quiet=True)}, "
            f"snapshots {du_h(f'{d}/io.containerd.snapshotter.v1.overlayfs', quiet=True)}, total {du_h(d)}")


def node_pull(c: Config, n: str, ref: str) -> bool:
    """Pull REF into node N's containerd from the registry and drop its layer blobs. As in the bash (run after
    `&&`, where set -e is off), only the pull's failure and the last command's count."""
    d, log = c.nodedir(n), c.log(f"{n}-pull")
    log_start(log, f"pull {ref}")
    with open(log, "a") as f:
        rc = sh.run(in_node(c, n, *CTR, "images", "pull", "--hosts-dir", f"{d}/certs.d",
                            "--max-concurrent-downloads", "4", ref), check=False, stdout=f, stderr=sh.STDOUT).returncode
    if rc != 0:
        write(tail(log, 5), err=True)
        return False
    manifest = field(sh.out(node_ctr(c, n, "images", "ls", f"name=={ref}")), 2, 3)
    labels = layer_labels(sh.out(node_ctr(c, n, "content", "ls")), manifest)
    if not labels:
        return True
    sh.run(node_ctr(c, n, "content", "label", manifest, *labels), check=False, stdout=sh.DEVNULL)
    # a synchronous GC: removing a throw-away tag with --sync runs one and waits for it
    trigger = f"rvk8s.invalid/gc-trigger:{os.getpid()}"
    sh.run(node_ctr(c, n, "images", "tag", ref, trigger), check=False, stdout=sh.DEVNULL)
    return sh.run(node_ctr(c, n, "images", "rm", "--sync", trigger), check=False, stdout=sh.DEVNULL).returncode == 0


def _pull_in_background(c: Config, n: str, ref: str, failed: list[str]) -> threading.Thread:
    def pull() -> None:
        s = time.time()
        try:
            if node_pull(c, n, ref):
                note(f"node {n}: pulled and unpacked in {elapsed(s)} s")
                return
        except Die as e:
            write(f"k8s-cluster: error: {e}\n", err=True)
        failed.append(n)
    thread = threading.Thread(target=pull, name=f"pull-{n}")
    thread.start()
    return thread


def _push(c: Config, image: str, repo: str, tag: str, t0: float) -> tuple[str, str]:
    target = f"{c.reg_addr}/{repo}:{tag}"
    sh.run(["docker", "tag", image, target])
    if not sh.ok(["docker", "push", "-q", target], stderr=None):
        sh.run(["docker", "rmi", target], stdout=sh.DEVNULL)
        die(f"docker push {target} failed")
    sh.run(["docker", "rmi", target], stdout=sh.DEVNULL)   # the push tag only; the image stays
    want, pushed = read2(*registry_manifest(c, repo, tag))
    note(f"registry: pushed in {elapsed(t0)} s ({du_h(f'{c.reg_dir}/data')} of blobs in all)")
    return want, pushed


def _load_one(c: Config, image: str, nodes: list[str]) -> None:
    rc, id_ = sh.capture(["docker", "image", "inspect", "-f", "{{.Id}}", image], stderr=sh.DEVNULL)
    if rc != 0:
        die(f"no local Docker image {image}")
    repo, tag = repo_of(image)
    step(f"{image} -> nodes {' '.join(nodes)} (docker.io/{repo}:{tag}, via {c.reg_addr})")
    t0 = time.time()
    want, pushed = read2(*registry_manifest(c, repo, tag))
    if pushed == id_:
        note(f"registry: has it ({want})")
    else:
        want, pushed = _push(c, image, repo, tag, t0)
    threads, failed = [], []
    missing = [n for n in nodes if not node_has(c, n, f"docker.io/{repo}:{tag}", want)]
    for n in sorted(set(nodes) - set(missing)):
        note(f"node {n}: has it")
    if missing:
        check_room(c, image, missing)
    for n in missing:
        threads.append(_pull_in_background(c, n, f"docker.io/{repo}:{tag}", failed))
    for thread in threads:
        thread.join()
    if failed:
        full = any("no space left on device" in tail(c.log(f"{n}-pull"), 5) for n in failed)
        die(f"node(s) {' '.join(sorted(failed))}: the pull of {image} failed"
            + (f": no space left on device ({free_bytes(c.state) / 1e9:.1f} GB free under {c.state}); free space "
               "there, then run load-image again" if full else f" (logs: {c.log_dir}/k8s-<node>-pull.log)"))
    note(f"done in {elapsed(t0)} s")


def load_image(c: Config, images: Sequence[str]) -> None:
    if not images:
        die(f"usage: {c.argv0} load-image IMAGE...")
    if pid_of(c, "registry") is None:
        die("the registry is not running (scripts/k8s-cluster up)")
    nodes = [n for n in NODES if pid_of(c, f"{n}.containerd") is not None]
    if not nodes:
        die("no node is running (scripts/k8s-cluster up)")
    for image in images:
        _load_one(c, image, nodes)
    for n in nodes:
        note(f"node {n} disk: {node_disk(c, n)}")


def import_image(c: Config, args: Sequence[str]) -> None:
    """`docker save` | `ctr import` into every running node's containerd (namespace k8s.io)."""
    image = args[0] if args else ""
    if not image:
        die(f"usage: {c.argv0} import-image IMAGE")
    if not sh.ok(["docker", "image", "inspect", image]):
        die(f"no local Docker image {image}")
    step(f"Importing {image} into the nodes' containerd (k8s.io)")
    tmp = tempfile.mkdtemp(prefix="tmp.")
    try:
        sh.run(["docker", "save", "-o", f"{tmp}/image.tar", image])
        count = 0
        for n in NODES:
            if pid_of(c, f"{n}.containerd") is None:
                note(f"node {n}: containerd not running, skipped")
                continue
            cmd = node_ctr(c, n, "images", "import", f"{tmp}/image.tar")
            rc = sh.stream(cmd, f"    node {n}: ")
            if rc != 0:
                raise sh.Failed(cmd, rc)
            count += 1
        if count == 0:
            die("no node is running (scripts/k8s-cluster up)")
    finally:
        rm_rf(tmp)
