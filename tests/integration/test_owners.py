"""Owner records and registrations of a shared bucket (components/storage/owners.py, issue 38) against a
real S3 server process (`rclone serve s3`, NOT RustFS; tests/e2e/test_platform.py runs them on RustFS
through the engine): the first claim owns a prefix, another stack is refused naming the owner, the
owner's own claim passes again, takeOverPrefixes takes a prefix only from a stack no longer registered,
and the upload provider refuses another stack's prefix and leaves it alone on purge."""
from __future__ import annotations

import pytest

from components.errors import ProviderError
from components.providers.model_upload import ModelUploadProvider
from components.storage import owners

A, B = "organization/rustfs-vllm/team-a", "organization/rustfs-vllm/team-b"


@pytest.fixture
def bucket(s3_server):
    c = s3_server.client()
    c.create_bucket(Bucket="shared")
    return c


def test_the_first_claim_owns_and_another_stack_is_refused_naming_it(bucket):
    assert owners.claim_problem(bucket, "shared", "m1", A, take_over=False) == ""
    owners.claim(bucket, "shared", "m1", A)
    assert owners.owner(bucket, "shared", "m1") == A
    assert owners.claim_problem(bucket, "shared", "m1", A, take_over=False) == ""      # its own, again
    problem = owners.claim_problem(bucket, "shared", "m1", B, take_over=False)
    assert problem.startswith(f"owned by stack {A} (its owner record .rustfs-vllm/owners/m1.json in bucket shared)")
    assert "takeOverPrefixes: true" in problem


def test_take_over_only_from_a_stack_that_is_no_longer_registered(bucket):
    owners.claim(bucket, "shared", "m1", A)
    owners.register(bucket, "shared", A, ["m1"])
    assert owners.registered(bucket, "shared") == [A]
    assert "still registered on the store" in owners.claim_problem(bucket, "shared", "m1", B, take_over=True)
    owners.unregister(bucket, "shared", A)
    assert owners.registered(bucket, "shared") == []
    assert owners.claim_problem(bucket, "shared", "m1", B, take_over=True) == ""


def test_the_upload_refuses_another_stacks_prefix_and_purge_leaves_it(bucket, s3_server, tmp_path):
    owners.claim(bucket, "shared", "m1", A)
    bucket.put_object(Bucket="shared", Key="m1/config.json", Body=b"{}")
    props = s3_server.props(bucket="shared", prefix="m1", source=str(tmp_path), manifest={}, purge=True, owner=B)
    with pytest.raises(ProviderError) as err:
        ModelUploadProvider().create(props)
    assert str(err.value).startswith(f"model m1: prefix 'm1' is owned by stack {A}")
    ModelUploadProvider().delete("s3://shared/m1/", props)                 # B's purge: not B's prefix
    assert [o["Key"] for o in bucket.list_objects_v2(Bucket="shared", Prefix="m1/")["Contents"]] == ["m1/config.json"]
    ModelUploadProvider().delete("s3://shared/m1/", {**props, "owner": A})  # A's purge: its objects and record go
    assert bucket.list_objects_v2(Bucket="shared", Prefix="m1/").get("Contents", []) == []
    assert owners.owner(bucket, "shared", "m1") is None
