"""The dynamic resources: thin `pulumi.dynamic.Resource` wrappers around our providers.

Each declares its output properties (None in the inputs) so the program can read them, and marks
credential-carrying properties secret in the state and in outputs.
"""
from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import Resource

from .providers.bucket import BucketProvider
from .providers.credentials import CredentialCheckProvider
from .providers.model_upload import ModelUploadProvider
from .providers.smoke import CompletionProvider

CREDENTIALS = ["access_key", "secret_key", "headers"]


def _opts(opts: Optional[pulumi.ResourceOptions]) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=CREDENTIALS))


class BucketResource(Resource, module="rustfs-vllm", name="Bucket"):
    adopted: pulumi.Output[bool]

    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(BucketProvider(), name, {"adopted": None, **props}, _opts(opts))


class CredentialCheckResource(Resource, module="rustfs-vllm", name="CredentialCheck"):
    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(CredentialCheckProvider(), name, props, _opts(opts))


class ModelUploadResource(Resource, module="rustfs-vllm", name="ModelUpload"):
    last_transfer: pulumi.Output[dict]
    file_count: pulumi.Output[int]
    total_bytes: pulumi.Output[int]

    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(ModelUploadProvider(), name,
                         {"last_transfer": None, "file_count": None, "total_bytes": None, **props}, _opts(opts))


class CompletionResource(Resource, module="rustfs-vllm", name="Completion"):
    text: pulumi.Output[str]
    seconds: pulumi.Output[float]

    def __init__(self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(CompletionProvider(), name, {"text": None, "seconds": None, **props}, _opts(opts))
