"""The policy pack's rules (policy/rules.py) on the facts the program records (components/core/policy_facts.py),
without the engine: each rule refuses what it names, in one line naming the key and the fix; a clean
production stack and a non-production stack pass. tests/toolchain/test_policy_pack.py runs the pack through
`pulumi preview --policy-pack policy`."""
from __future__ import annotations

import json

import pytest

from components.core.policy_facts import facts
from policy import rules
from tests.helpers import make_model
from tests.unit.probes import load_and_check

ROOT = "rustfs-vllm:index:ServingStack"


def urn(stack: str) -> str:
    return f"urn:pulumi:{stack}::rustfs-vllm::{ROOT}::rustfs-vllm"


def violations(props: dict, stack: str, patterns=None) -> dict[str, list[str]]:
    out = {r[0]: rules.judge(r, ROOT, props, urn(stack), patterns) for r in rules.RULES}
    return {k: v for k, v in out.items() if v}


def clean(**over) -> dict:
    f = {"version": 1, "stack": "prod", "environment": "production", "defaultCredentials": False, "readKeys": "scoped",
         "apiKeySet": True, "exposure": {"bindAddress": "0.0.0.0"},
         "images": {"vllmImage": "vllm/vllm-openai:v0.30.0", "rustfsImage": "rustfs/rustfs:1.0.1@sha256:" + "a" * 64,
                    "rcloneImage": "registry:5000/rustfs-vllm/rclone-mount:1.75.2@sha256:" + "b" * 64}}
    return {rules.FACTS: {**f, **over}}


def test_a_clean_production_stack_passes_and_a_dev_stack_is_not_judged():
    assert violations(clean(), "prod") == {}
    sloppy = clean(environment="dev", defaultCredentials=True, readKeys="shared", apiKeySet=False,
                   images={"vllmImage": "vllm/vllm-openai:latest", "rcloneImage": "rustfs-vllm/rclone-mount:1.75.2"})
    assert violations(sloppy, "dev") == {}                      # not production by name or environment
    assert set(violations(sloppy, "prod")) == {r[0] for r in rules.RULES}


@pytest.mark.parametrize("over, rule, key", [
    ({"defaultCredentials": True, "environment": "dev"}, "no-default-credentials", "rustfsAccessKey/rustfsSecretKey"),
    ({"readKeys": "shared"}, "scoped-read-keys", "readKeys: 'shared'"),
    ({"apiKeySet": False}, "api-key-when-exposed", "bindAddress: '0.0.0.0'"),
    ({"apiKeySet": False, "exposure": {"target": "kubernetes (NodePorts on every node)"}}, "api-key-when-exposed",
     "vllmApiKey: "),
    ({"environment": "dev"}, "no-dev-environment", "environment: 'dev'"),
    ({"images": {"vllmImage": "vllm/vllm-openai"}}, "pinned-images", "vllmImage: 'vllm/vllm-openai'"),
    ({"images": {"hosts[gpu].vllmImage": "registry:5000/v/vllm:latest"}}, "pinned-images", "hosts[gpu].vllmImage"),
    ({"images": {"rcloneImage": "rustfs-vllm/rclone-mount:1.75.2"}}, "mount-image-by-digest",
     "rcloneImage: 'rustfs-vllm/rclone-mount:1.75.2'"),
    ({"images": {"rcloneImage": "r:5000/rclone-mount@sha256:" + "c" * 64, "hosts[b].rcloneImage": "r:5000/rc:1.75.2"}},
     "mount-image-by-digest", "hosts[b].rcloneImage"),
])
def test_each_rule_refuses_in_one_line_naming_the_key_and_the_fix(over, rule, key):
    found = violations(clean(**over), "prod-eu")
    assert set(found) == {rule, *(["no-dev-environment"] if over.get("environment") == "dev" else [])}, found
    [line] = found[rule]
    assert line.startswith(key) and "\n" not in line and "'prod-eu'" in line
    assert any(fix in line for fix in ("set ", "pin ")), line


def test_loopback_binds_need_no_api_key_and_other_addresses_do():
    for address in ("127.0.0.1", "127.0.0.5", "::1", "localhost"):
        assert violations(clean(apiKeySet=False, exposure={"bindAddress": address}), "prod") == {}
    found = violations(clean(apiKeySet=False, exposure={"bindAddress": "127.0.0.1", "hosts[b].bindAddress": "10.0.0.2"}),
                       "prod")
    assert [line.split(":")[0] for line in found["api-key-when-exposed"]] == ["hosts[b].bindAddress"]


@pytest.mark.parametrize("ref, ok", [
    ("vllm/vllm-openai:v0.30.0", True), ("rustfs-vllm/rustfs:1.0.1-local", True), ("nginx:1.22.1", True),
    ("localhost:5000/vllm@sha256:" + "b" * 64, True), ("vllm/vllm-openai", False), ("localhost:5000/vllm", False),
    ("vllm/vllm-openai:latest", False), ("x/y:nightly", False), ("debian:bookworm", False)])
def test_pinned_means_a_digest_or_a_version_tag(ref, ok):
    assert rules.pinned(ref) is ok


def test_production_by_name_follows_the_packs_config():
    sloppy = clean(environment="test", readKeys="shared")
    assert violations(sloppy, "prod-eu") and not violations(sloppy, "staging")
    assert violations(sloppy, "staging", patterns=["staging"]) and not violations(sloppy, "prod-eu", patterns=[])


def test_a_root_without_facts_is_refused_only_on_a_production_name_and_other_resources_never():
    assert list(violations({}, "prod")) == ["no-default-credentials"]
    assert "policyFacts" in violations({}, "prod")["no-default-credentials"][0]
    assert violations({}, "staging") == {}
    assert all(rules.judge(r, "docker:index/container:Container", clean(readKeys="shared"), urn("prod"), None) == []
               for r in rules.RULES)


def test_the_program_records_the_facts_the_rules_read(tmp_path):
    make_model(tmp_path / "m1")
    raw = {"environment": "dev", "mountPath": str(tmp_path / "mnt"), "vllmImage": "vllm/vllm-openai:latest",
           "models": [{"name": "m1", "source": "m1"}]}
    cfg = load_and_check(raw, "prod", str(tmp_path), in_use=(), memory=24 * 2**30, volume=lambda name: None)
    f = facts(cfg)
    assert f["defaultCredentials"] is True and f["environment"] == "dev" and f["apiKeySet"] is False
    # the models' ports and the stack's one endpoint (routerPort) listen on bindAddress
    assert f["exposure"] == {"bindAddress": cfg.bind_address, "routerPort": cfg.bind_address}
    assert f["images"]["routerImage"] == "rustfs-vllm/vllm-router:0.1.17"
    assert f["images"]["vllmImage"] == "vllm/vllm-openai:latest" and "rustfsImage" in f["images"]
    assert "rcloneImage" in f["images"]                        # the mounts' keepers' image
    found = violations({rules.FACTS: f}, "prod")
    assert {"no-default-credentials", "no-dev-environment", "pinned-images"} <= set(found), found


def test_the_facts_hold_no_key(tmp_path):
    make_model(tmp_path / "m1")
    keys = {"rustfsAccessKey": "prod-access-7f3a", "rustfsSecretKey": "prod-secret-9b1c2d", "vllmApiKey": "api-4e5f6a"}
    raw = {"environment": "production", "mountPath": str(tmp_path / "mnt"), **keys,
           "models": [{"name": "m1", "source": "m1"}]}
    f = facts(load_and_check(raw, "prod", str(tmp_path), in_use=(), memory=24 * 2**30, volume=lambda name: None))
    assert f["apiKeySet"] is True and f["defaultCredentials"] is False
    assert not any(v in json.dumps(f) for v in keys.values())
