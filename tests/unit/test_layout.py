"""Model folders: a Hugging Face cache snapshot (file symlinks into ../../blobs/) is followed and
hashed as its blobs' bytes; a bad link is refused in one line per cause, with no consequences."""
from __future__ import annotations

import hashlib
import os

from components.storage import layout, manifest
from tests.helpers import make_hf_cache, make_model


def test_a_hugging_face_cache_snapshot_is_a_model_folder(tmp_path):
    model = make_model(tmp_path / "m", weights_bytes=70_000)
    snap = make_hf_cache(model, tmp_path / "hub")
    assert all(os.path.islink(p) for p in snap.iterdir())
    assert layout.folder_problems(str(snap)) == []
    files, problems = layout.walk_files(str(snap))
    assert problems == [] and files == sorted(p.name for p in model.iterdir())
    # the manifest hashes the blobs' bytes, under the links' names
    got = manifest.build(str(snap), str(tmp_path / "cache.json"))
    want = manifest.build(str(model), str(tmp_path / "cache2.json"))
    assert got == want
    assert got["model.safetensors"]["sha256"] == hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest()


def test_a_changed_blob_is_a_changed_file(tmp_path):
    model = make_model(tmp_path / "m")
    snap = make_hf_cache(model, tmp_path / "hub")
    before = manifest.build(str(snap), str(tmp_path / "cache.json"))
    # a new revision of the weights: a new blob, the snapshot's link now points at it
    blob = snap.parent.parent / "blobs" / "new-weights"
    blob.write_bytes(b"new weights" * 100)
    os.remove(snap / "model.safetensors")
    os.symlink(os.path.relpath(blob, snap), snap / "model.safetensors")
    after = manifest.build(str(snap), str(tmp_path / "cache.json"))
    assert after["model.safetensors"] != before["model.safetensors"]
    assert after["model.safetensors"]["size"] == 1100
    assert {k: v for k, v in after.items() if k != "model.safetensors"} == \
        {k: v for k, v in before.items() if k != "model.safetensors"}


def test_bad_links_are_refused_one_line_per_cause_and_nothing_else(tmp_path):
    model = make_model(tmp_path / "m")
    snap = make_hf_cache(model, tmp_path / "hub")
    os.remove(snap.parent.parent / "blobs" / os.path.basename(os.readlink(snap / "model.safetensors")))
    os.symlink("loop-b", snap / "loop-a")
    os.symlink("loop-a", snap / "loop-b")
    os.symlink("..", snap / "up")
    problems = layout.folder_problems(str(snap))
    weights = os.readlink(snap / "model.safetensors")
    assert sorted(problems) == sorted([
        f"no dangling symlinks (model.safetensors -> {weights}: the target does not exist)",
        "no symlink loops (loop-a -> loop-b)", "no symlink loops (loop-b -> loop-a)",
        "no links to folders (up -> ..)"]), problems
