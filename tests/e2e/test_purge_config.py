"""purgeOnDestroy given right before `pulumi destroy` is what destroy does, through the real engine and the
upstream language host (issues 29, 43). Destroy works from the deployed state; the deletes that purge
follow the configuration the engine hands them when the program ran (`pulumi destroy --run-program`:
any source), else Pulumi.<stack>.yaml as it is at destroy time, saying so
(components/providers/destroy_config.py):

1. up with purgeOnDestroy false, then `pulumi config set purgeOnDestroy true`, then a plain destroy: the
   model's objects are gone, and so are its copy and the VFS cache on the host (issue 37: destroy
   tells the host first, components/providers/purge_order.py).
2. up with purgeOnDestroy true, then `pulumi config set purgeOnDestroy false`, then destroy: every
   object is kept, and the copy on the host too.
3. up with purgeOnDestroy false, then `pulumi destroy --run-program --config-file other.yaml` whose
   purgeOnDestroy is true (the stack file still says false): the objects, the copy and the cache are gone.
(A destroy with nothing asking for a purge keeps everything and no line of it speaks of a purge:
tests/e2e/test_lifecycle.py's step 7, on its stack; this file's fourth up and destroy of it were cut on
2026-12-07 for CI's 90 minutes.)

One small model, loadFormat local_copy, no smoke test; the server is tests/s3_under_test.py's
(real RustFS under `make test-rustfs`, else the rclone serve s3 stand-in, NOT RustFS).
"""
from __future__ import annotations

import secrets
import shutil
from pathlib import Path

import pytest
import yaml

from tests import s3_under_test
from tests.helpers import ROOT, free_port
from tests.pulumi_cli import Stack

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
PREFIX, BUCKET = "smollm2", "purge-models"


def test_destroy_follows_purge_on_destroy_set_after_the_last_up(tmp_path: Path):
    if not MODEL.joinpath("model.safetensors").exists():
        pytest.skip("scripts/build-smollm2-model has not run (scripts/test runs it)")
    source = tmp_path / "model"
    shutil.copytree(MODEL, source, ignore=shutil.ignore_patterns(".complete"))
    stack = Stack(ROOT, f"prg-{secrets.token_hex(3)}")
    stack.init()
    name = f"rvllm-{stack.name}"
    volume = f"{name}-data"
    cfg = {"environment": "test", "namePrefix": name, **s3_under_test.stack_settings(),
           "rustfsPort": str(free_port()), "bindAddress": "127.0.0.1", "bucket": BUCKET,
           "mountPath": f"/mnt/{name}", "mountCacheDir": str(tmp_path / "cache"), "smokeTest": False,
           "vllmImage": "rustfs-vllm/vllm-openai-cpu:0.30.0", "vllmReadyTimeout": 600, "vllmCompileCache": False,
           "models": [{"name": "smollm2", "source": str(source), "prefix": PREFIX, "port": free_port(),
                       "maxModelLen": 512, "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"],
                       "loadFormat": "local_copy"}]}   # the host's copy and the VFS cache (issue 37)
    try:
        # (deployed, purgeOnDestroy given at destroy, how it is given)
        for deployed, at_destroy, how in ((False, True, "config set"), (True, False, "config set"),
                                          (False, True, "--config-file")):
            stack.write_config({**cfg, "purgeOnDestroy": deployed})
            stack.set("rustfsAccessKey", "prg-access-0123456789", secret=True)
            stack.set("rustfsSecretKey", "prg-secret-0123456789", secret=True)
            stack.run("up", "--yes", "--skip-preview")
            files = {k for k in s3_under_test.volume_objects(volume) if k.startswith(f"{BUCKET}/{PREFIX}/")}
            assert len(files) >= 5, files
            if how == "config set":
                stack.set("purgeOnDestroy", str(at_destroy).lower())
                out = stack.run("destroy", "--yes", "--skip-preview")
            else:                                   # --config-file
                other = tmp_path / "other.yaml"
                mine = yaml.safe_load((ROOT / f"Pulumi.{stack.name}.yaml").read_text())
                mine["config"]["rustfs-vllm:purgeOnDestroy"] = at_destroy
                other.write_text(yaml.safe_dump(mine))
                out = stack.run("destroy", "--yes", "--skip-preview", "--run-program", "--config-file", str(other))
                kept = yaml.safe_load((ROOT / f"Pulumi.{stack.name}.yaml").read_text())["config"]
                assert str(kept["rustfs-vllm:purgeOnDestroy"]).lower() == str(deployed).lower(), "the stack file changed"
            left = {k for k in s3_under_test.volume_objects(volume) if k.startswith(f"{BUCKET}/{PREFIX}/")}
            if at_destroy:
                assert left == set(), f"{how} purgeOnDestroy true, then destroy: {len(left)} objects stayed"
            else:
                assert left == files, f"{how} purgeOnDestroy false, then destroy: objects were removed"
            said = out.stdout + out.stderr
            assert "Traceback" not in said
            # the host's copy and VFS cache follow the same value (issue 37), saying so, one line each
            cache = tmp_path / "cache"
            left_on_host = sorted(str(p.relative_to(cache)) for p in cache.rglob("*")) if cache.exists() else []
            if at_destroy:
                assert left_on_host == [], f"{how} purgeOnDestroy true, then destroy: left on the host {left_on_host[:5]}"
                assert "host local: purgeOnDestroy is true" in said and "removed the local copy" in said, said[-3000:]
                assert "set purgeOnDestroy to remove it" not in said, said[-3000:]
                source_words = ("in the configuration this destroy ran the program with" if how == "--config-file"
                                else f"in Pulumi.{stack.name}.yaml")
                assert f"model {PREFIX}: purgeOnDestroy is true {source_words}" in said, said[-3000:]
            else:
                assert any(p.endswith("model.safetensors") for p in left_on_host), left_on_host
                assert "kept the local copy" in said, said[-3000:]
                assert "host local: purgeOnDestroy is false" in said, said[-3000:]
            for line in said.splitlines():   # no two of these messages run together on one line
                assert line.count("purgeOnDestroy is") <= 1 and line.count(" at /") <= 1, line
    finally:
        stack.teardown(volume)
