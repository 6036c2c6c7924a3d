"""The served stack's model source is a Hugging Face cache snapshot (tests/serving/stack.py):
``snapshots/<rev>/`` whose files are symlinks into ``../../blobs/``, as ``huggingface-cli download``
and ``snapshot_download()`` leave them. The links were followed: the bucket holds the blobs' bytes
under the links' names, and vLLM reads regular files through the mount (it served the other
modules' requests from them)."""
from __future__ import annotations

import hashlib
import os

from tests.serving.stack import PREFIX, Served


def test_the_snapshots_links_were_uploaded_as_the_blobs_bytes(served: Served):
    links = sorted(p.name for p in served.model.iterdir())
    assert links and all(p.is_symlink() and os.readlink(p).startswith("../../blobs/") for p in served.model.iterdir())
    vllm = served.container()
    listing = vllm.exec_run(["sh", "-c", f"cd /models/{PREFIX} && for f in *; do stat -c '%n %F %s' \"$f\"; done"])
    seen = {line.split()[0]: (line.split()[1:-1], int(line.split()[-1]))
            for line in listing.output.decode().splitlines()}
    assert sorted(seen) == links
    for name, (kind, size) in seen.items():
        assert kind == ["regular", "file"] and size == os.path.getsize(served.model / name), (name, kind, size)
    weights = served.model / "model.safetensors"
    inside = vllm.exec_run(["sha256sum", f"/models/{PREFIX}/model.safetensors"]).output.decode().split()[0]
    assert inside == hashlib.sha256(open(os.path.realpath(weights), "rb").read()).hexdigest()
