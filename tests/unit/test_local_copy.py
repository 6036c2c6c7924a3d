"""loadFormat: local_copy under Pulumi mocks: the graph of a model copied to the host's disk (a copy
command instead of a mount, the container binding the revision's folder, keys only in the copy's
secret environment), its config rules, and what a lost copy asks for."""
from __future__ import annotations

import json
import os

import pytest

from components import config
from components.docker import copies
from components.mounting import copy_tool
from tests.helpers import ROOT, make_model
from tests.unit.graph import READ_SECRET, READ_USER, build, unwrap

KEYS = ("copy-access-key-00001", "copy-secret-key-00001")
CONTAINER = "docker:index/container:Container"
COMMAND = "command:local:Command"


def raw_config(tmp_path, **b_fields) -> dict:
    make_model(tmp_path / "a")
    make_model(tmp_path / "b", seed=2)
    return {"rustfsAccessKey": KEYS[0], "rustfsSecretKey": KEYS[1], "bucket": "weights",
            "mountPath": str(tmp_path / "mnt"), "mountCacheDir": str(tmp_path / "cache"),
            "models": [{"name": "a", "source": str(tmp_path / "a"), "port": 8100, "loadFormat": "mount"},
                       {"name": "b", "source": str(tmp_path / "b"), "port": 8101,
                        "loadFormat": "local_copy", **b_fields}]}


@pytest.fixture
def graph(tmp_path):
    return build(config.load(raw_config(tmp_path), "dev", str(ROOT)))


def _revision(graph, name: str) -> str:
    return graph.stack.store.uploads[name].revision_digest


def test_a_copied_model_has_a_copy_command_and_no_mount(graph, tmp_path):
    names = sorted(r.name for r in graph.by_type(COMMAND))
    assert "mount-a-command" in names and "copy-b-command" in names
    assert not any(n.startswith(("mount-b", "copy-a")) for n in names)
    cmd = graph.one(COMMAND, "copy-b-command")
    assert cmd.plain("create").endswith("rclone-mount copy-up") and cmd.plain("delete").endswith("rclone-mount copy-down")
    env = cmd.plain("environment")
    assert env["RV_SOURCE"] == "weights/b" and env["RV_REVISION"] == _revision(graph, "b")
    assert env["RV_COPY_ROOT"] == str(tmp_path / "cache" / "b" / "copy")
    expect = json.loads(env["RV_EXPECT"])
    manifest = graph.stack.store.uploads["b"].manifest
    assert expect == {rel: [int(e["size"]), e["sha256"]] for rel, e in manifest.items()}   # every file's sha256
    assert _revision(graph, "b") in json.dumps(cmd.plain("triggers"))     # a new revision: a new copy


def test_the_container_binds_the_revisions_folder_at_the_guides_path(graph, tmp_path):
    b = graph.one(CONTAINER, "vllm-b-container")
    assert b.plain("command")[:2] == ["--model", "/models/b"]            # the guide's argv, unchanged
    [bind, cache] = b.plain("mounts")
    assert cache["target"] == "/vllm-cache"
    assert bind["source"] == str(tmp_path / "cache" / "b" / "copy" / _revision(graph, "b"))
    assert bind["target"] == "/models/b" and bind["readOnly"] is True and not bind.get("bindOptions")
    assert {"label": "rustfs-vllm.copy", "value": "generation-0"} in b.plain("labels")
    assert "Command::copy-b-command" in " ".join(b.dependencies)
    # the mounted model keeps its container exactly as before
    a = graph.one(CONTAINER, "vllm-a-container")
    assert a.plain("mounts")[0]["target"] == "/models" and a.plain("mounts")[0]["bindOptions"]["propagation"] == "rslave"
    assert not any(lbl["label"] == "rustfs-vllm.copy" for lbl in a.plain("labels"))


def test_a_new_revision_replaces_the_copy_and_the_container(tmp_path):
    raw = raw_config(tmp_path)
    g1 = build(config.load(raw, "dev", str(ROOT)))
    cfg_json = tmp_path / "b" / "config.json"
    cfg_json.write_text(cfg_json.read_text().replace("{", '{"changed": 1, ', 1))
    g2 = build(config.load(raw, "dev", str(ROOT)))
    t1, t2 = (g.one(COMMAND, "copy-b-command").plain("triggers") for g in (g1, g2))
    assert t1 != t2 and _revision(g2, "b") in json.dumps(t2)
    s1, s2 = (g.one(CONTAINER, "vllm-b-container").plain("mounts")[0]["source"] for g in (g1, g2))
    assert s1 != s2 and s2.endswith(_revision(g2, "b"))
    # and a new, empty compile cache: nothing compiled for other weights is reused
    v1, v2 = (g.one("docker:index/volume:Volume", "vllm-b-compile-cache").plain("name") for g in (g1, g2))
    assert v1 != v2
    # the other model is untouched
    assert g1.one(CONTAINER, "vllm-a-container").inputs == g2.one(CONTAINER, "vllm-a-container").inputs


def test_keys_only_in_the_copys_secret_environment(graph):
    cmd = graph.one(COMMAND, "copy-b-command")
    assert cmd.is_secret("environment")
    env = cmd.plain("environment")
    # readKeys scoped (the default with s3Server rustfs): the copy reads with the stack's read key
    assert graph.one("dynamic/rustfs-vllm:ReadKey")
    assert env["RCLONE_CONFIG_RVLLM_DEV_ACCESS_KEY_ID"] == READ_USER
    assert env["RCLONE_CONFIG_RVLLM_DEV_SECRET_ACCESS_KEY"] == READ_SECRET
    assert not any(k in json.dumps(env) for k in KEYS), "no root key on the serving side"
    for r in graph.resources:
        for key, value in r.inputs.items():
            if any(k in json.dumps(unwrap(value), default=str) for k in (*KEYS, READ_SECRET)):
                assert r.is_secret(key), f"{r.name}.{key} carries a key but is not secret"


def test_outputs_say_the_model_reads_a_local_copy(graph):
    from components.docker.outputs import load_format

    assert load_format(graph.stack.cfg, "a") == "mount" and load_format(graph.stack.cfg, "b") == "local_copy"


def test_copy_flags_are_checked(tmp_path):
    raw = raw_config(tmp_path)
    raw["copyFlags"] = ["--transfers", "8", "--s3-secret-access-key=x"]
    with pytest.raises(config.ConfigError) as e:
        config.load(raw, "dev", str(ROOT))
    assert "rustfs-vllm:copyFlags = '--s3-secret-access-key=x' is invalid: no credential" in str(e.value)
    raw["copyFlags"] = ["--transfers", "8"]
    g = build(config.load(raw, "dev", str(ROOT)))
    assert g.one(COMMAND, "copy-b-command").plain("environment")["RV_COPY_FLAGS"] == "--transfers\n8"


def test_local_copy_is_refused_on_kubernetes_naming_the_key(tmp_path):
    from tests.unit.test_kube import KUBECONFIG

    raw = raw_config(tmp_path)
    raw.update(target="kubernetes", kubeconfig=KUBECONFIG, kubeNodeAddress="127.0.0.1")
    for i, m in enumerate(raw["models"]):
        m["port"] = 30100 + i
    with pytest.raises(config.ConfigError) as e:
        config.load(raw, "dev", str(ROOT))
    assert "rustfs-vllm:models[b].loadFormat = 'local_copy' is invalid: mount or runai_streamer with target: " \
           "kubernetes" in str(e.value)


def test_a_lost_copy_asks_for_the_next_generation(tmp_path, capsys):
    marker, folder = tmp_path / "marker.json", tmp_path / "copy" / "rev1"
    assert copies.generation(str(marker), str(folder), True) == 0                  # never copied
    marker.write_text(json.dumps({"generation": 2}))
    folder.mkdir(parents=True)
    (folder / copy_tool.MARKER).write_text("{}")
    assert copies.generation(str(marker), str(folder), True) == 2                  # present: as it was
    os.remove(folder / copy_tool.MARKER)
    assert copies.generation(str(marker), str(folder), True) == 3                  # lost: copied again
    assert copies.generation(str(marker), str(folder), False) == 2                 # a remote host: not looked at


def test_the_compile_cache_can_be_turned_off(tmp_path):
    raw = raw_config(tmp_path)
    raw["vllmCompileCache"] = False
    g = build(config.load(raw, "dev", str(ROOT)))
    assert not [v for v in g.by_type("docker:index/volume:Volume") if "compile" in v.name]
    b = g.one(CONTAINER, "vllm-b-container")
    assert [m["target"] for m in b.plain("mounts")] == ["/models/b"]
    assert not any(e.startswith(("VLLM_CACHE_ROOT=", "TORCHINDUCTOR_CACHE_DIR=")) for e in b.plain("envs") or [])
