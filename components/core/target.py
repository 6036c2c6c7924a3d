"""The seam between the target-neutral core and the places a stack runs on.

The core (components.core.plan) builds, for every target, the same things the same way: the
credential check of the S3 server, the bucket, each model's upload and revision, each server's smoke
completion and the outputs they share. A target (components.targets: Docker hosts, Kubernetes)
supplies only what differs: where the S3 server runs, how each model's weights reach its vLLM (a
mount, a copy on the host's disk, the streamer) and how vLLM is placed and exposed. A third target is
one more module under components/targets/ implementing this class and one more line in its registry;
the store does not change.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

import pulumi

from components.config.spec import StackConfig
from components.core.bucket import Bucket
from components.core.model_upload import ModelUpload
from components.providers.credentials import CredentialCheckResource
from components.providers.read_key import ReadKeyResource


@dataclass
class Keys:
    """The S3 keys, as Pulumi secrets."""
    access_key: pulumi.Output[str]
    secret_key: pulumi.Output[str]


@dataclass
class S3Side:
    """What a target says about the S3 server it runs (or the external one it names)."""
    component: pulumi.Resource              # the server's component: the credential check is its child
    ready: list[pulumi.Resource]            # answering (a readiness wait, a rollout); [] for an external one
    instance: pulumi.Input[str]             # its container or StatefulSet ("external"): a new one re-checks the keys
    endpoint: pulumi.Output[str]            # as this machine reaches it (the uploads, the check)
    kind: pulumi.Output[str]                # the ``s3_server`` output
    store: str                              # where the objects live: another one means nothing is known there
    check_wait_seconds: int = 0             # how long the credential check retries a server coming up


@dataclass
class Served:
    """One model's vLLM at one place, as the core's smoke completion and outputs need it."""
    model: str
    place: Optional[str]                    # the host's name; None where the model has one place
    name_prefix: str                        # of its smoke test's resources (a host's ``a-``, or "")
    base_url: pulumi.Output[str]
    instance: pulumi.Input[str]             # a new container or rollout re-runs the smoke completion
    ready: list[pulumi.Resource] = field(default_factory=list)


@dataclass
class Store:
    """What the core built for the target to read from (components.core.store)."""
    server: S3Side
    credentials: CredentialCheckResource
    bucket: Bucket
    uploads: dict[str, ModelUpload]         # model name -> its upload
    read_keys: Keys                         # what serving hosts and pods read with (scoped, or the root keys)
    read_key: Optional[ReadKeyResource] = None   # readKeys scoped: the resource that made read_keys
    given_by: str = ""                      # store: the platform stack that made read_keys (its tenant's read key)

    @property
    def ready(self) -> list[pulumi.Resource]:
        return [*self.server.ready, self.credentials]

    @property
    def read_keys_note(self) -> str:
        """The ``read_keys`` output: who holds which key on the serving side."""
        if self.given_by:
            return (f"scoped: serving hosts and pods hold a read-only key for this stack's model prefixes, made by "
                    f"the store {self.given_by} (storeKey)")
        if self.read_key is None:
            return "shared: serving hosts and pods hold the S3 server's root keys (readKeys shared)"
        return "scoped: serving hosts and pods hold a read-only key for this stack's model prefixes (readKeys scoped)"


class Target(ABC):
    """One place a stack runs on. ``component_type`` is the type of the stack's root component: it is
    in every URN below it, so it never changes for a target that has deployed stacks."""
    name: ClassVar[str]
    component_type: ClassVar[str]

    def __init__(self, cfg: StackConfig) -> None:
        self.cfg = cfg

    @classmethod
    @abstractmethod
    def accepts(cls, cfg: StackConfig) -> bool:
        """Whether this target runs ``cfg`` (its ``target`` key)."""

    @abstractmethod
    def preflight(self) -> list[str]:
        """What `up` would fail on, found before anything is registered: one line each."""

    @abstractmethod
    def s3_server(self, owner: pulumi.ComponentResource, keys: Keys) -> S3Side:
        """Declare the S3 server (children of ``owner``), or name the external one."""

    @abstractmethod
    def serve(self, owner: pulumi.ComponentResource, store: Store, keys: Keys) -> list[Served]:
        """Declare how each model's weights reach its vLLM and the vLLM servers; what was served.
        ``keys`` are what they read with: ``store.read_keys``, never the root keys unless readKeys is shared."""

    @abstractmethod
    def outputs(self, store: Store) -> dict[str, Any]:
        """The target's own outputs, beside the core's (S3 server, bucket, smoke completions)."""
