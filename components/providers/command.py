"""Dynamic provider: a local command with create, delete and an optional read (refresh) command.

Stands in for pulumi-command's `local.Command`, whose provider plugin cannot be built here (its Go
module is refused by the module proxy). Semantics follow it:

- `triggers` changing forces a replacement (delete, then create);
- any other input change re-runs `create` (there is no separate update command);
- `delete` runs the delete command stored in the state;
- nothing runs during preview.

Added for drift: a `read` command run on refresh; a non-zero exit means the thing the command
made is gone, so the next `up` runs `create` again.

Commands run through `/bin/sh -c` with an explicit environment: PATH and HOME from this process
plus the `environment` input (where credentials go, never on the command line). stdout and stderr
come back as outputs, so commands must not print secrets; `secrets` values are masked anyway.
"""
from __future__ import annotations

import os
import subprocess
from typing import Any

from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")


def run(command: str, props: dict[str, Any], what: str) -> tuple[str, str]:
    env = {k: os.environ[k] for k in BASE_ENV if k in os.environ}
    env.update({k: str(v) for k, v in (props.get("environment") or {}).items()})
    proc = subprocess.run(["/bin/sh", "-c", command], env=env, cwd=props.get("dir") or None,
                          capture_output=True, text=True, timeout=int(props.get("timeout") or 600), check=False)
    out, err = _mask(proc.stdout, props), _mask(proc.stderr, props)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} command failed (exit {proc.returncode}): {err.strip() or out.strip()}")
    return out, err


def _mask(text: str, props: dict[str, Any]) -> str:
    for s in props.get("secrets") or []:
        if s:
            text = text.replace(str(s), "***")
    return text


class CommandProvider(ResourceProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        out, err = run(props["create"], props, "create")
        return CreateResult(f"cmd-{os.urandom(6).hex()}", {**props, "stdout": out, "stderr": err})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = (set(olds) | set(news)) - {"stdout", "stderr", "__provider"}
        changed = sorted(k for k in keys if olds.get(k) != news.get(k))
        replaces = ["triggers"] if olds.get("triggers") != news.get("triggers") else []
        return DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=True)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        out, err = run(news["create"], news, "create")
        return UpdateResult({**news, "stdout": out, "stderr": err})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        if not props.get("read"):
            return ReadResult(id_, props)
        try:
            run(props["read"], props, "read")
        except RuntimeError:
            return ReadResult(None, {})
        return ReadResult(id_, props)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        if props.get("delete"):
            run(props["delete"], props, "delete")
