"""The stack's configuration: the schema (one declaration per key), the reader of Pulumi's config,
and the validation into a StackConfig (components.config.load)."""
from components.config.load import load
from components.config.schema import DEFAULT_MOUNT_FLAGS, NAMESPACE
from components.config.spec import DEFAULT_CREDENTIAL, LOCAL, REMOTE_TOOLS_ROOT, ConfigError, HostSpec, ModelSpec, StackConfig

__all__ = ["load", "DEFAULT_MOUNT_FLAGS", "NAMESPACE", "DEFAULT_CREDENTIAL", "LOCAL", "REMOTE_TOOLS_ROOT",
           "ConfigError", "HostSpec", "ModelSpec", "StackConfig"]
