"""Shared test helpers: small Hugging Face-shaped folders, and the project's paths."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make_model(folder: Path, weights_bytes: int = 4096, max_positions: int = 2048, seed: int = 1,
               extra: dict[str, bytes] | None = None) -> Path:
    """A folder with the layout vLLM and our checks expect; the weights are random bytes
    (good for storage tests, not for serving)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"],
                                                    "max_position_embeddings": max_positions}))
    (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "seed": seed}))
    (folder / "tokenizer_config.json").write_text("{}")
    rnd = __import__("random").Random(seed)
    (folder / "model.safetensors").write_bytes(rnd.randbytes(weights_bytes))
    for name, data in (extra or {}).items():
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return folder


def free_port() -> int:
    """A port nothing is bound to, below the kernel's ephemeral range: a port the kernel hands out (bind to
    0) is also what every outgoing connection takes, and the suite's lanes open thousands (rclone to the S3
    server, clients to vLLM): one of them may hold the port by the time a stack publishes it."""
    import random
    import socket

    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    pick = random.SystemRandom()
    for _ in range(500):
        port = pick.randrange(10000, max(low, 10001))
        try:
            for address in ("0.0.0.0", "127.0.0.1"):
                with socket.socket() as s:
                    s.bind((address, port))
            return port
        except OSError:
            continue
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> int:
    """The first of ``n`` consecutive ports free on 127.0.0.1 and 0.0.0.0 (the router's endpoint, router, metrics)."""
    import socket

    for _ in range(200):
        first = free_port()
        if first + n > 65535:
            continue
        try:
            for port in range(first, first + n):
                with socket.socket() as s:
                    s.bind(("0.0.0.0", port))
            return first
        except OSError:
            continue
    raise RuntimeError(f"no {n} consecutive free ports")


def pulumi_env() -> dict[str, str]:
    """The environment scripts/env.sh sets up, for subprocesses."""
    import subprocess

    out = subprocess.run(["bash", "-c", f". {ROOT}/scripts/env.sh && env -0"], capture_output=True, check=True).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


def read(path: str | os.PathLike) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def wait_http(url: str, timeout: float, any_status: bool = True, ca: str = "") -> bool:
    """True once ``url`` answers (any HTTP status with ``any_status``, else only 2xx/3xx) within
    ``timeout`` seconds, False when it never did. ``ca``: the CA file that verifies an https URL."""
    import ssl
    import time
    import urllib.error
    import urllib.request

    context = ssl.create_default_context(cafile=ca) if ca else None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1, context=context)
            return True
        except urllib.error.HTTPError:
            if any_status:
                return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def start_rclone_s3(root: Path, port: int, access: str = "", secret: str = "",
                    auth_keys: str | None = None, tls: tuple[Path, Path] | None = None) -> subprocess.Popen:
    """`rclone serve s3` (the S3-compatible server from rclone, NOT RustFS) on 127.0.0.1:``port``,
    keeping objects under ``root``; returns once it answers. Credentials via the environment:
    the pair ``access``/``secret``, or ``auth_keys`` as RCLONE_AUTH_KEY takes it (a CSV of quoted
    "ak,sk" pairs: several keys). ``tls``: (certificate chain, key) to serve HTTPS instead of HTTP."""
    import shutil

    env = {"PATH": os.environ["PATH"], "HOME": str(root.parent),
           "RCLONE_AUTH_KEY": auth_keys if auth_keys is not None else f'"{access},{secret}"'}
    tls_args = ["--cert", str(tls[0]), "--key", str(tls[1])] if tls else []
    proc = subprocess.Popen([shutil.which("rclone"), "serve", "s3", str(root), "--addr", f"127.0.0.1:{port}",
                             "--config", "/dev/null", *tls_args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if wait_tcp(port, 20):
        return proc
    proc.kill()
    raise RuntimeError("rclone serve s3 did not start")


def wait_tcp(port: int, timeout: float) -> bool:
    """True once something accepts TCP connections on 127.0.0.1:``port`` within ``timeout`` seconds."""
    import socket
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def descendants(pid: int) -> dict[int, str]:
    """{pid: command line} of every process below ``pid`` (children, theirs, ...), read from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                    stat = fh.read()
                parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in found:
                found[child] = cmdline(child)
                frontier.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def alive_of(processes: dict[int, str]) -> dict[int, str]:
    """Those of ``processes`` still running the same command (a reused pid does not count)."""
    return {pid: cmd for pid, cmd in processes.items() if cmd and cmdline(pid) == cmd}


def make_hf_cache(model: Path, cache: Path, repo: str = "HuggingFaceTB/SmolLM2-135M-Instruct",
                  revision: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    """The model folder ``model`` laid out as the Hugging Face hub cache keeps it (what
    ``huggingface-cli download`` and ``snapshot_download()`` make): ``models--<org>--<name>/blobs/<hash>``
    holding the bytes, ``snapshots/<revision>/<file>`` relative symlinks into ``../../blobs/``, and
    ``refs/main``. Returns the snapshot folder, the path users point at."""
    import hashlib
    import shutil

    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / revision
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(revision)
    for src in sorted(p for p in model.rglob("*") if p.is_file() and not p.name.startswith(".")):
        rel = src.relative_to(model)
        h = hashlib.sha256(src.read_bytes()).hexdigest()
        shutil.copyfile(src, root / "blobs" / h)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(root / "blobs" / h, link.parent), link)
    return snapshot


def process_command_lines() -> str:
    """Every process's command line on this machine, one per line (what `ps` shows)."""
    return "\n".join(cmdline(int(pid)) for pid in os.listdir("/proc") if pid.isdigit())


def kill_mount_keeper(mount_point: str) -> None:
    """The mount's keeper gone for good (its container removed: SIGKILL to it and its rclone) and any
    supervisor of an older mount: the mount at ``mount_point`` is left dead, nobody mounts it again."""
    import docker

    client = docker.from_env()
    for c in client.containers.list(all=True, filters={"label": f"rustfs-vllm.mount={os.path.realpath(mount_point)}"}):
        c.remove(force=True)
    subprocess.run(["pkill", "-9", "-f", f"rustfs-vllm-mount-supervisor {mount_point} "], check=False)


def repository(ref: str) -> str:
    """An image reference less its tag and digest (a registry's port stays): ``host:5005/a/b``."""
    name = ref.split("@")[0]
    folder, _, last = name.rpartition("/")
    return f"{folder}/{last.split(':')[0]}" if folder else last.split(":")[0]


def keeper_privileges(attrs: dict, vllm_image: str, rclone_image: str, by_digest: bool = True) -> dict:
    """What a mount keeper's ``docker inspect`` shows, checked against issue 37's least privilege: its
    own small image (never the vLLM image), every capability dropped but the three the mount needs,
    no-new-privileges, Docker's default seccomp, no init, an empty environment for what it runs on the
    host, the host's python3 running the mount tool installed root-owned outside any checkout. The
    facts, for the report."""
    host = attrs["HostConfig"]
    facts = {"image": attrs["Config"]["Image"], "cap_add": sorted(host.get("CapAdd") or []),
             "cap_drop": host.get("CapDrop"), "security_opt": host.get("SecurityOpt"),
             "pid_mode": host.get("PidMode"), "init": host.get("Init"), "cmd": attrs["Config"]["Cmd"][:4]}
    if by_digest:   # issue 45: the keeper runs rcloneImage by digest (a registry's) or by its image ID (a local build)
        image = facts["image"]
        assert ("@sha256:" in image and repository(image) == repository(rclone_image)) or \
            (image.startswith("sha256:") and attrs.get("Image") == image), (image, rclone_image)
    else:
        assert facts["image"] == rclone_image, facts
    assert facts["image"] != vllm_image, facts
    assert facts["cap_add"] == ["SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"] and facts["cap_drop"] == ["ALL"], facts
    assert "no-new-privileges" in facts["security_opt"] and not any("seccomp" in o for o in facts["security_opt"]), facts
    assert not host.get("Privileged") and facts["init"] in (False, None), facts
    python, isolated, _, tool = facts["cmd"]
    assert python.startswith("/usr/bin/python3") and isolated == "-I", facts
    assert tool.startswith("/usr/local/lib/rustfs-vllm/tools-") and tool.endswith("/mount_tool.py"), facts
    assert "env -i" in " ".join(attrs["Config"]["Entrypoint"]), attrs["Config"]["Entrypoint"]
    return facts


def s3_answer(call) -> str:
    """"OK", or the S3 error code a call got (AccessDenied, InvalidAccessKeyId, ...)."""
    from components.storage import s3

    try:
        call()
        return "OK"
    except Exception as exc:  # noqa: BLE001 - the server's answer is what is compared
        return s3.error_code(exc) or type(exc).__name__


def model_container(stack: str, served_name: str):
    """A model's vLLM container on this machine's Docker, in whichever of its two slots it is
    (components/docker/change_order.py: it alternates between them in side-by-side changes); the running one
    while both are there. docker.errors.NotFound when there is none."""
    import docker

    found = docker.from_env().containers.list(all=True, filters={"label": [
        f"rustfs-vllm.stack={stack}", "rustfs-vllm.role=vllm", f"rustfs-vllm.model={served_name}"]})
    if not found:
        raise docker.errors.NotFound(f"no vLLM container of model {served_name} in stack {stack}")
    return next((c for c in found if c.status == "running"), found[0])
