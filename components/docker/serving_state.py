"""What preview and up say of a model whose vLLM container is not serving (issue 45): restarting, killed
for lack of memory (OOM), or exited, per model and host, from the hosts' Docker facts that preflight
gathered (``docker inspect``: State, RestartCount, the memory limit). Each such model is named in one
warning (what is wrong, how often, the config key to change), and its readiness wait gets a trigger of
its own (``recheck-<cause>-<restarts>``, for that container only: one that `up` makes again has none),
so that `up` waits for it again and fails, naming the cause, when it still does not serve; a model that
serves again keeps that trigger (nothing more to do) until its container is made again: the readiness
wait records that it saw the container serve (``.state/serving/<container id>.json``: its restarts then and
the trigger), and while the container has not restarted since, nothing is said and the trigger stays.

Read-only: nothing here creates or changes anything."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Mapping, Optional

from components.config.spec import ModelSpec, StackConfig
from components.docker import change_order
from components.hosts.docker_facts import DockerFacts, Health

GIB = 2**30


@dataclass(frozen=True)
class Trouble:
    """A model's container on a host that is not serving, or was OOM-killed since it was made."""
    model: str
    host: str
    container: str
    line: str           # the warning: what, how often, the key to change
    recheck: str        # the readiness wait's extra trigger
    summary: str        # a few words for the model's state output
    container_id: str = ""   # the container it is about: a replacement of it has no trouble yet


def container_name(cfg: StackConfig, m: ModelSpec, f: Optional[DockerFacts] = None) -> str:
    """Model ``m``'s container on a host whose Docker ``f`` shows: the one of its two slots
    (components/docker/change_order.py) that is there, the running one if both are; slot a's if none."""
    names = change_order.containers(cfg, m)
    there = [n for n in names if f is not None and n in f.health]
    return next((n for n in there if f.health[n].status == "running"), there[0] if there else names[0])


def acked(state_dir: str, container_id: str) -> dict:
    """What the readiness wait recorded when it last saw this container serve after a trouble
    (scripts/wait-ready: {"restarts", "recheck"}), or {}."""
    try:
        with open(os.path.join(state_dir, "serving", f"{container_id}.json"), encoding="utf-8") as fh:
            found = json.load(fh)
        return found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        return {}


def describe(m: ModelSpec, where: str, name: str, h: Health) -> Optional[Trouble]:
    """The trouble of model ``m``'s container ``name`` (its Health), or None when it serves as made."""
    now = " (running now)" if h.status == "running" else f", {h.status} now"
    times = f"{h.restarts} restart{'s' if h.restarts != 1 else ''} since it was made"
    if h.oom_killed:
        limit = (f"its memory limit is {h.memory / GIB:g} GiB (models[{m.name}].memoryGib): raise it" if h.memory else
                 f"it has no memory limit and the host ran out of memory: lower models[{m.name}].kvCacheSpaceGib or "
                 f"maxModelLen, serve it on a host with more memory, or bound it with models[{m.name}].memoryGib")
        return Trouble(m.name, where, name,
                       f"models[{m.name}]{where}: its vLLM container {name} was killed for lack of memory (OOM), {times}"
                       f"{now}; {limit}. This run checks that it serves", f"recheck-oom-{h.restarts}",
                       f"OOM-killed, {times}", h.id)
    if h.status in ("restarting", "exited", "dead"):
        fix = ("run `pulumi up --refresh` to make it again" if h.status != "restarting" else
               f"a bad models[{m.name}].extraArgs, env or vllmImage is the usual cause")
        return Trouble(m.name, where, name,
                       f"models[{m.name}]{where}: its vLLM container {name} is not serving: {h.status} (exit code "
                       f"{h.exit_code}, {times}); `docker logs {name}` says why ({fix}). This run waits for it to "
                       "serve again", f"recheck-{h.status}-{h.restarts}", f"{h.status}, exit code {h.exit_code}, {times}",
                       h.id)
    return None


def troubles(cfg: StackConfig, facts: Mapping[str, Optional[DockerFacts]], here: str) -> dict[tuple[str, str], Trouble]:
    """{(host, model): Trouble} for every model container of ``cfg`` that ``facts`` ({host name: its
    DockerFacts}) show in trouble (a host whose facts are unknown says nothing); ``here``: this machine's
    host name, whose containers are named without "on host"."""
    out: dict[tuple[str, str], Trouble] = {}
    for m in cfg.models:
        for host in m.hosts:
            f = facts.get(host)
            name = container_name(cfg, m, f)
            h = f.health.get(name) if f is not None else None
            if h is None or f is None or f.containers.get(name, {}).get("rustfs-vllm.stack") != cfg.stack:
                continue
            where = "" if host == here and len(cfg.hosts) == 1 else f" on host {host}"
            found = describe(m, where, name, h)
            if not found:
                continue
            ack = acked(cfg.state_dir, h.id) if h.id else {}
            if ack.get("recheck") and h.status == "running" and h.restarts <= int(ack.get("restarts", -1)):
                # seen serving since (the trouble is Docker's record of its past): nothing to say, the same trigger
                found = Trouble(found.model, found.host, found.container, "", str(ack["recheck"]), found.summary, h.id)
            out[(host, m.name)] = found
    return out
