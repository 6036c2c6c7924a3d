"""Bucket provider against a real S3 server process."""
from __future__ import annotations

import pytest

from components.providers.bucket import BucketProvider
from components.errors import ProviderError


def test_create_then_delete_when_empty(s3_server):
    p = BucketProvider()
    res = p.create(s3_server.props(bucket="made-here", purge=False))
    assert res.id == "made-here" and res.outs["adopted"] is False
    assert (s3_server.root / "made-here").is_dir()
    assert p.read("made-here", res.outs).id == "made-here"
    p.delete("made-here", res.outs)
    assert not (s3_server.root / "made-here").exists()
    p.delete("made-here", res.outs)  # already gone: still fine
    assert p.read("made-here", res.outs).id is None


def test_existing_bucket_is_adopted_and_never_deleted(s3_server):
    c = s3_server.client()
    c.create_bucket(Bucket="theirs")
    p = BucketProvider()
    res = p.create(s3_server.props(bucket="theirs", purge=True))
    assert res.outs["adopted"] is True
    p.delete("theirs", res.outs)
    assert (s3_server.root / "theirs").is_dir()


def test_bucket_with_data_is_kept(s3_server):
    p = BucketProvider()
    res = p.create(s3_server.props(bucket="has-data", purge=True))
    s3_server.client().put_object(Bucket="has-data", Key="foreign/object", Body=b"keep me")
    p.delete("has-data", res.outs)
    assert (s3_server.root / "has-data" / "foreign" / "object").read_bytes() == b"keep me"


def test_wrong_credentials_are_explained(s3_server):
    p = BucketProvider()
    with pytest.raises(ProviderError) as info:
        p.create({**s3_server.props(bucket="nope"), "secret_key": "not-the-secret-0001"})
    msg = str(info.value)
    assert "rejected the credentials" in msg and "rustfsSecretKey" in msg and "not-the-secret" not in msg


def test_unreachable_endpoint_is_explained():
    p = BucketProvider()
    with pytest.raises(ProviderError) as info:
        p.create({"endpoint": "http://127.0.0.1:9", "access_key": "a" * 16, "secret_key": "b" * 16,
                  "bucket": "x-y-z"})
    assert "unreachable" in str(info.value) and "rustfsEndpoint" in str(info.value)


def test_diff_replaces_on_name_and_updates_on_purge():
    p = BucketProvider()
    olds = {"endpoint": "e", "bucket": "a-b-c", "purge": False, "access_key": "k", "secret_key": "s"}
    assert p.diff("a-b-c", olds, dict(olds)).changes is False
    d = p.diff("a-b-c", olds, {**olds, "bucket": "d-e-f"})
    assert d.changes and d.replaces == ["bucket"]
    d = p.diff("a-b-c", olds, {**olds, "purge": True})
    assert d.changes and d.replaces == []


def test_another_store_behind_the_endpoint_gets_the_bucket_again(s3_server, tmp_path):
    """A new rustfsVolume (or s3Server) behind the same endpoint: the state's bucket is on a server
    that is gone. The update makes sure it exists on the one answering now."""
    p = BucketProvider()
    olds = p.create(s3_server.props(bucket="moved", purge=False, store="rustfs volume old")).outs
    s3_server.client().delete_bucket(Bucket="moved")          # what the new, empty store looks like
    news = s3_server.props(bucket="moved", purge=False, store="rustfs volume new")
    d = p.diff("moved", olds, news)
    assert d.changes and d.replaces == []                      # an update: same bucket, another store
    outs = p.update("moved", olds, news).outs
    assert (s3_server.root / "moved").is_dir() and outs["adopted"] is False
    assert p.diff("moved", outs, dict(news)).changes is False
