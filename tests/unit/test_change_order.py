"""How a change reaches a model's server on a Docker host (issue 58, components/docker/change_order.py): the slot
it goes to, create-first or delete-first, and the one line preview says, from the last `up`'s record and the host's
memory; and the config rules of changeOrder and changePort."""
from __future__ import annotations

import dataclasses

import pytest

from components.config.spec import ModelSpec
from components.docker import change_order
from components.docker.change_order import Fit, decide, fit, slot
from components.serving.vllm import VllmServerArgs, change_parts
from tests.unit.probes import load_and_check
from tests.helpers import make_model

GIB = 2**30
PARTS = {"image": "i1", "vLLM arguments": "a1", "environment": "e1", "weights": "w1"}


@pytest.fixture
def cfg(tmp_path):
    make_model(tmp_path / "m1")
    make_model(tmp_path / "m2", seed=2)
    raw = {"environment": "dev", "mountPath": str(tmp_path / "mnt"),
           "models": [{"name": "m1", "source": "m1", "port": 8000, "kvCacheSpaceGib": 1},
                      {"name": "m2", "source": "m2", "port": 60000, "changeOrder": "stopFirst"}]}
    return load_and_check(raw, "dev", str(tmp_path), in_use=(), memory=24 * GIB, volume=lambda name: None)


def test_two_slots_of_their_own_and_the_default_change_port(cfg):
    m1, m2 = cfg.models
    assert (m1.change_port, m2.change_port) == (18000, 50000)        # +10000, or -10000 above 55535
    assert slot(cfg, m1, "a") == change_order.Slot("a", "rvllm-dev-vllm-m1", 8000)
    assert slot(cfg, m1, "b") == change_order.Slot("b", "rvllm-dev-vllm2-m1", 18000)
    # no prefix's slot a is another's slot b: "-vllm-" and "-vllm2-" differ before the prefix
    assert not set(change_order.containers(cfg, m1)) & set(change_order.containers(cfg, m2))


def test_nothing_changed_or_no_record_stays_where_it_is(cfg):
    m1 = cfg.models[0]
    never = lambda: pytest.fail("the host's memory is judged only for a change")  # noqa: E731
    for before in (None, {"slot": "b"}, {"slot": "b", "parts": PARTS}):
        d = decide(cfg, m1, "local", before, PARTS, never)
        assert d.slot == d.was and not d.side_by_side and d.line == ""
    assert decide(cfg, m1, "local", {"slot": "b", "parts": PARTS}, PARTS, never).slot.letter == "b"
    assert decide(cfg, m1, "local", {"slot": "zz", "parts": PARTS}, PARTS, never).slot.letter == "a"


def test_a_change_that_fits_goes_side_by_side_to_the_other_slot_and_says_why(cfg):
    m1 = cfg.models[0]
    now = {**PARTS, "environment": "e2", "image": "i2"}
    d = decide(cfg, m1, "gpu-1", {"slot": "a", "parts": PARTS}, now, lambda: Fit(True, "FIGURES"))
    assert d.side_by_side and d.was.letter == "a" and d.slot == slot(cfg, m1, "b")
    assert d.line.startswith("models[m1] on gpu-1: its image, environment changed: side by side "
                             "(vllmChangeOrder auto: FIGURES): the new server rvllm-dev-vllm2-m1 starts on port 18000 "
                             "beside rvllm-dev-vllm-m1 (port 8000)"), d.line
    back = decide(cfg, m1, "gpu-1", {"slot": "b", "parts": now}, PARTS, lambda: Fit(True, ""))
    assert back.slot.letter == "a" and back.was.letter == "b" and back.side_by_side


def test_new_weights_of_a_mounted_model_go_stop_first_and_say_why(cfg):
    m1 = cfg.models[0]
    assert m1.mounted
    d = decide(cfg, m1, "local", {"slot": "a", "parts": PARTS}, {**PARTS, "weights": "w2", "image": "i2"},
               lambda: pytest.fail("not judged: the mount decides"))
    assert not d.side_by_side and d.slot == d.was and "its image, weights changed: stop-first (new weights of a " \
        "mounted model: its mount is made again in place first" in d.line, d.line
    copied = type(m1)(**{**m1.__dict__, "load_format": "local_copy"})
    assert decide(cfg, copied, "local", {"slot": "a", "parts": PARTS}, {**PARTS, "weights": "w2"},
                  lambda: Fit(True, "")).side_by_side


def test_a_change_that_does_not_fit_or_is_asked_stop_first_stays_and_says_how_to_change_it(cfg):
    m1, m2 = cfg.models
    now = {**PARTS, "environment": "e2"}
    d = decide(cfg, m1, "local", {"slot": "b", "parts": PARTS}, now, lambda: Fit(False, "needs 9 GiB, has 2"))
    assert not d.side_by_side and d.slot == d.was == slot(cfg, m1, "b")
    assert "stop-first (vllmChangeOrder auto: needs 9 GiB, has 2)" in d.line and "503 with Retry-After" in d.line
    assert d.line.endswith("Set vllmChangeOrder sideBySide to start it beside the old one"), d.line
    d2 = decide(cfg, m2, "local", {"slot": "a", "parts": PARTS}, now, lambda: pytest.fail("not judged"))
    assert not d2.side_by_side and "stop-first (models[m2].changeOrder stopFirst)" in d2.line
    cfg_side = type(cfg)(**{**cfg.__dict__, "vllm_change_order": "sideBySide"})
    d3 = decide(cfg_side, m1, "local", {"slot": "a", "parts": PARTS}, now, lambda: pytest.fail("not judged"))
    assert d3.side_by_side and "side by side (vllmChangeOrder sideBySide)" in d3.line


def model(**kw) -> ModelSpec:
    return ModelSpec(name="m", source="/x", prefix="m", port=8000, max_model_len=256, dtype="float32",
                     gpu_memory_utilization=kw.pop("gmu", None), kv_cache_space_gib=kw.pop("kv", None), **kw)


@pytest.mark.parametrize("m, gpus, env, available, fits, words", [
    (model(kv=1), "", {}, 8 * GIB, True, "about 2.5 GiB (weights 0.5 + KV cache 1 + 1 for vLLM), the host has 8.0"),
    (model(kv=1), "", {}, 3 * GIB, False, "the host has 3.0 GiB available (1 GiB kept free)"),
    (model(memory_gib=6), "", {}, 6.5 * GIB, False, "its memoryGib 6 GiB"),
    (model(), "", {"VLLM_CPU_KVCACHE_SPACE": "2"}, 8 * GIB, True, "KV cache 2"),
    (model(), "", {}, 64 * GIB, False, "vLLM sizes its KV cache on CPU from the host's memory"),
    (model(kv=1), "", {}, None, False, "the host's available memory is not known"),
    (model(), "all", {}, None, False, "each server takes 0.92 of GPUs all (gpuMemoryUtilization, vLLM default)"),
    (model(gmu=0.45), "0", {}, None, True, "both would take 0.9, at most 0.95 fits"),
])
def test_auto_judges_whether_the_host_holds_both(m, gpus, env, available, fits, words):
    judged = fit(m, gpus, env, GIB // 2, available)
    assert judged.fits is fits and words in judged.why, judged


def test_the_parts_change_with_what_replaces_the_container_and_not_with_its_slot():
    args = VllmServerArgs(stack="s", container_name="c", image_id="i", model_dir="/models/m", served_name="m",
                          dtype="float32", max_model_len=512, port=8000, mount_path="/mnt/x", revision="r",
                          drain_seconds=60)
    base = change_parts(args, "img:1", "rev1", "")
    moved = dataclasses.replace(args, port=18000, container_name="c2", restart="always", memory_gib=4.0)
    assert change_parts(moved, "img:1", "rev1", "") == base          # the slot, and what Docker changes in place
    changes = {"image": change_parts(args, "img:2", "rev1", ""),
               "weights": change_parts(args, "img:1", "rev2", ""),
               "API key": change_parts(args, "img:1", "rev1", "k"),
               "vLLM arguments": change_parts(dataclasses.replace(args, served_name="m2"), "img:1", "rev1", ""),
               "environment": change_parts(dataclasses.replace(args, env={"A": "1"}), "img:1", "rev1", ""),
               "stop timeout": change_parts(dataclasses.replace(args, drain_seconds=5), "img:1", "rev1", "")}
    for part, now in changes.items():
        # the drain is vLLM's --shutdown-timeout too
        expected = ["vLLM arguments", part] if part == "stop timeout" else [part]
        assert [k for k in base if base[k] != now[k]] == expected, (part, now)


def test_changeorder_and_changeport_rules(tmp_path):
    make_model(tmp_path / "m1")
    make_model(tmp_path / "m2", seed=2)
    from components import config
    raw = {"environment": "dev", "mountPath": str(tmp_path / "mnt"),
           "models": [{"name": "m1", "source": "m1", "port": 8000},
                      {"name": "m2", "source": "m2", "port": 8001, "changePort": 8000}]}
    with pytest.raises(config.ConfigError) as info:
        load_and_check(raw, "dev", str(tmp_path), in_use=(), memory=24 * GIB, volume=lambda name: None)
    assert "models[m2].changePort = 8000 is invalid" in str(info.value) and "model 'm1' uses it there" in str(info.value)
    raw["models"][1]["changePort"] = 18000
    with pytest.raises(config.ConfigError) as info:
        load_and_check(raw, "dev", str(tmp_path), in_use=(), memory=24 * GIB, volume=lambda name: None)
    assert "models[m2].changePort = 18000" in str(info.value) and "model 'm1' uses it there" in str(info.value)
    raw["models"][1]["changePort"] = 9100
    raw["routerPort"] = 18000
    with pytest.raises(config.ConfigError) as info:
        load_and_check(raw, "dev", str(tmp_path), in_use=(), memory=24 * GIB, volume=lambda name: None)
    assert "routerPort = 18000" in str(info.value) and "changePort" in str(info.value)


def test_preview_says_in_words_when_the_endpoint_is_down(cfg):
    from components.hosts.docker_facts import DockerFacts
    from components.targets.docker import endpoint_down

    mine = {"rustfs-vllm.stack": cfg.stack}
    names = (f"{cfg.name_prefix}-router", f"{cfg.name_prefix}-endpoint")
    running = DockerFacts(containers={n: mine for n in names}, states={n: "running" for n in names})
    assert endpoint_down(cfg, running) == "" and endpoint_down(cfg, None) == ""
    stopped = DockerFacts(containers={n: mine for n in names}, states={names[0]: "exited", names[1]: "running"})
    line = endpoint_down(cfg, stopped)
    assert line.startswith(f"the stack's endpoint is down: {names[0]} is exited, so no model is reachable at "
                           f"routerPort {cfg.router_port}") and "`pulumi up --refresh` starts it again" in line, line
    others = DockerFacts(containers={n: {"rustfs-vllm.stack": "another"} for n in names},
                         states={n: "exited" for n in names})
    assert endpoint_down(cfg, others) == ""          # not this stack's: preflight's name check speaks of those
