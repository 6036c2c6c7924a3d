"""The smaller points of issue 57, on real files: what runs as root never follows a path an unprivileged user
could swap, the read-ahead skips what is not a regular file, the providers' log is private and bounded, and no
stack name has a ``..`` segment."""
from __future__ import annotations

import os
import stat
import threading

from components.config.schema import STACK_REF_RE
from components.mounting import vfs_cache
from components.providers import base


def test_the_cache_purge_unlinks_a_folder_swapped_for_a_link_and_never_empties_its_target(tmp_path):
    root, victim = tmp_path / "cache", tmp_path / "precious"
    (root / "m1" / "vfs").mkdir(parents=True)
    (root / "m1" / "vfs" / "f").write_text("cached")
    victim.mkdir()
    (victim / "keep.txt").write_text("not the cache's")
    (root / "m2").symlink_to(victim, target_is_directory=True)     # swapped in place of a model's cache folder
    vfs_cache.remove_under(str(root), "m2")
    vfs_cache.remove_under(str(root), "m1")
    assert (victim / "keep.txt").read_text() == "not the cache's"
    assert sorted(os.listdir(root)) == []


def test_the_read_ahead_skips_a_fifo_and_a_link_instead_of_hanging_or_following(tmp_path):
    folder = tmp_path / "vfs" / "R" / "b" / "m"
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes(b"{}" * 100)
    os.mkfifo(folder / "model.safetensors")            # a reader of a FIFO with no writer blocks forever
    (tmp_path / "elsewhere").write_bytes(b"x" * 5000)
    (folder / "tokenizer.json").symlink_to(tmp_path / "elsewhere")
    result: list = []
    t = threading.Thread(target=lambda: result.append(vfs_cache.read_cache_ahead(str(tmp_path), budget=1 << 30)),
                         daemon=True)
    t.start()
    t.join(10)
    assert result, "the read-ahead hung"
    files, done, _, _ = result[0]
    assert (files, done) == (1, 200), result


def test_the_providers_log_is_0600_never_written_through_a_link_and_bounded(tmp_path, monkeypatch):
    log = tmp_path / "logs" / "providers.log"
    base.write_log(str(log), "first\n")
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    monkeypatch.setattr(base, "LOG_MAX_BYTES", 100)
    base.write_log(str(log), "x" * 200)
    base.write_log(str(log), "after\n")            # past the bound: the old log moved aside, a new one begun
    assert log.read_text() == "after\n" and (tmp_path / "logs" / "providers.log.1").exists()
    target = tmp_path / "target"
    target.write_text("untouched")
    log.unlink()
    log.symlink_to(target)
    base.write_log(str(log), "through the link?\n")
    assert target.read_text() == "untouched"


def test_no_stack_name_has_a_dot_or_dot_dot_segment():
    for good in ("organization/rustfs-vllm/dev", "acme/proj.x/stack..2", "a/b/.c"):
        assert STACK_REF_RE.fullmatch(good), good
    for bad in ("organization/rustfs-vllm/..", "../rustfs-vllm/dev", "a/./c", "a/../c", "a/b"):
        assert not STACK_REF_RE.fullmatch(bad), bad


def test_a_unit_test_that_reads_the_hosts_own_state_fails(own_state_folder):
    """tests/unit/conftest.py: the project's .state (a deployed stack's mount markers, say) is out of a unit test's
    reach, so the README's two commands pass in either order (issue 57); its own state folder is not."""
    import pytest

    from tests.helpers import ROOT

    with pytest.raises(RuntimeError, match="read the host's state"):
        open(ROOT / ".state" / "mounts" / "offline" / "SmolLM2-135M-Instruct.json")
    (own_state_folder / "x").parent.mkdir(parents=True, exist_ok=True)
    (own_state_folder / "x").write_text("its own")
    assert (own_state_folder / "x").read_text() == "its own"
