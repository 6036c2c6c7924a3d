"""Dynamic provider: a stack's read key, the identity half: a RustFS user of its own with a fresh secret.

    ReadKey (the user and its secret) -> ReadGrant (its policy: read the stack's prefixes; read_grant.py)

The serving side takes its key from this resource's outputs, and this resource changes only when the
user must be another (another stack or bucket, another server behind the endpoint): a new model list
or new root keys update the ReadGrant, not this, so preview never shows the readers' keys changing
when they do not (a dynamic resource's outputs are unknown at the preview of its update).

- create: the user ``<user_base><4 hex>`` (a user of its own for each key, so a replacement, e.g.
  `pulumi up --replace` of it, a rotation, makes the new user before the old one goes; a name the
  server has neither as a user nor as a policy, looked up first: RustFS's add-user overwrites an
  existing user's secret) with a fresh
  40-hex secret made here, through the admin API with the root keys (components/storage/admin_api.py).
  It can do nothing until its ReadGrant attaches the policy.
- the root keys given here are for the create only: a change of them is not a change of this resource
  (the ReadGrant, which holds the current ones, removes the user);
- read (refresh): a user the server no longer has is gone, and the next `up` makes it again. Keys the
  server no longer takes (the root keys rotated since this user was made) are followed by the stack's
  current root keys (``configure``: the engine gives dynamic providers the stack's configuration), so a
  refresh after a rotation still sees a read user deleted behind the program's back; when neither is
  taken, the state is left as it is;
- delete: nothing of its own: the ReadGrant, deleted before it, removed the user with the current keys.

The secret is an output of this resource, secret in the state and wherever it flows.
"""
from __future__ import annotations

import os
import secrets
from typing import Any, Optional

import pulumi
from pulumi.dynamic import ConfigureRequest, CreateResult, DiffResult, ReadResult, Resource

from components.providers.base import Provider
from components.dynamic import secret_outputs
from components.errors import ProviderError
from components.storage import admin_api, read_policy

READ_SECRETS = ["read_access_key", "read_secret_key"]
# another value: another user (a replacement). The endpoint is how the server is reached, not which one it
# is (``store`` says that): another spelling or port of it updates nothing here (issue 57)
IDENTITY = ("user_base", "store")


TRIES = 8      # user names tried before giving up (4 hex of their own: 1 in 65,536 each to meet one)


def _exists(props: dict[str, Any], what: str, look: Any) -> bool:
    """Whether the server has it (a user, a policy): False only on its own 'no such' answer."""
    try:
        look()
    except Exception as exc:  # noqa: BLE001 - classified below
        if admin_api.is_missing(exc):
            return False
        raise ProviderError(admin_api.explain(exc, props, f"look up {what}")) from None
    return True


def free_user(props: dict[str, Any], admin: Any) -> str:
    """A user name the server has neither as a user nor as a read policy's name: RustFS's ``add-user``
    and ``add-canned-policy`` overwrite what exists, so the program looks first and never takes over
    (or resets the secret of) a user it did not make."""
    taken = []
    for _ in range(TRIES):
        user = read_policy.user_name(props["user_base"], secrets.token_hex(2))
        policy = read_policy.policy_name(user)
        if _exists(props, f"user {user}", lambda: admin.user_info(user)) or \
                _exists(props, f"policy {policy}", lambda: admin.policy_info(policy)):
            taken.append(user)
            continue
        return user
    raise ProviderError(f"read key: every user name tried ({', '.join(taken)}) already exists on the S3 server at "
                        f"{props['endpoint']}; remove the stale rvread users there (their policies are named "
                        f"rustfs-vllm-<user>), then run `pulumi up` again")


NAMESPACE = "rustfs-vllm"


def STATE_DIR() -> str:  # noqa: N802 - the project's .state (the engine starts providers in the project folder)
    return os.path.join(os.getcwd(), ".state")


class ReadKeyProvider(Provider):
    REPLACE_ON = IDENTITY
    current: Optional[tuple[str, str]] = None      # the stack's root keys as configured now (configure)

    def configure(self, req: ConfigureRequest) -> None:
        access, secret = req.config.get(f"{NAMESPACE}:rustfsAccessKey"), req.config.get(f"{NAMESPACE}:rustfsSecretKey")
        self.current = (str(access), str(secret)) if access and secret else None

    def _look(self, id_: str, props: dict[str, Any]) -> Optional[bool]:
        """Whether the server has user ``id_`` (None: these keys cannot tell: refused, or no server)."""
        try:
            admin_api.admin_for(props).user_info(id_)
        except Exception as exc:  # noqa: BLE001
            if admin_api.is_missing(exc):
                return False
            if admin_api.is_unreachable(exc) or admin_api.is_refused(exc):
                return None
            raise ProviderError(admin_api.explain(exc, props, f"look up user {id_}")) from None
        return True

    def create(self, props: dict[str, Any]) -> CreateResult:
        admin = admin_api.admin_for(props)
        user, secret = free_user(props, admin), secrets.token_hex(20)
        admin_api.call(props, f"add user {user}", lambda: admin.user_add(user, secret))
        read_policy.record_made(STATE_DIR(), props["user_base"])
        return CreateResult(user, {**props, "read_access_key": user, "read_secret_key": secret})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in IDENTITY if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(replaces), replaces=replaces, delete_before_replace=False)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        found = self._look(id_, props)
        if found is None and self.current and self.current != (props.get("access_key"), props.get("secret_key")):
            # the keys it was made with were rotated since: the stack's current ones look instead
            found = self._look(id_, {**props, "access_key": self.current[0], "secret_key": self.current[1]})
        if found is False:
            return ReadResult(None, {})
        if found:
            read_policy.record_made(STATE_DIR(), props["user_base"])
        return ReadResult(id_, props)   # there, or nobody can tell (the server is lost): nothing to change

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        return None    # the ReadGrant removed the user (see the module's text)


class ReadKeyResource(Resource, module="rustfs-vllm", name="ReadKey"):
    read_access_key: pulumi.Output[str]
    read_secret_key: pulumi.Output[str]

    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(ReadKeyProvider(), name, {"read_access_key": None, "read_secret_key": None, **props},
                         pulumi.ResourceOptions.merge(secret_outputs(opts),
                                                      pulumi.ResourceOptions(additional_secret_outputs=READ_SECRETS)))
