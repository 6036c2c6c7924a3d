"""An S3 endpoint on HTTPS with a certificate from a CA made in the test (the company-CA case),
served for real by `rclone serve s3` (the S3-compatible stand-in, NOT RustFS) on loopback.

With rustfsCaBundle every part that talks to the endpoint works: the preview probe, the
credential check, the bucket, the upload, rclone's mount. Without it, or with another CA, the
preview probe fails in one line naming the endpoint, the certificate problem and the key, the
providers fail the same way, and a mount fails with rclone's own x509 words and leaves no mount
and no rclone behind.
"""
from __future__ import annotations

import os

import grpc
import pytest

from components.storage import layout, manifest as manifest_mod, tls
from components.providers.bucket import BucketProvider
from components.providers.credentials import check
from components.errors import ProviderError
from components.providers.model_upload import ModelUploadProvider
from tests.helpers import free_port, make_model, start_rclone_s3
from tests.integration.conftest import ACCESS, SECRET, S3Server
from tests.integration.mounting import mount_env, pids, props
from tests.tls import make_pki


@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path / "pki", "company-ca")


@pytest.fixture
def other_ca(tmp_path):
    return make_pki(tmp_path / "other", "other-ca").ca


@pytest.fixture
def https_server(tmp_path, pki):
    root_dir = tmp_path / "s3data"
    root_dir.mkdir()
    port = free_port()
    proc = start_rclone_s3(root_dir, port, ACCESS, SECRET, tls=(pki.cert, pki.key))
    yield S3Server(f"https://127.0.0.1:{port}", root_dir, proc, port)
    proc.terminate()
    proc.wait(timeout=10)


def test_probe_verifies_with_the_bundle_and_names_the_key_without_it(https_server, pki, other_ca):
    endpoint = https_server.endpoint
    assert tls.probe(endpoint, str(pki.ca)) is None
    missing = tls.probe(endpoint, "")
    assert missing.startswith(f"rustfs-vllm:rustfsEndpoint = '{endpoint}'") and "not trusted" in missing
    assert "certificate" in missing and "set rustfs-vllm:rustfsCaBundle" in missing and "\n" not in missing
    wrong = tls.probe(endpoint, str(other_ca))
    assert wrong.startswith(f"rustfs-vllm:rustfsCaBundle = '{other_ca}' is invalid") and endpoint in wrong


def test_probe_on_plain_http_and_on_nothing(s3_server):
    answer = tls.probe(f"https://127.0.0.1:{s3_server.port}", "")
    assert "TLS handshake failed" in answer and "HTTPS" in answer
    assert tls.probe(f"https://127.0.0.1:{free_port()}", "") is None    # nothing answers: up's check says so
    assert tls.probe(s3_server.endpoint, "") is None                    # http: nothing to verify


def test_credential_check_bucket_and_upload_use_the_bundle(https_server, pki, tmp_path):
    with_ca = https_server.props(ca_bundle=str(pki.ca))
    check({**with_ca, "kind": "external", "defaults_allowed": False})
    BucketProvider().create({**with_ca, "bucket": "models", "purge": False})
    model = make_model(tmp_path / "model")
    m = manifest_mod.build(str(model), str(tmp_path / "hashes.json"))
    res = ModelUploadProvider().create({**with_ca, "bucket": "models", "prefix": "m1", "source": str(model),
                                        "manifest": m, "purge": False})
    assert res.outs["last_transfer"]["files"] == len(m)
    assert sorted(p.name for p in (https_server.root / "models" / "m1").iterdir()) == sorted(m)


@pytest.mark.parametrize("bundle", ["none", "other"])
def test_providers_without_the_right_ca_fail_naming_the_key(https_server, other_ca, bundle):
    p = https_server.props(**({"ca_bundle": str(other_ca)} if bundle == "other" else {}))
    os.environ.pop("AWS_CA_BUNDLE", None)
    with pytest.raises(ProviderError) as info:
        check({**p, "kind": "external", "defaults_allowed": False})
    msg = str(info.value)
    assert msg.startswith("credential check: the TLS certificate of https://127.0.0.1:") and "rustfsCaBundle" in msg
    assert "certificate" in msg and "\n" not in msg
    with pytest.raises(ProviderError) as info:
        BucketProvider().create({**p, "bucket": "models", "purge": False})
    assert "rustfsCaBundle" in str(info.value)


@pytest.fixture
def tls_bucket(https_server, pki):
    from components.storage import s3

    c = s3.client(https_server.endpoint, ACCESS, SECRET, ca_bundle=str(pki.ca))
    c.create_bucket(Bucket="models")
    c.put_object(Bucket="models", Key="m1/config.json", Body=b'{"a": 1}')
    c.put_object(Bucket="models", Key="m1/model.safetensors", Body=b"w" * 100_000)
    return c


@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse on this host")
def test_mount_with_the_bundle_serves_the_model(commands, https_server, tls_bucket, root, tmp_path, pki):
    env = mount_env(https_server, root, tmp_path, RV_CA_CERT=str(pki.ca))
    id_, outs = commands.create(props(env))
    try:
        assert layout.mounted_at(str(root / "m1")) == "fuse.rclone"
        assert (root / "m1" / "config.json").read_bytes() == b'{"a": 1}'
        [line] = [ln for ln in os.popen("ps -eo args --width 100000").read().splitlines()
                  if ln.startswith(os.path.realpath(env["RV_RCLONE"])) and " mount " in ln and str(root / "m1") in ln]
        assert f"--ca-cert {pki.ca}" in line
    finally:
        commands.delete(id_, outs)


@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse on this host")
def test_mount_without_the_bundle_fails_with_rclones_words_and_leaves_nothing(commands, https_server, tls_bucket,
                                                                              root, tmp_path):
    env = mount_env(https_server, root, tmp_path, RV_WAIT_SECONDS="8")
    with pytest.raises(grpc.RpcError) as info:
        commands.create(props(env))
    details = info.value.details()
    assert "x509" in details or "certificate" in details, details
    mnt = root / "m1"
    assert layout.mounted_at(str(mnt)) is None
    assert str(mnt) not in open("/proc/mounts").read()
    assert not pids(f"rclone mount ITEST:models/m1 {mnt} ") and not pids(f"rustfs-vllm-mount-supervisor {mnt} ")
