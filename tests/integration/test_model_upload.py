"""Model upload provider against a real S3 server process: create, incremental update, verify,
delete with and without purge, and convergence after an interrupted upload."""
from __future__ import annotations

import os
import time

import pytest

from components.storage import manifest as manifest_mod
from components.errors import ProviderError
from components.providers.model_upload import ModelUploadProvider, list_prefix, verify
from tests.helpers import make_model


@pytest.fixture
def model(tmp_path):
    # one file above the multipart threshold, so multipart uploads and their ETags are exercised
    return make_model(tmp_path / "model", weights_bytes=70 * 2**20 + 123,
                      extra={"sub/extra.bin": b"x" * 1000, "merges.txt": b"a b\n"})


def props(s3_server, model, tmp_path, **extra):
    m = manifest_mod.build(str(model), str(tmp_path / "cache" / "hashes.json"))
    return s3_server.props(bucket="models", prefix="m1", source=str(model), manifest=m, purge=False,
                           file_workers=4, part_workers=4, **extra)


def snapshot(s3_server, bucket="models"):
    """{key: (mtime_ns, inode)} of the server's backing files: which objects were (re)written."""
    base = s3_server.root / bucket
    return {str(p.relative_to(base)): (p.stat().st_mtime_ns, p.stat().st_ino) for p in base.rglob("*") if p.is_file()}


def test_create_uploads_and_verifies_everything(s3_server, model, tmp_path):
    s3_server.client().create_bucket(Bucket="models")
    pr = props(s3_server, model, tmp_path)
    res = ModelUploadProvider().create(pr)
    assert res.id == "s3://models/m1/"
    assert res.outs["last_transfer"]["files"] == 6
    assert res.outs["last_transfer"]["bytes"] == sum(e["size"] for e in pr["manifest"].values())
    for rel in pr["manifest"]:
        assert (s3_server.root / "models" / "m1" / rel).read_bytes() == (model / rel).read_bytes()
    assert verify(s3_server.client(), "models", "m1", pr["manifest"]) == []


def test_update_transfers_only_the_changed_file(s3_server, model, tmp_path):
    s3_server.client().create_bucket(Bucket="models")
    p = ModelUploadProvider()
    old = p.create(props(s3_server, model, tmp_path)).outs
    before = snapshot(s3_server)
    time.sleep(0.01)
    (model / "tokenizer_config.json").write_text('{"changed": true}')
    new = props(s3_server, model, tmp_path)
    diff = p.diff("id", old, new)
    assert diff.changes and diff.replaces == []
    changed = [k for k in new["manifest"] if new["manifest"][k] != old["manifest"][k]]
    assert changed == ["tokenizer_config.json"]
    out = p.update("id", old, new).outs
    assert out["last_transfer"] == {**out["last_transfer"], "files": 1, "bytes": 17, "deleted": 0}
    after = snapshot(s3_server)
    rewritten = sorted(k for k in after if after[k] != before.get(k))
    assert rewritten == ["m1/tokenizer_config.json"]


def test_unchanged_folder_has_no_diff_and_update_sends_nothing(s3_server, model, tmp_path):
    s3_server.client().create_bucket(Bucket="models")
    p = ModelUploadProvider()
    old = p.create(props(s3_server, model, tmp_path)).outs
    new = props(s3_server, model, tmp_path)
    assert p.diff("id", old, new).changes is False
    assert p.update("id", old, new).outs["last_transfer"]["bytes"] == 0


def test_removed_file_is_refused_at_preview_and_deleted_with_prune_objects(s3_server, model, tmp_path, capsys):
    """Issue 57: the bucket may hold the only copy, so an update that would delete an object is refused at
    preview (the diff) unless pruneObjects is true; with it, the diff says what goes and the update deletes it."""
    s3_server.client().create_bucket(Bucket="models")
    p = ModelUploadProvider()
    old = p.create(props(s3_server, model, tmp_path)).outs
    (model / "merges.txt").unlink()
    with pytest.raises(ProviderError) as refused:
        p.diff("id", old, props(s3_server, model, tmp_path))
    assert "merges.txt" in str(refused.value) and "pruneObjects" in str(refused.value), refused.value
    kept = p.update("id", old, props(s3_server, model, tmp_path)).outs      # the provider itself keeps it too
    assert kept["last_transfer"]["deleted"] == 0 and "merges.txt" in list_prefix(s3_server.client(), "models", "m1")
    assert p.diff("id", old, props(s3_server, model, tmp_path, prune=True)).changes
    assert "this update deletes 1 objects" in capsys.readouterr().out
    out = p.update("id", old, props(s3_server, model, tmp_path, prune=True)).outs
    assert out["last_transfer"]["deleted"] == 1
    assert "merges.txt" not in list_prefix(s3_server.client(), "models", "m1")


def test_corrupted_object_is_detected_and_repaired(s3_server, model, tmp_path):
    s3_server.client().create_bucket(Bucket="models")
    p = ModelUploadProvider()
    pr = props(s3_server, model, tmp_path)
    outs = p.create(pr).outs
    target = s3_server.root / "models" / "m1" / "model.safetensors"
    data = bytearray(target.read_bytes())
    data[1000] ^= 0xFF                      # same size, one flipped byte
    target.write_bytes(bytes(data))
    problems = verify(s3_server.client(), "models", "m1", pr["manifest"])
    assert len(problems) == 1 and problems[0].startswith("model.safetensors")
    # refresh reports the drift; the next update re-sends just that object
    refreshed = p.read("s3://models/m1/", outs).outs
    assert "model.safetensors" not in refreshed["manifest"]
    assert p.diff("id", refreshed, pr).changes
    fixed = p.update("id", refreshed, pr).outs
    assert fixed["last_transfer"]["files"] == 1
    assert target.read_bytes() == (model / "model.safetensors").read_bytes()


def test_delete_keeps_objects_unless_purge(s3_server, model, tmp_path):
    c = s3_server.client()
    c.create_bucket(Bucket="models")
    c.put_object(Bucket="models", Key="m1-other/keep", Body=b"not ours")
    c.put_object(Bucket="models", Key="foreign.txt", Body=b"not ours")
    p = ModelUploadProvider()
    outs = p.create(props(s3_server, model, tmp_path)).outs
    p.delete("id", outs)
    assert len(list_prefix(c, "models", "m1")) == 6
    p.delete("id", {**outs, "purge": True})
    assert list_prefix(c, "models", "m1") == {}
    assert sorted(o["Key"] for o in c.list_objects_v2(Bucket="models")["Contents"]) == ["foreign.txt", "m1-other/keep"]
    p.delete("id", {**outs, "purge": True})  # already gone: fine


def test_interrupted_upload_converges_sending_only_what_is_missing(s3_server, model, tmp_path):
    c = s3_server.client()
    c.create_bucket(Bucket="models")
    pr = props(s3_server, model, tmp_path)
    # what an interrupted run leaves: some objects there, one truncated, the rest missing
    c.upload_file(str(model / "config.json"), "models", "m1/config.json")
    c.upload_file(str(model / "tokenizer.json"), "models", "m1/tokenizer.json")
    c.put_object(Bucket="models", Key="m1/model.safetensors", Body=b"partial")
    out = ModelUploadProvider().create(pr).outs
    assert out["last_transfer"]["files"] == 4   # 6 files, 2 intact ones skipped
    assert verify(c, "models", "m1", pr["manifest"]) == []


def test_server_down_gives_a_clear_error(s3_server, model, tmp_path):
    s3_server.client().create_bucket(Bucket="models")
    pr = props(s3_server, model, tmp_path)
    s3_server.proc.terminate()
    s3_server.proc.wait()
    with pytest.raises(ProviderError) as info:
        ModelUploadProvider().create(pr)
    assert "unreachable" in str(info.value)


def test_check_rejects_escaping_manifest(tmp_path, model):
    res = ModelUploadProvider().check({}, {"source": str(model), "manifest": {"../etc/passwd": {}}})
    assert [f.property for f in res.failures] == ["manifest"]


def test_hash_cache_skips_unchanged_files(tmp_path, model):
    cache = str(tmp_path / "c" / "h.json")
    first = manifest_mod.build(str(model), cache)
    c = manifest_mod.HashCache(cache)
    assert all(c.lookup(os.path.join(model, rel)).sha256 == e["sha256"] for rel, e in first.items())
    assert c.hits == len(first) and c.misses == 0
    (model / "merges.txt").write_bytes(b"changed\n")
    c2 = manifest_mod.HashCache(cache)
    c2.lookup(os.path.join(model, "merges.txt"))
    assert c2.misses == 1


def test_upload_verification_rejects_a_wrong_server_etag(s3_server, model, tmp_path):
    """What the server received must hash to what was read here; a file that changed between
    hashing and sending (same size) is caught by the ETag the server computed."""
    from components.providers.model_upload import put_file

    s3_server.client().create_bucket(Bucket="models")
    pr = props(s3_server, model, tmp_path)
    target = model / "model.safetensors"
    data = bytearray(target.read_bytes())
    data[5] ^= 0x01
    target.write_bytes(bytes(data))
    with pytest.raises(ProviderError) as info:
        put_file(s3_server.client(), "models", "m1/model.safetensors", str(target), pr["manifest"]["model.safetensors"], 2)
    assert "verification of s3://models/m1/model.safetensors failed" in str(info.value)


def test_a_running_upload_reports_progress(s3_server, tmp_path, capsys):
    """Files and bytes done and MB/s, printed while the upload runs and once at the end."""
    from components.providers import model_upload

    src = make_model(tmp_path / "big", weights_bytes=40 * 2**20)
    c = s3_server.client()
    c.create_bucket(Bucket="progress")
    props = s3_server.props(bucket="progress", prefix="big", source=str(src),
                            manifest=manifest_mod.build(str(src), str(tmp_path / "h.json")))
    old = model_upload.PROGRESS_EVERY
    model_upload.PROGRESS_EVERY = 0.01
    try:
        model_upload.sync(props)
    finally:
        model_upload.PROGRESS_EVERY = old
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("upload big:")]
    assert len(lines) >= 2, lines                       # while running, and the final line
    assert lines[-1].startswith("upload big: 4/4 files, 40/40 MiB,") and lines[-1].endswith("(done)")
    assert "MB/s" in lines[0]


def test_another_store_behind_the_endpoint_gets_every_object_again(s3_server, model, tmp_path):
    """``store`` changed (a new volume behind the same endpoint): the old manifest says nothing about
    the new server, so the update compares with a listing and sends everything missing there."""
    s3_server.client().create_bucket(Bucket="models")
    p = ModelUploadProvider()
    olds = p.create(props(s3_server, model, tmp_path, store="rustfs volume old")).outs
    for rel in olds["manifest"]:                               # the new store has none of it
        s3_server.client().delete_object(Bucket="models", Key=f"m1/{rel}")
    news = props(s3_server, model, tmp_path, store="rustfs volume new")
    d = p.diff("s3://models/m1/", olds, news)
    assert d.changes and d.replaces == []
    outs = p.update("s3://models/m1/", olds, news).outs
    assert outs["last_transfer"]["files"] == len(news["manifest"])
    assert verify(s3_server.client(), "models", "m1", news["manifest"]) == []
