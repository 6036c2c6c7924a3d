"""Several serving hosts from one stack, through the real engine, on two SIMULATED hosts.

tests/hosts/sim-hosts starts two hosts on this machine, each with its own sshd (127.0.0.2:2222 and
127.0.0.3:2222), its own Docker daemon and data root, its own mount namespace (its own /mnt, so
its FUSE mounts are its own), rclone and fuse3. The program reaches them only as it reaches real
hosts: Docker over ssh://, the mounts as remote commands over SSH. The hosts pull the vLLM image
from Debian's docker-registry on 127.0.0.1:5005 (kept between runs, as are the hosts' data roots).
They share this machine's network, so their s3Endpoint is this machine's loopback (a real host
would name the S3 server's address).

One model ("both") on hosts a and b, one ("one") on host a only, and later one ("copied") on host b from a
local copy. Steps, on one stack:
  preview -> up -> completions from every host through its own read-only mount, and through the
  model's entry point, spread over both hosts -> no-change up
  -> change "one" (touches only host a's "one") -> kill rclone of "both" on host b while host a
  keeps serving (b's mount comes back by itself) -> host b's vLLM killed under load through the entry
  point (only requests in flight on b fail; b comes back by its restart policy) -> host b restarts
  (engine, mounts, rclone: it serves again with no pulumi run) -> host b down: the model's entry point (nginx on
  this machine) keeps answering from a, preview and up fail naming it,
  destroy cleans host a and fails for b -> b back: destroy with purgeOnDestroy set right before it ends
  with no container or mount on any host, each host's VFS cache and the models' objects removed.
  Between: host b's check of its mounts fails -> one warning, nothing mounted again; "copied" is added on
  host b (its local copy made there from the bucket), and the purge removes that copy too.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from components.storage import s3
from tests import s3_under_test
from tests.helpers import ROOT, keeper_privileges, s3_answer
from tests.pulumi_cli import Stack
from tests.serving.load import SteadyLoad
from tests.hosts.sim import (HOSTS, LOCAL_IMAGE, MODEL, RCLONE_IMAGE, REGISTRY, complete, completions_served,
                             containers, make_stack, on_host, rclone_mounts, sim, start, stop, tear_down, url)

RESULTS = ROOT / ".state" / f"e2e-hosts-{s3_under_test.KIND}.json"

pytestmark = pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                                reason="scripts/build-smollm2-model has not run (scripts/test runs it)")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    started = time.monotonic()
    start()
    timings = {"sim_hosts_up": round(time.monotonic() - started, 1)}
    ctx = make_stack(tmp_path_factory.mktemp("hosts"), "hosts", [
        {"name": "both", "prefix": "both", "port": 8101, "env": {"VLLM_CPU_OMP_THREADS_BIND": "0"}},
        {"name": "one", "prefix": "one", "port": 8102, "hosts": ["a"], "env": {"VLLM_CPU_OMP_THREADS_BIND": "1"}}])
    ctx["timings"] = timings
    yield ctx
    tear_down(ctx)
    stop()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({**ctx["stack"].timings, **timings}, indent=2))
    print("two-host timings:", json.dumps({**ctx["stack"].timings, **timings}))


def test_two_hosts(env):
    stack: Stack = env["stack"]

    # 1. preview: each host's provider, tools, mounts, image and containers, nothing made yet
    steps = json.loads(stack.run("preview", "--json", label="preview_empty").stdout)["steps"]
    created = {s["urn"].split("::")[-1] for s in steps if s["op"] == "create"}
    assert {"a-docker", "b-docker", "a-host-tools-command", "b-host-tools-command", "a-mount-both-command",
            "b-mount-both-command", "a-mount-one-command", "a-vllm-both-container", "b-vllm-both-container",
            "a-vllm-one-container", "a-smoke-one-completion"} <= created
    assert not any(n.startswith("b-") and "-one" in n for n in created), "model one runs on host a only"
    assert all(containers(h, stack.name) == {} for h in HOSTS)

    # 2. up: every host serves its models through its own read-only rclone mount
    stack.run("up", "--yes", "--skip-preview", label="up_two_hosts")
    outputs = stack.outputs()
    assert outputs["models"]["both"]["base_urls"] == [url("a", 8101), url("b", 8101)]
    assert outputs["models"]["one"]["base_urls"] == [url("a", 8102)]
    answers = {(h, m): complete(url(h, p), m) for h, m, p in (("a", "both", 8101), ("b", "both", 8101),
                                                            ("a", "one", 8102))}
    assert all(answers.values()), answers
    assert answers[("a", "both")] == answers[("b", "both")], "same weights, same greedy answer on both hosts"
    assert outputs["smoke_completions"]["both"]["b"]
    for h, models in (("a", {"both", "one"}), ("b", {"both"})):
        mounts = {Path(p).name: opts for p, opts in rclone_mounts(h)}
        assert set(mounts) == models, (h, mounts)
        assert all(o.split(",")[0] == "ro" for o in mounts.values()), mounts
        for name in models:
            cid = containers(h, stack.name)[f"{env['prefix']}-vllm-{name}"]
            binds = json.loads(on_host(h, f"docker inspect -f '{{{{json .Mounts}}}}' {cid}"))
            assert [(b["Source"], b["Destination"], b["RW"]) for b in binds if b["Type"] == "bind"] == [
                ("/mnt/rv-hosts", "/models", False)]
            assert [b["Destination"] for b in binds if b["Type"] == "volume"] == ["/vllm-cache"]   # vllmCompileCache
    # the stack's one endpoint on this machine spreads the model's requests over both hosts
    env["entry"] = outputs["endpoint"]
    assert outputs["endpoint_models"] == ["both", "one"]
    box = f"{env['prefix']}-vllm-both"
    served = {h: completions_served(h, box) for h in HOSTS}
    for _ in range(4):
        assert complete(env["entry"], "both") == answers[("a", "both")]
    spread = {h: completions_served(h, box) - served[h] for h in HOSTS}
    assert sum(spread.values()) == 4 and all(n >= 1 for n in spread.values()), spread
    # the hosts' mounts are theirs: this machine has none of them
    assert "/mnt/rv-hosts" not in Path("/proc/mounts").read_text()
    # no credential on any host's process list or in a file others can read
    for h in HOSTS:
        ps = on_host(h, "ps -eo args")
        assert env["secret"] not in ps and env["access"] not in ps
        # the keys are on the host only in the mount keepers' specs: mode 0600, root's (DESIGN: a
        # mode-0600 file or environment variables), which the keepers read after a restart
        holders = on_host(h, f"grep -rl -- {env['secret']} /var/lib/rustfs-vllm || true").split()
        assert all(p.endswith(".keeper.json") for p in holders), holders
        for p in holders:
            assert on_host(h, f"stat -c '%a %U' {p}").strip() == "600 root", p
        # the keepers: their own small image, least privilege, the tools root installed outside tools_dir
        for name in on_host(h, "docker ps -q --filter label=rustfs-vllm.role=mount").split():
            attrs = json.loads(on_host(h, f"docker inspect {name}"))[0]
            env["timings"].setdefault("keepers", {})[h] = keeper_privileges(
                attrs, f"{REGISTRY}/{LOCAL_IMAGE}", f"{REGISTRY}/{RCLONE_IMAGE}")
    state = json.dumps(stack.state())
    assert env["secret"] not in state and "PRIVATE KEY" not in state
    if s3_under_test.KIND == "rustfs":
        env["timings"]["read_key_on_hosts"] = _read_key_on_hosts(env, {"a": {"both", "one"}, "b": {"both"}})

    # 3. a second up changes nothing
    stack.run("preview", "--expect-no-changes", label="preview_no_change")

    # 4. a change of model "one" touches only host a's "one"
    before = {h: containers(h, stack.name) for h in HOSTS}
    data = yaml.safe_load(env["cfg_file"].read_text())
    data["config"]["rustfs-vllm:models"][1]["maxModelLen"] = 384
    env["cfg_file"].write_text(yaml.safe_dump(data, sort_keys=False))
    steps = json.loads(stack.run("preview", "--json").stdout)["steps"]
    changed = {s["urn"].split("::")[-1] for s in steps if s["op"] not in ("same", "read")}
    # ... and the endpoint's routes: its server moves to another port (side by side, below)
    assert "router-routes" in changed, changed
    changed.discard("router-routes")
    assert changed and all(n.startswith("a-") and "one" in n for n in changed), changed
    up = stack.run("up", "--yes", "--skip-preview", label="up_change_one")
    after = {h: containers(h, stack.name) for h in HOSTS}
    both = f"{env['prefix']}-vllm-both"
    assert after["a"][both] == before["a"][both] and after["b"] == before["b"]
    # side by side (issue 58; auto: host a's available memory, read over SSH, holds both): the new server of "one"
    # on its changePort (8102+10000) in the other slot; the old one went once the endpoint had the new one
    one_a, one_b = f"{env['prefix']}-vllm-one", f"{env['prefix']}-vllm2-one"
    assert "models[one] on a: its vLLM arguments changed: side by side" in up.stdout, up.stdout[-3000:]
    assert one_a in before["a"] and one_a not in after["a"] and one_b in after["a"], after["a"]
    one_url = url("a", 18102)
    assert stack.outputs()["models"]["one"]["base_urls"] == [one_url]
    assert complete(one_url, "one")

    # 5. host b's rclone dies: host a keeps serving, b's supervisor mounts again by itself
    rclone_b = "pgrep -f '^[^ ]*rclone mount2? [^ ]+ /mnt/rv-hosts/both ' || true"
    before_pid = on_host("b", rclone_b).split()
    assert len(before_pid) == 1, before_pid
    on_host("b", "pkill -9 -f '^[^ ]*rclone mount2? [^ ]+ /mnt/rv-hosts/both '")
    killed = time.monotonic()
    assert complete(url("a", 8101), "both")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now_pid = on_host("b", rclone_b).split()
        if now_pid and now_pid != before_pid and "config.json" in on_host("b", "ls /mnt/rv-hosts/both || true"):
            break
        time.sleep(0.5)
    else:
        raise AssertionError("host b's mount never came back after its rclone was killed")
    env["timings"]["b_mounted_again_s"] = round(time.monotonic() - killed, 1)
    assert complete(url("b", 8101), "both") and complete(url("a", 8101), "both")
    stored = s3_under_test.volume_objects(env["volume"])
    assert len(stored) > 2

    # 5b. under load through the entry point (four clients, sampled, half streamed, no retries), host
    #     b's vLLM main process is killed: only requests in flight on b may fail; every request sent
    #     after the kill is answered (by a); then, with the load stopped, b's restart policy brings it
    #     back and preview stays empty
    pid = on_host("b", f"docker inspect -f '{{{{.State.Pid}}}}' {box}").strip()
    # (a request may wait long on a machine this busy: host a serves alone while b boots again; what is
    # asserted is that none fails, so each client waits up to 180 s rather than the load's default 60)
    with SteadyLoad(env["entry"], "both", workers=4, request_timeout=180) as load:
        load.wait_successes_after(0, n=4, timeout=120)         # warm: a few answers before the kill
        assert not [o for o in load.outcomes if not o.ok], [o.error for o in load.outcomes if not o.ok]
        on_host("b", f"kill -9 {pid}")
        at = time.monotonic()            # after the kill: a request started from here on must not fail
        load.wait_successes_after(at, n=48, timeout=300)       # answered meanwhile (by host a while b restarts)
    report = load.report(at)
    print("5b, host b's vLLM killed under load:", json.dumps(report))
    env["timings"]["entry_vllm_b_killed_under_load"] = report
    # said before b's return is waited for: a failure here costs no more minutes
    assert report["requests"] >= 48 and report["failed"] == report["failed_in_flight"] <= 4, report
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            complete(url("b", 8101), "both", timeout=30)
            break
        except Exception:  # noqa: BLE001 - b restarting
            time.sleep(1)
    report["b_serving_again_after_s"] = round(time.monotonic() - at, 1)
    # and back in the endpoint's rotation (the router's health check, every 2 s): requests through it reach b
    before_b, back = completions_served("b", box), time.monotonic()
    while completions_served("b", box) == before_b and time.monotonic() - back < 60:
        complete(env["entry"], "both")
    assert completions_served("b", box) > before_b, "host b is not back in the endpoint's rotation after 60 s"
    report["b_back_in_rotation_after_serving_s"] = round(time.monotonic() - back, 1)
    assert on_host("b", f"docker inspect -f '{{{{.RestartCount}}}}' {box}").strip() == "1"
    stack.run("preview", "--expect-no-changes", label="preview_after_b_vllm_killed")

    # 5c. host b restarts (engine stopped, rclone and keeper gone, nothing mounted under /mnt, engine
    #     started): b serves again with no pulumi command (its keeper mounts, then starts b's vLLM);
    #     host a is never touched; preview --refresh is clean after
    a_before = containers("a", stack.name)
    sim("restart", "b")
    restarted = time.monotonic()
    deadline = restarted + 900
    while time.monotonic() < deadline:
        try:
            if complete(url("b", 8101), "both", timeout=30):
                break
        except Exception:  # noqa: BLE001 - b starting
            time.sleep(2)
    else:
        raise AssertionError("host b did not serve again within 900 s of its restart")
    env["timings"]["b_restarted_serving_again_s"] = round(time.monotonic() - restarted, 1)
    assert containers("a", stack.name) == a_before
    stack.run("preview", "--refresh", "--expect-no-changes", label="preview_refresh_after_b_restart")

    # 5d. host a's keeper of model "one" is removed (docker rm -f: its rclone killed, a dead mount left):
    #     nothing on the host brings it back; preview --refresh sees it over SSH and shows only that
    #     mount to redo; up mends it and "one" serves again, its container kept
    one_box = containers("a", stack.name)[one_b]
    on_host("a", f"docker rm -f {env['prefix']}-mount-one >/dev/null")
    removed = time.monotonic()
    steps = json.loads(stack.run("preview", "--refresh", "--json", label="preview_keeper_removed").stdout)["steps"]
    redo = {s["urn"].split("::")[-1] for s in steps if s["op"] not in ("same", "read", "refresh")}
    assert redo == {"a-mount-one-command"}, redo
    stack.run("up", "--yes", "--skip-preview", label="up_keeper_removed")
    assert complete(one_url, "one")
    env["timings"]["a_keeper_removed_serving_again_s"] = round(time.monotonic() - removed, 1)
    assert containers("a", stack.name)[one_b] == one_box
    assert on_host("a", f"docker inspect -f '{{{{.State.Running}}}}' {env['prefix']}-mount-one").strip() == "true"
    stack.run("preview", "--refresh", "--expect-no-changes", label="preview_refresh_after_keeper_mended")

    # 5e. host b's check of its mounts fails (its mount tool cannot run): one warning naming the host and the
    #     exit status; its mounts count as unknown: nothing is mounted again (the plan stays empty)
    tool = f"/var/lib/rustfs-vllm/{env['prefix']}/rclone-mount"
    on_host("b", f"chmod a-x {tool}")
    try:
        proc = stack.run("preview", "--expect-no-changes", label="preview_mount_check_fails")
    finally:
        on_host("b", f"chmod 0755 {tool}")
    # one warning, in the preview's diagnostics (its progress line shows the same)
    warned = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines()
              if "the check of its mounts failed" in ln and ln.strip().startswith("warning:")]
    assert len(warned) == 1 and "host b:" in warned[0] and "exit status 126" in warned[0], proc.stdout[-3000:]
    env["timings"]["mount_check_failed_warning"] = warned[0].strip()

    # 5f. a third model, "copied", on host b from a local copy (loadFormat local_copy): the copy is made on
    #     b's disk from the bucket and served; purge at step 7 removes it (issue 45)
    data = yaml.safe_load(env["cfg_file"].read_text())
    data["config"]["rustfs-vllm:models"].append({**data["config"]["rustfs-vllm:models"][0], "name": "copied",
                                                 "prefix": "copied", "port": 8103, "hosts": ["b"],
                                                 "loadFormat": "local_copy"})
    env["cfg_file"].write_text(yaml.safe_dump(data, sort_keys=False))
    stack.run("up", "--yes", "--skip-preview", label="up_local_copy_on_b")
    assert complete(url("b", 8103), "copied") == answers[("a", "both")]
    cache_b = next(r["outputs"]["cache_root"] for r in stack.state()["deployment"]["resources"]
                   if r["type"].endswith("PurgeOrder") and r["outputs"]["host"] == "b")
    copy_b = on_host("b", f"ls -d {cache_b}/copied/copy/* 2>/dev/null || true").split()   # <cache>/<prefix>/copy/<rev>
    assert copy_b, "no local copy on host b"

    # 6. host b goes down (sshd, Docker and mounts gone): preview and up stop before changing
    #    anything, naming the host; destroy removes what it can on host a and fails for b's resources;
    #    once b is back, destroy finishes.
    a_before = containers("a", stack.name)
    # purgeOnDestroy set right before the destroys (issue 45): each host's VFS cache goes with its part
    caches = {r["outputs"]["host"]: r["outputs"]["cache_root"] for r in stack.state()["deployment"]["resources"]
              if r["type"].endswith("PurgeOrder")}
    assert set(caches) == set(HOSTS), caches
    for h, root in caches.items():
        assert on_host(h, f"du -sk {root} | cut -f1").strip() not in ("", "0"), (h, root)   # the VFS cache is there
    stack.set("purgeOnDestroy", "true")
    sim("down", "b")
    # the entry point leaves host b out: no request fails
    started = time.monotonic()
    for _ in range(6):
        assert complete(env["entry"], "both") == answers[("a", "both")]
    env["timings"]["entry_6_requests_host_b_down_s"] = round(time.monotonic() - started, 2)
    for op in ("preview", "up"):
        args = ("preview",) if op == "preview" else ("up", "--yes", "--skip-preview")
        proc = stack.run(*args, check=False, label=f"{op}_host_down")
        assert proc.returncode != 0
        assert "hosts[b]: cannot log in as root@127.0.0.3:2222 over SSH" in proc.stdout + proc.stderr, proc.stdout[-3000:]
    assert containers("a", stack.name) == a_before
    proc = stack.run("destroy", "--yes", "--skip-preview", "--continue-on-error", check=False,
                     label="destroy_host_down")
    assert proc.returncode != 0
    env["timings"]["destroy_host_down_output"] = proc.stdout[-1500:]
    assert containers("a", stack.name) == {} and rclone_mounts("a") == []
    left = [r["urn"].split("::")[-1] for r in stack.state()["deployment"]["resources"]
            if r["type"] != "pulumi:pulumi:Stack" and not r["type"].startswith("pulumi:providers:")]
    # host a's part is gone; host b's part (and the storage its mounts read) waits for b
    assert not [n for n in left if n.startswith("a-")] and "b-mount-both-command" in left, left
    assert on_host("a", f"test -e {caches['a']} && echo left || echo gone").strip() == "gone", caches["a"]
    env["timings"]["left_after_destroy_host_down"] = left
    sim("up", "b", HOSTS["b"])

    # 7. destroy (purgeOnDestroy set before step 6's, issue 45): no container or mount on any host, each
    #    host's VFS cache removed (told over SSH by the purge order, root's on the host: a's at step 6, b's
    #    now), the models' objects removed as asked
    stack.run("destroy", "--yes", "--skip-preview", label="destroy_purge")
    for h in HOSTS:
        assert containers(h, stack.name) == {}, h
        assert rclone_mounts(h) == [], h
        assert on_host(h, f"ls -A /var/lib/rustfs-vllm/{env['prefix']} 2>/dev/null || true").strip() == ""
        assert on_host(h, f"test -e {caches[h]} && echo left || echo gone").strip() == "gone", (h, caches[h])
    assert on_host("b", f"ls -d {' '.join(copy_b)} 2>/dev/null || true").strip() == "", copy_b   # the copy too
    left = s3_under_test.volume_objects(env["volume"])
    assert not [k for k in left if k.split("/")[1:2] in (["both"], ["one"], ["copied"])], sorted(left)[:10]
    env["timings"]["purge_on_ssh_hosts"] = {"caches_removed": sorted(caches.values()), "copies_removed": copy_b,
                                            "objects_left": len(left)}


def _read_key_on_hosts(env: dict, models: dict[str, set[str]]) -> dict:
    """readKeys scoped (RustFS's default): every host's mounts read with the stack's read key, not the
    root keys (the keepers' specs, root's mode-0600 files, are where the keys are), and RustFS refuses
    that key a PUT into the model's own prefix and a listing of another stack's prefix."""
    keys = set()
    for h, names in models.items():
        for name in names:
            found = on_host(h, f"find /var/lib/rustfs-vllm -name '{env['stack'].name}-{name}.keeper.json'").split()
            assert len(found) == 1, (h, name, found)
            spec = json.loads(on_host(h, f"cat {found[0]}"))
            access = next(v for k, v in spec["env"].items() if k.endswith("_ACCESS_KEY_ID"))
            secret = next(v for k, v in spec["env"].items() if k.endswith("_SECRET_ACCESS_KEY"))
            assert access != env["access"] and secret != env["secret"], (h, name, "a root key on the host")
            assert access.startswith("rvread"), (h, name, access)
            keys.add((access, secret))
    assert len(keys) == 1, "one read key per stack, on every host"
    access, secret = keys.pop()
    reader = s3.client(f"http://127.0.0.1:{env['s3_port']}", access, secret)
    listed = reader.list_objects_v2(Bucket="hosts-models", Prefix="both/")
    assert any(o["Key"] == "both/config.json" for o in listed.get("Contents", [])), listed
    refused = {"put": s3_answer(lambda: reader.put_object(Bucket="hosts-models", Key="both/planted.txt", Body=b"x")),
               "list root": s3_answer(lambda: reader.list_objects_v2(Bucket="hosts-models"))}
    assert refused == dict.fromkeys(refused, "AccessDenied"), refused
    return {"user": access, "refused": refused}
