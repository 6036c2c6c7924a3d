"""Configuration validation: every bad value is rejected with the key, the value and what is allowed."""
from __future__ import annotations

import os

import pytest

from components import config
from tests.helpers import make_model
from tests.unit.probes import load_and_check

GIB = 2**30


def load(raw, tmp_path, stack="dev", in_use=(), memory=24 * GIB, volume_format=lambda name: None):
    return load_and_check(raw, stack, str(tmp_path), in_use=tuple(in_use), memory=memory, volume=volume_format)


@pytest.fixture
def good(tmp_path):
    make_model(tmp_path / "m1")
    make_model(tmp_path / "m2", seed=2)
    return {
        "environment": "dev",
        "mountPath": str(tmp_path / "mnt"),
        "models": [{"name": "m1", "source": "m1"}],
    }


def test_good_config_loads_with_defaults(good, tmp_path):
    cfg = load(good, tmp_path)
    assert cfg.bucket == "vllm-models"
    assert cfg.s3_server == "rustfs"
    assert cfg.rustfs_image == "rustfs/rustfs-x86-musl:v2.3.1"
    assert cfg.rustfs_endpoint == "http://127.0.0.1:9000"
    assert cfg.models[0].source == str(tmp_path / "m1")
    assert cfg.models[0].prefix == "m1" and cfg.models[0].port == 8000
    assert cfg.name_prefix == "rvllm-dev"
    assert cfg.uses_default_credentials


def _bad(tmp_path, good, change, stack="dev", **kw):
    raw = dict(good)
    change(raw)
    with pytest.raises(config.ConfigError) as info:
        load(raw, tmp_path, stack=stack, **kw)
    return str(info.value)


def _models(**fields):
    def change(raw):
        raw["models"] = [{**raw["models"][0], **fields}]
    return change


def _set(**values):
    def change(raw):
        raw.update(values)
    return change


def _symlink_model(tmp_path):
    def change(raw):
        make_model(tmp_path / "ln")
        os.symlink("/nonexistent/escape.json", tmp_path / "ln" / "escape.json")
        raw["models"] = [{"name": "ln", "source": "ln"}]
    return change


def _symlink_loop(tmp_path):
    def change(raw):
        make_model(tmp_path / "lp")
        os.symlink("b.json", tmp_path / "lp" / "a.json")
        os.symlink("a.json", tmp_path / "lp" / "b.json")
        raw["models"] = [{"name": "lp", "source": "lp"}]
    return change


def _dir_symlink(tmp_path):
    def change(raw):
        make_model(tmp_path / "dl")
        os.symlink("..", tmp_path / "dl" / "up")
        raw["models"] = [{"name": "dl", "source": "dl"}]
    return change


def _no_weights(tmp_path):
    def change(raw):
        make_model(tmp_path / "nw")
        (tmp_path / "nw" / "model.safetensors").unlink()
        raw["models"] = [{"name": "nw", "source": "nw"}]
    return change


def _no_config(tmp_path):
    def change(raw):
        make_model(tmp_path / "nc")
        (tmp_path / "nc" / "config.json").unlink()
        raw["models"] = [{"name": "nc", "source": "nc"}]
    return change


def _unreadable(tmp_path):
    def change(raw):
        make_model(tmp_path / "ur")
        os.chmod(tmp_path / "ur" / "model.safetensors", 0)
        raw["models"] = [{"name": "ur", "source": "ur"}]
    return change


def _nonempty_mount(tmp_path):
    def change(raw):
        (tmp_path / "full").mkdir()
        (tmp_path / "full" / "keep.txt").write_text("x")
        raw["mountPath"] = str(tmp_path / "full")
    return change


# (id, change, expected fragments: key, value, allowed)
CASES = [
    ("missing-folder", _models(source="nope"), ["models[m1].source", "nope", "does not exist"]),
    ("bucket-uppercase", _set(bucket="Vllm_Models"), ["rustfs-vllm:bucket", "Vllm_Models", "3-63 characters"]),
    ("bucket-short", _set(bucket="ab"), ["rustfs-vllm:bucket", "'ab'", "3-63"]),
    ("bucket-ip", _set(bucket="192.168.1.1"), ["rustfs-vllm:bucket", "192.168.1.1", "not an IP"]),
    ("gmu-zero", _models(gpuMemoryUtilization=0), ["gpuMemoryUtilization", "0", "(0, 1]"]),
    ("gmu-above-one", _models(gpuMemoryUtilization=1.5), ["gpuMemoryUtilization", "1.5", "(0, 1]"]),
    ("kv-too-big", _models(kvCacheSpaceGib=64), ["kvCacheSpaceGib", "64", "at most this machine's memory"]),
    ("kv-and-gmu", _models(kvCacheSpaceGib=1, gpuMemoryUtilization=0.5), ["kvCacheSpaceGib", "not both"]),
    ("max-len-too-big", _models(maxModelLen=4096), ["maxModelLen", "4096", "2048"]),
    ("max-len-type", _models(maxModelLen="long"), ["maxModelLen", "long", "integer"]),
    ("dtype", _models(dtype="int3"), ["models[m1].dtype", "int3", "float32"]),
    ("port-range", _models(port=70000), ["models[m1].port", "70000", "1-65535"]),
    ("s3-server-kind", _set(s3Server="minio"), ["rustfs-vllm:s3Server", "minio", "rustfs, rclone-serve-s3, external"]),
    ("external-without-endpoint", _set(s3Server="external"), ["rustfs-vllm:rustfsEndpoint", "required"]),
    ("endpoint-url", _set(s3Server="external", rustfsEndpoint="rustfs:9000"), ["rustfsEndpoint", "rustfs:9000", "http(s)://"]),
    ("restart", _set(vllmRestart="sometimes"), ["rustfs-vllm:vllmRestart", "sometimes", "unless-stopped"]),
    ("environment", _set(environment="qa"), ["rustfs-vllm:environment", "qa", "dev, test, production"]),
    ("gpus", _set(vllmGpus="two"), ["rustfs-vllm:vllmGpus", "two", "count=N"]),
    ("shm", _set(vllmShmSize="lots"), ["rustfs-vllm:vllmShmSize", "lots", "2g"]),
    ("mount-relative", _set(mountPath="mnt/x"), ["rustfs-vllm:mountPath", "mnt/x", "absolute"]),
    ("mount-root", _set(mountPath="/"), ["rustfs-vllm:mountPath", "'/'", "dedicated folder"]),
    ("mount-flag-secret", _set(mountFlags=["--s3-secret-access-key=x"]), ["mountFlags", "secret", "credentials"]),
    ("mount-flag-rw", _set(mountFlags=["--read-write"]), ["mountFlags", "--read-write", "read-only"]),
    ("rclone-missing", _set(rcloneBinary="/nonexistent/rclone"), ["rcloneBinary", "/nonexistent/rclone", "rclone executable"]),
    ("unknown-model-field", _models(maxLen=12), ["models[0].maxLen", "12", "known field"]),
    ("extra-arg-reserved", _models(extraArgs=["--port", "9"]), ["extraArgs", "--port", "sets itself"]),
    ("model-env-secret", _models(env={"VLLM_API_KEY": "x"}), ["models[m1].env.VLLM_API_KEY", "vllmApiKey"]),
    ("model-env-name", _models(env={"1BAD": "x"}), ["models[m1].env.1BAD", "environment variable NAME"]),
    ("model-env-type", _models(env=["A=1"]), ["models[m1].env", "A=1", "a map of environment"]),
    ("model-gpus", _models(gpus="two"), ["models[m1].gpus", "two", "overrides vllmGpus"]),
    ("models-empty", _set(models=[]), ["rustfs-vllm:models", "[]", "non-empty list"]),
    ("models-not-list", _set(models={"name": "x"}), ["rustfs-vllm:models", "list of model objects"]),
    ("model-name", _models(name="bad name!"), ["models[0].name", "bad name!", "served model name"]),
    ("prefix-slash", _models(prefix="a/b"), ["prefix", "a/b", "one path segment"]),
    ("api-key-in-env", _set(vllmEnv={"VLLM_API_KEY": "x"}), ["vllmEnv.VLLM_API_KEY", "vllmApiKey"]),
    ("api-key-dash", _set(vllmApiKey="-k3yStartsWithDash"), ["rustfs-vllm:vllmApiKey = '<secret>'",
                                                              "does not start with '-'"]),
    ("smoke-tokens", _set(smokeMaxTokens=0), ["rustfs-vllm:smokeMaxTokens", "0", "1-256"]),
    ("ready-timeout", _set(vllmReadyTimeout=5), ["vllmReadyTimeout", "5", "30-7200"]),
    ("drain-negative", _set(vllmDrainSeconds=-1), ["vllmDrainSeconds", "-1", "0-3600"]),
    ("drain-text", _set(vllmDrainSeconds="soon"), ["vllmDrainSeconds", "soon", "0-3600"]),
    ("change-order", _set(vllmChangeOrder="rolling"), ["vllmChangeOrder", "rolling", "auto, sideBySide, stopFirst"]),
    ("model-change-order", _models(changeOrder="blue-green"), ["models[m1].changeOrder", "blue-green", "sideBySide"]),
    ("change-port-own", _models(port=8100, changePort=8100), ["models[m1].changePort", "8100", "its own port"]),
    ("change-port-range", _models(changePort=70000), ["models[m1].changePort", "70000", "1-65535"]),
    ("bind-address", _set(bindAddress="localhost"), ["bindAddress", "localhost", "IPv4"]),
    ("short-secret", _set(rustfsSecretKey="abc"), ["rustfsSecretKey", "8 characters"]),
    ("standin-short-key", _set(s3Server="rclone-serve-s3", rustfsAccessKey="ak", rustfsSecretKey="long-enough-secret"),
     ["rustfsAccessKey", "16 characters"]),
]


@pytest.mark.parametrize("change,fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_value_is_rejected_with_key_value_and_allowed(good, tmp_path, change, fragments):
    message = _bad(tmp_path, good, change)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"


@pytest.mark.parametrize("builder,fragments", [
    (_symlink_model, ["models[ln].source", "no dangling symlinks", "escape.json -> /nonexistent/escape.json"]),
    (_symlink_loop, ["models[lp].source", "no symlink loops", "a.json -> b.json", "b.json -> a.json"]),
    (_dir_symlink, ["models[dl].source", "no links to folders", "up -> .."]),
    (_no_weights, ["models[nw].source", "weights", "none found"]),
    (_no_config, ["models[nc].source", "config.json"]),
    (_nonempty_mount, ["rustfs-vllm:mountPath", "it has files"]),
], ids=["symlink-dangling", "symlink-loop", "symlink-dir", "no-weights", "no-config", "mount-not-empty"])
def test_bad_folder_is_rejected(good, tmp_path, builder, fragments):
    message = _bad(tmp_path, good, builder(tmp_path))
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file: an unreadable file needs a non-root user")
def test_unreadable_file_is_rejected(good, tmp_path):
    assert "cannot be read" in _bad(tmp_path, good, _unreadable(tmp_path))


def test_two_models_problems(good, tmp_path):
    raw = {**good, "models": [{"name": "a", "source": "m1", "port": 8000, "prefix": "shared"},
                              {"name": "a", "source": "m2", "port": 8000, "prefix": "Shared"}]}
    message = _bad(tmp_path, raw, lambda r: None)
    assert "models[a].name = 'a'" in message and "duplicate" in message
    assert "models[a].prefix = 'Shared'" in message and "collides" in message
    assert "models[a].port = 8000" in message and "a port of its own" in message


def test_port_in_use_is_rejected(good, tmp_path):
    message = _bad(tmp_path, good, lambda r: None, in_use={8000})
    assert "models[m1].port = 8000" in message and "already listens" in message


def test_model_port_clashing_with_s3_port(good, tmp_path):
    message = _bad(tmp_path, good, _models(port=9000))
    assert "models[m1].port = 9000" in message and "S3 server" in message


def test_default_credentials_rejected_outside_dev(good, tmp_path):
    message = _bad(tmp_path, good, _set(environment="production"), stack="prod")
    assert "rustfsAccessKey/rustfsSecretKey" in message and "rustfsadmin" in message and "only when" in message


def test_production_with_own_credentials_loads(good, tmp_path):
    cfg = load({**good, "environment": "production", "rustfsAccessKey": "prod-access-key-0001",
                "rustfsSecretKey": "prod-secret-key-0001"}, tmp_path, stack="prod")
    assert not cfg.uses_default_credentials


def test_wrong_type_is_rejected(good, tmp_path):
    assert "rustfs-vllm:rustfsPort = 'ninety'" in _bad(tmp_path, good, _set(rustfsPort="ninety"))
    assert "rustfs-vllm:purgeOnDestroy = 'yes'" in _bad(tmp_path, good, _set(purgeOnDestroy="yes"))


def test_all_problems_are_reported_together(good, tmp_path):
    message = _bad(tmp_path, good, _set(bucket="X", vllmRestart="never", smokeMaxTokens=999))
    assert message.count("\n  - ") == 3


def test_mount_path_already_mounted_by_something_else(good, tmp_path):
    message = _bad(tmp_path, good, _set(mountPath="/proc"))
    assert "rustfs-vllm:mountPath = '/proc'" in message and "proc filesystem" in message


def test_missing_images_are_rejected(good, tmp_path):
    raw = dict(good)
    with pytest.raises(config.ConfigError) as info:
        load_and_check(raw, "dev", str(tmp_path), images=lambda image: image.startswith("rustfs/"))
    msg = str(info.value)
    assert "rustfs-vllm:vllmImage = 'vllm/vllm-openai-cpu:v0.30.0'" in msg and "scripts/build-images" in msg
    assert "rustfsImage" not in msg


def test_unknown_image_presence_is_not_an_error(good, tmp_path):
    load_and_check(dict(good), "dev", str(tmp_path), images=lambda image: None)  # Docker not answering


def test_fuse_unavailable_is_rejected(good, tmp_path):
    with pytest.raises(config.ConfigError) as info:
        load_and_check(dict(good), "dev", str(tmp_path), fuse=False)
    assert "rustfs-vllm:mountPath" in str(info.value) and "/dev/fuse is missing" in str(info.value)


def test_s3_port_in_use_is_rejected(good, tmp_path):
    message = _bad(tmp_path, good, lambda r: None, in_use={9000})
    assert "rustfs-vllm:rustfsPort = 9000" in message and "already listens" in message


@pytest.mark.parametrize("server,found,fragment", [
    ("rustfs", "files", "holds objects another S3 server (rclone serve s3) kept as plain files"),
    ("rclone-serve-s3", "rustfs", "holds RustFS's own data format"),
])
def test_volume_of_the_other_server_kind_is_rejected(good, tmp_path, server, found, fragment):
    """Switching s3Server on an existing volume: the data formats differ, so preview refuses it
    (naming the key and the volume) instead of letting the server fail on the first upload."""
    def change(raw):
        raw.update(s3Server=server, rustfsAccessKey="a-long-enough-access-key", rustfsSecretKey="a-long-enough-secret")
    message = _bad(tmp_path, good, change, volume_format=lambda name: found)
    assert "rustfs-vllm:rustfsVolume" in message and "rvllm-dev-data" in message and fragment in message


@pytest.mark.parametrize("server,found", [("rustfs", "rustfs"), ("rustfs", "empty"), ("rustfs", None),
                                          ("rclone-serve-s3", "files"), ("external", "files")])
def test_volume_of_the_same_kind_or_none_is_accepted(good, tmp_path, server, found):
    raw = {**good, "s3Server": server, "rustfsAccessKey": "a-long-enough-access-key",
           "rustfsSecretKey": "a-long-enough-secret", "rustfsEndpoint": "http://127.0.0.1:9000"}
    load(raw, tmp_path, volume_format=lambda name: found)


CA_PEM = b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"


def _external_https(raw, ca=None):
    raw.update(s3Server="external", rustfsEndpoint="https://s3.example.internal:9000")
    if ca is not None:
        raw["rustfsCaBundle"] = ca


@pytest.mark.parametrize("content, fragment", [
    (None, "it does not exist"),
    (b"just text\n", "no '-----BEGIN CERTIFICATE-----' block"),
    (CA_PEM, "that OpenSSL can load"),
])
def test_unusable_ca_bundle_is_rejected(good, tmp_path, content, fragment):
    if content is not None:
        (tmp_path / "ca.pem").write_bytes(content)
    msg = _bad(tmp_path, good, lambda r: _external_https(r, "ca.pem"))
    assert f"rustfs-vllm:rustfsCaBundle = '{tmp_path / 'ca.pem'}' is invalid" in msg and fragment in msg


def test_ca_bundle_with_an_http_endpoint_is_rejected(good, tmp_path):
    from tests.tls import make_pki

    pki = make_pki(tmp_path / "pki")
    msg = _bad(tmp_path, good, lambda r: r.update(rustfsCaBundle=str(pki.ca)))
    assert "rustfsCaBundle" in msg and "only with an https:// rustfsEndpoint" in msg and "http://127.0.0.1:9000" in msg


def test_tls_probe_result_fails_the_config_and_gets_the_bundle(good, tmp_path):
    from tests.tls import make_pki

    pki = make_pki(tmp_path / "pki")
    calls = []

    def probe(endpoint, ca):
        calls.append((endpoint, ca))
        return "rustfs-vllm:rustfsEndpoint = 'https://...': the server's certificate is not trusted"

    raw = dict(good)
    _external_https(raw, str(pki.ca))
    with pytest.raises(config.ConfigError) as info:
        load_and_check(raw, "dev", str(tmp_path), tls=probe)
    assert "is not trusted" in str(info.value)
    assert calls == [("https://s3.example.internal:9000", str(pki.ca))]
    cfg = load_and_check(raw, "dev", str(tmp_path), tls=lambda e, c: None)
    assert cfg.ca_bundle == str(pki.ca)


def test_tls_probe_is_not_asked_for_http_or_a_bad_bundle(good, tmp_path):
    def probe(endpoint, ca):
        raise AssertionError("probed")

    load_and_check(dict(good), "dev", str(tmp_path), tls=probe)        # http: nothing to verify
    raw = dict(good)
    _external_https(raw, "missing.pem")
    with pytest.raises(config.ConfigError):
        load_and_check(raw, "dev", str(tmp_path), tls=probe)
