"""Facts about local folders: a Hugging Face model folder's layout, and a mount point's state."""
from __future__ import annotations

import errno
import json
import os
from typing import Optional

# what is mounted at a path and the mount root's self-bind: the mount tool's own checks, one implementation
from components.mounting.mount_tool import is_self_bind, mounted_at  # noqa: F401  (callers use layout.mounted_at/is_self_bind)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
WEIGHT_NAMES = ("pytorch_model.bin",)


def walk_files(root: str) -> tuple[list[str], list[str]]:
    """Relative paths of the files under ``root`` and a list of problems, one line per cause.

    A symlink to a file is followed: the file is uploaded (and hashed) under the link's name, so a
    Hugging Face cache snapshot (``snapshots/<rev>/*`` linking into ``../../blobs/``, the layout
    ``huggingface-cli download`` and ``snapshot_download()`` make) is a model folder like any other.
    A dangling link, a link loop, a link to a folder and entries that are neither files nor
    folders are problems; names starting with a dot (``.cache/``, ``.git/``) are never part of a model.
    """
    files, problems, _ = _walk(root)
    return files, problems


def _walk(root: str) -> tuple[list[str], list[str], set[str]]:
    """(files, problems, the names of the entries those problems are about)."""
    files: list[str] = []
    problems: list[str] = []
    refused: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for d in list(dirnames):
            full = os.path.join(dirpath, d)
            if os.path.islink(full):
                problems.append(f"no links to folders ({os.path.relpath(full, root)} -> {os.readlink(full)})")
                refused.add(d)
                dirnames.remove(d)
            elif d.startswith("."):
                dirnames.remove(d)
        for f in filenames:
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, root)
            if f.startswith("."):
                continue
            problem = entry_problem(full, rel)
            if problem:
                problems.append(problem)
                refused.add(f)
            else:
                files.append(rel.replace(os.sep, "/"))
    files.sort()
    return files, problems, refused


def entry_problem(full: str, rel: str) -> str:
    """What keeps one entry of a model folder from being uploaded ("" if nothing); links followed."""
    link = f"{rel} -> {os.readlink(full)}" if os.path.islink(full) else ""
    try:
        os.stat(full)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"no symlink loops ({link})"
        if link:
            return f"no dangling symlinks ({link}: the target does not exist)"
        return f"regular files only ({rel}: {exc.strerror})"
    if os.path.isdir(full):
        return f"no links to folders ({link})"
    if not os.path.isfile(full):
        return f"regular files only ({link or rel} is not one)"
    if not os.access(full, os.R_OK):
        return f"readable files only ({link or rel} cannot be read by this user)"
    return ""


def folder_problems(source: str) -> list[str]:
    """What keeps ``source`` from being an uploadable Hugging Face model folder (empty if nothing)."""
    if os.path.islink(source):
        return ["a real folder, not a symlink"]
    if not os.path.exists(source):
        return ["an existing local folder (it does not exist)"]
    if not os.path.isdir(source):
        return ["a folder (it is a file)"]
    if not os.access(source, os.R_OK | os.X_OK):
        return ["a folder this user can read"]
    files, problems, refused = _walk(source)
    # an entry refused above is not reported missing again: one line per cause
    names = {f.split("/")[-1] for f in files} | refused
    if "config.json" in files:
        try:
            with open(os.path.join(source, "config.json"), encoding="utf-8") as fh:
                json.load(fh)
        except (OSError, ValueError) as exc:
            problems.append(f"a config.json that is valid JSON ({exc})")
    elif "config.json" not in refused:
        problems.append("a Hugging Face folder with config.json at its top (none found)")
    if not any(n in names for n in TOKENIZER_FILES):
        problems.append(f"tokenizer files ({', '.join(TOKENIZER_FILES)}): none found")
    if not any(n.endswith(WEIGHT_SUFFIXES) or n in WEIGHT_NAMES for n in names):
        problems.append("weights (*.safetensors or pytorch_model.bin): none found")
    return problems


def max_positions(source: str) -> Optional[int]:
    """The model's context length from config.json, where it states one."""
    try:
        with open(os.path.join(source, "config.json"), encoding="utf-8") as fh:
            cfg = json.load(fh)
    except (OSError, ValueError):
        return None
    for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        value = cfg.get(key) if isinstance(cfg, dict) else None
        if isinstance(value, int) and value > 0:
            return value
    return None


def mount_point_problem(path: str) -> Optional[str]:
    """Why ``path`` cannot become our mount root, or None.

    Ours from an earlier run is fine: the root as a bind mount of itself, the models' rclone mounts
    (or their folders, whose mount, when down, preview names) in it, or a whole-bucket rclone mount of
    an older version of this program.
    Anything else mounted there, or other files, is refused: mounting over it would hide them.
    """
    if os.path.exists(path) and not os.path.isdir(path):
        return "a folder path (a file exists there)"
    fstype = mounted_at(path)
    if fstype is not None and fstype != "fuse.rclone" and not is_self_bind(path):
        return f"a path with nothing mounted on it (a {fstype} filesystem is)"
    if os.path.isdir(path) and fstype != "fuse.rclone":
        ours = fstype is not None and is_self_bind(path)
        try:
            entries = os.listdir(path)
        except OSError as exc:
            return f"a folder this user can read ({exc.strerror})"
        for name in entries:
            full = os.path.join(path, name)
            if mounted_at(full) == "fuse.rclone":
                continue
            if ours and os.path.isdir(full) and not os.path.islink(full):
                continue    # a deployed root: a model's folder with its mount down is that mount's to say (preview)
            if os.path.isdir(full) and not os.path.islink(full):
                try:
                    if not os.listdir(full):
                        continue
                except OSError:
                    pass
            return "an empty or missing folder (it has files, which the mount would hide)"
    return None
