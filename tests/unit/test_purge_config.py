"""Destroy follows purgeOnDestroy: the value the engine hands the providers when the program ran at
destroy (``pulumi destroy --run-program``), else the stack file's when it changed since the last up,
else the deployed one; every purge is said (issues 29, 43)."""
from __future__ import annotations

import pytest

from components.providers import base
from components.providers.destroy_config import purge_at_destroy

MODEL = "the model's objects"


def write(folder, stack, text):
    (folder / f"Pulumi.{stack}.yaml").write_text(text)


@pytest.fixture
def engine(monkeypatch):
    """The configuration the engine handed the provider process (Configure), as base.adopt keeps it."""
    def hand_over(value=None):
        monkeypatch.setattr(base, "_config", {} if value is None else {"rustfs-vllm:purgeOnDestroy": value})
    hand_over()
    return hand_over


def test_a_value_set_in_the_stack_file_after_the_last_up_is_followed_both_ways(tmp_path, capsys, engine):
    engine("false")                    # a plain destroy: the engine hands over the last up's configuration
    write(tmp_path, "s", "config:\n  rustfs-vllm:purgeOnDestroy: true\n")
    assert purge_at_destroy({"purge": False, "stack": "s"}, "model m", MODEL, str(tmp_path)) is True
    assert ("model m: purgeOnDestroy is true in Pulumi.s.yaml (the stack was last deployed with false): "
            "following the configuration, removing the model's objects") in capsys.readouterr().out
    engine("true")
    write(tmp_path, "s", "config:\n  rustfs-vllm:purgeOnDestroy: 'false'\n")
    assert purge_at_destroy({"purge": True, "stack": "s"}, "model m", MODEL, str(tmp_path)) is False
    assert "keeping the model's objects" in capsys.readouterr().out


def test_the_engines_value_counts_when_the_program_ran_at_destroy(tmp_path, capsys, engine):
    """`pulumi destroy --run-program --config-file other.yaml` (or -c, or an ESC environment): the engine hands
    over a value the last up did not have; the stack file, which says otherwise, does not count then."""
    write(tmp_path, "s", "config:\n  rustfs-vllm:purgeOnDestroy: 'false'\n")
    engine("true")
    assert purge_at_destroy({"purge": False, "stack": "s"}, "model m", MODEL, str(tmp_path)) is True
    out = capsys.readouterr().out
    assert "purgeOnDestroy is true in the configuration this destroy ran the program with" in out, out
    engine("false")
    write(tmp_path, "s", "config:\n  rustfs-vllm:purgeOnDestroy: true\n")
    assert purge_at_destroy({"purge": True, "stack": "s"}, "model m", MODEL, str(tmp_path)) is False


def test_no_key_means_the_default_false(tmp_path, engine):
    write(tmp_path, "s", "config:\n  rustfs-vllm:bucket: b\n")
    assert purge_at_destroy({"purge": True, "stack": "s"}, "model m", MODEL, str(tmp_path)) is False


def test_without_a_file_or_a_recorded_stack_the_deployed_value_stands_and_a_purge_is_said(tmp_path, capsys, engine):
    assert purge_at_destroy({"purge": True, "stack": "gone"}, "model m", MODEL, str(tmp_path)) is True
    assert capsys.readouterr().out == "model m: purgeOnDestroy is true (as deployed): removing the model's objects\n"
    assert purge_at_destroy({"purge": True}, "model m", MODEL, str(tmp_path)) is True
    write(tmp_path, "s", ": not yaml : [")
    capsys.readouterr()
    assert purge_at_destroy({"purge": False, "stack": "s"}, "model m", MODEL, str(tmp_path)) is False
    assert capsys.readouterr().out == ""           # nothing purged, nothing changed: nothing to say
