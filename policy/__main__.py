"""The rustfs-vllm policy pack: `pulumi preview --policy-pack policy` (or `up`) refuses a production
stack that breaks one of the rules in rules.py, one line per violation naming the key and the fix.

Config (`--policy-pack-config <file.json>`, `{"<policy name>": {...}}` per policy): ``productionStacks``, the stack-name
patterns (fnmatch) judged as production beside stacks that say ``environment: production``.
"""
import os
import sys
from typing import Any

from pulumi_policy import (EnforcementLevel, PolicyConfigSchema, PolicyPack, ReportViolation,
                           ResourceValidationArgs, ResourceValidationPolicy)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rules  # noqa: E402  (the pack runs as a program from its folder)

SCHEMA = PolicyConfigSchema(properties={"productionStacks": {
    "type": "array", "items": {"type": "string"}, "default": rules.DEFAULT_PRODUCTION_STACKS}})


def plain(value: Any) -> Any:
    """The SDK's read-only proxies of a resource's inputs as plain dicts and lists."""
    if hasattr(value, "items"):
        return {k: plain(v) for k, v in value.items()}
    if hasattr(value, "__iter__") and not isinstance(value, (str, bytes)):
        return [plain(v) for v in value]
    return value


def policy(rule: rules.Rule) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if args.resource_type not in rules.ROOT_TYPES:
            return    # only the root's facts are read: other inputs hold values unknown during a preview
        patterns = plain((args.get_config() or {}).get("productionStacks"))
        for line in rules.judge(rule, args.resource_type, plain(args.props), args.urn, patterns):
            report_violation(line, args.urn)
    return ResourceValidationPolicy(name=rule[0], description=rule[1], validate=validate,
                                    enforcement_level=EnforcementLevel.MANDATORY, config_schema=SCHEMA)


PolicyPack(name="rustfs-vllm", enforcement_level=EnforcementLevel.MANDATORY,
           policies=[policy(r) for r in rules.RULES])
