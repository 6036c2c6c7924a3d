"""Reads the raw stack configuration from the Pulumi runtime (typed by Pulumi.yaml's declarations)."""
from __future__ import annotations

import json
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from .config import NAMESPACE

# key -> kind; every key here is declared in Pulumi.yaml with its type, default and description.
KEYS: dict[str, str] = {
    "environment": "string", "namePrefix": "string", "s3Server": "string", "rustfsImage": "string",
    "rustfsEndpoint": "string", "rustfsCaBundle": "string", "rustfsPort": "integer", "rustfsConsolePort": "integer",
    "rustfsConsoleEnable": "boolean", "rustfsVolume": "string", "rustfsAccessKey": "secret",
    "rustfsSecretKey": "secret", "bucket": "string", "purgeOnDestroy": "boolean", "models": "json",
    "mountPath": "string", "mountCacheDir": "string", "mountFlags": "json", "rcloneBinary": "string",
    "vllmImage": "string", "vllmShmSize": "string", "vllmGpus": "string", "vllmEnv": "json",
    "vllmApiKey": "secret", "vllmRestart": "string", "vllmReadyTimeout": "integer", "bindAddress": "string",
    "smokeTest": "boolean", "smokePrompt": "string", "smokeMaxTokens": "integer", "hosts": "json",
    "sshPrivateKey": "secret", "balancerImage": "string",
}
SECRET_KEYS = tuple(k for k, kind in KEYS.items() if kind == "secret")


def read_raw() -> tuple[dict[str, Any], list[str]]:
    """({key: value}, problems): values parsed by kind; unknown keys and secrets set in plain text
    are problems, reported with the rest."""
    problems: list[str] = []
    raw: dict[str, Any] = {}
    for key, kind in KEYS.items():
        full = f"{NAMESPACE}:{key}"
        value = runtime_config.get_config(full)
        if value is None or value == "":
            continue  # unset: Pulumi.yaml declares "" where our default is computed
        if kind == "secret" and not runtime_config.is_config_secret(full):
            problems.append(f"{full} is set in plain text; allowed: a secret, set with "
                            f"`pulumi config set --secret {key} ...` so it is encrypted in Pulumi.<stack>.yaml")
        if kind == "json" and isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                problems.append(f"{full} = {value!r} is invalid: a YAML list/map ({exc})")
                continue
        raw[key] = value
    for full in runtime_config.CONFIG.get():
        ns, _, key = full.partition(":")
        if ns == NAMESPACE and key not in KEYS:
            problems.append(f"{full} is not a known key; allowed: {', '.join(sorted(KEYS))}")
    return raw, problems


def stack_name() -> str:
    return pulumi.get_stack()
