"""The schema is the one source of truth: Pulumi.yaml's config block is generated from it, and the
defaults config.load applies are the declared ones; and the code keeps its shape (short functions)."""
from __future__ import annotations

import ast

import yaml

from components import config
from components.config import schema
from tests.helpers import ROOT, make_model

SNAKE = {"rustfsAccessKey": "access_key", "rustfsSecretKey": "secret_key", "purgeOnDestroy": "purge_on_destroy",
         "sshPrivateKey": "ssh_private_key", "rustfsCaBundle": "ca_bundle", "mountFlags": "mount_flags"}


def snake(name: str) -> str:
    return SNAKE.get(name) or "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def test_pulumi_yaml_config_is_the_schema():
    declared = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    assert declared == schema.pulumi_config(), "run: python -m components.config.schema --write"
    assert list(declared) == [k.name for k in schema.KEYS]


def test_unset_keys_get_the_declared_defaults(tmp_path):
    make_model(tmp_path / "m")
    cfg = config.load({"environment": "dev", "mountPath": str(tmp_path / "mnt"),
                       "models": [{"name": "m", "source": "m"}]}, "dev", str(tmp_path))
    checked = 0
    for k in schema.KEYS:
        if k.default in (schema.COMPUTED, None) or k.name in ("environment", "hosts", "rcloneBinary"):
            continue
        value = getattr(cfg, snake(k.name))
        assert value == (tuple(k.default) if isinstance(k.default, list) else k.default), k.name
        checked += 1
    assert checked >= 20
    m = cfg.models[0]
    for f in schema.MODEL_FIELDS:
        if f.default not in (schema.COMPUTED, schema.REQUIRED) and f.name not in ("env", "hosts"):
            got = getattr(m, snake(f.name).replace("max_model_len", "max_model_len"))
            assert got == (tuple(f.default) if isinstance(f.default, list) else f.default), f.name


def test_a_bad_value_names_the_key_the_value_and_the_declared_allowed(tmp_path):
    make_model(tmp_path / "m")
    base = {"environment": "dev", "mountPath": str(tmp_path / "mnt"), "models": [{"name": "m", "source": "m"}]}
    for k in schema.KEYS:
        if k.choices or k.lo is not None:
            bad = "not-a-choice" if k.choices else int(k.lo) - 1
            try:
                config.load({**base, k.name: bad}, "dev", str(tmp_path))
            except config.ConfigError as exc:
                assert f"rustfs-vllm:{k.name} = {bad!r} is invalid: {k.allowed}" in exc.problems, exc.problems
            else:
                raise AssertionError(f"{k.name} = {bad!r} was accepted")


def test_no_function_in_components_is_longer_than_60_lines():
    long = []
    for path in sorted((ROOT / "components").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1})")
    assert not long, long
