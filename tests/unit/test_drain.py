"""vLLM's drain (issue 58, vllmDrainSeconds): a stopped server finishes what it serves before it exits.

The argv carries ``--shutdown-timeout`` once (the stack's, unless the model's extraArgs give their own) and the
container's stop timeout and destroy grace follow the drain that applies; the endpoint rewrites its conf when a
new version of the program writes another one.
"""
from __future__ import annotations

import pytest

from components.docker.router import conf_version
from components.serving import router_conf
from components.serving.vllm import VllmServerArgs, drain_of, given_drain, stop_seconds, vllm_argv


def server(drain: int, extra: tuple[str, ...] = ()) -> VllmServerArgs:
    return VllmServerArgs(stack="s", container_name="c", image_id="i", model_dir="/models/m", served_name="m",
                          dtype="float32", max_model_len=512, port=8000, mount_path="/mnt/x", revision="r",
                          extra_args=extra, drain_seconds=drain)


@pytest.mark.parametrize("drain, extra, flag, stop", [
    (60, (), ["--shutdown-timeout", "60"], 90),                                  # the stack's default
    (0, (), [], 10),                                                              # off: vLLM's abort, Docker's 10 s
    (60, ("--shutdown-timeout", "5"), ["--shutdown-timeout", "5"], 35),          # the model's own wins, once
    (60, ("--shutdown-timeout=0",), ["--shutdown-timeout=0"], 10),               # the model's own 0: no drain
    (0, ("--enforce-eager", "--shutdown-timeout", "120"), ["--shutdown-timeout", "120"], 150),
])
def test_the_drain_given_once_and_the_stop_timeout_after_it(drain, extra, flag, stop):
    args = server(drain, extra)
    argv = vllm_argv(args)
    assert sum(a.startswith("--shutdown-timeout") for a in argv) == (1 if flag else 0), argv
    if flag:
        at = next(i for i, a in enumerate(argv) if a.startswith("--shutdown-timeout"))
        assert argv[at:at + len(flag)] == flag, argv
    assert stop_seconds(args) == stop
    assert drain_of(args) == (stop - 30 if stop > 10 else 0)


def test_a_shutdown_timeout_that_is_not_a_number_is_left_to_vllm():
    assert given_drain(("--shutdown-timeout", "soon")) is None
    assert given_drain(("--shutdown-timeout",)) is None
    assert given_drain(("--shutdown-timeout", "inf")) is None and given_drain(("--shutdown-timeout=nan",)) is None


def test_the_endpoint_conf_version_follows_the_conf_text():
    ports = router_conf.Ports("127.0.0.1", 8080, 8081, 8082)
    assert conf_version(ports) == conf_version(router_conf.Ports("127.0.0.1", 8080, 8081, 8082))
    assert conf_version(ports) != conf_version(router_conf.Ports("127.0.0.1", 9080, 9081, 9082))
