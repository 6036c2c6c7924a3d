"""The schema is the one source of truth: Pulumi.yaml's config block is generated from it, and the
defaults config.load applies are the declared ones; and the code keeps its shape (short functions)."""
from __future__ import annotations

import ast

import yaml

from components import config
from components.config import schema
from components.config.kube import KUBE_KEYS
from tests.helpers import ROOT, make_model
from tests.unit.test_kube import KUBECONFIG

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
        if k.default in (schema.COMPUTED, None) or k.name in ("environment", "hosts", "models", "rcloneBinary", "target",
                                                                         "balancerImage",    # no longer used
                                                                         "storeKey"):        # store_ref reads it
            continue
        if k.name in KUBE_KEYS:   # target kubernetes only: tests/unit/test_kube.py checks their defaults
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
            cluster = {"target": "kubernetes", "kubeconfig": KUBECONFIG} if k.name in KUBE_KEYS else {}
            try:
                config.load({**base, **cluster, k.name: bad}, "dev", str(tmp_path))
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


def _readme_rows(header: str) -> list[dict[str, str]]:
    """Each table under ``header`` in the user docs (docs/CONFIGURATION.md, docs/HOSTS.md): {first cell: second cell}."""
    tables = []
    text = "\n".join((ROOT / "docs" / f).read_text() for f in ("CONFIGURATION.md", "HOSTS.md"))
    for part in text.split(header)[1:]:
        rows = {}
        for line in part.split("\n\n", 1)[0].strip().splitlines()[1:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("`")] = cells[1]
        tables.append(rows)
    return tables


def _shown(default) -> str:
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, list):
        return "`[]`" if not default else "`[" + ", ".join(f'"{v}"' for v in default) + "]`"
    if isinstance(default, dict):
        return "`{}`"
    return f"`{default}`"


def _starts(cell: str, default) -> bool:
    return cell.startswith(("`\"\"`", "none")) if default == "" else cell.startswith(_shown(default))


def test_the_readme_reference_lists_every_key_and_field_with_its_default():
    [keys] = _readme_rows("| key | default | meaning |")
    assert set(keys) == {k.name for k in schema.KEYS}
    for k in schema.KEYS:
        if k.default not in (schema.COMPUTED, None) and not k.secret and k.name != "hosts":
            assert _starts(keys[k.name], k.default), (k.name, keys[k.name])
    tables = _readme_rows("| field | default | meaning |")
    [hosts] = [t for t in tables if "docker" in t]
    [fields] = [t for t in tables if "source" in t]
    assert set(hosts) == {f.name for f in schema.HOST_FIELDS}
    assert set(fields) == {f.name for f in schema.MODEL_FIELDS}
    for f in schema.MODEL_FIELDS:
        if f.default not in (schema.COMPUTED, schema.REQUIRED, None):
            assert _starts(fields[f.name], f.default), (f.name, fields[f.name])
