"""The rules of the rustfs-vllm policy pack, as plain functions of a stack's policy facts (recorded by
components/core/policy_facts.py as the inputs of the stack's root component). policy/__main__.py turns
each into a mandatory Pulumi policy; tests/unit/test_policy_rules.py checks them without the engine.

A stack is a production stack when its ``environment`` is ``production`` or its name matches one of
the pack's ``productionStacks`` patterns (its config; default below): a stack named ``prod`` that says
``environment: dev`` is refused for that, not let through. Other stacks are not judged.

Each rule returns one line per violation: the config key, its value, why, and the fix.
"""
from __future__ import annotations

import fnmatch
import ipaddress
from typing import Any, Callable, Optional

ROOT_TYPES = ("rustfs-vllm:index:ServingStack", "rustfs-vllm:index:KubeStack")
FACTS = "policyFacts"
FACTS_VERSION = 1
DEFAULT_PRODUCTION_STACKS = ["prod", "prod-*", "*-prod", "production", "production-*", "*-production"]
# tags that name whatever was pushed last: never a pin
FLOATING_TAGS = {"latest", "stable", "main", "master", "nightly", "edge", "dev", "rolling", "release", "current"}

Facts = dict[str, Any]


def stack_of(urn: str) -> str:
    """The stack's name in a resource URN (urn:pulumi:<stack>::<project>::<type>::<name>)."""
    return urn.split("::", 1)[0].rsplit(":", 1)[-1]


def is_production(facts: Facts, stack: str, patterns: list[str]) -> bool:
    return facts.get("environment") == "production" or any(fnmatch.fnmatchcase(stack, p) for p in patterns)


def pinned(ref: str) -> bool:
    """A digest, or a tag that names a version (has a digit, and is not a moving name like latest)."""
    if "@sha256:" in ref:
        return True
    name = ref.rsplit("/", 1)[-1]
    if ":" not in name:
        return False
    tag = name.rsplit(":", 1)[1]
    return tag.lower() not in FLOATING_TAGS and any(c.isdigit() for c in tag)


def loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def default_credentials(facts: Facts, stack: str) -> list[str]:
    if not facts.get("defaultCredentials"):
        return []
    return [f"rustfsAccessKey/rustfsSecretKey: production stack '{stack}' runs on RustFS's default credentials "
            "(rustfsadmin), which anyone can guess; set both: pulumi config set --secret rustfsAccessKey <key> "
            "and pulumi config set --secret rustfsSecretKey <8+ characters>"]


def read_keys(facts: Facts, stack: str) -> list[str]:
    if facts.get("readKeys") != "shared":
        return []
    return [f"readKeys: 'shared' on production stack '{stack}' gives every serving host and pod the store's root "
            "keys (write and delete, every prefix); set readKeys: scoped (a read-only key for this stack's prefixes)"]


def exposure(facts: Facts, stack: str) -> list[str]:
    if facts.get("apiKeySet"):
        return []
    out = []
    for key, where in sorted((facts.get("exposure") or {}).items()):
        if key == "target":
            out.append(f"vllmApiKey: production stack '{stack}' serves through {where} with no API key: anyone who "
                       "reaches a node can use the models; set it: pulumi config set --secret vllmApiKey <key>")
        elif key == "routerPort" and not loopback(str(where)):
            out.append(f"routerPort: the stack's one endpoint listens on '{where}' (bindAddress) on production stack "
                       f"'{stack}' with no vllmApiKey: anyone who reaches this machine can use every model; set one "
                       "(pulumi config set --secret vllmApiKey <key>) or bind to 127.0.0.1")
        elif not loopback(str(where)):
            out.append(f"{key}: '{where}' on production stack '{stack}' publishes vLLM beyond this machine with no "
                       "vllmApiKey; set one (pulumi config set --secret vllmApiKey <key>) or bind to 127.0.0.1")
    return out


def environment(facts: Facts, stack: str) -> list[str]:
    if facts.get("environment") != "dev":
        return []
    return [f"environment: 'dev' on production stack '{stack}' (its name says production) lets it take RustFS's "
            "default credentials and dev shortcuts; set environment: production (or rename a stack that is not one)"]


def images(facts: Facts, stack: str) -> list[str]:
    return [f"{key}: '{ref}' on production stack '{stack}' is not pinned (no tag, or a tag that moves): the next "
            "pull may run other code; pin a version tag or a digest (name:tag@sha256:...)"
            for key, ref in sorted((facts.get("images") or {}).items()) if not pinned(str(ref))]


def mount_image(facts: Facts, stack: str) -> list[str]:
    """The mounts' keepers run as root on every serving host: their image is pinned by digest (issue 45)."""
    return [f"{key}: '{ref}' on production stack '{stack}' is not pinned by digest: its mount keepers run as root "
            "on every serving host, so whoever can move that tag runs code as root there; pin it by digest "
            "(name:tag@sha256:..., from `docker buildx imagetools inspect` or the registry)"
            for key, ref in sorted((facts.get("images") or {}).items())
            if key.endswith("rcloneImage") and "@sha256:" not in str(ref)]


Rule = tuple[str, str, Callable[[Facts, str], list[str]]]
RULES: list[Rule] = [
    ("no-default-credentials", "Production stacks do not run on RustFS's default credentials.", default_credentials),
    ("scoped-read-keys", "Production stacks give serving hosts a scoped read key, not the root keys.", read_keys),
    ("api-key-when-exposed", "A production stack that serves beyond loopback has a vLLM API key.", exposure),
    ("no-dev-environment", "A stack named as production does not say environment: dev.", environment),
    ("pinned-images", "Production stacks run images pinned by version tag or digest.", images),
    ("mount-image-by-digest", "Production stacks run the mount keepers' image (root on every serving host) "
                              "pinned by digest.", mount_image),
]


def judge(rule: Rule, resource_type: str, props: dict, urn: str, patterns: Optional[list[str]]) -> list[str]:
    """The violations of ``rule`` by one resource (only a stack's root component is judged)."""
    if resource_type not in ROOT_TYPES:
        return []
    stack, facts = stack_of(urn), props.get(FACTS)
    patterns = DEFAULT_PRODUCTION_STACKS if patterns is None else patterns
    if not isinstance(facts, dict):
        if rule[0] == RULES[0][0] and any(fnmatch.fnmatchcase(stack, p) for p in patterns):
            return [f"policyFacts: stack '{stack}' was made by a rustfs-vllm program that records no policy facts; "
                    "run `pulumi preview --policy-pack policy` with this project's current program"]
        return []
    if int(facts.get("version", 0)) > FACTS_VERSION:
        return [] if rule[0] != RULES[0][0] else [
            f"policyFacts: stack '{stack}' records facts version {facts.get('version')}, newer than this pack "
            f"knows ({FACTS_VERSION}); use the policy/ folder of the same rustfs-vllm checkout"]
    if not is_production(facts, stack, patterns):
        return []
    return rule[2](facts, stack)
