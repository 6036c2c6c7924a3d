"""File helpers for what the bash did with rm, ``[ -s ]`` and its ``put`` function."""
from __future__ import annotations

import os
import shutil


def nonempty(path: str) -> bool:
    """``[ -s PATH ]``."""
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def rm_f(path: str) -> None:
    """``rm -f PATH`` (a file)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def rm_rf(path: str) -> None:
    """``rm -rf PATH``: a link or file is unlinked, a folder deleted with all it holds."""
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        rm_f(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)


def put(path: str, text: str) -> None:
    """TEXT into PATH unless PATH holds that already (kube-proxy exits when its file is written); as the
    bash's ``new=$(cat)``, trailing newlines do not count and one is written."""
    new = text.rstrip("\n")
    try:
        with open(path, errors="surrogateescape") as f:
            if f.read().rstrip("\n") == new:
                return
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        pass
    with open(f"{path}.tmp", "w") as f:
        f.write(new + "\n")
    os.replace(f"{path}.tmp", path)
