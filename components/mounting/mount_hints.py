"""Why a mount would fail, in words a user can act on: the preflight (one ``rclone lsf`` of the
model's prefix with the mount's remote, so that a TLS or credential problem fails in rclone's own
words instead of as a mount that never shows the model), the cause in rclone's error output, and
what to do about it (the hints, shared with components/storage/s3.py for boto3's errors).

Standard library only, Python 3.9+, nothing from the ``components`` package: a part of the mount
tool, shipped with mount_tool.py to remote serving hosts (HostTools). It is loaded as
``components.mounting.mount_hints`` in the program and, where mount_tool.py runs as a file, from beside it
(mount_tool.PARTS).
"""
from __future__ import annotations

import subprocess
from typing import List, Mapping, Optional

from .tool_base import without

# What a user does about an S3 error; shared with components/storage/s3.py (boto3's errors)
CA_HINT = "set rustfs-vllm:rustfsCaBundle to the PEM file of the CA that signed"
AUTH_HINT = "check rustfs-vllm:rustfsAccessKey and rustfs-vllm:rustfsSecretKey"
ENDPOINT_HINT = "check rustfs-vllm:rustfsEndpoint and that the server is running"
AUTH_CODES = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "InvalidToken")
TLS_WORDS = ("x509", "certificate")
UNREACHABLE_WORDS = ("connection refused", "no such host", "timeout")


def lsf_cause(err: str) -> str:
    """The cause in rclone's error output: its last 'last error was: ...', else its last line."""
    lines = err.rstrip("\n").split("\n")
    causes = [ln.rsplit("last error was: ", 1)[1] for ln in lines if "last error was: " in ln]
    return causes[-1] if causes else lines[-1]


def lsf_hint(cause: str, log: str) -> str:
    """What to do about a failed listing's cause."""
    if any(w in cause for w in TLS_WORDS):
        return f"{CA_HINT} the endpoint's certificate"
    if any(c in cause for c in AUTH_CODES):
        return AUTH_HINT
    if any(w in cause for w in UNREACHABLE_WORDS):
        return ENDPOINT_HINT
    return f"see {log}"


def preflight(env: Mapping[str, str], ca_flags: List[str], log: str) -> Optional[str]:
    """One listing with the same remote (about 50 ms), so a TLS or credential problem fails here in
    rclone's own words, instead of as a mount that never shows the model. None when it lists."""
    remote, source = env["RV_REMOTE"], env["RV_SOURCE"]
    cmd = [env.get("RV_RCLONE") or "rclone", "lsf", f"{remote}:{source}", "--config", "/dev/null",
           "--max-depth", "1", "--low-level-retries", "2", "--retries", "1", "--contimeout", "10s", *ca_flags]
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env=without(env, ("AWS_CA_BUNDLE",)), check=False)
    except OSError as exc:
        err = f"cannot run {cmd[0]}: {exc.strerror}"
    else:
        if proc.returncode == 0:
            return None
        err = proc.stderr.decode("utf-8", "replace")
    cause = lsf_cause(err)
    endpoint = env.get(f"RCLONE_CONFIG_{remote}_ENDPOINT") or "the endpoint"
    return f"rclone cannot list {source} at {endpoint}: {cause}; {lsf_hint(cause, log)}"
