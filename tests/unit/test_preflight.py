"""Preflight's decisions on given Docker facts (the probes themselves run for real in
tests/reliability/test_bad_inputs.py and against the simulated hosts): GPUs asked for where the
host has none, named by the key that asked; container names this stack will create held by
containers that are not this stack's, with who made them."""
from __future__ import annotations

from components.hosts import docker_facts
from components.docker import preflight
from components.docker.preflight import DockerFacts
from tests.unit.probes import GivenProbes
from tests.unit.test_hosts import load, raw_two_hosts


def check(cfg, local, remote):
    """preflight.check with probes answering ``local()`` for this machine and ``remote(host)`` for
    each remote host (and nothing wrong with ports, images, FUSE, TLS or SSH)."""
    facts = {preflight.here(cfg): local(), **{h.name: remote(h) for h in cfg.hosts if not h.local}}
    return preflight.check(cfg, GivenProbes(facts=facts))

NO_GPU = DockerFacts(runtimes=("io.containerd.runc.v2", "runc"))


def test_gpus_asked_on_a_host_without_them_name_the_key_that_asked(tmp_path):
    raw = raw_two_hosts(tmp_path)
    raw["models"][1]["gpus"] = "0"                       # "one" on b asks itself; "both" gets a's gpus: all
    cfg = load(raw)
    problems = check(cfg, local=lambda: DockerFacts(), remote=lambda h: NO_GPU)
    assert len(problems) == 2, problems
    assert problems[0].startswith("rustfs-vllm:hosts[a].gpus = 'all' is invalid") and "host 'a'" in problems[0]
    assert "NVIDIA Container Toolkit" in problems[0] and "model both" in problems[0]
    assert problems[1].startswith("rustfs-vllm:models[one].gpus = '0' is invalid") and "host 'b'" in problems[1]


def test_a_runtime_a_hook_or_a_cdi_device_is_enough(tmp_path):
    cfg = load(raw_two_hosts(tmp_path, vllmGpus="all"))
    for facts in (DockerFacts(runtimes=("nvidia", "runc")), DockerFacts(hooks=("nvidia-container-runtime-hook",)),
                  DockerFacts(cdi_devices=("nvidia.com/gpu=0", "nvidia.com/gpu=all"))):
        assert check(cfg, local=lambda: None, remote=lambda h, f=facts: f) == []
    assert check(cfg, local=lambda: None, remote=lambda h: None) == []   # not asked: up says


def test_a_foreign_container_with_one_of_the_stacks_names_is_named_with_its_maker(tmp_path):
    cfg = load(raw_two_hosts(tmp_path))
    prefix = cfg.name_prefix
    on_b = {f"{prefix}-vllm-one": {"com.docker.compose.project": "lab"},
            f"{prefix}-vllm-both": {"rustfs-vllm.stack": "multi"},         # ours: fine
            "unrelated": {}}
    problems = check(cfg, local=lambda: DockerFacts(),
                               remote=lambda h: DockerFacts(runtimes=("nvidia",),          # host a's gpus: all
                                                            containers=on_b if h.name == "b" else {}))
    assert problems == [
        f"rustfs-vllm:namePrefix = {prefix!r} is invalid: a prefix whose container names are free: the container "
        f"'{prefix}-vllm-one' on host 'b' exists and is not this stack's (it was made by docker compose (project "
        f"'lab')); remove it (`docker rm -f {prefix}-vllm-one`) if it is a leftover, or set another "
        "rustfs-vllm:namePrefix"]


def test_the_s3_server_and_entry_point_names_are_checked_on_this_machine(tmp_path):
    raw = raw_two_hosts(tmp_path, s3Server="rustfs", rustfsEndpoint="http://127.0.0.1:9000",
                        rustfsImage="rustfs/rustfs:1.0.1")
    raw["hosts"] = [{**h, "s3Endpoint": "http://10.0.0.1:9000"} for h in raw["hosts"]]
    cfg = load(raw)
    local = DockerFacts(containers={f"{cfg.name_prefix}-s3": {"rustfs-vllm.stack": "other"},
                                    f"{cfg.name_prefix}-endpoint": {}})
    problems = check(cfg, local=lambda: local, remote=lambda h: DockerFacts(runtimes=("nvidia",)))
    assert len(problems) == 2 and all(" on host " not in p for p in problems), problems
    assert "belongs to the rustfs-vllm stack 'other'" in problems[0] and "no label says" in problems[1]


def test_remote_facts_are_read_from_the_probe_script_output():
    out = ('{"Runtimes": {"runc": {}, "nvidia": {}}, "ServerVersion": "27.0"}\n--- hooks\n'
           'nvidia-container-runtime-hook\n--- containers\nweb\trunning\tcom.docker.compose.project=lab,a=b\nbare\tcreated\t\n')
    f = docker_facts.parse_remote(out)
    assert f.gpus and f.runtimes == ("nvidia", "runc") and f.hooks == ("nvidia-container-runtime-hook",)
    assert f.containers == {"web": {"com.docker.compose.project": "lab", "a": "b"}, "bare": {}}
    assert f.states == {"web": "running", "bare": "created"}
    assert docker_facts.parse_remote("Cannot connect to the Docker daemon\n--- hooks\n--- containers\n") is None


def test_a_container_of_the_stack_that_never_started_is_named_with_the_refresh_that_mends_it(tmp_path):
    cfg = load(raw_two_hosts(tmp_path))
    name = f"{cfg.name_prefix}-vllm-{cfg.models[0].prefix.lower()}"
    host = cfg.models[0].hosts[0]
    mine = {"rustfs-vllm.stack": cfg.stack}
    [line] = preflight.never_started(cfg, {host: DockerFacts(containers={name: mine}, states={name: "created"})})
    assert line.startswith(f"container {name} on host {host!r} was made but never started"), line
    assert "pulumi up --refresh" in line
    assert preflight.never_started(cfg, {host: DockerFacts(containers={name: mine}, states={name: "running"})}) == []
    other = DockerFacts(containers={name: {"rustfs-vllm.stack": "other"}}, states={name: "created"})
    assert preflight.never_started(cfg, {host: other}) == []
