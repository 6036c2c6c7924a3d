"""The one exception the program's dynamic providers raise for a failure a user can act on."""
from __future__ import annotations


class ProviderError(RuntimeError):
    """Its message names the resource, the cause and the fix; the provider host
    (scripts/pulumi-resource-pulumi-python) sends the engine that message without a traceback."""
