"""loadFormat: runai_streamer under Pulumi mocks: the graph of a streamed model (no mount, the bucket's
URL, keys only as a secret file, host networking), its config rules and its preflight check."""
from __future__ import annotations

import json

import pytest

from components import config
from components.docker import preflight
from components.serving import streamer
from tests.helpers import ROOT, make_model
from tests.unit.graph import READ_SECRET, READ_USER, build, unwrap
from tests.unit.probes import GivenProbes

KEYS = ("stream-access-key-0001", "stream-secret-key-0001")
CONTAINER = "docker:index/container:Container"
COMMAND = "command:local:Command"


def raw_config(tmp_path, **b_fields) -> dict:
    make_model(tmp_path / "a")
    make_model(tmp_path / "b", seed=2)
    return {"rustfsAccessKey": KEYS[0], "rustfsSecretKey": KEYS[1], "bucket": "weights",
            "mountPath": str(tmp_path / "mnt"),
            "models": [{"name": "a", "source": str(tmp_path / "a"), "port": 8100, "loadFormat": "mount"},
                       {"name": "b", "source": str(tmp_path / "b"), "port": 8101,
                        "loadFormat": "runai_streamer", **b_fields}]}


@pytest.fixture
def graph(tmp_path):
    return build(config.load(raw_config(tmp_path), "dev", str(ROOT)))


def test_a_streamed_model_has_no_mount_and_reads_its_prefix(graph):
    mounts = sorted(r.name for r in graph.by_type(COMMAND) if r.name.startswith("mount-"))
    assert "mount-a-command" in mounts and not any(n.startswith("mount-b") for n in mounts)
    b = graph.one(CONTAINER, "vllm-b-container")
    argv = b.plain("command")
    assert argv[:2] == ["--model", "s3://weights/b/"]
    assert argv[argv.index("--load-format") + 1] == "runai_streamer"
    assert argv[argv.index("--port") + 1] == "8101" and "--host" in argv
    assert b.plain("networkMode") == "host" and not b.plain("ports")
    assert [m["target"] for m in b.plain("mounts")] == ["/vllm-cache"]      # only the compile cache, no weights
    assert {"label": "rustfs-vllm.ports", "value": "8101"} in b.plain("labels")   # preflight: our own port
    # the mounted model keeps the guide's container exactly
    a = graph.one(CONTAINER, "vllm-a-container")
    assert a.plain("command")[:2] == ["--model", "/models/a"] and "--load-format" not in a.plain("command")
    assert a.plain("networkMode") is None and a.plain("ports")[0]["external"] == 8100


def test_the_keys_reach_the_streamer_as_a_secret_file_only(graph):
    b = graph.one(CONTAINER, "vllm-b-container")
    env = dict(e.split("=", 1) for e in b.plain("envs"))
    assert env["AWS_SHARED_CREDENTIALS_FILE"] == streamer.CREDENTIALS_FILE
    assert env["RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING"] == "0" and env["AWS_EC2_METADATA_DISABLED"] == "true"
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    for key in ("command", "envs", "labels"):
        text = json.dumps(b.plain(key))
        assert not any(k in text for k in (*KEYS, READ_SECRET)), f"{key} carries a key"
    assert b.is_secret("uploads")
    files = {u["file"]: u["content"] for u in b.plain("uploads")}
    # readKeys scoped (the default with s3Server rustfs): the streamer reads with the stack's read key
    assert graph.one("dynamic/rustfs-vllm:ReadKey")
    assert files[streamer.CREDENTIALS_FILE] == streamer.credentials(READ_USER, READ_SECRET)
    assert not any(k in json.dumps(b.plain("uploads")) for k in KEYS), "no root key in vLLM's container"


def test_a_streamed_model_waits_for_its_upload_not_for_a_mount(graph):
    b = graph.one(CONTAINER, "vllm-b-container")
    deps = " ".join(b.dependencies)
    assert "ModelUpload::model-b" in deps and "mount" not in deps


def test_outputs_say_how_each_model_reads_its_weights(tmp_path):
    from components.docker.outputs import load_format

    g = build(config.load(raw_config(tmp_path), "dev", str(ROOT)))
    assert load_format(g.stack.cfg, "a") == "mount" and load_format(g.stack.cfg, "b") == "runai_streamer"


def test_load_format_and_its_flags_are_checked(tmp_path):
    with pytest.raises(config.ConfigError) as e:
        config.load(raw_config(tmp_path, loadFormat="s3"), "dev", str(ROOT))
    assert "rustfs-vllm:models[b].loadFormat = 's3' is invalid: one of mount, runai_streamer" in str(e.value)
    with pytest.raises(config.ConfigError) as e:
        config.load(raw_config(tmp_path, extraArgs=["--load-format=safetensors"]), "dev", str(ROOT))
    assert "models[b].extraArgs = '--load-format=safetensors' is invalid" in str(e.value)


def test_preflight_refuses_an_image_without_the_streamer(tmp_path):
    cfg = config.load(raw_config(tmp_path), "dev", str(ROOT))
    asked: list[tuple[str, str]] = []

    def lacks(image: str, module: str) -> bool:
        asked.append((image, module))
        return False
    problems = preflight.check(cfg, GivenProbes(modules=lacks))
    assert asked == [(cfg.vllm_image, "runai_model_streamer_s3")]
    assert len(problems) == 1 and problems[0].startswith(
        "rustfs-vllm:models[b].loadFormat = 'runai_streamer' is invalid: a loader the vLLM image has")
    assert preflight.check(cfg, GivenProbes(modules=lambda i, m: True)) == []
    assert preflight.check(cfg, GivenProbes(modules=lambda i, m: None)) == []   # cannot tell: up says


def test_the_credentials_file_is_what_boto3_reads(tmp_path):
    """The file's form is the AWS shared-credentials INI: botocore's own parser reads our keys back."""
    from botocore.configloader import raw_config_parse

    path = tmp_path / "credentials"
    path.write_text(streamer.credentials(*KEYS))
    assert raw_config_parse(str(path))["default"] == {"aws_access_key_id": KEYS[0],
                                                      "aws_secret_access_key": KEYS[1]}


def test_no_key_anywhere_but_secret_inputs(graph):
    for r in graph.resources:
        for key, value in r.inputs.items():
            if any(k in json.dumps(unwrap(value), default=str) for k in KEYS):
                assert r.is_secret(key), f"{r.name}.{key} carries a key but is not secret"
