"""What every part of the mount tool (mount_tool.py and the parts beside it) shares: its one failure
(``Fail``: ``rclone-mount: <message>`` and an exit status), its parameters (RV_* variables), the
commands it runs, and the loader of the standalone tools beside it (copy_tool, keeper_tool).

Standard library only, Python 3.9+, nothing from the ``components`` package: a part of the mount
tool, shipped with mount_tool.py to remote serving hosts (HostTools). It is loaded as
``components.mounting.tool_base`` in the program and, where mount_tool.py runs as a file, from beside it
(mount_tool.PARTS).
"""
from __future__ import annotations

import os
import subprocess
from typing import Any, Dict, Mapping, Optional, Sequence


class Fail(Exception):
    """The action failed: ``rclone-mount: <message>`` on stderr, exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- parameters
def _need(env: Mapping[str, str], *names: str) -> None:
    for name in names:
        if not env.get(name):
            raise Fail(f"{name}: parameter null or not set")


def _remote(env: Mapping[str, str]) -> Optional[str]:
    return env.get("RV_REMOTE") or None


def env_stdin(environment: Mapping[str, str]) -> str:
    """Variables for an action's ``--env-stdin``: ``NAME=<base64 of the value>`` lines (mount_tool.
    read_env_stdin reads them back), never on a command line (``ps``) nor through SSH Setenv."""
    import base64

    return "".join(f"{k}={base64.b64encode(str(v).encode()).decode()}\n" for k, v in sorted(environment.items()))


def without(env: Mapping[str, str], names: Sequence[str]) -> Dict[str, str]:
    return {k: v for k, v in env.items() if k not in names}


# --------------------------------------------------------------------------- commands and folders
def _quiet(cmd: Sequence[str]) -> bool:
    """Run ``cmd`` with its errors hidden; did it succeed?"""
    try:
        return subprocess.run(list(cmd), stderr=subprocess.DEVNULL, check=False).returncode == 0
    except OSError:
        return False


def _checked(cmd: Sequence[str]) -> None:
    """Run ``cmd`` (its errors shown); a failure fails the action."""
    try:
        code = subprocess.run(list(cmd), check=False).returncode
    except OSError as exc:
        raise Fail(f"cannot run {cmd[0]}: {exc.strerror}") from None
    if code != 0:
        raise Fail(f"{' '.join(cmd)} failed (exit status {code})", code)


def _rmdir(path: str) -> None:
    """Remove ``path`` if it is an empty folder; never anything with files."""
    try:
        os.rmdir(path)
    except OSError:
        pass


# --------------------------------------------------------------------------- the tools beside it
_SIBLINGS: Dict[str, Any] = {}


def sibling(name: str) -> Any:
    """``<name>.py`` beside this file (here and in a host's tools folder): copy_tool (the node-local
    copies), keeper_tool (the mount keepers)."""
    if name in _SIBLINGS:
        return _SIBLINGS[name]
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.realpath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"rustfs_vllm_{name}", path)
    if spec is None or spec.loader is None or not os.path.exists(path):
        raise Fail(f"{path} is missing: the host's tools are incomplete (run pulumi up again)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _SIBLINGS[name] = module
    return module
