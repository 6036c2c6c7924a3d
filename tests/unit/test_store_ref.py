"""A serving stack on a platform stack's store (issue 38), without the engine: what `store` turns into
(components/config/store_ref.py, the platform's outputs read through a fake reader), and what role store
and store refuse at preview, one line each naming the key."""
from __future__ import annotations

import pytest

from components import config
from components.config import store_ref
from tests.helpers import make_model

ADMIN = {"access_key": "plat-access-0123456789", "secret_key": "plat-secret-0123456789"}
OUTS = {"store_endpoint": "http://127.0.0.1:19000", "store_bucket": "shared-models", "store_ca": "", "store_admin": ADMIN}
NAME = "organization/rustfs-vllm/platform"


def test_store_gives_the_server_the_bucket_and_the_admin_keys(tmp_path):
    raw, problems = store_ref.resolve({"store": NAME, "environment": "test"}, str(tmp_path), "team-a",
                                      read=lambda name: OUTS if name == NAME else {})
    assert problems == []
    assert raw["s3Server"] == "external" and raw["rustfsEndpoint"] == OUTS["store_endpoint"]
    assert raw["bucket"] == "shared-models" and raw["rustfsAccessKey"] == ADMIN["access_key"]
    assert "rustfsCaBundle" not in raw


def test_the_stores_ca_is_written_where_the_uploads_and_rclone_read_it(tmp_path):
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    raw, _ = store_ref.resolve({"store": NAME}, str(tmp_path), "team-a", read=lambda _: {**OUTS, "store_ca": pem})
    assert open(raw["rustfsCaBundle"], encoding="utf-8").read() == pem


@pytest.mark.parametrize("key", store_ref.FROM_STORE)
def test_a_key_the_store_gives_may_not_be_set_too(tmp_path, key):
    # Pulumi.yaml's defaults reach the program as values: those are not the user's
    defaults = {"s3Server": "rustfs", "bucket": "vllm-models"}
    assert store_ref.resolve({"store": NAME, **defaults}, str(tmp_path), "s", read=lambda _: OUTS)[1] == []
    _, problems = store_ref.resolve({"store": NAME, key: "x"}, str(tmp_path), "s", read=lambda _: OUTS)
    assert problems == [f"rustfs-vllm:{key} is set, but the store stack {NAME} gives it: remove it "
                        f"(pulumi config rm {key})"]


def test_a_store_that_cannot_be_read_or_exports_no_store_is_one_line(tmp_path):
    def gone(name):
        raise RuntimeError("unknown stack 'organization/rustfs-vllm/platform'")
    _, problems = store_ref.resolve({"store": NAME}, str(tmp_path), "s", read=gone)
    [line] = problems
    assert line.startswith(f"rustfs-vllm:store = '{NAME}' is invalid: its outputs could not be read (unknown stack")
    _, problems = store_ref.resolve({"store": NAME}, str(tmp_path), "s", read=lambda _: {"store_endpoint": "x"})
    [line] = problems
    assert "exports no store (store_bucket, store_ca, store_admin missing)" in line and "role: store" in line


def load(raw, tmp_path):
    return config.load(raw, "s", str(tmp_path))


def problems_of(raw, tmp_path) -> list[str]:
    with pytest.raises(config.ConfigError) as err:
        load(raw, tmp_path)
    return err.value.problems


def test_role_store_serves_no_model_and_runs_its_server(tmp_path):
    make_model(tmp_path / "m1")
    base = {"environment": "dev", "role": "store", "mountPath": str(tmp_path / "mnt")}
    cfg = load(base, tmp_path)
    assert cfg.role == "store" and cfg.models == ()
    found = problems_of({**base, "models": [{"name": "m1", "source": "m1"}], "s3Server": "external",
                         "rustfsEndpoint": "http://s3.internal:9000", "store": NAME}, tmp_path)
    assert any(p.startswith("rustfs-vllm:models = '<1 models>' is invalid: none with role store") for p in found), found
    assert any(p.startswith("rustfs-vllm:s3Server = 'external' is invalid: rustfs") for p in found), found
    assert any(p.startswith(f"rustfs-vllm:store = '{NAME}' is invalid: unset with role store") for p in found), found


def test_a_stack_on_a_store_reads_with_a_scoped_key_only(tmp_path):
    make_model(tmp_path / "m1")
    raw, _ = store_ref.resolve({"store": NAME, "environment": "test", "mountPath": str(tmp_path / "mnt"),
                                "models": [{"name": "m1", "source": "m1"}]}, str(tmp_path), "s", read=lambda _: OUTS)
    assert load(raw, tmp_path).read_keys == "scoped"
    found = problems_of({**raw, "readKeys": "shared"}, tmp_path)
    assert found == [f"rustfs-vllm:readKeys = 'shared' is invalid: scoped with store (serving hosts get a read key of "
                     f"this stack's own, never the admin key of {NAME})"]
