"""What an `up` deletes from the bucket, said at preview (issue 57; components/core/deletions.py): one line per
prefix that leaves the stack or moves, with its objects and bytes, and nothing for a prefix that stays."""
from __future__ import annotations

import dataclasses

import pytest

from components.core import deletions
from tests.helpers import make_model
from tests.unit.probes import load_and_check

ME = "organization/rustfs-vllm/dev"


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setattr(deletions, "stack_fqn", lambda: ME)
    make_model(tmp_path / "m1")
    make_model(tmp_path / "m2", seed=2)
    return load_and_check({"environment": "dev", "mountPath": str(tmp_path / "mnt"),
                           "models": [{"name": "m1", "source": "m1"}, {"name": "m2", "source": "m2"}]},
                          "dev", str(tmp_path))


def count(found: dict):
    return lambda bucket, prefix: found[(bucket, prefix)]


def test_nothing_is_said_when_every_prefix_stays_where_it_was(cfg):
    assert deletions.lines(cfg, deletions.stored(cfg), count({})) == []
    assert deletions.lines(cfg, None, count({})) == []          # a first `up`: nothing deployed to compare with


def test_a_model_that_left_the_stack_or_moved_is_named_with_its_objects_and_bytes(cfg):
    before = {**deletions.stored(cfg), "gone": "s3://vllm-models/gone/", "m1": "s3://old-bucket/m1/"}
    found = {("vllm-models", "gone"): (6, 3 * 2**20, ME), ("old-bucket", "m1"): (2, 2**20, ME)}
    purged = dataclasses.replace(cfg, purge_on_destroy=True)
    assert deletions.lines(purged, before, count(found)) == [
        "model prefix gone: this up deletes 6 objects (3.0 MiB) under s3://vllm-models/gone/: no model of the "
        "stack is stored there now and purgeOnDestroy is true",
        "model prefix m1: this up deletes 2 objects (1.0 MiB) under s3://old-bucket/m1/: it moves to "
        "s3://vllm-models/m1/ and purgeOnDestroy is true"]
    kept = deletions.lines(cfg, before, count(found))
    assert kept[0] == ("model prefix gone: 6 objects (3.0 MiB) under s3://vllm-models/gone/ stay in the bucket: no "
                       "model of the stack is stored there now (purgeOnDestroy is false)") and len(kept) == 2


def test_another_stacks_prefix_is_not_this_stacks_to_speak_of_and_an_unanswering_server_is_said(cfg):
    purged = dataclasses.replace(cfg, purge_on_destroy=True)
    before = {"theirs": "s3://vllm-models/theirs/", "lost": "s3://vllm-models/lost/"}

    def count_(bucket, prefix):
        if prefix == "lost":
            raise ConnectionError("no server")
        return 3, 10, "organization/rustfs-vllm/other"

    assert deletions.lines(purged, before, count_) == [
        "model prefix lost: this up deletes its objects (the server does not answer) under s3://vllm-models/lost/: "
        "no model of the stack is stored there now and purgeOnDestroy is true"]
