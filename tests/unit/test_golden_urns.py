"""Every stack shape's resources, as the program registers them under Pulumi mocks, against the record
in tests/unit/golden/ (made by commit 4412807's code, before issue 30's target-neutral core): same URNs,
same parents, same dependencies, same inputs (the dynamic providers' pickled references too), same
secret marks. A refactor that changes none of these neither replaces nor orphans anything in a
deployed stack. `RV_WRITE_GOLDEN=1 pytest tests/unit/test_golden_urns.py` rewrites the record: only
for a change meant to show in every deployed stack's preview (say so in the commit).

Every shape is recorded with readKeys shared (the serving side on the root keys, as every stack was
before issue 31): a stack that keeps them is unchanged. What readKeys scoped adds and changes is pinned
in tests/unit/test_read_keys.py."""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import re

import pytest

from components import config
from tests.helpers import ROOT
from tests.unit.graph import build, config_from_file, unwrap
from tests.unit.test_hosts import load as load_hosts, raw_two_hosts
from tests.unit.test_kube import raw as raw_kube

GOLDEN = ROOT / "tests" / "unit" / "golden"


def from_file(stack: str, tmp_path, **over) -> config.StackConfig:
    return config_from_file(stack, tmp_path, "/nonexistent-golden/mnt",
                            keys=("golden-access-key-0001", "golden-secret-0001"), **over)


def with_state(cfg: config.StackConfig, tmp_path) -> config.StackConfig:
    return type(cfg)(**{**cfg.__dict__, "state_dir": str(tmp_path / ".state")})


def shape(name: str, tmp_path, monkeypatch) -> tuple[config.StackConfig, str]:
    monkeypatch.chdir(tmp_path)
    if name in ("dev", "offline"):
        return from_file(name, tmp_path), name
    if name == "offline-mount":
        return from_file("offline", tmp_path, loadFormat="mount"), "offline"
    if name == "offline-streamer":
        return from_file("offline", tmp_path, loadFormat="runai_streamer"), "offline"
    if name == "two-hosts":
        raw = raw_two_hosts(tmp_path, balancerImage="nginx:1.22.1")
        raw["models"][0]["balancerPort"] = 9000
        return with_state(load_hosts(raw), tmp_path), "multi"
    assert name == "kubernetes"
    return config.load(raw_kube(tmp_path), "k8s", str(ROOT)), "k8s"


def without_tools_content(text: str) -> str:
    """The SSH hosts' tools archive and its digest stand for the tools' content, which changes with
    any edit of them (then preview shows an update of the host-tools command: the new tools copied);
    what is recorded is the rest."""
    from components.hosts import host_tools

    for ca in ("", *sorted(set(re.findall(r'"ca_bundle": "([^"]+)"', text)))):
        data = host_tools.bundle(ca)
        text = text.replace(hashlib.sha256(data).hexdigest(), "<tools-digest>")
        text = text.replace(base64.b64encode(data).decode(), "<tools-archive>")
    return text


def without_copy_token(text: str) -> str:
    """A local copy's RV_TOKEN hashes, among its inputs, the rclone path, which lies under the checkout
    (/work/main here, elsewhere in CI): it stands as <copy-token>. The upgrade tests (tests/e2e/
    test_upgrade.py, local_copy) prove on a real up from the main before that it does not change."""
    return re.sub(r'"RV_TOKEN": "[0-9a-f]{16}"', '"RV_TOKEN": "<copy-token>"', text)


def record(cfg: config.StackConfig, stack: str, tmp_path) -> dict[str, dict]:
    g = build(dataclasses.replace(cfg, read_keys="shared"), stack=stack)
    out = {r.urn: {"parent": r.parent, "dependencies": sorted(r.dependencies), "provider": r.provider,
                   "secret": sorted(k for k in r.inputs if r.is_secret(k)), "inputs": unwrap(r.inputs),
                   "retain_on_delete": r.retain_on_delete}
           for r in g.resources if "::pulumi:pulumi:Stack::" not in r.urn}   # registered once per process
    text = json.dumps(out, sort_keys=True, default=str, indent=1)
    text = without_copy_token(without_tools_content(text))
    return json.loads(text.replace(str(tmp_path / "unit-project"), "<root>").replace(str(tmp_path), "<tmp>").replace(str(ROOT), "<root>"))


SHAPES = ["dev", "offline", "offline-mount", "offline-streamer", "two-hosts", "kubernetes"]


@pytest.mark.parametrize("name", SHAPES)
def test_every_urn_parent_dependency_and_input_is_as_recorded(name, tmp_path, monkeypatch):
    now = record(*shape(name, tmp_path, monkeypatch), tmp_path)
    path = GOLDEN / f"{name}.json"
    if os.environ.get("RV_WRITE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(now, sort_keys=True, indent=1) + "\n")
    before = json.loads(without_copy_token(path.read_text()))
    assert sorted(set(now) - set(before)) == [], "resources the record lacks"
    assert sorted(set(before) - set(now)) == [], "recorded resources the program no longer makes"
    for urn, was in before.items():
        for part in was:
            assert now[urn][part] == was[part], f"{urn}: {part}"
