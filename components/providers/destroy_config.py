"""purgeOnDestroy as ``pulumi destroy`` should follow it, for the deletes that purge (a model's objects, a
host's copies and VFS caches).

A delete gets the outputs of the last ``up`` (``purge``: the value deployed then). Two newer sources:

- the configuration the engine handed this provider process (components/providers/base.py): with
  ``pulumi destroy --run-program`` the program runs first and the engine hands over the configuration
  from every source (``Pulumi.<stack>.yaml``, ``--config-file``, ``-c``, an ESC environment); a plain
  ``pulumi destroy`` hands over the last ``up``'s;
- ``Pulumi.<stack>.yaml`` in the project folder (this process's working folder) as it is now: a
  ``pulumi config set purgeOnDestroy`` since the last ``up`` is there, also for a plain destroy.

The rule: the engine's value when it differs from the deployed one (only a run of the program can
have given it); else the stack file's when it differs (changed since the last ``up``); else the
deployed value. Every purge is said, with where its value came from.
"""
from __future__ import annotations

import os
from typing import Any, Optional

import yaml

from components.providers.base import engine_config

KEY = "rustfs-vllm:purgeOnDestroy"


def _bool(value: Any) -> Optional[bool]:
    if value is None:
        return None
    return value is True or str(value).strip().lower() == "true"


def in_stack_file(stack: Optional[str], folder: str = "") -> Optional[bool]:
    """purgeOnDestroy as ``Pulumi.<stack>.yaml`` says now (absent: false); None when the file cannot tell
    (no stack recorded, no such file, not YAML)."""
    if not stack:
        return None
    path = os.path.join(folder or os.getcwd(), f"Pulumi.{stack}.yaml")
    try:
        with open(path, encoding="utf-8") as fh:
            config = (yaml.safe_load(fh) or {}).get("config") or {}
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    return _bool(config.get(KEY, False))


def purge_at_destroy(props: dict[str, Any], subject: str, what: str, folder: str = "") -> bool:
    """Whether this destroy purges ``what`` (e.g. "the model's objects"); says so in one line for
    ``subject`` (e.g. "model m1") whenever it purges, or keeps against the deployed value."""
    deployed = bool(props.get("purge"))
    engine = _bool(engine_config(KEY))
    stack = props.get("stack")
    if engine is not None and engine != deployed:
        purge, source = engine, "in the configuration this destroy ran the program with"
    else:
        in_file = in_stack_file(stack, folder)
        if in_file is not None and in_file != deployed:
            purge, source = in_file, f"in Pulumi.{stack}.yaml"
        else:
            purge, source = deployed, "as deployed"
    if purge == deployed and source == "as deployed":
        if purge:
            print(f"{subject}: purgeOnDestroy is true (as deployed): removing {what}", flush=True)
        return purge
    print(f"{subject}: purgeOnDestroy is {str(purge).lower()} {source} (the stack was last deployed with "
          f"{str(deployed).lower()}): following the configuration, {'removing' if purge else 'keeping'} {what}",
          flush=True)
    return purge
