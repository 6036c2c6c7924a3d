"""make bench --hosts: the time of `pulumi up` of one model on one simulated serving host and on
two, in the same run, and the ratio two/one (tests/hosts/sim-hosts; tests/hosts/sim.py).

Both runs start from a destroyed stack with the image already on the hosts (pulled from the
loopback registry by an earlier run: the pull is not measured) and the same model (SmolLM2-135M,
float32, CPU). The simulated hosts share this machine's cores, so two vLLM starts compete for
them; on real hosts each has its own, and the ratio is then closer to 1."""
from __future__ import annotations

import time
from pathlib import Path

from tests.hosts import sim

MODEL = [{"name": "both", "prefix": "both", "port": 8101}]


def bench_hosts(work: Path, results: dict, kind: str) -> None:
    sim.start()
    part: dict = {"note": "one model (SmolLM2-135M, CPU); simulated hosts sharing this machine's cores; "
                          "images already on the hosts"}
    try:
        for label, hosts in (("one_host", {"a": sim.HOSTS["a"]}), ("two_hosts", sim.HOSTS)):
            ctx = sim.make_stack(work / "hosts", f"bench-{label.replace('_', '')}", MODEL, hosts, kind=kind)
            try:
                started = time.monotonic()
                ctx["stack"].run("up", "--yes", "--skip-preview")
                part[f"{label}_up_s"] = round(time.monotonic() - started, 1)
                for h in hosts:
                    assert sim.complete(sim.url(h, 8101), "both")
                started = time.monotonic()
                ctx["stack"].run("destroy", "--yes", "--skip-preview")
                part[f"{label}_destroy_s"] = round(time.monotonic() - started, 1)
            finally:
                sim.tear_down(ctx, hosts)
        part["ratio_two_vs_one_up"] = round(part["two_hosts_up_s"] / part["one_host_up_s"], 2)
    finally:
        sim.stop()
    results["hosts"] = part
