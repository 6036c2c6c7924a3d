"""Rules the config's modules share (load, hosts, models): where a mount may not go, what an
environment map may hold, which images only this machine has."""
from __future__ import annotations

import os
import re
from typing import Any

from components.config.reader import Reader

FORBIDDEN_MOUNT_ROOTS = ("/", "/mnt", "/tmp", "/var", "/home")
# images this project builds on this machine (scripts/build-images): a remote host cannot pull them
LOCAL_ONLY_PREFIXES = ("rustfs-vllm/",)


def inside(path: str, root: str) -> bool:
    """``path`` is ``root`` or below it."""
    p, q = os.path.normpath(path), os.path.normpath(root)
    return p == q or p.startswith(q + os.sep)


ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_map(r: Reader, key: str, raw: Any) -> dict[str, str]:
    """A map of environment variables for vLLM containers (``vllmEnv`` or a model's ``env``)."""
    if not isinstance(raw, dict):
        r.bad(key, raw, "a map of environment variable names to string values")
        return {}
    for k, val in raw.items():
        if not ENV_NAME_RE.fullmatch(str(k)) or not isinstance(val, (str, int, float)) or isinstance(val, bool):
            r.bad(f"{key}.{k}", val, "an environment variable NAME mapped to a string or number")
        elif k == "VLLM_API_KEY":
            r.bad(f"{key}.{k}", "<secret>", "not here: set vllmApiKey with --secret")
    return {str(k): str(val) for k, val in raw.items()}
