"""Dynamic provider: a stack's read key, the grant half: the policy that lets the ReadKey's user read the
stack's model prefixes (components/storage/read_policy.py), attached to that user.

- create: the canned policy ``rustfs-vllm-<user>`` and its attachment to the user;
- update (another model list, bucket, root keys, CA, a new server container): the same two calls: the
  policy changes in place and takes effect at the user's next request (tried on RustFS 1.0.1: no new
  login, no remount); a user the server no longer has (its volume lost) is made again first, with the
  ReadKey's secret (``secret``), so the readers' key stays the same;
- delete: the user, then the policy (RustFS refuses to remove a policy still attached); already gone
  is success; a server that does not answer (gone with its container) leaves them to it, said in one
  line. A replacement (the ReadKey replaced: a rotation) removes the old user after the new one reads;
  a replacement of the grant alone (``pulumi up --replace`` of it: the same user) leaves the user and
  the policy to the new grant: the policy it wrote names its ``instance`` (the document's ``Id``,
  components/providers/succession.py), and the old grant's delete sees another there (issue 57);
- read (refresh): a policy the server no longer has is gone, and the next `up` makes it again.
"""
from __future__ import annotations

import json
from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, UpdateResult

from components.providers import succession
from components.providers.base import Provider
from components.dynamic import secret_outputs
from components.errors import ProviderError
from components.storage import admin_api, read_policy

INPUTS = ("endpoint", "policy", "access_key", "secret_key", "ca_bundle", "store", "server", "secret", "key_kind")


def _user_missing(props: dict[str, Any], admin: Any, user: str) -> bool:
    try:
        admin.user_info(user)
    except Exception as exc:  # noqa: BLE001 - classified below
        if admin_api.is_missing(exc):
            return True
        raise ProviderError(admin_api.explain(exc, props, f"look up user {user}")) from None
    return False


def grant(props: dict[str, Any]) -> None:
    """The policy and its attachment: idempotent, each step as it stands. On a server that lost the
    user (a new container on a new volume) the user is made again with the key's own secret, so the
    readers keep the key they hold."""
    admin, user = admin_api.admin_for(props), props["user"]
    name = read_policy.policy_name(user)
    if props.get("secret") and _user_missing(props, admin, user):
        admin_api.call(props, f"add user {user} again", lambda: admin.user_add(user, props["secret"]))
    document = read_policy.with_instance(json.loads(props["policy"]), str(props.get(succession.KEY) or ""))
    admin_api.call(props, f"add policy {name}", lambda: admin.policy_add(name, policy=document))
    admin_api.call(props, f"attach policy {name} to {user}", lambda: admin.policy_set(name, user=user))


def policy_holder(props: dict[str, Any], admin: Any, name: str) -> dict[str, str]:
    """{"instance": the grant instance that wrote policy ``name`` last} ({} when it names none or is gone)."""
    try:
        return {succession.KEY: read_policy.instance_of(admin.policy_info(name))}
    except Exception as exc:  # noqa: BLE001 - classified below
        if admin_api.is_missing(exc):
            return {}
        raise


class ReadGrantProvider(Provider):
    REPLACE_ON = ("user",)

    def create(self, props: dict[str, Any]) -> CreateResult:
        props = {**props, succession.KEY: succession.new_instance()}
        grant(props)
        return CreateResult(read_policy.policy_name(props["user"]), dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = ["user"] if olds.get("user") != news.get("user") else []
        changed = replaces or any(olds.get(k) != news.get(k) for k in INPUTS)
        return DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        news = {**news, succession.KEY: succession.kept(olds)}
        grant(news)
        return UpdateResult(dict(news))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        try:
            admin_api.admin_for(props).policy_info(id_)
        except Exception as exc:  # noqa: BLE001
            if admin_api.is_missing(exc):
                return ReadResult(None, {})
            if admin_api.is_unreachable(exc):
                return ReadResult(id_, props)   # the server is lost; `up` makes it (and this grant) again
            raise ProviderError(admin_api.explain(exc, props, f"look up policy {id_}")) from None
        return ReadResult(id_, props)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        admin, user = admin_api.admin_for(props), props["user"]
        try:
            if succession.successor(policy_holder(props, admin, id_), props):
                print(f"read key {user}: replaced, not destroyed: the user and its policy {id_} stay with the grant "
                      "that replaced this one", flush=True)
                return
        except Exception as exc:  # noqa: BLE001
            if admin_api.is_unreachable(exc):
                print(f"read key {user}: the S3 server at {props['endpoint']} does not answer; its user and "
                      f"policy {id_} are left to it (they go with its volume)", flush=True)
                return
            raise ProviderError(admin_api.explain(exc, props, f"look up policy {id_}")) from None
        for what, fn in ((f"remove user {user}", lambda: admin.user_remove(user)),
                         (f"remove policy {id_}", lambda: admin.policy_remove(id_))):
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - classified below
                if admin_api.is_missing(exc):
                    continue
                if admin_api.is_unreachable(exc):
                    print(f"read key {user}: the S3 server at {props['endpoint']} does not answer; its user and "
                          f"policy {id_} are left to it (they go with its volume)", flush=True)
                    return
                raise ProviderError(admin_api.explain(exc, props, what)) from None


class ReadGrantResource(Resource, module="rustfs-vllm", name="ReadGrant"):
    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(ReadGrantProvider(), name, props, pulumi.ResourceOptions.merge(
            secret_outputs(opts), pulumi.ResourceOptions(additional_secret_outputs=["secret"])))
