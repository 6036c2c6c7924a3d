"""What the last `up` of this stack exported, read through a reference to the stack itself (issue 57): where
each model's objects were (components/core/deletions.py), the digest the mount pods were pinned to
(components/kube/image_pin.py). One StackReference per run, read once; nothing when there was no `up` yet,
when the backend cannot say, or under the unit tests' mocks.
"""
from __future__ import annotations

from typing import Any, Optional

import pulumi

from components.config.runtime import stack_fqn

_cache: dict[str, Any] = {}


def output(name: str) -> Optional[Any]:
    """The last `up`'s output ``name`` (plain or secret), or None."""
    if name in _cache:
        return _cache[name]
    from pulumi.runtime.sync_await import _sync_await

    try:
        ref = _cache.get("") or pulumi.StackReference("rustfs-vllm-previous", stack_name=stack_fqn())
        _cache[""] = ref
        details = _sync_await(ref.get_output_details(name))
        value = details.value if details.value is not None else details.secret_value
    except Exception:  # noqa: BLE001 - a first `up`, a backend that cannot say: nothing to compare with
        value = None
    _cache[name] = value
    return value
