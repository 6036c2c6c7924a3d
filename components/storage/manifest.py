"""The manifest of a model folder: every file's size, sha256 and S3 ETag, with a hash cache.

The cache is keyed by (path, size, mtime_ns, inode), so an unchanged multi-gigabyte model is not
re-read on every preview; a file whose size or mtime changed is hashed again.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from components.storage import layout

# Multipart part size for uploads. The expected ETag of an object depends on it, so it is part of
# the manifest: changing it changes the expected ETags (and the objects are re-verified, not re-sent).
PART_SIZE = 64 * 2**20
MULTIPART_THRESHOLD = 64 * 2**20
CACHE_VERSION = 2
_READ = 8 * 2**20


@dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str
    md5: str         # some servers report the plain MD5 as the ETag even for multipart objects
    etag: str        # the ETag S3 reports for our upload of this file (multipart form for large files)

    def to_dict(self) -> dict[str, object]:
        return {"size": self.size, "sha256": self.sha256, "md5": self.md5, "etag": self.etag}


def hash_file(path: str, part_size: int = PART_SIZE,
              threshold: int = MULTIPART_THRESHOLD) -> tuple[str, str, str]:
    """sha256 and md5 of the file, and the ETag S3 gives it when uploaded with our part size."""
    sha = hashlib.sha256()
    whole_md5 = hashlib.md5()
    part_md5s: list[bytes] = []
    part = hashlib.md5()
    in_part = 0
    size = 0
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(_READ)
            if not chunk:
                break
            size += len(chunk)
            sha.update(chunk)
            whole_md5.update(chunk)
            view = memoryview(chunk)
            while view:
                take = min(len(view), part_size - in_part)
                part.update(view[:take])
                in_part += take
                view = view[take:]
                if in_part == part_size:
                    part_md5s.append(part.digest())
                    part = hashlib.md5()
                    in_part = 0
    if in_part:
        part_md5s.append(part.digest())
    if size < threshold:
        etag = whole_md5.hexdigest()
    else:
        etag = f"{hashlib.md5(b''.join(part_md5s)).hexdigest()}-{len(part_md5s)}"
    return sha.hexdigest(), whole_md5.hexdigest(), etag


class HashCache:
    """A JSON file of path -> (size, mtime_ns, inode, sha256, etag), safe for threads."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.entries: dict[str, dict[str, object]] = {}
        self.hits = 0
        self.misses = 0
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            if data.get("version") == CACHE_VERSION and data.get("part_size") == PART_SIZE:
                self.entries = data.get("entries", {})
        except (OSError, ValueError, AttributeError):
            self.entries = {}

    def lookup(self, full: str) -> FileEntry:
        st = os.stat(full)
        key = os.path.realpath(full)
        with self.lock:
            e = self.entries.get(key)
        if e and e.get("size") == st.st_size and e.get("mtime_ns") == st.st_mtime_ns and e.get("ino") == st.st_ino:
            self.hits += 1
            return FileEntry(st.st_size, str(e["sha256"]), str(e["md5"]), str(e["etag"]))
        sha, md5, etag = hash_file(full)
        st2 = os.stat(full)
        if (st2.st_size, st2.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
            raise RuntimeError(f"{full} changed while it was being hashed; run again")
        with self.lock:
            self.misses += 1
            self.entries[key] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino,
                                 "sha256": sha, "md5": md5, "etag": etag}
        return FileEntry(st.st_size, sha, md5, etag)

    def save(self) -> None:
        if not self.misses:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"version": CACHE_VERSION, "part_size": PART_SIZE, "entries": self.entries}, fh)
        os.replace(tmp, self.path)


def build(source: str, cache_path: str, workers: int = 4) -> dict[str, dict[str, object]]:
    """{relative path: {size, sha256, etag}} for every file of the model folder ``source``."""
    files, problems = layout.walk_files(source)
    if problems:
        raise ValueError(f"{source}: " + "; ".join(problems))
    cache = HashCache(cache_path)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        entries = list(pool.map(lambda rel: cache.lookup(os.path.join(source, rel)), files))
    cache.save()
    return {rel: e.to_dict() for rel, e in zip(files, entries)}
