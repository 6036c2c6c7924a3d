"""What the ``s3_server`` output says: the server's kind, and for RustFS which build of it."""
from __future__ import annotations

import re

KIND_LABELS = {
    "rustfs": "RustFS",
    "rclone-serve-s3": "rclone serve s3 (S3-compatible stand-in, not RustFS)",
    "external": "external S3 endpoint",
}
# scripts/build-rustfs-image tags its local builds rustfs-vllm/rustfs:<crate version>-local.
LOCAL_RUSTFS = re.compile(r"^rustfs-vllm/rustfs:(?P<version>[^-]+)-local$")


# The label scripts/build-rustfs-image puts on its images: where the binary came from.
SOURCE_LABEL = "rustfs-vllm.rustfs-source"


def describe(kind: str, image: str, source: str = "") -> str:
    """The ``s3_server`` output: which server, and for RustFS which build of it. ``source`` is the
    local image's SOURCE_LABEL (a binary compiled here, or a prebuilt one and its checksum)."""
    if kind != "rustfs":
        return KIND_LABELS[kind]
    local = LOCAL_RUSTFS.match(image)
    if local and source.startswith("prebuilt binary"):
        return f"RustFS {local['version']} (local image {image} packed from a {source}; not the official image)"
    if local:
        return (f"RustFS {local['version']} (local build from the crates.io rustfs crate, image {image}; "
                "not the official image)")
    return f"RustFS (image {image})"
