"""What every dynamic resource of the program shares: credential-carrying properties are secret in
the state and in outputs. Each module of components/providers/ holds a provider and its resource
class together."""
from __future__ import annotations

from typing import Optional

import pulumi

CREDENTIALS = ["access_key", "secret_key", "headers"]


def secret_outputs(opts: Optional[pulumi.ResourceOptions]) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=CREDENTIALS))
