"""The stack part: the program itself through the Pulumi CLI (the tests' thin wrapper): `up` of a
fresh stack, a no-op `up` and a no-op preview, the seconds per resource, the same at an earlier
revision (--before REF) and the ratios to it; and the 3.4 GB model's stack with its load-format
changes."""
from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path

import docker

from bench.machine import MIB, ROOT, VLLM_IMAGE, WORK, drop_caches, free_port, log, timed
from bench.server import MODEL
from components.storage import manifest as manifest_mod
from tests.s3_under_test import stack_settings, stored_objects


def bench_big_stack(model: Path, fields: dict, kind: str, quick_preview_s: float | None) -> dict:
    """The 3.4 GB model through the program, single samples: `up` from an empty stack (upload, mount,
    cold load, first completion), a no-op preview (against the quick run's, a 1 GiB model), then a
    model change each way: to ``loadFormat: runai_streamer`` (the container replaced, the weights
    streamed from the bucket) and back to the mount (its VFS cache from the first `up` still on disk:
    a warm restart)."""
    from tests.pulumi_cli import Stack

    stack = Stack(ROOT, f"bench-big-{secrets.token_hex(3)}")
    stack.init()
    keys = {"rustfsAccessKey": f"bench-{secrets.token_hex(8)}", "rustfsSecretKey": secrets.token_urlsafe(18)}
    m = {"name": "big", "source": str(model), "prefix": "big", "port": free_port(), "kvCacheSpaceGib": 1, **fields}
    cfg = {"environment": "test", "namePrefix": stack.name, **stack_settings(kind), "rustfsPort": free_port(),
           "bindAddress": "127.0.0.1", "mountPath": f"/mnt/{stack.name}",
           "mountCacheDir": str(WORK / "stack-big-cache"), "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 1500}

    def configure(load_format: str) -> None:
        stack.write_config({**cfg, "models": [{**m, "loadFormat": load_format}]})
        for k, v in keys.items():
            stack.set(k, v, secret=True)
    try:
        configure("mount")
        drop_caches()
        stack.run("up", "--yes", "--skip-preview", label="up")
        stack.run("preview", "--expect-no-changes", label="noop_preview")
        for load_format, label in (("runai_streamer", "to_streamer"), ("mount", "to_mount")):
            configure(load_format)
            drop_caches()
            stack.run("up", "--yes", "--skip-preview", label=label)
        t = stack.timings
        return {"up_s": t["up"], "preview_noop_s": t["noop_preview"],
                "preview_ratio_vs_quick": round(t["noop_preview"] / quick_preview_s, 2) if quick_preview_s else None,
                "change_to_streamer_s": t["to_streamer"], "change_to_mount_warm_s": t["to_mount"],
                "streamer_ratio_vs_mount_warm": round(t["to_streamer"] / t["to_mount"], 2),
                "weights_bytes": sum(p.stat().st_size for p in model.glob("*.safetensors"))}
    finally:
        _drop_stack(stack)
        shutil.rmtree(WORK / "stack-big-cache", ignore_errors=True)


# ------------------------------------------------------------------------------- stack: up, preview
def bench_stack(full: bool, results: dict, program: Path = ROOT, label: str = "stack", kind: str = "rustfs") -> None:
    """up (empty -> first completion), no-op up and no-op preview of a fresh stack of the program
    in the folder ``program`` (this checkout, or a worktree of an earlier revision)."""
    from tests.pulumi_cli import Stack  # the same thin CLI wrapper the tests use

    tmp = WORK / label
    shutil.rmtree(tmp, ignore_errors=True)
    model = tmp / MODEL.name
    shutil.copytree(MODEL, model, ignore=shutil.ignore_patterns(".complete"))
    pad_total = (5 if full else 1) * 2**30
    for i in range(4):  # weights-sized padding vLLM ignores: the model the stack moves is 1 or 5 GB
        with open(model / f"pad-{i}.dat", "wb") as fh:
            left = pad_total // 4
            while left:
                n = min(left, 64 * MIB)
                fh.write(os.urandom(n))
                left -= n
    stack = Stack(program, f"bench-{secrets.token_hex(3)}")
    if program != ROOT:  # that revision's components, not ours
        stack.env = {**stack.env, "PYTHONPATH": str(program)}
    stack.init()
    try:
        name = stack.name
        stack.write_config({
            "environment": "test", "namePrefix": name, **stack_settings(kind), "rustfsPort": free_port(),
            "bindAddress": "127.0.0.1", "mountPath": f"/mnt/{name}", "mountCacheDir": str(tmp / "cache"),
            "vllmImage": VLLM_IMAGE, "vllmReadyTimeout": 900,
            "mountFlags": results.get("load", {}).get("ours_flags", []),
            "models": [{"name": "smollm2", "source": str(model), "prefix": MODEL.name, "port": free_port(),
                        "maxModelLen": 512, "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"]}]})
        stack.set("rustfsAccessKey", f"bench-{secrets.token_hex(8)}", secret=True)
        stack.set("rustfsSecretKey", secrets.token_urlsafe(18), secret=True)
        drop_caches()
        breakdown = _breakdown(stack.run("up", "--yes", "--skip-preview", label="up").stdout)
        volume = Path(docker.from_env().volumes.get(f"{name}-data").attrs["Mountpoint"])
        before = stored_objects(volume, kind)       # the objects the server keeps, not its own state
        stack.run("up", "--yes", label="noop_up")
        after = stored_objects(volume, kind)
        rewritten = sum(after[k][0] for k in after if after[k] != before.get(k))
        stack.run("preview", "--expect-no-changes", label="noop_preview")
        t_manifest, _ = timed(manifest_mod.build, str(model),
                              str(program / ".state" / "hash-cache" / _cache_name(model)))
        results["up"] = {"total_s": stack.timings["up"], "noop_s": stack.timings["noop_up"],
                         "by_resource_s": breakdown, "model_bytes": sum(p.stat().st_size for p in model.iterdir())}
        results["preview"] = {"noop_s": stack.timings["noop_preview"], "model_gib": round(pad_total / 2**30 + 0.5, 1)}
        results["upload"]["noop_bytes"] = rewritten
        results["upload"]["noop_s"] = round(t_manifest, 3)
        log(f"{label}: up {results['up']}, preview {results['preview']}")
    finally:
        _drop_stack(stack)


def _drop_stack(stack) -> None:
    """Destroy a bench stack, remove it and its data volume."""
    stack.run("destroy", "--yes", "--skip-preview", check=False)
    stack.remove()
    try:
        docker.from_env().volumes.get(f"{stack.name}-data").remove(force=True)
    except docker.errors.NotFound:
        pass


def bench_before(full: bool, ref: str, results: dict, kind: str) -> None:
    """The stack part with the program at ``ref``: a git worktree of it, same venv, same images."""
    tree = WORK / f"before-{ref}"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
    shutil.rmtree(tree, ignore_errors=True)
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), ref], check=True,
                   capture_output=True)
    try:
        part: dict = {"upload": {}, "load": results.get("load", {})}
        bench_stack(full, part, program=tree, label=f"stack-before-{ref}", kind=kind)
        results["before"] = {"ref": ref, "up": part["up"], "preview": part["preview"]}
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


def _cache_name(model: Path) -> str:
    import hashlib

    return f"hashes-{hashlib.sha256(os.path.realpath(model).encode()).hexdigest()[:16]}.json"


def _breakdown(output: str) -> dict[str, float]:
    """Seconds per resource, from the engine's progress lines ("<type> <name> created (51s)")."""
    spans: dict[str, float] = {}
    for m in re.finditer(r"(?:dynamic/rustfs-vllm:\w+|docker:index(?:/\w+)?:\w+|command:local:Command) (\S+) "
                         r"created \(([0-9.]+)s\)", output):
        spans[m.group(1)] = float(m.group(2))
    return spans


def vs_before(results: dict, ref: str) -> dict:
    """This checkout's stack figures over those at ``ref`` (below 1: faster now)."""
    b = results["before"]
    return {
        "ref": ref,
        "up.total_s": round(results["up"]["total_s"] / b["up"]["total_s"], 2),
        "up.noop_s": round(results["up"]["noop_s"] / b["up"]["noop_s"], 2),
        "preview.noop_s": round(results["preview"]["noop_s"] / b["preview"]["noop_s"], 2)}
