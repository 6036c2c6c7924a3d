"""A remote host's mounts as the host sees them, asked at preview over SSH: each marker's generation
and whether a live rclone mount is at its path (``rclone-mount mount-states``, read only). What a
host answered is kept on this machine, so that a run that cannot reach it asks for no change."""
from __future__ import annotations

import json
import os
import subprocess
from typing import Callable, Mapping

SSH_FAILED = 255        # ssh's own exit status: the connection (not the command) failed
NO_TOOLS = 127          # the shell's "command not found": the host has no rclone-mount of ours yet


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
    host with ``argv`` (ssh ... host). A host that has none of our tools yet (a first ``up``): {"mounts":
    {}}. A host that does not answer (ssh's 255, a timeout): "unreachable": True; one whose check fails
    otherwise (another exit status, an answer that is not JSON): "failed": the status and its last
    line. Either way the mounts count as unknown: the last answer, every mount taken as live, so that
    nothing is mounted again on a guess and nothing reads as fine (the caller warns)."""
    if not mounts:
        return {"mounts": {}}
    try:
        proc = subprocess.run([*argv, f"{tools_dir}/rclone-mount", "mount-states", "--env-stdin"],
                              input=stdin({"RV_MOUNTS": json.dumps(mounts)}), capture_output=True,
                              text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        proc = None
    failed = ""
    if proc is not None and proc.returncode == 0:
        try:
            answer = json.loads(proc.stdout)
        except ValueError:
            answer = None
        if isinstance(answer, dict):
            _keep(seen_file, answer)
            return {"mounts": answer}
        failed = f"exit status 0 and an answer that is not JSON: {(proc.stdout.strip().splitlines() or [''])[-1][:200]}"
    elif proc is not None and proc.returncode != SSH_FAILED:
        if proc.returncode == NO_TOOLS:     # the host has none of our tools yet: nothing of ours is mounted there
            return {"mounts": {}}
        failed = f"exit status {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1][:200]}"
    kept = _kept(seen_file)
    known = {p: {"generation": s.get("generation"), "state": "live"} for p, s in kept.items() if isinstance(s, dict)}
    return {"mounts": known, **({"failed": failed} if failed else {"unreachable": True})}
