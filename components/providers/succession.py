"""A replacement is not a destruction (issue 57).

The engine runs a resource's ``delete`` when the resource is destroyed or leaves the program, and also
when it is REPLACED: by default the new instance is created first and the old one's delete runs after
it, in the same ``up`` (or, after an interruption, in the next one). The delete receives only the old
instance's outputs: nothing says why it runs. A delete that purges, unregisters or revokes would then
remove what the new instance has just taken over (seen: a change of the endpoint's spelling with
purgeOnDestroy deleted every model's objects in an ``up`` that exited 0).

So every dynamic resource whose delete removes something carries an ``instance``: a token its create
makes and its updates keep (an output). What it holds in the store (a prefix's owner record, a stack's
registration, the bucket's record, a grant's policy, a tenant's key record) names the instance that
wrote it last. A new instance writes it at its create, before the old instance's delete runs; that
delete reads it and, when another instance holds it, leaves it and everything it stands for as it is,
in one line. A record without an instance (written before issue 57) holds for whoever reads it.
"""
from __future__ import annotations

import secrets
from typing import Any, Mapping, Optional

KEY = "instance"


def new_instance() -> str:
    return secrets.token_hex(8)


def kept(olds: Mapping[str, Any]) -> str:
    """The instance an update keeps: the deployed one, or a new one for a resource made before issue 57."""
    return str(olds.get(KEY) or new_instance())


def successor(record: Optional[Mapping[str, Any]], props: Mapping[str, Any]) -> str:
    """The instance that holds ``record`` when it is not the one whose outputs are ``props`` ("" when it is
    that one's, has no instance, or there is no record): the delete of a replaced instance gets its successor."""
    theirs = str((record or {}).get(KEY) or "")
    return theirs if theirs and theirs != str(props.get(KEY) or "") else ""
