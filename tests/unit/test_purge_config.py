"""Destroy follows purgeOnDestroy as the stack's config file says at destroy time (issue 29)."""
from __future__ import annotations

from components.providers.model_upload import configured_purge


def write(folder, stack, text):
    (folder / f"Pulumi.{stack}.yaml").write_text(text)


def test_a_value_set_after_the_last_up_is_followed_both_ways(tmp_path, capsys):
    write(tmp_path, "s", "config:\n  rustfs-vllm:purgeOnDestroy: true\n")
    assert configured_purge({"purge": False, "stack": "s", "prefix": "m"}, str(tmp_path)) is True
    assert "purgeOnDestroy is true in Pulumi.s.yaml (the stack was last deployed with false)" in capsys.readouterr().out
    write(tmp_path, "s", "config:\n  rustfs-vllm:purgeOnDestroy: 'false'\n")
    assert configured_purge({"purge": True, "stack": "s", "prefix": "m"}, str(tmp_path)) is False
    assert "keeping the model's objects" in capsys.readouterr().out


def test_no_key_means_the_default_false(tmp_path):
    write(tmp_path, "s", "config:\n  rustfs-vllm:bucket: b\n")
    assert configured_purge({"purge": True, "stack": "s"}, str(tmp_path)) is False


def test_without_a_file_or_a_recorded_stack_the_deployed_value_stands(tmp_path, capsys):
    assert configured_purge({"purge": True, "stack": "gone"}, str(tmp_path)) is True
    assert configured_purge({"purge": True}, str(tmp_path)) is True
    write(tmp_path, "s", ": not yaml : [")
    assert configured_purge({"purge": False, "stack": "s"}, str(tmp_path)) is False
    assert capsys.readouterr().out == ""
