"""The ``models`` key: each entry checked against MODEL_FIELDS, then the rules between models."""
from __future__ import annotations

import os
from typing import Any, Mapping

from components.storage import layout
from components.config.reader import Reader
from components.config.rules import env_map
from components.config.schema import MODEL_FIELDS
from components.config.spec import HostSpec, ModelSpec

FIELD = {f.name: f for f in MODEL_FIELDS}
# The read path of a model that names none, on every target: the guide's read-only rclone mount (one
# copy of the model, in the bucket; issue 36). local_copy (Docker hosts) is opt-in per model.
DEFAULT_LOAD_FORMAT = "mount"
KUBE_LOAD_FORMAT = "mount"
# vLLM flags this program sets itself: giving them in extraArgs would contradict the model fields.
RESERVED_VLLM_FLAGS = ("--model", "--served-model-name", "--dtype", "--max-model-len",
                       "--gpu-memory-utilization", "--port", "--host", "--api-key")


def parse(r: Reader, project_dir: str, hosts: list[HostSpec], port_base: int = 8000,
          load_format: str = DEFAULT_LOAD_FORMAT) -> list[ModelSpec]:
    """The models; ``port_base`` + index is a model's default port (a NodePort on Kubernetes);
    ``load_format`` is the target's default read path."""
    raw_models = r.value("models")
    if not raw_models:
        r.bad("models", raw_models, "a non-empty list of models, each with at least name and source")
        return []
    models: list[ModelSpec] = []
    for i, m in enumerate(raw_models):
        if not isinstance(m, dict):
            r.bad(f"models[{i}]", m, "an object with name, source and optional "
                                     + ", ".join(f.name for f in MODEL_FIELDS[2:]))
            continue
        models.append(_model(r, i, m, project_dir, hosts, port_base, load_format))
    _between(r, models)
    return models


def _model(r: Reader, i: int, m: Mapping[str, Any], project_dir: str, hosts: list[HostSpec],
           port_base: int = 8000, default_load_format: str = DEFAULT_LOAD_FORMAT) -> ModelSpec:
    for unknown in sorted(set(m) - set(FIELD)):
        r.bad(f"models[{i}].{unknown}", m[unknown], f"a known field: {', '.join(sorted(FIELD))}")
    name = r.field(FIELD["name"], m, f"models[{i}]") or f"model{i}"
    key = f"models[{name}]"
    prefix = r.field(FIELD["prefix"], m, key, name.split("/")[-1]) or f"invalid{i}"
    source, source_ok = _source(r, key, m, project_dir)
    on = _hosts(r, key, m, [h.name for h in hosts])
    port = r.field(FIELD["port"], m, key, port_base + i)
    before = len(r.problems)
    max_len = r.field(FIELD["maxModelLen"], m, key)
    if source_ok and len(r.problems) == before:
        limit = layout.max_positions(source)
        if limit is not None and max_len > limit:
            r.bad(f"{key}.maxModelLen", max_len,
                  f"at most the model's own context length, {limit} (max_position_embeddings in config.json)")
    gmu = r.field(FIELD["gpuMemoryUtilization"], m, key)
    kv = r.field(FIELD["kvCacheSpaceGib"], m, key)
    if gmu is not None and kv is not None:
        r.bad(f"{key}.kvCacheSpaceGib", kv, "either gpuMemoryUtilization or kvCacheSpaceGib, not both")
    extra = r.field(FIELD["extraArgs"], m, key)
    for a in extra:
        if a.split("=")[0] in RESERVED_VLLM_FLAGS:
            r.bad(f"{key}.extraArgs", a, f"no flag this program sets itself ({', '.join(RESERVED_VLLM_FLAGS)}); "
                                         "use the model's fields or vllmApiKey")
    load_format = r.field(FIELD["loadFormat"], m, key, default_load_format)
    if load_format == "runai_streamer":
        for a in extra:
            if a.split("=")[0] == "--load-format":
                r.bad(f"{key}.extraArgs", a, "no --load-format with loadFormat: runai_streamer (it sets it)")

    return ModelSpec(name=name, source=source, prefix=prefix, port=port, max_model_len=max_len,
                     dtype=r.field(FIELD["dtype"], m, key), gpu_memory_utilization=gmu, kv_cache_space_gib=kv,
                     extra_args=tuple(extra), env=env_map(r, f"{key}.env", m.get("env", {})),
                     gpus=r.field(FIELD["gpus"], m, key), hosts=tuple(on),
                     balancer_port=r.field(FIELD["balancerPort"], m, key), load_format=load_format,
                     load_format_given="loadFormat" in m,
                     replicas=r.field(FIELD["replicas"], m, key),
                     memory_gib=r.field(FIELD["memoryGib"], m, key), cpus=r.field(FIELD["cpus"], m, key),
                     change_order=r.field(FIELD["changeOrder"], m, key),
                     change_port=r.field(FIELD["changePort"], m, key, default_change_port(port)))


def default_change_port(port: int) -> int:
    """A model's changePort when it names none: port+10000, or port-10000 where that passes 65535."""
    return port + 10000 if port + 10000 <= 65535 else max(1, port - 10000)


def _source(r: Reader, key: str, m: Mapping[str, Any], project_dir: str) -> tuple[str, bool]:
    """(the model folder, absolute; whether it can be uploaded): every problem of it, one line each."""
    source = r.field(FIELD["source"], m, key)
    if not source:
        if source == "":
            r.bad(f"{key}.source", source, FIELD["source"].allowed)
        return "", False
    source = os.path.normpath(os.path.join(project_dir, os.path.expanduser(source)))
    problems = layout.folder_problems(source)
    for problem in problems:
        r.bad(f"{key}.source", source, problem)
    return source, not problems


def _hosts(r: Reader, key: str, m: Mapping[str, Any], all_hosts: list[str]) -> list[str]:
    on = m.get("hosts", all_hosts)
    if not isinstance(on, list) or not on or not all(isinstance(n, str) for n in on) or len(set(on)) != len(on):
        r.bad(f"{key}.hosts", on, f"a non-empty list of host names without repeats, from: {', '.join(all_hosts)}")
        return all_hosts
    for n in on:
        if n not in all_hosts:
            r.bad(f"{key}.hosts", n, f"a host of rustfs-vllm:hosts: {', '.join(all_hosts)}")
    return [n for n in on if n in all_hosts] or all_hosts


def _between(r: Reader, models: list[ModelSpec]) -> None:
    """Names, prefixes (case-folded: some file systems fold case) and per-host ports are each a model's own."""
    seen_names: set[str] = set()
    seen_prefixes: dict[str, str] = {}
    seen_ports: dict[tuple[str, int], str] = {}
    for m in models:
        if m.name in seen_names:
            r.bad(f"models[{m.name}].name", m.name, "a served name used by one model only (duplicate)")
        seen_names.add(m.name)
        folded = m.prefix.lower()
        if folded in seen_prefixes:
            r.bad(f"models[{m.name}].prefix", m.prefix,
                  f"a prefix of its own: it collides with model {seen_prefixes[folded]!r}")
        seen_prefixes[folded] = m.name
        for h in m.hosts:
            if (h, m.port) in seen_ports:
                r.bad(f"models[{m.name}].port", m.port,
                      f"a port of its own on host {h!r}: model {seen_ports[(h, m.port)]!r} uses it there")
            seen_ports[(h, m.port)] = m.name
    for m in models:     # the other server's port (side by side) is the model's own too
        for h in m.hosts:
            other = "its own port" if m.change_port == m.port else seen_ports.get((h, m.change_port))
            if other is not None:
                r.bad(f"models[{m.name}].changePort", m.change_port,
                      f"a port of its own on host {h!r} (its new server takes it beside the old one in a side-by-side "
                      f"change): {other if m.change_port == m.port else f'model {other!r} uses it there'}")
            seen_ports[(h, m.change_port)] = m.name
