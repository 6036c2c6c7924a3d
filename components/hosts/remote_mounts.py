"""A remote host's mounts as the host sees them, asked at preview over SSH: each marker's generation
and whether a live rclone mount is at its path (``rclone-mount mount-states``, read only). What a
host answered is kept on this machine, so that a run that cannot reach it asks for no change."""
from __future__ import annotations

import json
import os
import subprocess
from typing import Callable, Mapping

SSH_FAILED = 255        # ssh's own exit status: the connection (not the command) failed


def _keep(path: str, answer: dict) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(answer, fh)
    os.replace(tmp, path)


def _kept(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            kept = json.load(fh)
        return kept if isinstance(kept, dict) else {}
    except (OSError, ValueError):
        return {}


def look(argv: list[str], tools_dir: str, mounts: Mapping[str, Mapping[str, str]], seen_file: str,
         stdin: Callable[[Mapping[str, str]], str], timeout: float = 40) -> dict:
    """{"mounts": {prefix: {"generation": int or None, "state": "live", "dead" or ""}}}, asked of the
    host with ``argv`` (ssh ... host). A host whose tools cannot answer (none yet, or older ones)
    has no marker of ours: {"mounts": {}}. A host that does not answer: "unreachable": True and its
    last answer with every mount taken as live (nothing is asked again)."""
    if not mounts:
        return {"mounts": {}}
    try:
        proc = subprocess.run([*argv, f"{tools_dir}/rclone-mount", "mount-states", "--env-stdin"],
                              input=stdin({"RV_MOUNTS": json.dumps(mounts)}), capture_output=True,
                              text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        proc = None
    if proc is not None and proc.returncode == 0:
        try:
            answer = json.loads(proc.stdout)
        except ValueError:
            answer = None
        if isinstance(answer, dict):
            _keep(seen_file, answer)
            return {"mounts": answer}
    if proc is not None and proc.returncode != SSH_FAILED:
        return {"mounts": {}}
    kept = _kept(seen_file)
    return {"mounts": {p: {"generation": s.get("generation"), "state": "live"} for p, s in kept.items()
                       if isinstance(s, dict)}, "unreachable": True}
